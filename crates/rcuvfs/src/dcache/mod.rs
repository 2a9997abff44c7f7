//! The dentry cache (Linux `fs/dcache.c`, seeds 003, 000 and 002), with no
//! global lock on any path: each directory's children in an index that
//! lookups read with no lock and no store, reference counts in a
//! [`Lockref`](crate::sync::Lockref), per-dentry sequence counts, per-name
//! locks for namespace changes, negative dentries, sharded LRU lists, and
//! deferred freeing through RCU.
//!
//! One file per concern:
//! - [`dentry`]: the dentry, its cache-line layout (seed 002), flags, names;
//! - `tree`: finding, adding, moving, deleting and killing dentries;
//! - `refs`: references: `dput`'s last-reference protocol, `dget_parent`;
//! - `lru`: the LRU lists and the shrinkers;
//! - `absent`: cached misses without dentries (a directory's set of absent
//!   names);
//! - `names`: name locks;
//! - `path`: paths and ancestry (`d_path`, `is_ancestor`, aliases);
//! - `check`: the invariant check.
//!
//! # Locks
//!
//! | lock                     | protects                                                       |
//! |--------------------------|----------------------------------------------------------------|
//! | `Dcache::supers`         | the list of live superblocks: no superblock is torn down while a holder walks its tree (`shrink_all`, `invalidate_super`, `Notify`) |
//! | `Dcache::rename_mutex`   | the tree's shape across directories (Linux `s_vfs_rename_mutex`): held by a cross-directory rename, a mount, and a lookup that moves a directory's dentry to another parent; ancestry checks under it are exact |
//! | `Dcache::renames` (seqcount) | written under `rename_mutex` around every move across directories: a path built under RCU (`d_path`) validates it |
//! | a name lock (`names`)    | one name in one directory: its binding in the filesystem, and the dcache's record of it, across a lookup miss, create, remove or rename of it |
//! | a dentry's `d_lock` (its lockref's lock) | the count's transitions to and from zero; the `HASHED`, `ON_LRU`, `NEG_LRU` and `ABSENT_HELD` flags; the inode pointer; the name and parent (with the name lock); the dead transition |
//! | `Dentry::seq` (seqcount) | written inside `d_lock` whenever the name, parent, inode or hashed state changes; invalidated when the dentry leaves its index or dies |
//! | an index's home lock     | the index entries of the keys whose home it is (`sync::index`) |
//! | an LRU shard's lock      | that shard's two lists (positive and negative dentries) and its clock; a dentry's `ON_LRU`, `NEG_LRU` and shard bits change only with both its `d_lock` and this held, and so does the inode pointer of a dentry on a list (`lru_flip_locked`), so that a list holds only its kind for anyone holding this lock |
//! | a list of directories with absent names (`absent`, per shard) | which directories' sets hold a reference on them (`ABSENT_HELD`); inserts into a set and its emptying run under the directory's `d_lock`, taking one name out under the set's home lock |
//! | `Inode::aliases`         | an inode's list of the dentries that name it (a leaf)     |
//!
//! Order: `supers`, then `rename_mutex`, then name locks (two in stripe
//! order), then a dentry's `d_lock` (a parent's before its child's; two
//! unrelated ones by address), then an index's home lock (two in the index's
//! order, a directory's set of absent names included), then an LRU
//! shard's lock or a list of directories with absent names, then the inode
//! table and `aliases`. The
//! shrinker walks an LRU list under its lock and only *tries* each dentry's
//! `d_lock`, so it never waits against this order.
//!
//! A filesystem's own locks come after all of these: the VFS calls a
//! filesystem holding at most name locks (never a `d_lock`, a home lock or
//! an LRU lock), and a filesystem calls back into the dcache (`fs::Notify`)
//! holding none of its own. memfs's, in its own order:
//!
//! | lock                       | protects                                         |
//! |----------------------------|--------------------------------------------------|
//! | a directory's entry-index home lock | its entries of that home (`sync::index`); two (a rename) in index order |
//! | an inode's `refs` lock (lockref) | the in-core count's transitions to and from zero, the dead mark; released before the inode leaves its table |
//! | an inode-table partition's home lock | that partition's slots: insert on create, remove on free |
//! | the superblock list's lock (per shard in `percpu`) | `s_inodes` links (seed 004) |
//! | an inode's attribute seqlock | its attributes (a leaf: nothing is taken inside it) |
//!
//! Order, in the table's order (memfs's module doc has the details): entry
//! home locks, then the inode table's, then the list's, then `attrs`; the
//! `refs` lock is let go before the table's is taken. In practice a create
//! takes them one at a time (its inode goes into the table before its
//! entry into the directory), and an rmdir *closes* the victim's entry
//! index (a state in the index's count word, not a lock: a create there
//! then fails ENOENT) before it takes the parent's entry lock, so no create
//! in the victim waits on the parent.
//!
//! Nothing on the path of a lookup, a create, an unlink or a same-directory
//! rename is global: two of them share a lock or a written cache line only
//! when they touch the same name (a name lock, its dentry), the same
//! directory's index home (one in the index's size), or the same directory's
//! own attributes.
//!
//! # Dentry states (seed 003, figure 6)
//!
//! | state    | `HASHED` | inode | count   | meaning                                         |
//! |----------|----------|-------|---------|-------------------------------------------------|
//! | in use   | yes      | any   | > 0     | a walk, handle or child holds it                |
//! | unused   | yes      | some  | 0       | cached, on an LRU list; the shrinker may kill it |
//! | negative | yes      | none  | >= 0    | a miss an update looked up (a lookup's miss leaves a name in its directory's set of absent names instead, `absent`) |
//! | unhashed | no       | any   | > 0     | removed, replaced or invalidated while held; killed at its last put |
//! | dead     | no       | -     | `DEAD`  | out of its parent's index and off the LRU; freed after a grace period |
//!
//! `HASHED` means "in its parent's index". A dentry holds a reference on
//! its parent, so the parent chain of any live dentry is live, and a dentry
//! with children is in use. A directory inode has at most one dentry
//! (`d_splice_alias`).
//!
//! # Who may touch a dentry when (the last reference against its killers)
//!
//! A dentry's memory stays valid while one holds a reference, or its
//! `d_lock` (taken while valid), or an RCU read section that began before it
//! left its parent's index. Killers (the shrinker, `drop_caches`' tree
//! shrink, the invalidation of a name renamed over, unlinked or reported
//! changed by a backend, a `dput` of an unhashed dentry) all mark it dead in
//! `unhash_and_mark_dead`, under its `d_lock` with its count at zero, and
//! only there: it leaves its parent's index first, then the LRU, then is
//! marked dead, so a dead dentry is never found by a lookup, a tree walk or
//! the shrinker. Whoever marked it dead then frees it (`kill`) through RCU.
//! The last `dput` decides a dentry's fate under `d_lock` too; its one
//! lockless step, the decrement to zero (Linux's `fast_dput`), runs inside
//! an RCU read section and stops there only if there is nothing to decide.
//! Walks over a tree (`drop_caches`, teardown, invalidation) read the
//! indexes inside an RCU read section and lock each victim before acting.
//! The loom models `loom_dput_vs_*` check this against each killer.
//!
//! # Readers
//!
//! [`Dcache::lookup_rcu`] probes a directory's index with atomic loads only
//! and returns a candidate with the sequence count it read first. The
//! caller owes two checks: the parent's count (hand-over-hand: the child was
//! found under a parent that did not move), and the child's count after it
//! has read what it needs (its inode pointer, and the inode's attributes).
//! Every field a reader loads is an atomic, or immutable behind an atomic
//! pointer (the name), so a racy read is never undefined behaviour: a stale
//! value is caught by the sequence check and discarded. An index never
//! hides a name present for the whole lookup, renames and resizes included
//! (`sync::index`), so a miss needs no retry under a rename lock.

mod absent;
mod check;
pub(crate) mod dentry;
mod lru;
pub(crate) mod names;
mod path;
mod refs;
mod tree;

use std::ptr;
use std::sync::Arc;

pub(crate) use dentry::{mark_referenced, name_hash, name_seed, DRef, Dentry, MOUNTED, ROOT};

use crate::fs::FileSystem;
use crate::inode::{Inode, Super};
use crate::mount::Namespace;
use crate::sync::atomic::Ordering;
use crate::sync::list_batch::ListMode;
use crate::sync::{Lockref, Mutex, Rcu, SeqCount};

/// The size of a directory's children index (slots) from which, over a
/// filesystem that answers misses itself, it keeps no removed name as a
/// negative dentry ([`Dcache::kills_removed`]). An index reaches it when
/// more than 3,072 names are cached (it doubles at three quarters full),
/// and shrinks below it only under 1,024, so a directory near the mark
/// does not flip between the two. Well above the 1,000 names a directory
/// of the lab's `files` sweep holds (2,048 slots), so that its unlinks
/// keep their cheaper flip to negative below the bound. Slots, not
/// names: counting the names sums a contended index's shards, a read of
/// every writer's line at each unlink.
pub(crate) const CROWDED_SLOTS: usize = 8192;

/// What [`Dcache::d_splice_alias`] did with a filesystem's answer.
pub(crate) enum Spliced<'a> {
    /// The dentry now naming the inode.
    Done(DRef<'a>),
    /// The inode is a directory whose dentry must move here from another
    /// place, and another thread holds the rename mutex or the name lock of
    /// that place (`wait`, its name hash): the caller lets go of its locks,
    /// waits for both, and looks again.
    RenameBusy { wait: Option<u64> },
    /// The name is absent, and no dentry was made for it: the answer of a
    /// lookup that wanted none (`lookup_positive`), cached in the
    /// directory's set of absent names where that may be (`absent`).
    Absent,
}

pub use crate::counters::LiveCounters;

/// The dentry cache of one Vfs.
pub(crate) struct Dcache {
    /// `PACKED` or 0: the layout of every dentry of this cache.
    layout: u32,
    /// Reference changes always take `d_lock` (`dlock` mode).
    lock_only: bool,
    pub rename_mutex: Mutex<()>,
    pub renames: SeqCount,
    pub(crate) names: names::NameLocks,
    /// The root filesystem's root dentry (the root mount's root).
    root: *const Dentry,
    /// Every live superblock (`*const Super`), the root one first.
    supers: Mutex<Vec<*const Super>>,
    /// Live superblocks whose filesystem is not a memfs: its calls may
    /// block (a host directory, etcd, a FUSE server), so an update does not
    /// hold a read section across them ([`hold_update`](Self::hold_update)).
    /// Plain std atomic: read as a hint, part of no protocol.
    blocking_supers: std::sync::atomic::AtomicUsize,
    /// How every superblock's inode list is locked.
    inode_list: ListMode,
    pub counters: Arc<LiveCounters>,
    /// The mount table.
    pub ns: Namespace,
    /// The RCU domain of every dentry and in-core inode (shared with a
    /// bound memfs, whose inodes those are).
    pub rcu: Arc<Rcu>,
    lrus: lru::Lrus,
    /// Directories with cached absent names (`absent`).
    absent_dirs: absent::AbsentDirs,
    /// Dentries the shrinker holds the cache to (lowered by a mount of a
    /// filesystem with an inode budget). Plain std atomic: not part of any
    /// protocol.
    target: std::sync::atomic::AtomicUsize,
    /// Negative dentries the shrinker holds the cache to.
    negative_target: usize,
    /// Directories of a filesystem that changes only through this cache
    /// may be `COMPLETE` (the builder's `complete_dirs`).
    complete_dirs: bool,
    /// Files made in the bound memfs get no dentry ([`creates_bare`](Self::creates_bare)).
    bare_leaves: bool,
}

// SAFETY: `root` is owned by the cache and lives as long as it; the
// superblocks on `supers` are live while listed, and used under its lock;
// everything else is Sync.
unsafe impl Send for Dcache {}
// SAFETY: as above.
unsafe impl Sync for Dcache {}

/// How a [`Dcache`] is built.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DcacheOptions {
    /// The count in the lookup line (seed 002's before).
    pub packed: bool,
    /// Every reference change takes `d_lock` (the `dlock` mode).
    pub lock_only: bool,
    /// How every superblock's inode list is locked.
    pub inode_list: ListMode,
    pub target: usize,
    pub negative_target: usize,
    pub complete_dirs: bool,
    /// Files made in the bound memfs get no dentry (the mode's
    /// `leaves_bare`).
    pub bare_leaves: bool,
}

impl Dcache {
    pub fn new(fs: Arc<dyn FileSystem>, o: DcacheOptions) -> std::io::Result<Dcache> {
        let layout = if o.packed { dentry::PACKED } else { 0 };
        let target = o.target.max(16);
        let mut dc = Dcache {
            layout,
            lock_only: o.lock_only,
            rename_mutex: Mutex::new(()),
            renames: SeqCount::new(),
            names: names::NameLocks::new(),
            lrus: lru::Lrus::new(),
            absent_dirs: absent::AbsentDirs::new(),
            target: std::sync::atomic::AtomicUsize::new(target),
            negative_target: o.negative_target,
            complete_dirs: o.complete_dirs,
            bare_leaves: o.bare_leaves,
            root: ptr::null(),
            supers: Mutex::new(Vec::new()),
            blocking_supers: Default::default(),
            inode_list: o.inode_list,
            // The shrinker reads the approximate count and allows a slack
            // of 1/64 of the target: the counters' error (shards times
            // batch) stays under a quarter of that, so a small cache counts
            // exactly.
            counters: Arc::new(LiveCounters::new((target as i64 / 4096).clamp(1, 64))),
            ns: Namespace::new(),
            // A memfs root lends its domain (choosing one now if it has
            // none yet), so that its inodes can be the in-core inodes.
            rcu: match fs.as_memfs() {
                Some(m) => m.domain().clone(),
                None => Arc::new(Rcu::new()),
            },
        };
        let sb = dc.new_super(fs)?;
        // SAFETY: just created; lives as long as the cache.
        dc.root = unsafe { (*sb).root.load(std::sync::atomic::Ordering::Relaxed) };
        dc.ns.init_root(sb, dc.root);
        Ok(dc)
    }

    /// A new superblock for `fs`, with its root dentry (pinned for the
    /// superblock's life: the count of 1 is the filesystem's own).
    pub fn new_super(&self, fs: Arc<dyn FileSystem>) -> std::io::Result<*const Super> {
        let attr = fs.getattr(fs.root())?;
        let sb = Super::new(fs, self.inode_list, self.rcu.clone());
        // SAFETY: just allocated; freed only by `kill_super` or teardown.
        let sbr = unsafe { &*sb };
        // The root's implicit lookup reference is the filesystem's own.
        let inode = match sbr.iget(&attr, false, &self.counters) {
            Ok(i) => i,
            Err(e) => {
                // SAFETY: never shared.
                drop(unsafe { Box::from_raw(sb as *mut Super) });
                return Err(e);
            }
        };
        // An empty root of a filesystem that changes only through us is
        // complete from the start (see `COMPLETE`).
        let g = self.rcu.read_lock();
        // SAFETY: the inode reference just taken keeps it live.
        let empty = self.dirs_can_be_complete(sbr) && unsafe { (*inode).entries.is_empty(&g) };
        drop(g);
        let flags = ROOT | self.layout | if empty { dentry::COMPLETE } else { 0 };
        let root = Dentry::new(flags, ptr::null(), 0, &[], inode, sb, self.lockref_ctor());
        // SAFETY: just allocated, not yet shared.
        unsafe { (*root).parent.store(root, Ordering::Relaxed) };
        sbr.root.store(root, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: just allocated, live.
        Self::alias_add(inode, unsafe { &*root });
        self.counters.add_dentry(1, false);
        if sbr.fs.as_memfs().is_none() {
            self.blocking_supers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.supers.lock().push(sb);
        Ok(sb)
    }

    /// Whether directories of `sb` may be `COMPLETE`: asked for, and its
    /// filesystem changes only through this cache.
    pub fn dirs_can_be_complete(&self, sb: &Super) -> bool {
        self.complete_dirs && sb.dirs_complete()
    }

    /// Whether `d_delete` should unhash `d`, whose name was removed, rather
    /// than keep it as a negative dentry: where the filesystem answers
    /// misses itself in the RCU walk (a bound memfs, `fs_probe`), a
    /// negative dentry serves only a create of the same name again, and
    /// once the negative dentries are at their bound it would only make
    /// the shrinker free the oldest of them at the next allocation. Below
    /// the bound they are kept (a job that creates and removes the same
    /// names, AIM7's `short`, reuses them), but not in a directory whose
    /// index has grown to [`CROWDED_SLOTS`]: there they share the
    /// index every lookup in the directory probes, and a directory whose
    /// names come and go would keep up to the whole bound of them (262,144
    /// by default: 65 MB for 10,000 live names, against 15-18 MB without,
    /// and each lookup in it slower for the larger index; the host's tmpfs
    /// keeps no negative dentry at all). The caller holds `d`'s `d_lock`,
    /// which keeps its parent (a move changes it only under that lock).
    #[inline]
    pub(crate) fn kills_removed(&self, d: &Dentry) -> bool {
        self.dirs_can_be_complete(d.sb())
            && (self.counters.negative.approx() >= self.negative_target as i64
                || d.parent().children.slots(&self.rcu.read_lock()) >= CROWDED_SLOTS)
    }

    /// Whether a create of a file (not a directory) in `dir`, whose name
    /// lock the caller holds and of which the cache holds no dentry for
    /// the name, leaves the name without a dentry (`Vfs`'s creates without
    /// one, `Update::Uncached`). `bound`: whether `dir` is a directory of
    /// the bound memfs, which must be so:
    ///
    /// - **In the mode that makes files no dentry (`bare_leaves`), always**
    ///   where memfs answers for the directory's names in the RCU walk
    ///   (`fs_probe`): memfs keeps the name in its own index, which a
    ///   walk reads as cheaply as the dcache's, so a dentry would be the
    ///   name's second copy, and its making and unmaking most of what a
    ///   create and an unlink cost (count-ops: 16 of a create's 42 atomic
    ///   operations). The directory stops being `COMPLETE` here, before
    ///   memfs has the name (its insert publishes the cleared flag, as a
    ///   removal's index change does): its misses go on to memfs from now
    ///   on, the cost of one more probe.
    /// - **Otherwise, at the cache's size target** ([`at_target`](Self::at_target)),
    ///   in a directory that is not complete: a dentry made then would only
    ///   make the shrinker free another.
    #[inline]
    pub(crate) fn creates_bare(&self, dir: &Dentry, bound: impl FnOnce(&Dentry) -> bool) -> bool {
        if self.bare_leaves {
            if !bound(dir) || !self.files_bare(dir.sb()) {
                return false;
            }
            dir.set_incomplete();
            return true;
        }
        // One load first, which below the target is the answer. Once
        // cleared, `COMPLETE` is never set again: the directory stays one
        // whose misses go on to memfs.
        self.at_target() && !dir.is_complete() && bound(dir)
    }

    /// Whether names of files in `sb` have no dentry but where something
    /// needs one (a handle's lookup, a link, a rename): in the mode that
    /// makes files none (`bare_leaves`), where memfs, bound here, answers
    /// for the directories' names in the RCU walk (`fs_probe`). There a
    /// removed file's name leaves nothing behind (`d_delete`), and no miss
    /// is cached in a set of absent names: memfs's index answers as soon.
    #[inline]
    pub(crate) fn files_bare(&self, sb: &Super) -> bool {
        self.bare_leaves && self.dirs_can_be_complete(sb)
    }

    /// Whether an open of a name the cache does not hold, which the bound
    /// memfs has, takes its inode without making a dentry
    /// (`Dcache::pin_found`): as for [`creates_bare`](Self::creates_bare),
    /// always in the mode that makes files no dentry, else at the target.
    #[inline]
    pub(crate) fn opens_bare(&self) -> bool {
        self.bare_leaves || self.at_target()
    }

    /// Whether a stat or an open that found `i` in the bound memfs with no
    /// dentry (`stat_found`, `pin_found`) leaves the name so: at the
    /// cache's size target always (a dentry would only make the shrinker
    /// free another); below it the first time (marking `i` seen: one store
    /// to its times' line, which the stat reads anyway), not the second,
    /// which falls back to the walk that makes the dentry. A file stat'ed
    /// or opened once (a build's scan, the `files` workload) costs no
    /// dentry; one used over and over gets one, and its walk is then as
    /// short as any cached path's (a memfs probe, the dcache's second look
    /// and the mark cost a first stat about 170 instructions more:
    /// count-ops, 946 against 775).
    #[inline]
    pub(crate) fn stays_bare(&self, i: &crate::inode::Inode) -> bool {
        self.at_target() || i.first_seen()
    }

    /// Whether the cache holds its size target of dentries or more: a
    /// dentry made now would only make the shrinker free another (see
    /// `Vfs`'s creates without a dentry). One load of the total. Relaxed,
    /// both: a hint (as for the shrinker), which either answer leaves
    /// correct.
    #[inline]
    pub(crate) fn at_target(&self) -> bool {
        self.counters.dentries.approx() >= self.target.load(std::sync::atomic::Ordering::Relaxed) as i64
    }

    fn lockref_ctor(&self) -> fn() -> Lockref {
        if self.lock_only {
            || Lockref::new_lock_only(1)
        } else {
            || Lockref::new(1)
        }
    }

    /// Drops a reference on an in-core inode, in its own superblock.
    ///
    /// # Safety
    /// The caller owns one reference on `inode`.
    pub unsafe fn iput(&self, inode: *const Inode) {
        // SAFETY: the caller's reference keeps the inode live.
        let sb = unsafe { (*inode).sb() };
        // SAFETY: as the caller promised.
        unsafe { sb.itable.iput(inode, &self.rcu, &self.counters) };
    }

    /// Lowers the size target to `n` dentries if it is higher (a mounted
    /// filesystem can hold only so many inodes).
    pub fn cap_target(&self, n: usize) {
        self.target.fetch_min(n.max(16), std::sync::atomic::Ordering::Relaxed);
    }

    /// The root filesystem's superblock.
    pub fn root_sb(&self) -> &Super {
        self.root().sb()
    }

    #[inline]
    pub fn root(&self) -> &Dentry {
        // SAFETY: the root lives as long as the cache.
        unsafe { &*self.root }
    }

    /// A new counted reference to the root.
    pub fn root_ref(&self) -> DRef<'_> {
        self.root().lockref().get();
        DRef { d: self.root(), dc: self }
    }

    /// A new counted reference to `d`, which the caller keeps alive by a
    /// reference of its own.
    pub fn dget<'a>(&'a self, d: &'a Dentry) -> DRef<'a> {
        d.lockref().get();
        DRef { d, dc: self }
    }

    /// Runs `f` on the live superblock serving `fs`, if any, with the
    /// superblock list locked: it cannot be torn down meanwhile.
    pub fn with_super<R>(&self, fs: *const (), f: impl FnOnce(&Super) -> R) -> Option<R> {
        let supers = self.supers.lock();
        for &sb in supers.iter() {
            // SAFETY: superblocks on the list are live.
            let sbr = unsafe { &*sb };
            if std::ptr::eq(Arc::as_ptr(&sbr.fs) as *const (), fs) {
                return Some(f(sbr));
            }
        }
        None
    }

    /// The cached dentry for `name` in directory `parent` of `sb`, if the
    /// directory is in core and the name cached (for `Notify`).
    pub fn cached_child(&self, sb: &Super, parent: crate::fs::Ino, name: &[u8]) -> Option<DRef<'_>> {
        let dir = self.alias_ref(sb, parent)?;
        self.d_lookup(&dir, name)
    }

    /// A referenced dentry naming in-core inode `ino` of `sb`, if any.
    pub fn alias_ref(&self, sb: &Super, ino: crate::fs::Ino) -> Option<DRef<'_>> {
        let ip = sb.itable.find_hold(ino, &self.counters, &self.rcu)?;
        // SAFETY: `find_hold` took a reference.
        let found = self.live_alias(unsafe { &*ip });
        // SAFETY: the reference `find_hold` took.
        unsafe { self.iput(ip) };
        found
    }

    /// The in-core inode `ino` of `sb` with its attributes read again from
    /// the filesystem, if it is in core.
    pub fn refresh_inode(&self, sb: &Super, ino: crate::fs::Ino) {
        if let Some(ip) = sb.itable.find_hold(ino, &self.counters, &self.rcu) {
            // SAFETY: we hold a reference.
            unsafe {
                (*ip).refresh(&*sb.fs);
                self.iput(ip);
            }
        }
    }

    /// Drops every cached name of `sb` (lost events): each child of its root
    /// is invalidated, with whatever it holds.
    pub fn invalidate_super(&self, sb: &Super) {
        // SAFETY: the caller holds the superblock list (`with_super`), so
        // the root is live.
        let root = unsafe { &*sb.root.load(std::sync::atomic::Ordering::Relaxed) };
        let g = self.rcu.read_lock();
        let mut kids: Vec<DRef<'_>> = Vec::new();
        root.children.for_each(&g, |c| {
            if c.lockref().get_not_dead() {
                // SAFETY: we just took this reference.
                kids.push(unsafe { DRef::adopt(self, c) });
            }
        });
        drop(g);
        for c in kids {
            self.d_invalidate(&c);
        }
        // The root's own cached misses (its children's went with them).
        let _l = root.lockref().lock();
        self.absent_drain(root);
    }

    /// One read section for a whole update ([`Rcu::hold`]): the sections
    /// of its walk, its lookups, its index inserts and removes and its
    /// last `dput` then nest in it for a thread-local count each, instead
    /// of seize's enter and leave (a create entered eight, an unlink seven).
    /// `None` while a filesystem whose calls may block is mounted: an
    /// update's filesystem call would run inside the section, and a call
    /// that blocks for seconds (etcd without a quorum) would hold back
    /// every object retired meanwhile, by every thread. Taken after the
    /// `global` mode's lock: `drop_caches` waits for a grace period
    /// holding it. (A mount of such a filesystem made while an update
    /// runs, after its look here, may be crossed by that update's walk
    /// inside the section: grace periods wait for that one call; no
    /// filesystem call waits for a grace period of this domain.)
    #[inline]
    pub(crate) fn hold_update(&self) -> Option<crate::sync::RcuHold<'_>> {
        (self.blocking_supers.load(std::sync::atomic::Ordering::Relaxed) == 0).then(|| self.rcu.hold())
    }

    /// Tears down a superblock whose last mount is gone (`kill_super`,
    /// `shrink_dcache_for_umount`): no handle, file or mount uses any of its
    /// dentries, so every one is unused; they go, then its root, then its
    /// inodes, and the superblock itself after a grace period (RCU walkers
    /// that crossed into it earlier may still read it).
    pub fn kill_super(&self, sb: *const Super) {
        // Off the list first (under its lock): `with_super` users finish
        // before, and no new one finds it.
        self.supers.lock().retain(|&x| !std::ptr::eq(x, sb));
        // SAFETY: the caller dropped the last mount; nothing else frees it.
        let sbr = unsafe { &*sb };
        if sbr.fs.as_memfs().is_none() {
            self.blocking_supers.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        let root = sbr.root.load(std::sync::atomic::Ordering::Relaxed) as *const Dentry;
        // SAFETY: the root is pinned until below.
        let r = unsafe { &*root };
        // The sets of absent names hold their directories: let go first.
        self.absent_purge(Some(sb));
        self.shrink_tree(r);
        assert!(r.children.is_empty(&self.rcu.read_lock()), "a dentry of an unmounted filesystem is in use");
        r.seq.invalidate();
        let inode = r.inode.swap(ptr::null_mut(), Ordering::Relaxed);
        Self::alias_del(inode, r);
        self.counters.add_dentry(-1, false);
        r.children.retire(&self.rcu);
        self.absent_drain(r);
        r.absent.retire(&self.rcu);
        // SAFETY: the root owned this reference; the root is off every list
        // and only RCU readers can still see it.
        unsafe {
            self.iput(inode);
            r.retire_name(&self.rcu, r.name.load(Ordering::Relaxed));
            self.rcu.retire_box(root as *mut Dentry);
        }
        sbr.itable.clear(sbr, &self.counters, &self.rcu);
        // Direct: its filesystem's destructor may block (an etcd lease
        // revoked) or take long (a memfs tree walked), and run from a
        // shard's drain it would run inside whatever section the draining
        // thread holds, an update's among them (`hold_update`).
        // SAFETY: off the list, with no dentry, inode or mount left.
        unsafe { self.rcu.retire_box_direct(sb as *mut Super) };
        // The rest out now, not when this shard's list fills: its dentries
        // and inodes, a tree's memory (an unmounted memfs).
        self.rcu.expedite();
    }
}

impl Drop for Dcache {
    /// Teardown (`shrink_dcache_for_umount`): the mounts go first (each
    /// filesystem mounted besides the root is killed with its last mount);
    /// then nothing else can reach the cache, so every dentry left goes
    /// without locks, then every inode.
    fn drop(&mut self) {
        self.umount_all();
        // The sets' references first: a directory out of the tree that one
        // still holds is found from no root below, and dies here.
        self.absent_purge(None);
        for sb in std::mem::take(&mut *self.supers.lock()) {
            // SAFETY: teardown: we own every superblock left.
            let sb = unsafe { Box::from_raw(sb as *mut Super) };
            let mut stack = vec![sb.root.load(std::sync::atomic::Ordering::Relaxed) as *const Dentry];
            while let Some(x) = stack.pop() {
                // SAFETY: teardown: we own every dentry in the tree.
                let d = unsafe { Box::from_raw(x as *mut Dentry) };
                let mut absent = Vec::new();
                {
                    let g = self.rcu.read_lock();
                    d.children.for_each(&g, |c| stack.push(c as *const Dentry));
                    d.absent.for_each_raw(&g, |n| absent.push(n));
                }
                self.counters.absent.add(-(absent.len() as i64));
                // SAFETY: teardown: no reader is left; the set owns its
                // names.
                unsafe {
                    d.children.clear_now();
                    d.absent.clear_now();
                    for n in absent {
                        dentry::Name::free(n as *mut dentry::NameHead);
                    }
                }
                let inode = d.inode.load(Ordering::Relaxed);
                self.counters.add_dentry(-1, inode.is_null());
                // SAFETY: the name is owned by the dentry.
                unsafe { d.free_name(d.name.load(Ordering::Relaxed)) };
            }
            sb.itable.clear(&sb, &self.counters, &self.rcu);
        }
        // Superblocks that unmounts killed wait in the RCU lists, each
        // holding the domain (and its filesystem, which may hold it too):
        // free them now, or the domain outlives this cache with all it
        // retired.
        self.rcu.barrier();
    }
}

#[cfg(all(test, loom))]
pub(crate) mod loom_tests;
