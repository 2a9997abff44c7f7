//! A reference count that threads take and drop on lines of their own
//! (Linux's `percpu_ref`), written by hand because it is the product: the
//! per-CPU counting that lets every open and close of a file, in any
//! directory, store nothing that another thread's open also stores.
//!
//! # Modes
//!
//! | mode     | `dying` | a get / put                                   | the count |
//! |----------|---------|-----------------------------------------------|-----------|
//! | per-shard | false  | adds to the caller's shard (its own line), inside an RCU read section | `central` holds `BIAS`; the shards' sum is the count |
//! | atomic   | true    | adds to `central`                             | `central` |
//!
//! Transitions: per-shard -> atomic, once, by [`PercpuRef::kill`] (the
//! owner lets go of its base reference: for a `Vfs`, its last handle
//! dropped). Nothing goes back.
//!
//! # The kill (the proof)
//!
//! `kill` stores `dying`, then waits for a grace period. A get or put that
//! read `dying == false` did so inside a read section that began before
//! the grace period ended, so it has finished by then, and its shard update
//! happens-before the end of the wait (the grace period's ordering). A get
//! or put whose section begins after the store sees it (a read section that
//! starts after a grace period began sees the stores made before it) and
//! uses `central`. So after the wait no shard changes any more: `kill` sums
//! them and adds `sum - BIAS` to `central` in one RMW. Until that RMW,
//! `central` holds `BIAS` plus what atomic-mode puts and gets added, which
//! is never zero (`BIAS` is far larger than any count); from it on, `central`
//! is the exact count. Exactly one RMW brings it to zero, `kill`'s or a
//! put's, and that one returns `true`: the caller then frees what the count
//! guarded.
//!
//! # Orderings
//!
//! - Shard updates and the `dying` load are `Relaxed`: the read section and
//!   the grace period order them against `kill` (above).
//! - `dying` is stored `SeqCst`, before the grace period begins.
//! - A put's decrement of `central` is `Release` and the one that reaches
//!   zero is followed by an `Acquire` fence (as `Arc`'s drop): every use
//!   of the guarded object by any holder happens-before its free. `kill`'s
//!   RMW is `AcqRel` for the same reason.

use super::atomic::{AtomicBool, AtomicI64, Ordering};
use super::rcu::Rcu;
use super::shard::{current, Padded, SHARDS};

/// Far above any count, so that `central` is never zero before the kill.
const BIAS: i64 = 1 << 60;

/// A per-shard reference count (see the module doc).
pub struct PercpuRef {
    dying: Padded<AtomicBool>,
    central: Padded<AtomicI64>,
    shards: Box<[Padded<AtomicI64>]>,
}

impl Default for PercpuRef {
    fn default() -> Self {
        Self::new()
    }
}

impl PercpuRef {
    /// A count of zero in per-shard mode: the owner's base reference is
    /// implied until [`kill`](Self::kill).
    pub fn new() -> PercpuRef {
        PercpuRef {
            // The ThreadSanitizer build's RCU stand-in cannot wait for
            // readers (`Rcu::synchronize`), so there the count starts in
            // atomic mode; loom checks the per-shard protocol.
            dying: Padded(AtomicBool::new(cfg!(feature = "tsan"))),
            central: Padded(AtomicI64::new(BIAS)),
            shards: (0..SHARDS).map(|_| Padded(AtomicI64::new(0))).collect(),
        }
    }

    /// Takes a reference. The caller holds one already, or the base
    /// reference is not yet killed.
    #[inline]
    pub fn get(&self, rcu: &Rcu) {
        {
            let _g = rcu.read_lock();
            if !self.dying.0.load(Ordering::Relaxed) {
                self.shards[current()].0.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.central.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops a reference: `true` if it was the last one after the kill (the
    /// caller frees what the count guards, after leaving every read section
    /// of `rcu`, which that may free too).
    #[inline]
    #[must_use]
    pub fn put(&self, rcu: &Rcu) -> bool {
        {
            let _g = rcu.read_lock();
            if !self.dying.0.load(Ordering::Relaxed) {
                self.shards[current()].0.fetch_sub(1, Ordering::Relaxed);
                return false;
            }
        }
        self.put_central()
    }

    #[cold]
    fn put_central(&self) -> bool {
        // Release, then an Acquire fence for the last: see the module doc.
        if self.central.0.fetch_sub(1, Ordering::Release) == 1 {
            super::atomic::fence(Ordering::Acquire);
            return true;
        }
        false
    }

    /// Drops the base reference and switches to atomic mode: `true` if no
    /// other reference was left (the caller frees). Called once, outside
    /// any read section of `rcu` (it waits for a grace period).
    #[must_use]
    pub fn kill(&self, rcu: &Rcu) -> bool {
        self.dying.0.store(true, Ordering::SeqCst);
        rcu.grace_period();
        let sum: i64 = self.shards.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        let delta = sum - BIAS;
        self.central.0.fetch_add(delta, Ordering::AcqRel) + delta == 0
    }

    /// The count now (exact when nothing takes or drops meanwhile; for
    /// tests and statistics).
    pub fn count(&self) -> i64 {
        let c = self.central.0.load(Ordering::Relaxed);
        if self.dying.0.load(Ordering::Relaxed) && c < BIAS / 2 {
            return c;
        }
        c - BIAS + self.shards.iter().map(|s| s.0.load(Ordering::Relaxed)).sum::<i64>()
    }
}

#[cfg(all(test, not(loom), not(feature = "tsan")))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn the_last_put_after_the_kill_is_the_one_that_frees() {
        let rcu = Rcu::new();
        let r = PercpuRef::new();
        r.get(&rcu);
        r.get(&rcu);
        assert_eq!(r.count(), 2);
        assert!(!r.put(&rcu));
        assert!(!r.kill(&rcu), "one reference left");
        assert_eq!(r.count(), 1);
        r.get(&rcu);
        assert!(!r.put(&rcu));
        assert!(r.put(&rcu), "the last");
        let r = PercpuRef::new();
        assert!(r.kill(&rcu), "nothing held at the kill");
    }

    #[test]
    fn gets_and_puts_on_many_threads_racing_the_kill_free_once() {
        // Under Miri, fewer rounds and operations: at full size the test
        // ran for over 16 minutes there without finishing.
        let (rounds, ops) = if cfg!(miri) { (2, 50) } else { (20, 2000) };
        for _ in 0..rounds {
            let rcu = Arc::new(Rcu::new());
            let r = Arc::new(PercpuRef::new());
            let frees = Arc::new(AtomicUsize::new(0));
            // Each thread holds one reference taken before the kill, and
            // takes and drops more on top of it across the kill.
            for _ in 0..4 {
                r.get(&rcu);
            }
            let ts: Vec<_> = (0..4)
                .map(|_| {
                    let (rcu, r, frees) = (rcu.clone(), r.clone(), frees.clone());
                    std::thread::spawn(move || {
                        for _ in 0..ops {
                            r.get(&rcu);
                            assert!(!r.put(&rcu), "a put freed while this thread held a reference");
                        }
                        if r.put(&rcu) {
                            frees.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            if r.kill(&rcu) {
                frees.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            for t in ts {
                t.join().unwrap();
            }
            assert_eq!(frees.load(std::sync::atomic::Ordering::SeqCst), 1);
        }
    }
}
