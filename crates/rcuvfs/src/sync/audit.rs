//! The shared-write audit: with the `audit` feature, every store or
//! read-modify-write that the primitives make to memory other threads can
//! see (lockref and lock words, sequence counts, dentry flags and links,
//! shared counters) adds one to a per-thread counter, so a test can assert
//! how many shared writes one operation makes. Without the feature these
//! calls compile to nothing.

#[cfg(feature = "audit")]
thread_local! {
    static WRITES: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// Records `n` shared writes by the calling thread.
#[inline(always)]
pub fn shared_writes(n: u64) {
    #[cfg(feature = "audit")]
    WRITES.with(|w| w.set(w.get() + n));
    #[cfg(not(feature = "audit"))]
    let _ = n;
}

/// The calling thread's count of shared writes so far (0 without the
/// `audit` feature).
pub fn count() -> u64 {
    #[cfg(feature = "audit")]
    return WRITES.with(|w| w.get());
    #[cfg(not(feature = "audit"))]
    0
}
