//! Sequence counts and sequence locks (Linux `include/linux/seqlock.h`).
//!
//! A [`SeqCount`] is an odd/even counter: even means stable, odd means a
//! writer is in the middle of an update. Writers are serialized by something
//! else (a lock the caller holds); a [`SeqLock`] bundles a count with its
//! writers' lock.
//!
//! # The reader's contract
//!
//! ```text
//! let s = seq.read_begin()?;       // None: a writer is in progress
//! ... read the protected fields with atomic loads ...
//! if seq.read_retry(s) { retry or fall back }  // else the values are a snapshot
//! ```
//!
//! The protected fields must be atomics (read `Relaxed`): a racy non-atomic
//! read is undefined behaviour in Rust even if the result is discarded.
//!
//! # Orderings (the standard Rust seqlock recipe)
//!
//! - writer: `store(s+1, Relaxed)`; `fence(Release)`; data stores (`Relaxed`);
//!   `store(s+2, Release)`.
//! - reader: `load(Acquire)`; data loads (`Relaxed`); `fence(Acquire)`;
//!   `load(Relaxed)`.
//!
//! If a reader's data load saw a value stored after the writer's first
//! increment, the reader's `fence(Acquire)` synchronizes with the writer's
//! `fence(Release)`, so its second load sees at least `s+1`: a mismatch. If
//! its first load saw `s+2`, the `Release` store of `s+2` carries every data
//! store before it. So a reader that finds both loads equal and even read a
//! consistent snapshot.
//!
//! # Userspace
//!
//! A writer can be preempted with the count odd. Readers therefore never spin
//! unboundedly on an odd count: [`SeqLock::read`] retries [`READ_RETRIES`]
//! times and then takes the writers' lock itself, which parks instead of
//! spinning.

use super::atomic::{fence, spin_hint, AtomicU32, Ordering};
use super::mutex::RawMutex;

/// Optimistic attempts before a reader takes the lock.
#[cfg(not(loom))]
pub const READ_RETRIES: u32 = 16;
#[cfg(loom)]
pub const READ_RETRIES: u32 = 2;

#[derive(Debug, Default)]
pub struct SeqCount {
    seq: AtomicU32,
}

impl SeqCount {
    pub fn new() -> Self {
        Self { seq: AtomicU32::new(0) }
    }

    /// Starts a read section. Returns the even count to pass to
    /// [`read_retry`](Self::read_retry), or `None` if a writer is in progress
    /// (the caller retries a bounded number of times, or falls back).
    #[inline(always)]
    pub fn read_begin(&self) -> Option<u32> {
        // Acquire: pairs with the writer's closing Release store.
        let s = self.seq.load(Ordering::Acquire);
        (s & 1 == 0).then_some(s)
    }

    /// Like [`read_begin`](Self::read_begin), but spins a bounded number of
    /// times on a writer in progress.
    #[inline]
    pub fn read_begin_spin(&self) -> Option<u32> {
        for _ in 0..READ_RETRIES {
            if let Some(s) = self.read_begin() {
                return Some(s);
            }
            spin_hint();
        }
        None
    }

    /// Ends a read section: `true` if a writer ran since `start`, so what was
    /// read must be discarded.
    #[inline(always)]
    pub fn read_retry(&self, start: u32) -> bool {
        // Acquire fence: pairs with the writer's Release fence after its first
        // increment (see the module doc).
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) != start
    }

    /// The raw count, for hand-over-hand validation (`raw_seqcount_begin`):
    /// may be odd.
    #[inline(always)]
    pub fn raw(&self) -> u32 {
        self.seq.load(Ordering::Acquire)
    }

    /// Starts a write section. The caller must serialize writers.
    #[inline]
    pub fn write_begin(&self) {
        super::audit::shared_writes(1);
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "nested or concurrent seqcount writers");
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        // Release fence: pairs with the reader's Acquire fence in read_retry.
        fence(Ordering::Release);
    }

    /// Ends a write section.
    #[inline]
    pub fn write_end(&self) {
        super::audit::shared_writes(1);
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 1);
        // Release: publishes the data stores to readers' Acquire read_begin.
        self.seq.store(s.wrapping_add(1), Ordering::Release);
    }

    /// Invalidates every read section in flight without a write section
    /// (`write_seqcount_invalidate`): used when an object leaves a structure
    /// (unhash) or dies. The caller serializes it with writers.
    ///
    /// Orderings, both directions:
    /// - the increment is `Release`: a reader whose `read_begin` sees the new
    ///   count also sees every store made before it (the cleared `HASHED`
    ///   flag), pairing with `read_begin`'s Acquire;
    /// - the `Release` fence after it: a reader that sees any store made
    ///   after the invalidation (a killed dentry's cleared inode) sees the
    ///   new count at its `read_retry`, pairing with that Acquire fence.
    #[inline]
    pub fn invalidate(&self) {
        super::audit::shared_writes(1);
        self.seq.fetch_add(2, Ordering::Release);
        fence(Ordering::Release);
    }
}

/// A sequence count with the lock that serializes its writers.
#[derive(Debug, Default)]
pub struct SeqLock {
    seq: SeqCount,
    lock: RawMutex,
}

/// A held [`SeqLock`] write section; ends it and unlocks on drop.
pub struct SeqLockWriteGuard<'a> {
    lock: &'a SeqLock,
}

impl Drop for SeqLockWriteGuard<'_> {
    fn drop(&mut self) {
        self.lock.seq.write_end();
        // SAFETY: this guard was created by `write`, which took the lock.
        unsafe { self.lock.lock.unlock() }
    }
}

/// The writers' lock held by a reader (the fallback path); no write section
/// is open, so optimistic readers are not disturbed.
pub struct SeqLockReadGuard<'a> {
    lock: &'a SeqLock,
}

impl Drop for SeqLockReadGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard was created by `read_locked`, which took the lock.
        unsafe { self.lock.lock.unlock() }
    }
}

impl SeqLock {
    pub fn new() -> Self {
        Self { seq: SeqCount::new(), lock: RawMutex::new() }
    }

    pub fn seqcount(&self) -> &SeqCount {
        &self.seq
    }

    /// Takes the lock and opens a write section (`write_seqlock`).
    pub fn write(&self) -> SeqLockWriteGuard<'_> {
        self.lock.lock();
        self.seq.write_begin();
        SeqLockWriteGuard { lock: self }
    }

    /// The count now, to compare in [`write_if`](Self::write_if) later: a
    /// version of what the lock protects. Odd while a writer is in
    /// progress (no later count equals it then). Acquire, as `raw`: a
    /// count read stale only makes the check under the lock fail, which
    /// always sees the latest. The lock is a leaf: the callers of
    /// `write_if` run nothing but stores and loads under it.
    #[inline]
    pub fn version(&self) -> u32 {
        self.seq.raw()
    }

    /// Takes the lock and opens a write section if `ok`, called under the
    /// lock with the version, says so. `None` (and the lock let go)
    /// otherwise: a refused writer disturbs no reader.
    pub fn write_if(&self, ok: impl FnOnce(u32) -> bool) -> Option<SeqLockWriteGuard<'_>> {
        self.lock.lock();
        if !ok(self.seq.raw()) {
            // SAFETY: taken above.
            unsafe { self.lock.unlock() };
            return None;
        }
        self.seq.write_begin();
        Some(SeqLockWriteGuard { lock: self })
    }

    /// Takes the lock without opening a write section (`read_seqlock_excl`):
    /// excludes writers, lets optimistic readers run.
    pub fn read_locked(&self) -> SeqLockReadGuard<'_> {
        self.lock.lock();
        SeqLockReadGuard { lock: self }
    }

    #[inline(always)]
    pub fn read_begin(&self) -> Option<u32> {
        self.seq.read_begin()
    }

    #[inline(always)]
    pub fn read_retry(&self, start: u32) -> bool {
        self.seq.read_retry(start)
    }

    /// Runs `f` until it reads a consistent snapshot: optimistically up to
    /// [`READ_RETRIES`] times, then once more under the lock, where no writer
    /// can interfere. `f` must only read (atomically) and may run many times.
    #[inline]
    pub fn read<R>(&self, mut f: impl FnMut() -> R) -> R {
        for _ in 0..READ_RETRIES {
            if let Some(s) = self.seq.read_begin() {
                let r = f();
                if !self.seq.read_retry(s) {
                    return r;
                }
            }
            spin_hint();
        }
        let _g = self.read_locked();
        f()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn readers_never_see_a_torn_pair() {
        let lock = Arc::new((SeqLock::new(), AtomicU64::new(0), AtomicU64::new(0)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n = if cfg!(miri) { 20 } else { 100_000 };
        let writer = {
            let (lock, stop) = (lock.clone(), stop.clone());
            std::thread::spawn(move || {
                for i in 1..=n {
                    let _g = lock.0.write();
                    lock.1.store(i, Ordering::Relaxed);
                    lock.2.store(i, Ordering::Relaxed);
                }
                stop.store(true, Ordering::Relaxed);
            })
        };
        let mut torn = 0;
        while !stop.load(Ordering::Relaxed) {
            let (a, b) = lock.0.read(|| (lock.1.load(Ordering::Relaxed), lock.2.load(Ordering::Relaxed)));
            torn += u32::from(a != b);
        }
        writer.join().unwrap();
        assert_eq!(torn, 0);
    }

    #[test]
    fn invalidate_fails_open_readers() {
        let s = SeqCount::new();
        let start = s.read_begin().unwrap();
        s.invalidate();
        assert!(s.read_retry(start));
        assert!(!s.read_retry(s.read_begin().unwrap()));
    }
}
