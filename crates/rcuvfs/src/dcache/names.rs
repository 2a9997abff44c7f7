//! Name locks: per-name serialization of namespace changes (past Linux's
//! per-directory `i_rwsem`, as the "parallel directory operations" work
//! proposes).
//!
//! A name lock covers one name in one directory, whatever dentries come and
//! go for it: it is held across the filesystem call that looks the name up
//! (on a cache miss), creates, removes or renames it, and across the dcache
//! change that records the result. Two operations on different names take
//! different locks (save for a stripe collision, one in [`STRIPES`] per
//! pair), so creates and unlinks of different names in one directory run in
//! parallel; two on the same name take turns, which is what keeps the cache
//! and the filesystem agreeing. Parallel lookups of one missing name wait
//! here for the first, then find its result cached (`d_alloc_parallel`'s
//! purpose: one filesystem call).
//!
//! The lock is keyed by the name's hash, which covers the parent dentry's
//! address, not by a dentry: a dentry can be unhashed (by a backend's
//! invalidation) while its name is locked, and a new dentry for the same
//! name must then still wait.
//!
//! Order: name locks of two names (a rename, a link) in stripe order; one
//! lock when they share a stripe. The rename mutex comes before them; a
//! dentry's `d_lock`, the index home locks and the LRU locks after them.

use crate::sync::shard::Padded;
use crate::sync::RawMutex;

/// Stripes per dcache: 64 KiB of padded locks.
#[cfg(not(loom))]
pub const STRIPES: usize = 1024;
/// Under loom every lock is a modelled object: a few stripes.
#[cfg(loom)]
pub const STRIPES: usize = 8;

pub(crate) struct NameLocks {
    stripes: Box<[Padded<RawMutex>]>,
}

/// A held name lock (one or two stripes); released on drop.
pub(crate) struct NameGuard<'a> {
    locks: &'a NameLocks,
    a: usize,
    b: Option<usize>,
}

impl NameLocks {
    pub fn new() -> NameLocks {
        NameLocks { stripes: (0..STRIPES).map(|_| Padded(RawMutex::new())).collect() }
    }

    fn stripe(hash: u64) -> usize {
        // The low bits: the index home uses the top ones.
        (hash as usize) & (STRIPES - 1)
    }

    /// Locks the name whose hash (`name_hash(parent, name)`) is `hash`.
    pub fn lock(&self, hash: u64) -> NameGuard<'_> {
        let a = Self::stripe(hash);
        self.stripes[a].0.lock();
        NameGuard { locks: self, a, b: None }
    }

    /// Locks the name whose hash is `hash` if no one holds its stripe (out
    /// of stripe order: it never waits).
    pub fn try_lock(&self, hash: u64) -> Option<NameGuard<'_>> {
        let a = Self::stripe(hash);
        // `then`, not `then_some`: see `Mutex::try_lock`.
        self.stripes[a].0.try_lock().then(|| NameGuard { locks: self, a, b: None })
    }

    /// Whether someone holds the stripe of the name whose hash is `hash`
    /// (a change of that name may be under way, or of another on its
    /// stripe): one Acquire load, for a reader that takes no lock
    /// (`Dcache::fs_probe`).
    #[inline]
    pub fn held(&self, hash: u64) -> bool {
        self.stripes[Self::stripe(hash)].0.is_locked_acquire()
    }

    /// Whether two names share a stripe (one lock covers both).
    pub fn same_stripe(h1: u64, h2: u64) -> bool {
        Self::stripe(h1) == Self::stripe(h2)
    }

    /// Locks two names, in stripe order.
    pub fn lock2(&self, h1: u64, h2: u64) -> NameGuard<'_> {
        let (x, y) = (Self::stripe(h1), Self::stripe(h2));
        if x == y {
            return self.lock(h1);
        }
        let (a, b) = if x < y { (x, y) } else { (y, x) };
        self.stripes[a].0.lock();
        self.stripes[b].0.lock();
        NameGuard { locks: self, a, b: Some(b) }
    }
}

impl Drop for NameGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `lock`/`lock2` took these stripes, once each.
        unsafe {
            if let Some(b) = self.b {
                self.locks.stripes[b].0.unlock();
            }
            self.locks.stripes[self.a].0.unlock();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_failed_try_lock_leaves_the_name_locked() {
        let n = NameLocks::new();
        let held = n.lock(7);
        assert!(n.try_lock(7).is_none());
        assert!(n.stripes[NameLocks::stripe(7)].0.is_locked(), "a failed try_lock released the holder's lock");
        drop(held);
        assert!(n.try_lock(7 + STRIPES as u64).is_some(), "one stripe for both");
    }
}
