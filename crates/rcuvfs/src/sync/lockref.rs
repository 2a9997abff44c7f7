//! `Lockref`: a spinlock-and-park lock and a reference count in one 64-bit
//! word, changed by one compare-and-swap while the lock is free
//! (Linux `lib/lockref.c`; seed 000 is its precursor).
//!
//! # The word
//!
//! | bits   | field  | meaning                                            |
//! |--------|--------|----------------------------------------------------|
//! | 0      | LOCKED | the lock is held                                   |
//! | 1      | PARKED | a waiter may be parked: unlock must wake it          |
//! | 2      | LOCK_ONLY | fixed at creation: every change takes the lock (the `dlock` mode, seed 003's per-dentry lock) |
//! | 3..32  | -      | zero                                               |
//! | 32..64 | count  | the reference count, an `i32`; [`DEAD`] when dead  |
//!
//! Legal states: `count >= 0` with any lock bits; `count == DEAD` (negative)
//! once [`LockrefGuard::mark_dead`] ran, after which only the lock holder that
//! killed it, or code that frees it, touches it.
//!
//! # The contract
//!
//! Every operation behaves *as if the lock had been taken*: the fast path is
//! one CAS on the whole word that succeeds only while `LOCKED` is clear, so a
//! lock holder sees a count that nobody else changes. After [`CAS_RETRIES`]
//! failed CASes (contention) or on finding the lock held, an operation either
//! takes the lock (`get`, `put_or_lock`) or reports failure (`put_return`,
//! like the kernel's). The lock spins [`SPIN_LIMIT`](super::atomic::SPIN_LIMIT) times and then parks:
//! never a pure spinlock, because a userspace holder can be preempted.
//!
//! # Orderings
//!
//! - Increments are `Relaxed`: taking a reference publishes nothing (as with
//!   `Arc::clone`); the caller already reached the object through something
//!   that synchronized (a hash chain read under RCU, a reference it holds).
//! - Lock-free decrements are `Release`, and the lock's acquisition is
//!   `Acquire`: whoever later takes the lock and finds the count at its last
//!   reference sees every access made under the dropped references (the
//!   decrements form a release sequence read by the locker's CAS).
//! - Unlock is a `Release` RMW pairing with the next `Acquire` lock.

use super::atomic::{spin_hint, unpark_one, AtomicU64, Ordering};

const LOCKED: u64 = 1;
const PARKED: u64 = 2;
const LOCK_ONLY: u64 = 4;
/// The bits a count update keeps.
const LOW_MASK: u64 = u32::MAX as u64;
const COUNT_SHIFT: u32 = 32;

/// The count of a dead object (as in Linux, a large negative number, so that
/// every "not dead" test is a sign test).
pub const DEAD: i32 = -128;

/// Lock-free attempts before falling back (Linux retries 100 times).
#[cfg(not(loom))]
pub const CAS_RETRIES: u32 = 100;
/// Under loom, two tries (seed 000's count) keep the model small while still
/// covering both the retry and the fallback.
#[cfg(loom)]
pub const CAS_RETRIES: u32 = 2;

#[inline(always)]
fn count_of(word: u64) -> i32 {
    (word >> COUNT_SHIFT) as u32 as i32
}

#[inline(always)]
fn with_count(word: u64, count: i32) -> u64 {
    (word & LOW_MASK) | u64::from(count as u32) << COUNT_SHIFT
}

/// A lock and a reference count sharing one word.
#[derive(Debug)]
pub struct Lockref {
    word: AtomicU64,
}

impl Lockref {
    pub fn new(count: i32) -> Self {
        Self { word: AtomicU64::new(with_count(0, count)) }
    }

    /// A lockref whose every change takes the lock: no compare-and-swap
    /// fast path (the `dlock` mode: Linux 2.6's `d_lock` around `d_count`).
    pub fn new_lock_only(count: i32) -> Self {
        Self { word: AtomicU64::new(with_count(LOCK_ONLY, count)) }
    }

    /// Runs the lockless fast path: applies `step` to the count while the
    /// lock is free. `step` returns `None` to give up (the count is in a
    /// state the fast path may not change). Returns `Ok(new count)`, or
    /// `Err(())` if the lock was held, `step` gave up, or the CAS kept losing.
    #[inline(always)]
    fn cmpxchg_loop(&self, success: Ordering, step: impl Fn(i32) -> Option<i32>) -> Result<i32, ()> {
        let mut old = self.word.load(Ordering::Relaxed);
        for _ in 0..CAS_RETRIES {
            if old & (LOCKED | LOCK_ONLY) != 0 {
                return Err(());
            }
            let new_count = step(count_of(old)).ok_or(())?;
            match self.word.compare_exchange_weak(old, with_count(old, new_count), success, Ordering::Relaxed) {
                Ok(_) => {
                    super::audit::shared_writes(1);
                    return Ok(new_count);
                }
                Err(cur) => {
                    old = cur;
                    spin_hint();
                }
            }
        }
        Err(())
    }

    /// Takes a reference unconditionally (`lockref_get`).
    #[inline]
    pub fn get(&self) {
        if self.cmpxchg_loop(Ordering::Relaxed, |c| Some(c + 1)).is_err() {
            let mut g = self.lock();
            let c = g.count();
            g.set_count(c + 1);
        }
    }

    /// Takes a reference if the count is above zero, without the lock:
    /// `false` (changing nothing) when it is not, the lock is held, or the
    /// CAS kept losing; the caller then takes the lock itself.
    #[inline]
    pub fn get_if_positive(&self) -> bool {
        self.cmpxchg_loop(Ordering::Relaxed, |c| (c > 0).then_some(c + 1)).is_ok()
    }

    /// Takes a reference unless the object is dead (`lockref_get_not_dead`);
    /// a count of zero (unused but cached) may be revived.
    #[inline]
    pub fn get_not_dead(&self) -> bool {
        match self.cmpxchg_loop(Ordering::Relaxed, |c| (c >= 0).then_some(c + 1)) {
            Ok(_) => true,
            Err(()) => {
                let mut g = self.lock();
                let c = g.count();
                if c >= 0 {
                    g.set_count(c + 1);
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Drops a reference if it is not the last one, without the lock.
    /// Returns `false`, changing nothing, when the count is one or less, the
    /// lock is held, or the CAS kept losing.
    #[inline]
    pub fn put_not_last(&self) -> bool {
        self.cmpxchg_loop(Ordering::Release, |c| (c > 1).then_some(c - 1)).is_ok()
    }

    /// Drops a reference without ever taking the lock (`lockref_put_return`).
    /// Returns the new count, or `None` if the count was not above zero, the
    /// lock was held, or the CAS kept losing: the caller then takes the slow
    /// path itself.
    #[inline]
    pub fn put_return(&self) -> Option<i32> {
        self.cmpxchg_loop(Ordering::Release, |c| (c > 0).then_some(c - 1)).ok()
    }

    /// Drops a reference if it is not the last one, else locks
    /// (`lockref_put_or_lock`). Returns `None` when a reference was dropped
    /// (the count was above one), or the held lock when the count is one or
    /// less, unchanged: the caller decides the object's fate under the lock.
    #[inline]
    pub fn put_or_lock(&self) -> Option<LockrefGuard<'_>> {
        if self.cmpxchg_loop(Ordering::Release, |c| (c > 1).then_some(c - 1)).is_ok() {
            return None;
        }
        let mut g = self.lock();
        let c = g.count();
        if c > 1 {
            g.set_count(c - 1);
            return None;
        }
        Some(g)
    }

    /// The count, read without the lock: a hint, stale as soon as it returns.
    #[inline]
    pub fn count_hint(&self) -> i32 {
        count_of(self.word.load(Ordering::Relaxed))
    }

    /// Takes the lock: spins [`SPIN_LIMIT`](super::atomic::SPIN_LIMIT) times, then parks.
    #[inline]
    pub fn lock(&self) -> LockrefGuard<'_> {
        let old = self.word.load(Ordering::Relaxed);
        if old & LOCKED != 0
            || self.word.compare_exchange_weak(old, old | LOCKED, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            self.lock_slow();
        }
        super::audit::shared_writes(1);
        LockrefGuard { lockref: self }
    }

    /// Takes the lock if it is free (`spin_trylock`), as `lock` does. Gives
    /// up after [`CAS_RETRIES`] lost races with count changes.
    #[inline]
    pub fn try_lock(&self) -> Option<LockrefGuard<'_>> {
        let mut old = self.word.load(Ordering::Relaxed);
        for _ in 0..CAS_RETRIES {
            if old & LOCKED != 0 {
                return None;
            }
            // Acquire: as in `lock`.
            match self.word.compare_exchange_weak(old, old | LOCKED, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => {
                    super::audit::shared_writes(1);
                    return Some(LockrefGuard { lockref: self });
                }
                Err(cur) => old = cur,
            }
        }
        None
    }

    #[cold]
    fn lock_slow(&self) {
        super::mutex::lock_slow(&self.word, LOCKED, PARKED);
    }

    fn addr(&self) -> usize {
        &self.word as *const _ as usize
    }
}

/// The held lock of a [`Lockref`]; the count may be read and changed through
/// it. Unlocks on drop.
pub struct LockrefGuard<'a> {
    lockref: &'a Lockref,
}

impl LockrefGuard<'_> {
    /// The count. Exact: while the lock is held nobody else changes it.
    #[inline]
    pub fn count(&self) -> i32 {
        count_of(self.lockref.word.load(Ordering::Relaxed))
    }

    /// Sets the count. A CAS loop rather than a store, because waiters may set
    /// `PARKED` concurrently; the count bits are ours alone.
    #[inline]
    pub fn set_count(&mut self, count: i32) {
        super::audit::shared_writes(1);
        let mut old = self.lockref.word.load(Ordering::Relaxed);
        loop {
            match self.lockref.word.compare_exchange_weak(
                old,
                with_count(old, count),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(cur) => old = cur,
            }
        }
    }

    /// Marks the object dead (`lockref_mark_dead`): every later `get_not_dead`
    /// fails.
    pub fn mark_dead(&mut self) {
        self.set_count(DEAD);
    }

    /// Sets the count and unlocks, in one RMW: a `set_count` then a drop
    /// were two (a create's close and its inode's first reference each
    /// paid one more locked instruction than needed). `Release`, as the
    /// unlock: a lockless operation that then sees the lock free sees this
    /// count too, as if it had taken the lock after us.
    #[inline]
    pub fn unlock_with(self, count: i32) {
        let me = core::mem::ManuallyDrop::new(self);
        let w = &me.lockref.word;
        super::audit::shared_writes(1);
        let mut old = w.load(Ordering::Relaxed);
        loop {
            // `PARKED` stays, as in `drop`: the wake-up below decides it.
            match w.compare_exchange_weak(old, with_count(old, count) & !LOCKED, Ordering::Release, Ordering::Relaxed) {
                Ok(prev) => {
                    if prev & PARKED != 0 {
                        me.unlock_slow();
                    }
                    return;
                }
                Err(cur) => old = cur,
            }
        }
    }

    /// Marks the object dead and unlocks, in one RMW (see `unlock_with`).
    #[inline]
    pub fn unlock_dead(self) {
        self.unlock_with(DEAD);
    }
}

impl Drop for LockrefGuard<'_> {
    fn drop(&mut self) {
        let w = &self.lockref.word;
        super::audit::shared_writes(1);
        // Release: pairs with the Acquire CAS of the next locker (and with
        // the Acquire of lockless operations that read this word). `PARKED`
        // stays: the wake-up below decides it.
        if w.fetch_and(!LOCKED, Ordering::Release) & PARKED != 0 {
            self.unlock_slow();
        }
    }
}

impl LockrefGuard<'_> {
    /// Wakes one parked waiter; clears `PARKED` if it was the last one
    /// (parking_lot's protocol; see `mutex`). The count may change under us
    /// (the lock is free), hence an RMW on the lock bits only.
    #[cold]
    fn unlock_slow(&self) {
        let w = &self.lockref.word;
        unpark_one(self.lockref.addr(), |more| {
            if !more {
                // Relaxed: the bit only says whom to wake; the waiters and
                // this callback are ordered by the parking lot's lock.
                w.fetch_and(!PARKED, Ordering::Relaxed);
            }
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn count_bits_round_trip() {
        for c in [0, 1, 2, 1000, i32::MAX, DEAD, -1] {
            assert_eq!(count_of(with_count(LOCKED | PARKED, c)), c);
            assert_eq!(with_count(LOCKED | PARKED, c) & (LOCKED | PARKED), LOCKED | PARKED);
        }
    }

    #[test]
    fn get_and_put_follow_the_kernel_contract() {
        let r = Lockref::new(1);
        r.get();
        assert_eq!(r.count_hint(), 2);
        assert_eq!(r.put_return(), Some(1));
        // put_or_lock at 1 hands back the lock with the count untouched.
        let mut g = r.put_or_lock().expect("last reference must lock");
        assert_eq!(g.count(), 1);
        g.set_count(0);
        drop(g);
        assert!(r.get_not_dead());
        assert_eq!(r.put_return(), Some(0));
        assert_eq!(r.put_return(), None, "put_return never goes below zero");
        r.lock().mark_dead();
        assert!(!r.get_not_dead());
    }

    #[test]
    fn put_return_fails_while_locked() {
        let r = Lockref::new(5);
        let g = r.lock();
        assert_eq!(r.put_return(), None);
        drop(g);
        assert_eq!(r.put_return(), Some(4));
    }

    #[test]
    fn many_threads_lose_no_reference() {
        let r = std::sync::Arc::new(Lockref::new(1));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for _ in 0..if cfg!(miri) { 50 } else { 20_000 } {
                        r.get();
                        if i % 2 == 0 {
                            let _g = r.lock();
                        }
                        if r.put_return().is_none() {
                            assert!(r.put_or_lock().is_none(), "count stayed above one");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(r.count_hint(), 1);
    }
}
