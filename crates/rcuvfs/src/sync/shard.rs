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
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Shards per sharded structure (a power of two). More than this machine's
/// cores, so that threads spread even when the scheduler moves them.
pub const SHARDS: usize = 16;

/// Shards of the structures that every update locks or writes once per
/// object (the LRU lists, the RCU batches, the inode lists, [`Counter`]s,
/// [`Budget`]s, memfs's inode-number chunks and the inode table's
/// partitions): one per thread up to 64 threads, so that two threads that
/// run at once on two cores never share one. With 16, the 32 threads of
/// `bench create-private` on 16 cores shared them in pairs and contended
/// on each create and unlink: 5.45-5.53M jobs/s, against 6.37-7.27M with
/// 64 (`short` 3.41M against 3.81-4.00M; the device machine, 2 runs each,
/// alternating). The per-table shards (an index's counts, 128 bytes each
/// and summed whole when one passes its quota) keep [`SHARDS`]: with 64
/// of those too, `bench short` ran 8% slower at 16 threads.
pub const THREAD_SHARDS: usize = 64;

#[cfg(not(loom))]
static NEXT: AtomicUsize = AtomicUsize::new(0);

#[cfg(not(loom))]
thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's shard, in `0..SHARDS`. Under loom always 0: a
/// model must be deterministic, and which shard a thread uses is part of no
/// protocol.
#[inline]
pub fn current() -> usize {
    thread() % SHARDS
}

/// The calling thread's shard among [`THREAD_SHARDS`] (its [`current`]
/// shard is this one modulo [`SHARDS`]). Under loom always 0.
#[cfg(loom)]
pub fn thread() -> usize {
    0
}

/// The calling thread's shard among [`THREAD_SHARDS`].
#[cfg(not(loom))]
#[inline]
pub fn thread() -> usize {
    SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        // Relaxed: only spreads threads over shards; any value is correct.
        let v = NEXT.fetch_add(1, Ordering::Relaxed) % THREAD_SHARDS;
        s.set(v);
        v
    })
}

/// The CPU the calling thread runs on, as a shard number (`0..SHARDS`;
/// under loom always 0). For per-CPU data proper: lists whose objects
/// should stay in one core's caches (freed objects and frames reused by
/// the next thread on that core), where per-thread shards would spread 16
/// threads' working sets over two cores' caches. A thread may move to
/// another CPU at any moment, so the shard is only a placement: what it
/// indexes must still be locked.
#[inline]
pub fn cpu() -> usize {
    #[cfg(not(loom))]
    {
        // SAFETY: sched_getcpu has no preconditions.
        let c = unsafe { libc::sched_getcpu() };
        if c >= 0 {
            return c as usize % SHARDS;
        }
        current()
    }
    #[cfg(loom)]
    0
}

/// A value on cache lines of its own: 128 bytes, because x86's spatial
/// prefetcher fetches lines in pairs, so two values 64 bytes apart still
/// slow each other's writers (crossbeam's `CachePadded` does the same).
#[repr(align(128))]
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
    /// [`approx`](Self::approx) is then off by less than `THREAD_SHARDS * batch`.
    pub fn new(batch: i64) -> Counter {
        Counter {
            total: Padded(AtomicI64::new(0)),
            deltas: (0..THREAD_SHARDS).map(|_| Padded(AtomicI64::new(0))).collect(),
            batch: batch.max(1),
        }
    }

    /// Adds `n` (negative to subtract).
    #[inline]
    pub fn add(&self, n: i64) {
        let d = &self.deltas[thread()].0;
        // Relaxed: a statistic; the total is exact once every thread's
        // delta is folded or summed (`exact`).
        let v = d.fetch_add(n, Ordering::Relaxed) + n;
        if v.abs() >= self.batch {
            let taken = d.swap(0, Ordering::Relaxed);
            self.total.0.fetch_add(taken, Ordering::Relaxed);
        }
    }

    /// The total, off by less than `THREAD_SHARDS * batch`; one load.
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

/// A quantity with a limit that threads charge on lines of their own: each
/// shard holds a *reserve* taken from the shared total in chunks (as ext4
/// and XFS reserve free blocks per CPU), so a charge that fits its shard's
/// reserve, and a refund, store only to that shard's line.
///
/// `used` counts what is charged plus every shard's reserve, so the limit is
/// never exceeded. Near the limit (within a chunk) nothing new is reserved,
/// and a charge the total refuses first takes every shard's reserve back and
/// tries once more: single-threaded, a charge fails exactly when the real
/// usage plus it would pass the limit. With other threads charging at the
/// same moment, one may fail while their fresh reserves (at most `THREAD_SHARDS`
/// chunks) hold the rest, as a per-CPU counter's comparison may.
///
/// Plain std atomics, `Relaxed`: a budget orders nothing but itself (every
/// update is an RMW on one word, so no unit is created or lost).
#[derive(Debug)]
pub struct Budget {
    used: Padded<AtomicU64>,
    reserves: Box<[Padded<AtomicU64>]>,
    limit: u64,
    chunk: u64,
}

impl Budget {
    /// A budget of `limit` units, handed to shards `chunk` at a time.
    pub fn new(limit: u64, chunk: u64) -> Budget {
        Budget {
            used: Padded(AtomicU64::new(0)),
            reserves: (0..THREAD_SHARDS).map(|_| Padded(AtomicU64::new(0))).collect(),
            limit,
            chunk: chunk.max(1),
        }
    }

    /// Charges `n` units; false (nothing charged) if the limit forbids it.
    #[inline]
    pub fn charge(&self, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let r = &self.reserves[thread()].0;
        let mut cur = r.load(Ordering::Relaxed);
        while cur >= n {
            // A CAS, not a subtraction: a thief (`reclaim`) may empty the
            // reserve at any moment.
            match r.compare_exchange_weak(cur, cur - n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
        self.charge_slow(r, n)
    }

    #[cold]
    fn charge_slow(&self, r: &AtomicU64, n: u64) -> bool {
        // A chunk for the reserve as well, while the total is far from the
        // limit; near it, only `n`, so that reserves drain there.
        let take = n.saturating_add(self.chunk);
        if self.add_used(take) {
            r.fetch_add(take - n, Ordering::Relaxed);
            return true;
        }
        if self.add_used(n) {
            return true;
        }
        self.reclaim();
        self.add_used(n)
    }

    /// Adds `n` to the total unless that passes the limit.
    fn add_used(&self, n: u64) -> bool {
        let mut cur = self.used.0.load(Ordering::Relaxed);
        loop {
            let Some(new) = cur.checked_add(n).filter(|&v| v <= self.limit) else { return false };
            match self.used.0.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }

    /// Moves every shard's reserve back to the total.
    fn reclaim(&self) {
        for s in self.reserves.iter() {
            let x = s.0.swap(0, Ordering::Relaxed);
            if x > 0 {
                self.used.0.fetch_sub(x, Ordering::Relaxed);
            }
        }
    }

    /// Gives back `n` units charged earlier (to this shard's reserve; past
    /// two chunks, the excess to the total).
    #[inline]
    pub fn refund(&self, n: u64) {
        if n == 0 {
            return;
        }
        let r = &self.reserves[thread()].0;
        let v = r.fetch_add(n, Ordering::Relaxed) + n;
        if v > 2 * self.chunk {
            self.trim(r);
        }
    }

    #[cold]
    fn trim(&self, r: &AtomicU64) {
        let mut cur = r.load(Ordering::Relaxed);
        while cur > self.chunk {
            match r.compare_exchange_weak(cur, self.chunk, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.used.0.fetch_sub(cur - self.chunk, Ordering::Relaxed);
                    return;
                }
                Err(c) => cur = c,
            }
        }
    }

    /// Charges `n` units whatever the limit (taking back a refund that was
    /// handed out too early must not fail).
    pub fn force(&self, n: u64) {
        self.used.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Units charged (the total less the reserves): exact when nothing
    /// charges meanwhile.
    pub fn used(&self) -> u64 {
        let reserved: u64 = self.reserves.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        self.used.0.load(Ordering::Relaxed).saturating_sub(reserved)
    }

    pub fn limit(&self) -> u64 {
        self.limit
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

    #[test]
    fn a_budget_refuses_exactly_at_its_limit_on_one_thread() {
        let b = Budget::new(1000, 64);
        assert!(b.charge(10));
        assert_eq!(b.used(), 10);
        assert!(b.charge(990));
        assert_eq!(b.used(), 1000);
        assert!(!b.charge(1), "one past the limit");
        assert_eq!(b.used(), 1000, "a refused charge changes nothing");
        b.refund(500);
        assert_eq!(b.used(), 500);
        assert!(b.charge(500));
        assert!(!b.charge(1));
        b.refund(1000);
        assert_eq!(b.used(), 0);
        assert!(b.charge(1000), "the whole budget again, reserves reclaimed");
    }

    #[test]
    fn a_budget_never_passes_its_limit_across_threads() {
        let b = std::sync::Arc::new(Budget::new(10_000, 64));
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut held = 0u64;
                    for i in 0..20_000u64 {
                        if i % 3 == 2 && held > 0 {
                            b.refund(7);
                            held -= 7;
                        } else if b.charge(7) {
                            held += 7;
                        }
                        assert!(b.used.0.load(Ordering::Relaxed) <= 10_000);
                    }
                    held
                })
            })
            .collect();
        let held: u64 = ts.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(b.used(), held, "no unit created or lost");
    }
}
