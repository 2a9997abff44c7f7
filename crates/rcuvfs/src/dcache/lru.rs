//! The LRU of unused dentries and the shrinkers (Linux `list_lru`,
//! `prune_dcache`, `shrink_dcache_parent`): one list per thread shard, as
//! Linux keeps one per NUMA node, so that the last `dput`s of different
//! threads lock different lists.
//!
//! A dentry joins the list of the shard of the thread that drops its count
//! to zero, and records that shard in its flags; it stays (lazily) while it
//! is used again; the shrinker drops the ones it finds in use. `ON_LRU` and
//! the shard bits change only with the dentry's `d_lock` and the shard's
//! lock both held; the links only under the shard's lock.

use std::ptr;

use super::dentry::{Dentry, LRU_SHARD_MASK, LRU_SHARD_SHIFT, ON_LRU, REFERENCED, ROOT};
use super::{mark_referenced, Dcache};
use crate::sync::atomic::Ordering;
use crate::sync::shard::{self, Padded, THREAD_SHARDS as SHARDS};
use crate::sync::{LockrefGuard, Mutex};

/// One shard's list of unused dentries, oldest first.
pub(super) struct Lru {
    head: *const Dentry,
    tail: *const Dentry,
}

pub(super) struct Lrus {
    shards: Box<[Padded<Mutex<Lru>>]>,
}

// SAFETY: the list pointers are touched only under their shard's lock.
unsafe impl Send for Lrus {}
// SAFETY: as above.
unsafe impl Sync for Lrus {}

impl Lrus {
    pub fn new() -> Lrus {
        Lrus { shards: (0..SHARDS).map(|_| Padded(Mutex::new(Lru { head: ptr::null(), tail: ptr::null() }))).collect() }
    }

    /// Calls `f` with each shard's list locked, one at a time.
    pub fn for_each_locked(&self, mut f: impl FnMut(*const Dentry, *const Dentry)) {
        for s in self.shards.iter() {
            let l = s.0.lock();
            f(l.head, l.tail);
        }
    }
}

/// The LRU links of `d`.
///
/// # Safety
/// The caller holds the lock of the shard whose list `d` is on (or will be).
#[allow(clippy::mut_from_ref)]
unsafe fn links(d: &Dentry) -> &mut super::dentry::LruLinks {
    // SAFETY: the caller's contract: the shard lock serializes all access.
    // (One access as loom sees it: the reference lives on past it.)
    d.lru.with_mut(|p| unsafe { &mut *p })
}

/// The next dentry on `d`'s list (for the invariant check).
///
/// # Safety
/// As `links`.
pub(super) unsafe fn lru_next(d: &Dentry) -> (*const Dentry, *const Dentry) {
    // SAFETY: the caller's contract.
    let l = unsafe { links(d) };
    (l.prev, l.next)
}

/// Puts `d` at the list's tail. The caller holds the shard's lock.
///
/// # Safety
/// `d` is live and not on any list.
unsafe fn append(lru: &mut Lru, d: &Dentry) {
    d.check_live();
    // SAFETY: the shard lock is held (caller); members are live.
    unsafe {
        let l = links(d);
        l.prev = lru.tail;
        l.next = ptr::null();
        match lru.tail.as_ref() {
            Some(t) => links(t).next = d,
            None => lru.head = d,
        }
    }
    lru.tail = d;
}

/// Unlinks `d`, leaving its flags alone (a rotation relinks it at once).
///
/// # Safety
/// `d` is on this shard's list; its lock is held.
unsafe fn unlink(lru: &mut Lru, d: &Dentry) {
    // SAFETY: the shard lock is held (caller); members are live.
    unsafe {
        let l = links(d);
        match l.prev.as_ref() {
            Some(p) => links(p).next = l.next,
            None => lru.head = l.next,
        }
        match l.next.as_ref() {
            Some(n) => links(n).prev = l.prev,
            None => lru.tail = l.prev,
        }
        l.prev = ptr::null();
        l.next = ptr::null();
    }
}

impl Dcache {
    /// Notes that `d`'s count just reached zero while hashed (`d_lru_add`):
    /// it goes on the calling thread's shard list (referenced), or, already
    /// on a list, is marked referenced. The caller holds `d`'s `d_lock`
    /// (`_g`), and `d` is not dead.
    pub(super) fn lru_add_locked(&self, d: &Dentry, _g: &LockrefGuard<'_>) {
        d.check_live();
        let f = d.flags.load(Ordering::Relaxed);
        if f & ROOT != 0 {
            return;
        }
        if f & ON_LRU != 0 {
            mark_referenced(d);
            return;
        }
        let s = shard::thread();
        let mut lru = self.lrus.shards[s].0.lock();
        d.flags.fetch_and(!LRU_SHARD_MASK, Ordering::Relaxed);
        d.flags.fetch_or(ON_LRU | REFERENCED | (s as u32) << LRU_SHARD_SHIFT, Ordering::Relaxed);
        crate::sync::audit::shared_writes(1);
        // SAFETY: the shard lock is held; `d` is live (we hold its d_lock
        // and it is not dead) and on no list (`ON_LRU` clear, which cannot
        // change without its d_lock).
        unsafe { append(&mut lru, d) };
    }

    /// Takes `d` off its LRU list for good (`d_lru_del`), if it is on one.
    /// The caller holds `d`'s `d_lock`.
    pub(super) fn lru_del_locked(&self, d: &Dentry, _g: &LockrefGuard<'_>) {
        let f = d.flags.load(Ordering::Relaxed);
        if f & ON_LRU == 0 {
            return;
        }
        let s = ((f & LRU_SHARD_MASK) >> LRU_SHARD_SHIFT) as usize;
        let mut lru = self.lrus.shards[s].0.lock();
        // SAFETY: on this shard's list (flags stable under d_lock); both
        // locks held.
        unsafe { unlink(&mut lru, d) };
        d.flags.fetch_and(!ON_LRU, Ordering::Relaxed);
    }

    /// Runs the shrinker if the cache is past its size target or its
    /// negative-dentry target: in the allocating thread, a batch at a time.
    pub(super) fn shrink_to_target(&self) {
        let (n, neg) = (self.counters.dentries.approx(), self.counters.negative.approx());
        let target = self.target.load(std::sync::atomic::Ordering::Relaxed);
        let negative_target = self.negative_target;
        let slack = (target / 64).max(8) as i64;
        if neg > negative_target as i64 + slack {
            self.shrink((neg - negative_target as i64) as usize, true);
        }
        if n > target as i64 + slack {
            self.shrink((n - target as i64) as usize, false);
        }
    }

    /// The shrinker (`prune_dcache`): frees up to `want` unused dentries
    /// (only negative ones if `negatives_only`), giving each referenced one
    /// a second chance: its bit is cleared and it goes to the back; on the
    /// next pass it is freed. Starts at the calling thread's shard and
    /// moves to the next when one runs dry; takes no global lock.
    ///
    /// It walks a list under the shard's lock and only *tries* each
    /// dentry's `d_lock` (Linux's `dentry_lru_isolate`): the order is
    /// `d_lock` before the shard lock, so waiting here could deadlock with a
    /// `dput` that holds one and wants the other. A busy dentry is rotated.
    pub fn shrink(&self, want: usize, negatives_only: bool) {
        let mut freed = 0;
        let first = shard::thread();
        for k in 0..SHARDS {
            if freed >= want {
                return;
            }
            freed += self.shrink_shard((first + k) % SHARDS, want - freed, negatives_only);
        }
    }

    fn shrink_shard(&self, s: usize, want: usize, negatives_only: bool) -> usize {
        let mut freed = 0;
        // A bounded walk (Linux's `nr_to_scan`): twice what we must free, so
        // that one call cannot sweep the whole list, clearing every bit and
        // then freeing what was just spared; the next allocation continues.
        // A negatives-only pass may walk the whole list: it skips positives,
        // and the negatives it finds are referenced the first time round.
        let mut budget =
            if negatives_only { self.counters.dentries.approx().max(0) as usize + 16 } else { 2 * want + 16 };
        while freed < want && budget > 0 {
            budget -= 1;
            let (victim, g) = {
                let rcu = self.rcu.read_lock();
                let mut lru = self.lrus.shards[s].0.lock();
                // SAFETY: members of the list are live: a dentry leaves its
                // list, under this lock, before it is marked dead.
                let Some(d) = (unsafe { lru.head.as_ref() }) else { break };
                let Some(g) = d.lockref().try_lock() else {
                    // SAFETY: `d` is on the list; lock held. Rotating keeps
                    // its flags as they are.
                    unsafe {
                        unlink(&mut lru, d);
                        append(&mut lru, d);
                    }
                    continue;
                };
                let f = d.flags.load(Ordering::Relaxed);
                if g.count() != 0 {
                    // In use: off the list until its count drops again.
                    // SAFETY: on the list; both locks held.
                    unsafe { unlink(&mut lru, d) };
                    d.flags.fetch_and(!ON_LRU, Ordering::Relaxed);
                    continue;
                }
                let positive = !d.inode.load(Ordering::Relaxed).is_null();
                if (negatives_only && positive) || f & REFERENCED != 0 {
                    if !(negatives_only && positive) {
                        // Spend the second chance (a pass for negatives
                        // only does not judge positives).
                        d.flags.fetch_and(!REFERENCED, Ordering::Relaxed);
                    }
                    // SAFETY: on the list; lock held.
                    unsafe {
                        unlink(&mut lru, d);
                        append(&mut lru, d);
                    }
                    continue;
                }
                // SAFETY: on the list; both locks held.
                unsafe { unlink(&mut lru, d) };
                d.flags.fetch_and(!ON_LRU, Ordering::Relaxed);
                // At scale each victim's unhash misses in its parent's
                // index: the next one's line loads while this one dies.
                // SAFETY: members of the list are live (as above).
                if let Some(next) = unsafe { lru.head.as_ref() } {
                    next.prefetch_slot(&rcu);
                }
                (d, g)
            };
            // Unused, so childless (children hold references). Usually
            // hashed too, but not always: a dentry unhashed while in use and
            // then put is briefly unhashed at count zero, between its
            // `dput_last`'s decrement and its d_lock. We kill it then, and
            // that `dput` finds it dead.
            self.unhash_and_mark_dead(victim, g);
            self.kill(victim);
            freed += 1;
        }
        freed
    }

    /// Kills every unused dentry under `root` (not `root` itself), leaves
    /// first (`shrink_dcache_parent`): drop_caches, a superblock's
    /// teardown, the invalidation of a subtree. Walks the children indexes
    /// inside an RCU read section, locks each candidate and re-checks it
    /// there; runs until a pass kills nothing. Dentries in use, and their
    /// ancestors, stay.
    pub fn shrink_tree(&self, root: &Dentry) {
        loop {
            let g = self.rcu.read_lock();
            let mut victims: Vec<&Dentry> = Vec::new();
            let mut stack = vec![root];
            while let Some(x) = stack.pop() {
                x.children.for_each(&g, |c| {
                    if !c.children.is_empty(&g) {
                        stack.push(c);
                    } else if c.lockref().count_hint() == 0 {
                        victims.push(c);
                    }
                });
            }
            let mut killed = 0;
            for d in victims {
                // Still in our read section: `d` is allocated even if it was
                // killed meanwhile (then it is dead, or in use again).
                let lock = d.lockref().lock();
                if lock.count() != 0 || !d.is_hashed() {
                    continue; // revived, dead, or being killed by its holder
                }
                self.unhash_and_mark_dead(d, lock);
                self.kill(d);
                killed += 1;
            }
            drop(g);
            if killed == 0 {
                return;
            }
        }
    }

    /// Kills every unused dentry of every superblock (like dropping caches),
    /// leaves first.
    pub fn shrink_all(&self) {
        // The superblock list first (see the lock table): no superblock dies
        // while we walk its tree.
        let supers = self.supers.lock();
        for &sb in supers.iter() {
            // SAFETY: superblocks on the list are live, and their roots.
            let root = unsafe { &*(*sb).root.load(std::sync::atomic::Ordering::Relaxed) };
            self.shrink_tree(root);
        }
    }
}
