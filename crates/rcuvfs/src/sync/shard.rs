//! Per-thread shards: the userspace stand-in for Linux's per-CPU data
//! (percpu counters, per-node LRU lists). Each thread gets a shard number
//! once, round-robin, so that threads that run at once mostly use different
//! shards and write different cache lines.
//!
//! [`Counter`] is a `percpu_counter`: a global total plus per-shard deltas
//! folded into it every `batch` units, so that counting writes a line of
//! its own in the common case and a shared line once per `batch`.

#[cfg(not(loom))]
use std::cell::Cell;
#[cfg(not(loom))]
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicI64, Ordering};

/// Shards per sharded structure (a power of two). More than this machine's
/// cores, so that threads spread even when the scheduler moves them.
pub const SHARDS: usize = 16;

#[cfg(not(loom))]
static NEXT: AtomicUsize = AtomicUsize::new(0);

#[cfg(not(loom))]
thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's shard, in `0..SHARDS`. Under loom always 0: a
/// model must be deterministic, and which shard a thread uses is part of no
/// protocol.
#[cfg(loom)]
pub fn current() -> usize {
    0
}

/// The calling thread's shard, in `0..SHARDS`.
#[cfg(not(loom))]
#[inline]
pub fn current() -> usize {
    SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        // Relaxed: only spreads threads over shards; any value is correct.
        let v = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
        s.set(v);
        v
    })
}

/// A value on a cache line of its own.
#[repr(align(64))]
#[derive(Default, Debug)]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A counter that threads update on lines of their own (`percpu_counter`).
///
/// Plain std atomics: counters are not part of any protocol (they steer
/// the shrinker and feed statistics), so loom need not see them.
#[derive(Debug)]
pub struct Counter {
    total: Padded<AtomicI64>,
    deltas: Box<[Padded<AtomicI64>]>,
    batch: i64,
}

impl Counter {
    /// A counter whose shards fold into the total every `batch` units:
    /// [`approx`](Self::approx) is then off by less than `SHARDS * batch`.
    pub fn new(batch: i64) -> Counter {
        Counter {
            total: Padded(AtomicI64::new(0)),
            deltas: (0..SHARDS).map(|_| Padded(AtomicI64::new(0))).collect(),
            batch: batch.max(1),
        }
    }

    /// Adds `n` (negative to subtract).
    #[inline]
    pub fn add(&self, n: i64) {
        let d = &self.deltas[current()].0;
        // Relaxed: a statistic; the total is exact once every thread's
        // delta is folded or summed (`exact`).
        let v = d.fetch_add(n, Ordering::Relaxed) + n;
        if v.abs() >= self.batch {
            let taken = d.swap(0, Ordering::Relaxed);
            self.total.0.fetch_add(taken, Ordering::Relaxed);
        }
    }

    /// The total, off by less than `SHARDS * batch`; one load.
    #[inline]
    pub fn approx(&self) -> i64 {
        self.total.0.load(Ordering::Relaxed)
    }

    /// The total with every shard's delta: exact when nothing counts
    /// meanwhile.
    pub fn exact(&self) -> i64 {
        self.total.0.load(Ordering::Relaxed) + self.deltas.iter().map(|d| d.0.load(Ordering::Relaxed)).sum::<i64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_exactly_across_threads() {
        let c = std::sync::Arc::new(Counter::new(8));
        let ts: Vec<_> = (0..4)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(if i % 2 == 0 { 3 } else { -1 });
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(c.exact(), 2 * 3000 - 2 * 1000);
        assert!((c.approx() - c.exact()).abs() < (SHARDS as i64) * 8);
    }
}
