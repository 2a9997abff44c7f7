//! The hash of a name, shared by the dcache's per-directory indexes (seeded
//! with the parent dentry's address) and memfs's directories (seed 0), and
//! the compare of two names: one function each, so that neither imports
//! the other for it. Written here, not taken from a crate: it is on every
//! lookup's path, and its tail handling is tuned for short names (see the
//! comment in it).

/// FxHash-style, over `seed` and the name's bytes; the top bits, which
/// pick an index's home slot, are mixed by the final multiply.
#[inline]
pub(crate) fn name_hash(seed: u64, name: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = seed.wrapping_mul(K);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(c.try_into().unwrap())).wrapping_mul(K);
    }
    // The tail is assembled in a register: copying it to the stack and
    // loading it back as one word stalls on store forwarding.
    let mut tail = 0u64;
    for (i, &b) in chunks.remainder().iter().enumerate() {
        tail |= u64::from(b) << (8 * i);
    }
    h = (h.rotate_left(5) ^ tail ^ name.len() as u64).wrapping_mul(K);
    h ^= h >> 29;
    h.wrapping_mul(K)
}

/// Byte equality without a call to `memcmp` for the short names that paths
/// are made of (the dcache's and memfs's name compares).
#[inline(always)]
pub(crate) fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}
