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
//! word still reads `LOCKED | PARKED`; unlock swaps the word to `0` and, if
//! `PARKED` was set, wakes every parked thread (they race again).
//!
//! Orderings: lock's successful CAS is `Acquire`, pairing with unlock's
//! `Release` swap, so everything the previous holder wrote is visible to the
//! next. Failed CASes and spinning loads are `Relaxed`: they publish nothing.

use core::cell::UnsafeCell;

use super::atomic::{park, spin_hint, unpark_all, AtomicU8, Ordering, SPIN_LIMIT};

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
        let mut spins = 0;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & LOCKED == 0 {
                if self.state.compare_exchange_weak(s, s | LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    return;
                }
                continue;
            }
            if spins < SPIN_LIMIT {
                spins += 1;
                spin_hint();
                continue;
            }
            if s & PARKED == 0
                && self.state.compare_exchange_weak(s, s | PARKED, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                continue;
            }
            park(self.addr(), || self.state.load(Ordering::Relaxed) == LOCKED | PARKED);
            spins = 0;
        }
    }

    /// # Safety
    /// The calling thread must hold the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        super::audit::shared_writes(1);
        // Release: pairs with the Acquire of the next lock (see module doc).
        if self.state.swap(0, Ordering::Release) & PARKED != 0 {
            unpark_all(self.addr());
        }
    }

    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    fn addr(&self) -> usize {
        &self.state as *const _ as usize
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

impl<T> MutexGuard<'_, T> {
    /// Runs `f` with exclusive access to the protected value.
    #[inline]
    pub fn with<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        f(self)
    }
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
