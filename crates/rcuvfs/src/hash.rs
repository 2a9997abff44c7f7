//! The hash of a name, shared by the dcache's per-directory indexes (seeded
//! with the parent dentry's address) and memfs's directories (seed 0), the
//! compare of two names, and the walk's scan of a path, which splits and
//! hashes it in one pass: one function each, so that neither the dcache
//! nor memfs imports the other for it. Written here, not taken from a
//! crate: they are on every lookup's path, a word at a time where a path's
//! short names allow (the way Linux's `hash_name` and `dentry_cmp` read
//! names), and tuned with `scripts/count-ops stat`.

const K: u64 = 0x517c_c1b7_2722_0a95;

/// FxHash-style, over `seed` and the name's bytes; the top bits, which
/// pick an index's home slot, are mixed by the final multiply.
#[inline]
pub(crate) fn name_hash(seed: u64, name: &[u8]) -> u64 {
    let mut h = start(seed);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        h = mix(h, u64::from_le_bytes(c.try_into().unwrap()));
    }
    // The tail is assembled in a register: copying it to the stack and
    // loading it back as one word stalls on store forwarding.
    let mut tail = 0u64;
    for (i, &b) in chunks.remainder().iter().enumerate() {
        tail |= u64::from(b) << (8 * i);
    }
    finish(h, tail, name.len())
}

#[inline(always)]
fn start(seed: u64) -> u64 {
    seed.wrapping_mul(K)
}

/// One full 8-byte chunk of a name.
#[inline(always)]
fn mix(h: u64, word: u64) -> u64 {
    (h.rotate_left(5) ^ word).wrapping_mul(K)
}

/// The last 0 to 7 bytes (`tail`, little-endian, zero above them) and the
/// name's length.
#[inline(always)]
fn finish(h: u64, tail: u64, len: usize) -> u64 {
    let h = (h.rotate_left(5) ^ tail ^ len as u64).wrapping_mul(K);
    let h = h ^ (h >> 29);
    h.wrapping_mul(K)
}

/// The `width` (1, 2, 4 or 8) bytes of `p` at `at`, little-endian.
#[inline(always)]
fn load(p: &[u8], at: usize, width: usize) -> u64 {
    // Free where the compiler sees the caller's compare of the lengths,
    // which every caller makes just before.
    assert!(at + width <= p.len() && matches!(width, 1 | 2 | 4 | 8));
    // SAFETY: an unaligned read of `width` bytes within `p` (asserted).
    unsafe {
        let q = p.as_ptr().add(at);
        match width {
            8 => u64::from_le(q.cast::<u64>().read_unaligned()),
            4 => u64::from(u32::from_le(q.cast::<u32>().read_unaligned())),
            2 => u64::from(u16::from_le(q.cast::<u16>().read_unaligned())),
            _ => u64::from(q.read()),
        }
    }
}

/// The `n` (1 to 7) bytes of `p` at `at`, little-endian, zero above them:
/// two loads that overlap, each within `p`.
#[inline(always)]
fn short(p: &[u8], at: usize, n: usize) -> u64 {
    if n >= 4 {
        load(p, at, 4) | load(p, at + n - 4, 4) << (8 * (n - 4))
    } else if n >= 2 {
        load(p, at, 2) | load(p, at + n - 2, 2) << (8 * (n - 2))
    } else {
        load(p, at, 1)
    }
}

/// Whether `p` holds a NUL byte: a word at a time (the last word
/// overlapping the one before it), where `memchr` goes a byte at a time
/// through slices as short as most paths (75 instructions for a path of
/// 14 bytes, against 15).
#[inline]
pub(crate) fn has_nul(p: &[u8]) -> bool {
    let n = p.len();
    if n >= 8 {
        let mut i = 0;
        while i + 8 < n {
            if zero_bytes(load(p, i, 8)) != 0 {
                return true;
            }
            i += 8;
        }
        return zero_bytes(load(p, n - 8, 8)) != 0;
    }
    // The bytes past the path's end made 0xFF, so that they are no NUL.
    n != 0 && zero_bytes(short(p, 0, n) | !0u64 << (8 * n)) != 0
}

/// A name of 1 to 7 bytes as one word: its length in the low byte, then
/// its bytes (the dcache's `Name::key`, which compares with it); 0 for
/// any other name.
#[inline]
pub(crate) fn short_key(name: &[u8]) -> u64 {
    match name.len() {
        n @ 1..=7 => short(name, 0, n) << 8 | n as u64,
        _ => 0,
    }
}

/// A path's names, each hashed as it is found: one pass over the bytes,
/// a word at a time, finding the '/' that ends a name and hashing the
/// words before it ([`name_hash`], whose value it gives), where splitting
/// and then hashing read every byte twice through an iterator's
/// machinery (Linux's `hash_name` does the same, with word-at-a-time
/// loads). Empty names (`//`, a leading or trailing '/') are skipped, as
/// [`Path::components`](std::path::Path::components) does. Loads never
/// reach past the path: the last word of a name that ends it is the
/// path's last eight bytes, shifted.
pub(crate) struct PathScan<'p> {
    path: &'p [u8],
    at: usize,
}

/// Which bytes of `w` are 0: their high bit set, exact for the lowest such
/// byte (a higher one may be set by the borrow out of a lower zero byte).
#[inline(always)]
fn zero_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    w.wrapping_sub(ONES) & !w & HIGHS
}

impl<'p> PathScan<'p> {
    #[inline(always)]
    pub fn new(path: &'p [u8]) -> Self {
        let mut s = PathScan { path, at: 0 };
        s.skip_slashes();
        s
    }

    #[inline(always)]
    fn skip_slashes(&mut self) {
        while self.path.get(self.at) == Some(&b'/') {
            self.at += 1;
        }
    }

    /// Whether no name is left (only slashes were, if anything).
    #[inline(always)]
    pub fn at_end(&self) -> bool {
        self.at == self.path.len()
    }

    /// The bytes at `i` (at most the path's length), up to 8
    /// (little-endian, zero above them), and how many there are.
    #[inline(always)]
    fn word_at(&self, i: usize) -> (u64, usize) {
        let p = self.path;
        debug_assert!(i <= p.len());
        let n = p.len() - i;
        if n >= 8 {
            return (load(p, i, 8), 8);
        }
        if n == 0 {
            return (0, 0);
        }
        if p.len() >= 8 {
            // The path's last word, its bytes before `i` shifted out.
            return (load(p, p.len() - 8, 8) >> (8 * (8 - n)), n);
        }
        (short(p, i, n), n)
    }

    /// The next name, its [`name_hash`] under `seed` and its
    /// [`short_key`], or `None` at the end.
    #[inline(always)]
    pub fn next_hashed(&mut self, seed: u64) -> Option<(&'p [u8], u64, u64)> {
        if self.at_end() {
            return None;
        }
        let begin = self.at;
        let mut h = start(seed);
        loop {
            let (w, n) = self.word_at(self.at);
            let slashes = zero_bytes(w ^ 0x2f2f_2f2f_2f2f_2f2f);
            let k = if slashes == 0 { n } else { ((slashes.trailing_zeros() / 8) as usize).min(n) };
            if k == 8 {
                h = mix(h, w);
                self.at += 8;
                continue;
            }
            let tail = w & ((1u64 << (8 * k)) - 1);
            self.at += k;
            debug_assert!(begin < self.at && self.at <= self.path.len());
            // SAFETY: `at` moved forward by what `word_at` found there.
            let name = unsafe { self.path.get_unchecked(begin..self.at) };
            let h = finish(h, tail, name.len());
            let key = if name.len() == k { tail << 8 | k as u64 } else { 0 };
            debug_assert_eq!(key, short_key(name));
            self.skip_slashes();
            return Some((name, h, key));
        }
    }
}

/// Byte equality without a call to `memcmp` for the short names that paths
/// are made of (the dcache's and memfs's name compares): a word at a time,
/// the last word overlapping the one before it, for names of 8 bytes or
/// more.
#[inline(always)]
pub(crate) fn same_name(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n >= 8 {
        // `has_nul`'s loop, written out again: a helper taking the test as
        // a closure, or `step_by` and `chain`, made a stat 10-140
        // instructions longer (`scripts/count-ops stat`, 3 runs each).
        let mut i = 0;
        while i + 8 < n {
            if load(a, i, 8) != load(b, i, 8) {
                return false;
            }
            i += 8;
        }
        return load(a, n - 8, 8) == load(b, n - 8, 8);
    }
    // Shorter names: a byte at a time is fewer instructions than the
    // overlapping loads (count-ops: 119 against 98 for the four names of
    // `/d0/d1/d2/file`).
    a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names and hashes a scan gives: those of splitting on '/' and
    /// hashing each name, for every path of a few shapes at every length
    /// (short paths take the small loads, long ones the shifted last word,
    /// names of 8 and 16 bytes end exactly on a word).
    #[test]
    fn a_scan_gives_the_names_and_hashes_of_split_and_hash() {
        let pieces: [&[u8]; 9] =
            [b"/", b"a", b"bc", b"def", b"ghijklm", b"nopqrstu", b"vwxyz0123456789A", b"//", b".."];
        let mut paths: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..if cfg!(miri) { 2 } else { 4 } {
            let mut next = Vec::new();
            for p in &paths {
                for q in pieces {
                    let mut x = p.clone();
                    x.extend_from_slice(q);
                    next.push(x);
                }
            }
            paths.extend(next);
        }
        paths.push(b"x/\xff\x80\xaf\x30/\x7f\x01\x2e/\xfe\xfe\xfe\xfe\xfe\xfe\xfe\xfe\xfe".to_vec());
        for path in &paths {
            for seed in [0u64, 0x7f3a_1000, u64::MAX] {
                let want: Vec<(&[u8], u64, u64)> = path
                    .split(|&b| b == b'/')
                    .filter(|c| !c.is_empty())
                    .map(|c| (c, name_hash(seed, c), short_key(c)))
                    .collect();
                let mut scan = PathScan::new(path);
                let mut got = Vec::new();
                while let Some(x) = scan.next_hashed(seed) {
                    // `at_end` after a name: whether it was the last.
                    got.push(x);
                    assert_eq!(scan.at_end(), got.len() == want.len(), "{:?}", String::from_utf8_lossy(path));
                }
                assert_eq!(got, want, "{:?}", String::from_utf8_lossy(path));
            }
        }
    }

    /// Names of every length up to 24 bytes compare equal to themselves and
    /// unequal to the same name with any one byte changed, or one byte
    /// shorter.
    #[test]
    fn same_name_tells_every_byte() {
        for n in 0..=24usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i * 7 % 26) as u8).collect();
            assert!(same_name(&a, &a.clone()), "{n}");
            for i in 0..n {
                let mut b = a.clone();
                b[i] ^= 0x20;
                assert!(!same_name(&a, &b), "{n} bytes, byte {i} differs");
                assert!(!same_name(&b, &a), "{n} bytes, byte {i} differs");
            }
            if n > 0 {
                assert!(!same_name(&a, &a[..n - 1]), "{n}");
            }
        }
    }

    /// A NUL is found at every position of paths of every length up to 24,
    /// and none in paths without one (bytes 0x01 and 0x80 included, which
    /// a word-at-a-time test gets wrong when written carelessly).
    #[test]
    fn has_nul_finds_every_nul() {
        for n in 0..=24usize {
            let a: Vec<u8> = (0..n).map(|i| [b'a', 0x01, 0x80, 0xff, b'/'][i % 5]).collect();
            assert!(!has_nul(&a), "{n}");
            for i in 0..n {
                let mut b = a.clone();
                b[i] = 0;
                assert!(has_nul(&b), "{n} bytes, NUL at {i}");
            }
        }
    }
}
