//! A one-byte lock that spins briefly and then parks, and a `Mutex<T>` on it.
//!
//! Lock word states (parking_lot's layout):
//!
//! | state              | meaning                                      |
//! |--------------------|----------------------------------------------|
//! | `0`                | unlocked, nobody parked                      |
//! | `LOCKED`           | held, nobody parked: unlock is one store      |
//! | `LOCKED \| PARKED` | held, and some thread may be parked on it     |
//! | `PARKED`           | released; parked threads are being woken      |
//!
//! Transitions: lock is `x -> x | LOCKED` by CAS when `LOCKED` is clear; a
//! waiter that has spun [`SPIN_LIMIT`] times sets `PARKED` and parks while the
//! word still reads `LOCKED | PARKED`. Unlock is `LOCKED -> 0` by CAS when
//! nobody is parked; otherwise it wakes one parked thread and, in the same
//! step under the parking lot's bucket lock, leaves the word at `PARKED` if
//! others still sleep (so the next unlock wakes the next one) or at `0`
//! (parking_lot's `unlock_slow`). Waking one, not all, keeps a contended
//! lock from a stampede of woken threads that mostly park again.
//!
//! Orderings: lock's successful CAS is `Acquire`, pairing with unlock's
//! `Release` CAS or store, so everything the previous holder wrote is
//! visible to the next. Failed CASes and spinning loads are `Relaxed`: they
//! publish nothing.

use core::cell::UnsafeCell;

use super::atomic::{park, spin_hint, unpark_one, AtomicU8, Ordering, SPIN_LIMIT};

const LOCKED: u8 = 1;
const PARKED: u8 = 2;

/// The raw lock. Not reentrant.
#[derive(Debug, Default)]
pub struct RawMutex {
    state: AtomicU8,
}

impl RawMutex {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self { state: AtomicU8::new(0) }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        Self { state: AtomicU8::new(0) }
    }

    #[inline]
    pub fn try_lock(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & LOCKED == 0 && self.state.compare_exchange(s, s | LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    #[inline]
    pub fn lock(&self) {
        super::audit::shared_writes(1);
        if self.state.compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_slow();
        }
    }

    #[cold]
    fn lock_slow(&self) {
        lock_slow(&self.state, LOCKED as u64, PARKED as u64);
    }

    /// # Safety
    /// The calling thread must hold the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        super::audit::shared_writes(1);
        // Release: pairs with the Acquire of the next lock (see module doc).
        if self.state.compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            self.unlock_slow();
        }
    }

    /// Unlock with `PARKED` set: wake one waiter.
    #[cold]
    fn unlock_slow(&self) {
        unpark_one(self.addr(), |more| {
            // Release: as in `unlock`. Only waiters set bits besides ours,
            // and they do so under the bucket lock this runs under, or
            // while `LOCKED` is set (which only we clear): a plain store.
            self.state.store(if more { PARKED } else { 0 }, Ordering::Release);
        });
    }

    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// [`is_locked`](Self::is_locked) with an Acquire load: what a holder
    /// wrote before the release seen here is visible to what the caller
    /// loads next (a reader that only looks, and stores nothing).
    pub fn is_locked_acquire(&self) -> bool {
        self.state.load(Ordering::Acquire) & LOCKED != 0
    }

    fn addr(&self) -> usize {
        &self.state as *const _ as usize
    }
}

/// A lock word with a `locked` and a `parked` bit (and possibly other bits
/// the lock leaves alone: the lockref's count).
pub(crate) trait LockWord {
    fn load_relaxed(&self) -> u64;
    /// `compare_exchange_weak` with the given success ordering (failure:
    /// Relaxed).
    fn cas_weak(&self, old: u64, new: u64, success: Ordering) -> bool;
    fn key(&self) -> usize;
}

impl LockWord for AtomicU8 {
    fn load_relaxed(&self) -> u64 {
        u64::from(self.load(Ordering::Relaxed))
    }
    fn cas_weak(&self, old: u64, new: u64, success: Ordering) -> bool {
        self.compare_exchange_weak(old as u8, new as u8, success, Ordering::Relaxed).is_ok()
    }
    fn key(&self) -> usize {
        self as *const Self as usize
    }
}

impl LockWord for super::atomic::AtomicU64 {
    fn load_relaxed(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
    fn cas_weak(&self, old: u64, new: u64, success: Ordering) -> bool {
        self.compare_exchange_weak(old, new, success, Ordering::Relaxed).is_ok()
    }
    fn key(&self) -> usize {
        self as *const Self as usize
    }
}

/// The contended path of every spin-then-park lock here (the mutex and the
/// lockref's `d_lock`): spin [`SPIN_LIMIT`] times while the word reads
/// locked; then set `parked` and park while the word still reads both
/// bits; on wake-up, start over. Acquiring is a CAS setting `locked`
/// (Acquire, pairing with the unlocker's Release), keeping the other bits.
pub(crate) fn lock_slow<W: LockWord>(word: &W, locked: u64, parked: u64) {
    let mut spins = 0;
    loop {
        let w = word.load_relaxed();
        if w & locked == 0 {
            if word.cas_weak(w, w | locked, Ordering::Acquire) {
                return;
            }
            continue;
        }
        if spins < SPIN_LIMIT {
            spins += 1;
            spin_hint();
            continue;
        }
        if w & parked == 0 && !word.cas_weak(w, w | parked, Ordering::Relaxed) {
            continue;
        }
        park(word.key(), || word.load_relaxed() & (locked | parked) == locked | parked);
        spins = 0;
    }
}

/// A mutual-exclusion lock over `T` built on [`RawMutex`]. The data sits in
/// a plain `UnsafeCell` even under loom: loom checks the lock word's
/// protocol, and the lock is what makes the data accesses exclusive.
pub struct Mutex<T> {
    raw: RawMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the lock gives one thread at a time access to `T`, which may be sent
// between threads.
unsafe impl<T: Send> Send for Mutex<T> {}
// SAFETY: as above: `&Mutex<T>` only hands out `&mut T` under the lock.
unsafe impl<T: Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    pub fn new(value: T) -> Self {
        Self { raw: RawMutex::new(), data: UnsafeCell::new(value) }
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.raw.lock();
        MutexGuard { mutex: self }
    }

    /// The lock if it is free now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        // `then`, not `then_some`: a guard made for a failed try would
        // unlock the holder's lock when dropped.
        self.raw.try_lock().then(|| MutexGuard { mutex: self })
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

pub struct MutexGuard<'a, T> {
    mutex: &'a Mutex<T>,
}

impl<T> core::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no mutable reference to the
        // value exists elsewhere for the guard's lifetime.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T> core::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock: this is the only reference.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: a guard exists only while its thread holds the lock.
        unsafe { self.mutex.raw.unlock() }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A failed try leaves the holder's lock held. (It built a guard for
    /// the failure too, `then_some`, whose drop unlocked it: a lookup that
    /// tried the rename mutex during a rename released the rename's mutex,
    /// two moves of one dentry ran at once, and one panicked in its write
    /// section, leaving lookups of the name spinning for good.)
    #[test]
    fn a_failed_try_lock_leaves_the_lock_held() {
        let m = Mutex::new(());
        let held = m.lock();
        assert!(m.try_lock().is_none());
        assert!(m.raw.is_locked(), "a failed try_lock released the holder's lock");
        drop(held);
        assert!(!m.raw.is_locked());
        assert!(m.try_lock().is_some());
    }
}
