//! References: `dput` and the last reference's protocol against killers,
//! and `dget_parent`.

use std::ptr;

use super::dentry::{DRef, Dentry, HASHED, ON_LRU, REFERENCED, ROOT};
use super::Dcache;
use crate::sync::atomic::Ordering;
use crate::sync::LockrefGuard;

impl Dcache {
    /// Drops a reference through `put_or_lock`: not the last one, or the
    /// last one of a hashed dentry (which stays cached, unused, on the LRU),
    /// returns `false`. The last one of an unhashed dentry marks it dead and
    /// returns `true`: the caller must `kill` it. No window: the last
    /// reference is given up only under `d_lock`.
    pub(super) fn put_or_mark_dead(&self, d: &Dentry) -> bool {
        match d.lockref().put_or_lock() {
            None => false,
            Some(g) => self.retain_or_mark_dead(d, g),
        }
    }

    /// The last reference's fate (`retain_dentry`), decided under `d_lock`
    /// (`g`) with the count at one (or at zero, from `dput_last`'s
    /// lockless decrement: the same decision): a hashed dentry stays cached
    /// at count zero, on the LRU; an unhashed one is marked dead, and
    /// `true` tells the caller to kill it. Either count is set as the lock
    /// is let go, in one RMW (no one sees the count while it is held).
    fn retain_or_mark_dead(&self, d: &Dentry, g: LockrefGuard<'_>) -> bool {
        debug_assert!(matches!(g.count(), 0 | 1));
        if d.flags.load(Ordering::Relaxed) & (HASHED | ROOT) != 0 {
            self.lru_add_locked(d, &g);
            g.unlock_with(0);
            return false;
        }
        self.unhash_and_mark_dead(d, g);
        true
    }

    /// Drops a reference (`dput`). The last reference to a hashed dentry
    /// leaves it cached and unused, on the LRU; to an unhashed one, kills it.
    ///
    /// Not the last reference: one lockless decrement. The last one is
    /// Linux's `fast_dput`: from the instant the count reads zero, a killer
    /// (the shrinker, `drop_caches`, the invalidation of a name renamed
    /// over) may mark the dentry dead and retire it, so everything after
    /// the decrement runs inside an RCU read section, which keeps the
    /// memory until we are done, and decides under `d_lock`. The lockless
    /// decrement to zero stands alone only when there is nothing to decide:
    /// the dentry is hashed, on the LRU and already referenced (a killer
    /// then finds it on the LRU and takes it off itself).
    #[inline]
    pub fn dput(&self, d: &Dentry) {
        if self.lock_only {
            // `dlock`: every change takes d_lock anyway, so the last
            // reference is given up under it, with no window to cover.
            if self.put_or_mark_dead(d) {
                self.kill(d);
            }
        } else if !d.lockref().put_not_last() {
            self.dput_last(d);
        }
    }

    #[inline(never)]
    fn dput_last(&self, d: &Dentry) {
        let _rcu = self.rcu.read_lock();
        let g = match d.lockref().put_return() {
            Some(n) if n > 0 => return,
            Some(_) => {
                crate::sync::atomic::preemption_point();
                // Acquire: if the decrement read a word that an unlock
                // released (a `d_drop` that cleared `HASHED`, a shrinker
                // that cleared `REFERENCED`), those stores are visible below.
                crate::sync::atomic::fence(Ordering::Acquire);
                const CACHED: u32 = HASHED | ON_LRU | REFERENCED;
                if d.flags.load(Ordering::Relaxed) & CACHED == CACHED {
                    return;
                }
                let g = d.lockref().lock();
                if g.count() != 0 {
                    return; // revived, or already killed (DEAD)
                }
                // Ours again, to decide like any last reference (at zero:
                // no one sees the count while we hold the lock).
                g
            }
            // The lock was held, or lost races: the locked path.
            None => match d.lockref().put_or_lock() {
                None => return,
                Some(g) => g,
            },
        };
        if self.retain_or_mark_dead(d, g) {
            self.kill(d);
        }
    }

    /// A counted reference to `d`'s parent (`dget_parent`), for a caller
    /// that holds `d`: the dentry that was `d`'s parent at some instant of
    /// the call.
    ///
    /// Holding `d` does not pin the parent it had a moment ago: a rename may
    /// move `d` and drop its reference on the old parent, which a killer may
    /// then free. So the parent is read inside an RCU read section (its
    /// memory stays valid), referenced only if not dead, and kept only if it
    /// is still `d`'s parent after that; otherwise we start again. A dead
    /// parent means `d` has moved: `get_not_dead` fails only under the lock
    /// the killer released, after the rename's store of the new parent.
    pub fn dget_parent<'a>(&'a self, d: &Dentry) -> DRef<'a> {
        let _g = self.rcu.read_lock();
        loop {
            let p = d.parent();
            crate::sync::atomic::preemption_point();
            if p.lockref().get_not_dead() {
                // SAFETY: we just took this reference.
                let r = unsafe { DRef::adopt(self, p) };
                // Acquire: pairs with the rename's Release store.
                if ptr::eq(d.parent.load(Ordering::Acquire), p) {
                    return r;
                }
            }
        }
    }
}
