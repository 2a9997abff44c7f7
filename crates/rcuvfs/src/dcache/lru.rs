//! The LRU of unused dentries and the shrinkers (Linux `list_lru`,
//! `prune_dcache`, `shrink_dcache_parent`): one pair of lists per thread
//! shard, as Linux keeps one list per NUMA node, so that the last `dput`s
//! of different threads lock different lists.
//!
//! A dentry joins the lists of the shard of the thread that drops its count
//! to zero, and records that shard in its flags; it stays (lazily) while it
//! is used again; the shrinker drops the ones it finds in use. `ON_LRU` and
//! the shard bits change only with the dentry's `d_lock` and the shard's
//! lock both held; the links only under the shard's lock.
//!
//! Each shard keeps its negative dentries on a list of their own (`NEG_LRU`
//! in the flags says which). Linux keeps one list, and has no pass that
//! frees only negative dentries; ours has one (the negative-dentry
//! target), and on one list that pass had to step over every unused
//! positive dentry to reach the negative ones, rotating each to the tail:
//! with a million files cached and a few hundred thousand names just
//! removed, every pass walked the million. A dentry that turns positive or
//! negative while on a list (lazily, in use) moves to the other list in the
//! same `d_lock` section that changes it (`lru_flip_locked`), so a list
//! holds only its own kind. Each dentry joining a tail is stamped with its
//! shard's clock, and a pass over the whole cache takes whichever head is
//! older: the order of one list, for one more word in the dentry's second
//! line (it had three spare).

use std::ptr;

use super::dentry::{Dentry, LRU_SHARD_MASK, LRU_SHARD_SHIFT, NEG_LRU, ON_LRU, REFERENCED, ROOT};
use super::{mark_referenced, Dcache};
use crate::sync::atomic::Ordering;
use crate::sync::shard::{self, Padded, THREAD_SHARDS as SHARDS};
use crate::sync::{LockrefGuard, Mutex};

/// One list of unused dentries, oldest first.
pub(super) struct Lru {
    head: *const Dentry,
    tail: *const Dentry,
}

/// A shard's two lists, under one lock, and the clock that stamps each
/// dentry joining a tail, so that a pass over both takes the older head
/// first, as from one list.
pub(super) struct Lists {
    positive: Lru,
    negative: Lru,
    clock: u64,
}

impl Lists {
    fn of(&mut self, negative: bool) -> &mut Lru {
        if negative {
            &mut self.negative
        } else {
            &mut self.positive
        }
    }

    /// Puts `d` at the tail of its kind's list: the shard's youngest.
    ///
    /// # Safety
    /// As [`append`].
    unsafe fn push(&mut self, negative: bool, d: &Dentry) {
        self.clock += 1;
        let stamp = self.clock;
        // SAFETY: the caller's contract.
        unsafe { append(self.of(negative), d, stamp) }
    }

    /// Which list a pass takes from next: `negatives_only`'s, or the one
    /// whose head joined first. `None` when it is empty.
    fn next_list(&self, negatives_only: bool) -> Option<bool> {
        let (p, n) = (self.positive.head, self.negative.head);
        if negatives_only || p.is_null() {
            return (!n.is_null()).then_some(true);
        }
        if n.is_null() {
            return Some(false);
        }
        // SAFETY: both are live members of this shard's lists, whose lock
        // the caller holds (`&self` came from the guard).
        Some(unsafe { links(&*n).stamp < links(&*p).stamp })
    }
}

pub(super) struct Lrus {
    shards: Box<[Padded<Mutex<Lists>>]>,
}

// SAFETY: the list pointers are touched only under their shard's lock.
unsafe impl Send for Lrus {}
// SAFETY: as above.
unsafe impl Sync for Lrus {}

impl Lrus {
    pub fn new() -> Lrus {
        let empty = || Lru { head: ptr::null(), tail: ptr::null() };
        let lists = || Padded(Mutex::new(Lists { positive: empty(), negative: empty(), clock: 0 }));
        Lrus { shards: (0..SHARDS).map(|_| lists()).collect() }
    }

    /// Calls `f(shard, negative, head, tail)` for each list, with its
    /// shard's lock held, one shard at a time.
    pub fn for_each_locked(&self, mut f: impl FnMut(usize, bool, *const Dentry, *const Dentry)) {
        for (k, s) in self.shards.iter().enumerate() {
            let l = s.0.lock();
            f(k, false, l.positive.head, l.positive.tail);
            f(k, true, l.negative.head, l.negative.tail);
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

/// The neighbours of `d` on its list and its stamp (for the invariant
/// check: stamps rise along a list, which `Lists::next_list` relies on).
///
/// # Safety
/// As `links`.
pub(super) unsafe fn lru_next(d: &Dentry) -> (*const Dentry, *const Dentry, u64) {
    // SAFETY: the caller's contract.
    let l = unsafe { links(d) };
    (l.prev, l.next, l.stamp)
}

/// Puts `d` at the list's tail, stamped `stamp`. The caller holds the
/// shard's lock.
///
/// # Safety
/// `d` is live and not on any list.
unsafe fn append(lru: &mut Lru, d: &Dentry, stamp: u64) {
    d.check_live();
    // SAFETY: the shard lock is held (caller); members are live.
    unsafe {
        let l = links(d);
        l.prev = lru.tail;
        l.next = ptr::null();
        l.stamp = stamp;
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

/// What a shrinker pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shrunk {
    /// Dentries freed.
    pub freed: usize,
    /// List members looked at (freed, rotated, or taken off in use).
    pub scanned: usize,
}

/// Which shard's lists a dentry with flags `f` (`ON_LRU` set) is on.
fn shard_of(f: u32) -> usize {
    ((f & LRU_SHARD_MASK) >> LRU_SHARD_SHIFT) as usize
}

impl Dcache {
    /// Notes that `d`'s count just reached zero while hashed (`d_lru_add`):
    /// it goes on the calling thread's shard list, not referenced (as in
    /// Linux: a dentry used once is the first to go), or, already on a
    /// list, is marked referenced. The caller holds `d`'s `d_lock` (`_g`),
    /// and `d` is not dead.
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
        // Stable: the inode changes only under d_lock, which we hold.
        let negative = d.inode.load(Ordering::Relaxed).is_null();
        let mut lists = self.lrus.shards[s].0.lock();
        let kind = if negative { NEG_LRU } else { 0 };
        let set = ON_LRU | kind | (s as u32) << LRU_SHARD_SHIFT;
        // One RMW for the shard, the kind and `ON_LRU` (a lookup may set
        // `REFERENCED` meanwhile, which the retry keeps); two before, of a
        // create's sixty-odd.
        let _ =
            d.flags.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| Some(f & !(LRU_SHARD_MASK | NEG_LRU) | set));
        crate::sync::audit::shared_writes(1);
        // SAFETY: the shard lock is held; `d` is live (we hold its d_lock
        // and it is not dead) and on no list (`ON_LRU` clear, which cannot
        // change without its d_lock).
        unsafe { lists.push(negative, d) };
    }

    /// Takes `d` off its LRU list for good (`d_lru_del`), if it is on one.
    /// The caller holds `d`'s `d_lock`.
    pub(super) fn lru_del_locked(&self, d: &Dentry, _g: &LockrefGuard<'_>) {
        let f = d.flags.load(Ordering::Relaxed);
        if f & ON_LRU == 0 {
            return;
        }
        let mut lists = self.lrus.shards[shard_of(f)].0.lock();
        // SAFETY: on this shard's list of its kind (flags stable under
        // d_lock); both locks held.
        unsafe { unlink(lists.of(f & NEG_LRU != 0), d) };
        d.flags.fetch_and(!(ON_LRU | NEG_LRU), Ordering::Relaxed);
    }

    /// Runs `change`, which turns `d` positive or negative (`d_instantiate`,
    /// `d_delete`), and, if `d` is on an LRU list (an unused dentry taken
    /// into use stays there, lazily), moves it to its shard's list of its
    /// new kind in the same section, so that a list never holds the other
    /// kind, even for an observer holding only the shard's lock. The caller
    /// holds `d`'s `d_lock`. Costs nothing more for a dentry on no list.
    pub(super) fn lru_flip_locked<R>(&self, d: &Dentry, _g: &LockrefGuard<'_>, change: impl FnOnce() -> R) -> R {
        let f = d.flags.load(Ordering::Relaxed);
        if f & ON_LRU == 0 {
            return change();
        }
        let mut lists = self.lrus.shards[shard_of(f)].0.lock();
        let r = change();
        let negative = d.inode.load(Ordering::Relaxed).is_null();
        if negative != (f & NEG_LRU != 0) {
            // SAFETY: on this shard's list of its old kind (flags stable
            // under d_lock); both locks held.
            unsafe {
                unlink(lists.of(!negative), d);
                lists.push(negative, d);
            }
            if negative {
                d.flags.fetch_or(NEG_LRU, Ordering::Relaxed);
            } else {
                d.flags.fetch_and(!NEG_LRU, Ordering::Relaxed);
            }
        }
        r
    }

    /// Runs the shrinker if the cache is past its size target or its
    /// negative-dentry target: in the allocating thread, a batch at a time.
    ///
    /// A batch is at most twice the slack. An allocation passes a target by
    /// one dentry, so a batch is usually the slack; but the cache can find
    /// itself far past one at once: a removal turns a dentry negative in
    /// place, without allocating, so `rm -r` of a million files leaves a
    /// million negative dentries for the next allocation (the size target
    /// still holds: each replaced a positive one), except over a bound
    /// memfs, where past the negative target a removal unhashes its
    /// dentry instead (`kills_removed`). Freeing them all there
    /// would stall that one call for a tenth of a second; the allocations
    /// that follow share the work instead.
    pub(super) fn shrink_to_target(&self) {
        let (n, neg) =
            (self.counters.dentries.approx(), self.counters.negative.approx() + self.counters.absent.approx());
        let target = self.target.load(std::sync::atomic::Ordering::Relaxed);
        let negative_target = self.negative_target;
        let slack = (target / 64).max(8) as i64;
        let batch = |over: i64| over.min(2 * slack) as usize;
        if neg > negative_target as i64 + slack {
            // Cached misses: sets of absent names first (a batch from the
            // oldest directory's), then negative dentries.
            let want = batch(neg - negative_target as i64);
            let freed = self.absent_evict(want);
            if freed < want {
                self.shrink(want - freed, true);
            }
        }
        if n > target as i64 + slack {
            self.shrink(batch(n - target as i64), false);
        }
    }

    /// The shrinker (`prune_dcache`): frees up to `want` unused dentries
    /// (only negative ones if `negatives_only`), giving each referenced one
    /// a second chance: its bit is cleared and it goes to the back; on the
    /// next pass it is freed. Starts at the calling thread's shard and
    /// moves to the next when one runs dry; takes no global lock. A pass
    /// over the whole cache takes the older of a shard's two heads each
    /// time, so it sees one list's order.
    ///
    /// It walks a list under the shard's lock and only *tries* each
    /// dentry's `d_lock` (Linux's `dentry_lru_isolate`): the order is
    /// `d_lock` before the shard lock, so waiting here could deadlock with a
    /// `dput` that holds one and wants the other. A busy dentry is rotated.
    pub fn shrink(&self, want: usize, negatives_only: bool) -> Shrunk {
        let mut done = Shrunk::default();
        let first = shard::thread();
        for k in 0..SHARDS {
            if done.freed >= want {
                break;
            }
            self.shrink_shard((first + k) % SHARDS, want - done.freed, negatives_only, &mut done);
        }
        done
    }

    fn shrink_shard(&self, s: usize, want: usize, negatives_only: bool, done: &mut Shrunk) {
        let mut freed = 0;
        // A bounded walk (Linux's `nr_to_scan`): twice what we must free, so
        // that one call cannot sweep the whole list, clearing every bit and
        // then freeing what was just spared; the next allocation continues.
        // The same for a pass for negatives only: with a million names just
        // removed, each looked up by its unlink (referenced), one call
        // walking its whole list would stall for a tenth of a second.
        let mut budget = 2 * want + 16;
        while freed < want && budget > 0 {
            budget -= 1;
            let (victim, g) = {
                let rcu = self.rcu.read_lock();
                let mut lists = self.lrus.shards[s].0.lock();
                let Some(negative) = lists.next_list(negatives_only) else { break };
                done.scanned += 1;
                let lru = lists.of(negative);
                // SAFETY: members of the list are live: a dentry leaves its
                // list, under this lock, before it is marked dead.
                let d = unsafe { &*lru.head };
                let Some(g) = d.lockref().try_lock() else {
                    // SAFETY: `d` is on the list; lock held. Rotating keeps
                    // its flags as they are.
                    unsafe {
                        unlink(lru, d);
                        lists.push(negative, d);
                    }
                    continue;
                };
                let f = d.flags.load(Ordering::Relaxed);
                debug_assert_eq!(f & NEG_LRU != 0, negative);
                debug_assert_eq!(d.inode.load(Ordering::Relaxed).is_null(), negative, "a list holds its own kind");
                if g.count() != 0 {
                    // In use: off the list until its count drops again.
                    // SAFETY: on the list; both locks held.
                    unsafe { unlink(lru, d) };
                    d.flags.fetch_and(!(ON_LRU | NEG_LRU), Ordering::Relaxed);
                    continue;
                }
                if f & REFERENCED != 0 {
                    // Spend the second chance.
                    d.flags.fetch_and(!REFERENCED, Ordering::Relaxed);
                    // SAFETY: on the list; lock held.
                    unsafe {
                        unlink(lru, d);
                        lists.push(negative, d);
                    }
                    continue;
                }
                // SAFETY: on the list; both locks held.
                unsafe { unlink(lru, d) };
                d.flags.fetch_and(!(ON_LRU | NEG_LRU), Ordering::Relaxed);
                // At scale each victim's unhash misses in its parent's
                // index: the next one's line loads while this one dies.
                if let Some(next) = lists.next_list(negatives_only) {
                    // SAFETY: members of the list are live (as above).
                    unsafe { &*lists.of(next).head }.prefetch_slot(&rcu);
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
        done.freed += freed;
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
        // Every cached miss, and with them the references that kept their
        // directories.
        self.absent_purge(None);
        for &sb in supers.iter() {
            // SAFETY: superblocks on the list are live, and their roots.
            let root = unsafe { &*(*sb).root.load(std::sync::atomic::Ordering::Relaxed) };
            self.shrink_tree(root);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Shrunk;
    use crate::Vfs;

    /// Frees `want` dentries through as many passes as it takes (a pass
    /// that finds its budget spent on second chances frees fewer), summing
    /// what they did.
    fn shrink_fully(vfs: &Vfs, want: usize, negatives_only: bool) -> Shrunk {
        let mut done = Shrunk::default();
        for _ in 0..8 {
            let d = vfs.dc().shrink(want - done.freed, negatives_only);
            done.freed += d.freed;
            done.scanned += d.scanned;
            if done.freed == want {
                break;
            }
        }
        done
    }

    /// A pass for negative dentries only (the negative-dentry target) looks
    /// at negative dentries only: with 20,000 unused files cached before
    /// 1,000 negative ones, each missed twice (so referenced), freeing 500
    /// of those looks at 1,500 dentries (each of the 1,000 once to spend
    /// its second chance, then the 500) and leaves every file cached. On
    /// one list it stepped over all 20,000 files, every pass.
    #[test]
    #[cfg_attr(miri, ignore = "21,000 names: minutes under Miri; the test below runs the same code")]
    fn a_pass_for_negative_dentries_looks_at_no_file() {
        // Misses leave negative dentries only where the root is not
        // complete.
        let vfs = Vfs::builder().complete_dirs(false).build().unwrap();
        for i in 0..20_000 {
            vfs.write(format!("/f{i}"), b"").unwrap();
        }
        // An update's miss leaves a negative dentry (a lookup's leaves an
        // absent name, no dentry): renames of names never made.
        for i in 0..1_000 {
            vfs.rename(format!("/m{i}"), "/z").unwrap_err();
        }
        for _ in 0..2 {
            for i in 0..1_000 {
                vfs.metadata(format!("/m{i}")).unwrap_err();
            }
        }
        let c = &vfs.dc().counters;
        let (files, negatives) = (c.dentries() - c.negative_dentries(), c.negative_dentries());
        assert_eq!(negatives, 1_000);
        assert_eq!(c.absent_names(), 0, "a negative dentry answers the stats");
        let done = shrink_fully(&vfs, 500, true);
        assert_eq!(done.freed, 500);
        assert!(done.scanned <= 1_600, "looked at {} dentries to free 500 of 1,000 negative ones", done.scanned);
        assert_eq!(c.negative_dentries(), 500);
        assert_eq!(c.dentries() - c.negative_dentries(), files, "a file's dentry was freed");
        vfs.dc().check_invariants().unwrap();
    }

    /// A removed file's dentry turns negative in place and moves to the
    /// negative list as the youngest; a pass over the whole cache still
    /// frees in one list's order, the oldest first, whichever list holds
    /// it: here the files never removed, not the names just removed. (In
    /// `rcuwalk`: in the default mode a file made through the Vfs has no
    /// dentry, and a removed one leaves none, `Dcache::files_bare`.)
    #[test]
    fn a_removed_names_dentry_moves_to_the_negative_list_and_a_pass_over_both_frees_the_oldest() {
        let vfs = Vfs::builder().mode(crate::RefMode::RcuWalk).build().unwrap();
        for i in 0..100 {
            vfs.write(format!("/f{i}"), b"").unwrap();
        }
        for i in 0..50 {
            vfs.remove_file(format!("/f{i}")).unwrap();
        }
        let c = &vfs.dc().counters;
        assert_eq!(c.negative_dentries(), 50, "an unlink by the only holder leaves a negative dentry");
        vfs.dc().check_invariants().unwrap();
        let before = c.dentries();
        assert_eq!(shrink_fully(&vfs, 50, false).freed, 50);
        assert_eq!(c.dentries(), before - 50);
        assert_eq!(c.negative_dentries(), 50, "freed a name removed after the files still cached");
        for i in 50..100 {
            // Looked up again from memfs for a handle: each makes a dentry.
            drop(vfs.entry(format!("/f{i}")).unwrap());
        }
        assert_eq!(c.dentries(), before);
        vfs.dc().check_invariants().unwrap();
    }

    /// Removals in a directory whose misses are cached in its set of
    /// absent names (not complete) leave names there, not negative
    /// dentries, and each one past the bound frees a batch of them as it
    /// goes (at most twice the slack, 1/64 of the size target): the set
    /// stays between the target and the target plus the slack, never
    /// emptied at once. (Negative dentries left by removals over a bound
    /// memfs, this test's subject until cached misses left dentries, are
    /// held by `kills_removed` instead.)
    #[test]
    #[cfg_attr(miri, ignore = "10,000 operations: minutes under Miri")]
    fn removals_past_the_negative_bound_are_held_to_it_a_batch_at_a_time() {
        // Target 6,400: slack 100, negative target 1,600.
        let vfs = Vfs::builder().dcache_target(6_400).complete_dirs(false).build().unwrap();
        for i in 0..5_000 {
            vfs.write(format!("/f{i}"), b"").unwrap();
        }
        let c = &vfs.dc().counters;
        let mut least_after_bound = i64::MAX;
        for i in 0..5_000 {
            vfs.remove_file(format!("/f{i}")).unwrap();
            if i >= 2_000 {
                least_after_bound = least_after_bound.min(c.absent_names());
            }
            assert!(c.absent_names() <= 1_600 + 100, "{} cached misses after {i} removals", c.absent_names());
        }
        assert_eq!(c.negative_dentries(), 0);
        assert!(least_after_bound >= 1_600 - 200, "the set fell to {least_after_bound}");
        for i in (0..5_000).step_by(97) {
            assert_eq!(vfs.metadata(format!("/f{i}")).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        }
        vfs.dc().check_invariants().unwrap();
    }

    /// The second chance goes to what was used again: a dentry whose count
    /// dropped to zero once is the first to go (Linux's `d_lru_add`), one
    /// looked up since is spared. 100 files made and looked up for a
    /// handle (which makes each its dentry: the create made none), 50 of
    /// them looked up again; a pass that frees 50 frees the other 50. (When
    /// every new dentry started referenced, the pass spent all 100 second
    /// chances and then freed in list order: the 50 looked up again first.)
    #[test]
    fn a_pass_frees_the_dentries_used_once_before_those_looked_up_again() {
        let vfs = Vfs::builder().build().unwrap();
        for i in 0..100 {
            vfs.write(format!("/f{i}"), b"").unwrap();
            drop(vfs.entry(format!("/f{i}")).unwrap());
        }
        for i in 0..50 {
            vfs.metadata(format!("/f{i}")).unwrap();
        }
        assert_eq!(shrink_fully(&vfs, 50, false).freed, 50);
        let dc = vfs.dc();
        let cached: Vec<usize> =
            (0..100).filter(|i| dc.d_lookup(dc.root(), format!("f{i}").as_bytes()).is_some()).collect();
        assert_eq!(cached, (0..50).collect::<Vec<_>>(), "the files cached after the pass");
        dc.check_invariants().unwrap();
    }
}
