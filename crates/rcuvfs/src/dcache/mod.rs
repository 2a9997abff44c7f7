//! The dentry cache (Linux `fs/dcache.c`, seeds 003, 000 and 002): a hash of
//! (parent, name) that readers walk with no lock and no store, reference
//! counts in a [`Lockref`], per-dentry sequence counts, a global rename
//! sequence lock, negative dentries, and deferred freeing through RCU.
//!
//! # Locks
//!
//! | lock                     | protects                                                       |
//! |--------------------------|----------------------------------------------------------------|
//! | `Dcache::supers`         | the list of live superblocks: no superblock is torn down while a holder walks its tree (`shrink_all`, `invalidate_super`, `Notify`) |
//! | `Dcache::tree_lock`      | every dentry's parent, name, children list and hash membership; freeing a dead dentry (`kill_locked`) (the 2.6 `dcache_lock`, taken by updates only) |
//! | `Dcache::rename_lock`    | a seqlock whose write section covers every `d_move`: a reader that misses during a rename retries (seed 003, listing 2) |
//! | `Bucket::lock`           | a hash chain's links                                            |
//! | `Dentry::lockref`'s lock (`d_lock`) | the count's transitions to and from zero; the `HASHED` and `ON_LRU` flags; the inode pointer; the dead transition |
//! | `Dentry::seq` (seqcount) | written inside `d_lock` or `tree_lock` whenever the name, parent, inode or hashed state changes; invalidated when the dentry dies |
//! | `Dcache::lru`            | the LRU list's links (a dentry's `ON_LRU` changes only with both its `d_lock` and this held) |
//! | `Inode::aliases`         | an inode's list of the dentries that name it (a leaf)     |
//!
//! Order: `supers`, then `tree_lock`, then `rename_lock`, then a dentry's
//! `d_lock` (a parent's before its child's), then a bucket lock or the
//! `lru` lock, then the inode table. The shrinker walks the LRU under its
//! lock and only *tries* each dentry's `d_lock` (Linux's
//! `dentry_lru_isolate`), rotating a busy one, so it never waits against
//! this order. Directory locks (`Inode::dir_lock`) come before all of these;
//! a filesystem's own locks come after all of them (see `fs::Notify`).
//!
//! # Dentry states (seed 003, figure 6)
//!
//! | state    | `HASHED` | inode | count   | meaning                                         |
//! |----------|----------|-------|---------|-------------------------------------------------|
//! | in use   | yes      | any   | > 0     | a walk, handle or child holds it                |
//! | unused   | yes      | some  | 0       | cached, on the LRU; the shrinker may kill it    |
//! | negative | yes      | none  | >= 0    | a cached miss                                   |
//! | unhashed | no       | any   | > 0     | removed or replaced while held; killed at its last put |
//! | dead     | no       | -     | `DEAD`  | off the hash and the LRU; unlinked from the tree and freed after a grace period |
//!
//! A dentry holds a reference on its parent, so the parent chain of any live
//! dentry is live, and every live dentry is on its parent's children list.
//!
//! # Who may touch a dentry when (the last reference against its killers)
//!
//! A dentry's memory stays valid while one holds a reference, or its
//! `d_lock`, or `tree_lock` while it is in the tree, or an RCU read section
//! that began before it was unhashed. Killers (the shrinker, `drop_caches`'
//! tree shrink, `d_invalidate` of a name renamed over, unlinked or reported
//! changed by a backend, a `dput` of an unhashed dentry) all mark it dead in
//! `unhash_and_mark_dead`, under its `d_lock` with its count at zero, and
//! only there; dead implies off the hash and off the LRU, so nothing finds
//! it again. Then `kill_locked`, under `tree_lock`, frees it through RCU.
//! The last `dput` decides a dentry's fate under `d_lock` too; its one
//! lockless step, the decrement to zero (Linux's `fast_dput`), runs inside
//! an RCU read section and stops there only if there is nothing to decide.
//! The loom models `loom_dput_vs_*` check this against each killer.
//!
//! # Readers
//!
//! [`Dcache::lookup_rcu`] walks a hash chain with atomic loads only and
//! returns a candidate with the sequence count it read first. The caller
//! owes two checks: the parent's count (hand-over-hand: the child was found
//! under a parent that did not move), and the child's count after it has
//! read what it needs (its inode pointer, and the inode's attributes).
//! Every field a reader loads is an atomic, or immutable behind an atomic
//! pointer (the name), so a racy read is never undefined behaviour: a stale
//! value is caught by the sequence check and discarded.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::AtomicI64;

use crate::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;

use crate::fs::FileSystem;
use crate::inode::{Inode, Super};
use crate::mount::Namespace;
use crate::sync::list_batch::ListMode;
use crate::sync::{Lockref, LockrefGuard, Mutex, Rcu, RcuGuard, SeqCount, SeqLock};

/// Live-object counters of one `Vfs`, kept past its end so that tests can
/// check that teardown freed everything. Updated on allocation and free
/// only, never on a lookup.
/// Plain std atomics: counters are not part of any protocol, so loom need
/// not see them.
#[derive(Debug, Default)]
pub struct LiveCounters {
    dentries: AtomicI64,
    negative: AtomicI64,
    inodes: AtomicI64,
    mounts: AtomicI64,
}

impl LiveCounters {
    pub fn dentries(&self) -> i64 {
        self.dentries.load(std::sync::atomic::Ordering::Relaxed)
    }
    pub fn negative_dentries(&self) -> i64 {
        self.negative.load(std::sync::atomic::Ordering::Relaxed)
    }
    pub fn inodes(&self) -> i64 {
        self.inodes.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Mounts besides the root one, attached or detached but still in use.
    pub fn mounts(&self) -> i64 {
        self.mounts.load(std::sync::atomic::Ordering::Relaxed)
    }
    pub(crate) fn add_mount(&self, n: i64) {
        self.mounts.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    pub(crate) fn add_inode(&self, n: i64) {
        self.inodes.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    fn add_dentry(&self, n: i64, negative: bool) {
        crate::sync::audit::shared_writes(1);
        self.dentries.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        if negative {
            self.negative.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// An immutable name, with its hash (which covers the parent too). A rename
/// swaps in a new `Name` and retires the old one through RCU.
pub(crate) struct Name {
    pub hash: u64,
    pub bytes: Box<[u8]>,
}

pub const HASHED: u32 = 1;
pub const ROOT: u32 = 2;
/// This dentry keeps its count in line 0 (the `packed` layout).
pub const PACKED: u32 = 4;
/// Looked up since the shrinker last passed (second chance). Set only
/// where clear (test, then set), so a hot dentry costs no store.
pub const REFERENCED: u32 = 8;
/// On the LRU list (changed under `Dcache::lru`).
pub const ON_LRU: u32 = 16;
/// Something is mounted here (changed under the namespace lock).
pub const MOUNTED: u32 = 32;

/// Links of the LRU list, touched only under `Dcache::lru`.
struct LruLinks {
    prev: *const Dentry,
    next: *const Dentry,
}

/// The LRU list of unused dentries (Linux `s_dentry_lru`): a dentry joins
/// it when its count drops to zero, and stays (lazily) while it is used
/// again; the shrinker drops the ones it finds in use.
struct Lru {
    head: *const Dentry,
    tail: *const Dentry,
}

/// Links of the dentry tree, touched only under `Dcache::tree_lock`.
struct TreeLinks {
    first_child: *const Dentry,
    next_sibling: *const Dentry,
    prev_sibling: *const Dentry,
}

/// A dentry. The first cache line holds what the RCU lookup reads; the
/// reference count lives on the next one (seed 002's `split` layout), so
/// that reference changes by `rcuwalk` and `lockref` walkers do not
/// invalidate the line that lookups of the same name read. The `packed`
/// layout (before seed 002) uses the count slot in line 0 instead; the
/// `PACKED` flag, fixed at allocation, says which slot is live.
#[repr(C, align(64))]
pub(crate) struct Dentry {
    // ---- cache line 0: read by RCU lookup ----
    pub seq: SeqCount,
    pub flags: AtomicU32,
    pub parent: AtomicPtr<Dentry>,
    pub name: AtomicPtr<Name>,
    pub inode: AtomicPtr<Inode>,
    /// Next dentry in the hash chain.
    next: AtomicPtr<Dentry>,
    /// The count in the `packed` layout.
    lockref_packed: Lockref,
    /// The superblock (fixed at allocation; it outlives its dentries).
    sb: AtomicPtr<Super>,
    /// Padding to the line. Atomic, like every other field, so that a
    /// pointer derived from a shared reference may free the dentry: under
    /// Stacked Borrows a shared reference grants write access only to
    /// interior-mutable bytes (Miri caught plain padding here).
    _pad: [std::sync::atomic::AtomicU64; 1],
    // ---- cache line 1: written by reference changes and updates ----
    /// The count in the `split` layout.
    lockref_split: Lockref,
    tree: UnsafeCell<TreeLinks>,
    lru: UnsafeCell<LruLinks>,
    /// Explicit (atomic) tail, so the struct has no implicit padding: see
    /// `_pad` (Miri caught the tail padding too).
    _tail: [std::sync::atomic::AtomicU64; 2],
    /// Set by the loom RCU stand-in once the grace period that began at
    /// this dentry's kill has ended, when the real build may free it: every
    /// touch checks it (`check_live`).
    #[cfg(loom)]
    pub(crate) freed: loom::sync::atomic::AtomicBool,
}

// SAFETY: the atomics are shared freely; `tree` is touched only under
// `Dcache::tree_lock`.
unsafe impl Send for Dentry {}
// SAFETY: as above.
unsafe impl Sync for Dentry {}

#[cfg(not(loom))]
const _: () =
    assert!(std::mem::offset_of!(Dentry, lockref_split) == 64 && std::mem::offset_of!(Dentry, lockref_packed) < 64);

impl Dentry {
    /// Under loom: panics if this dentry's memory could already have been
    /// freed (a grace period has passed since its kill). Nothing otherwise.
    #[inline(always)]
    pub(crate) fn check_live(&self) {
        #[cfg(loom)]
        assert!(
            !self.freed.load(loom::sync::atomic::Ordering::SeqCst),
            "a dentry touched after the grace period that followed its kill (a use after free)"
        );
    }

    /// The reference count and `d_lock`, in the slot of this dentry's layout.
    #[inline(always)]
    pub fn lockref(&self) -> &Lockref {
        self.check_live();
        if self.flags.load(Ordering::Relaxed) & PACKED != 0 {
            &self.lockref_packed
        } else {
            &self.lockref_split
        }
    }

    /// The inode, or `None` for a negative dentry. Readers without a
    /// reference must validate `seq` afterwards.
    #[inline]
    pub fn inode(&self) -> Option<&Inode> {
        // Acquire: pairs with the Release store in `d_instantiate`/`alloc`,
        // so the inode's fields are initialized when we see the pointer.
        // SAFETY: a non-null inode pointer is live while this dentry holds
        // its reference, or, for an RCU reader, until a grace period after
        // the dentry let it go.
        unsafe { self.inode.load(Ordering::Acquire).as_ref() }
    }

    #[inline]
    pub fn name(&self) -> &Name {
        // SAFETY: names are freed only through RCU after being replaced,
        // and every caller is inside a read section or holds `tree_lock`.
        unsafe { &*self.name.load(Ordering::Acquire) }
    }

    #[inline]
    pub fn parent(&self) -> &Dentry {
        // SAFETY: a dentry holds a reference on its parent; a parent reached
        // by an RCU reader is freed only after a grace period.
        unsafe { &*self.parent.load(Ordering::Acquire) }
    }

    /// The superblock this dentry belongs to.
    #[inline]
    pub fn sb(&self) -> &Super {
        // SAFETY: a superblock outlives its dentries (`kill_super` frees
        // them first, and retires itself through RCU after them).
        unsafe { &*self.sb.load(Ordering::Relaxed) }
    }

    /// A mount sits on this dentry (`DCACHE_MOUNTED`): a walk must look in
    /// the mount hash.
    #[inline]
    pub fn is_mountpoint(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & MOUNTED != 0
    }

    #[inline]
    pub fn is_hashed(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & HASHED != 0
    }

    #[inline]
    pub fn is_root(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & ROOT != 0
    }

    #[inline]
    pub fn is_dir(&self) -> bool {
        self.inode().is_some_and(|i| i.kind == crate::fs::FileType::Dir)
    }

    /// # Safety
    /// The caller holds `Dcache::tree_lock`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn links(&self) -> &mut TreeLinks {
        // SAFETY: the caller holds tree_lock, which serializes all access.
        unsafe { &mut *self.tree.get() }
    }
}

/// Sets `REFERENCED` on `d` unless it is set already: a lookup of a hot
/// dentry stores nothing.
#[inline]
pub(crate) fn mark_referenced(d: &Dentry) {
    d.check_live();
    if d.flags.load(Ordering::Relaxed) & REFERENCED == 0 {
        d.flags.fetch_or(REFERENCED, Ordering::Relaxed);
        crate::sync::audit::shared_writes(1);
    }
}

/// The hash of `name` under `parent` (FxHash-style, over the parent's
/// address and the name's bytes).
#[inline]
pub(crate) fn name_hash(parent: *const Dentry, name: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = (parent as usize as u64).wrapping_mul(K);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(c.try_into().unwrap())).wrapping_mul(K);
    }
    // The tail is assembled in a register: copying it to the stack and
    // loading it back as one word stalls on store forwarding.
    let mut tail = 0u64;
    for (i, &b) in chunks.remainder().iter().enumerate() {
        tail |= u64::from(b) << (8 * i);
    }
    h = (h.rotate_left(5) ^ tail ^ name.len() as u64).wrapping_mul(K);
    h ^ (h >> 29)
}

/// Byte equality without a call to `memcmp` for the short names that paths
/// are made of.
#[inline(always)]
fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

struct Bucket {
    head: AtomicPtr<Dentry>,
    lock: crate::sync::RawMutex,
}

/// A counted reference to a dentry (`dget`'d); `dput` on drop.
pub(crate) struct DRef<'a> {
    d: &'a Dentry,
    dc: &'a Dcache,
}

impl<'a> DRef<'a> {
    /// Adopts a reference the caller already took.
    ///
    /// # Safety
    /// The caller owns one reference on `d`, which `dc` manages.
    pub unsafe fn adopt(dc: &'a Dcache, d: *const Dentry) -> DRef<'a> {
        // SAFETY: a held reference keeps the dentry allocated.
        DRef { d: unsafe { &*d }, dc }
    }

    /// Gives up ownership of the reference, returning the raw pointer.
    pub fn into_raw(self) -> *const Dentry {
        let p = self.d as *const Dentry;
        std::mem::forget(self);
        p
    }

    pub fn clone_ref(&self) -> DRef<'a> {
        self.d.lockref().get();
        DRef { d: self.d, dc: self.dc }
    }

    pub fn ptr(&self) -> *const Dentry {
        self.d
    }
}

impl<'a> std::ops::Deref for DRef<'a> {
    type Target = Dentry;
    fn deref(&self) -> &Dentry {
        self.d
    }
}

impl Drop for DRef<'_> {
    fn drop(&mut self) {
        self.dc.dput(self.d);
    }
}

/// The dentry cache of one Vfs.
pub(crate) struct Dcache {
    /// `PACKED` or 0: the layout of every dentry of this cache.
    layout: u32,
    /// Reference changes always take `d_lock` (`dlock` mode).
    lock_only: bool,
    buckets: Box<[Bucket]>,
    mask: u64,
    pub tree_lock: Mutex<()>,
    pub rename_lock: SeqLock,
    /// The root filesystem's root dentry (the root mount's root).
    root: *const Dentry,
    /// Every live superblock (`*const Super`), the root one first.
    supers: Mutex<Vec<usize>>,
    /// The inode list mode of every superblock.
    list: ListMode,
    pub counters: Arc<LiveCounters>,
    /// The mount table.
    pub ns: Namespace,
    pub rcu: Rcu,
    lru: Mutex<Lru>,
    /// Dentries the shrinker holds the cache to (lowered by a mount of a
    /// filesystem with an inode budget). Plain std atomic: not part of any
    /// protocol.
    target: std::sync::atomic::AtomicUsize,
    /// Negative dentries the shrinker holds the cache to.
    negative_target: usize,
}

// SAFETY: `root` is owned by the cache and lives as long as it; everything
// else is Sync.
unsafe impl Send for Dcache {}
// SAFETY: as above.
unsafe impl Sync for Dcache {}

impl Dcache {
    /// `packed`: the count in the lookup line (seed 002's before);
    /// `lock_only`: every reference change takes `d_lock` (the `dlock` mode).
    pub fn new(
        fs: Arc<dyn FileSystem>,
        buckets: usize,
        packed: bool,
        lock_only: bool,
        list: ListMode,
        target: usize,
        negative_target: usize,
    ) -> std::io::Result<Dcache> {
        let layout = if packed { PACKED } else { 0 };
        let n = buckets.next_power_of_two().max(1);
        let mut dc = Dcache {
            layout,
            lock_only,
            buckets: (0..n)
                .map(|_| Bucket { head: AtomicPtr::new(ptr::null_mut()), lock: Default::default() })
                .collect(),
            mask: (n - 1) as u64,
            tree_lock: Mutex::new(()),
            rename_lock: SeqLock::new(),
            lru: Mutex::new(Lru { head: ptr::null(), tail: ptr::null() }),
            target: std::sync::atomic::AtomicUsize::new(target.max(16)),
            negative_target,
            root: ptr::null(),
            supers: Mutex::new(Vec::new()),
            list,
            counters: Arc::new(LiveCounters::default()),
            ns: Namespace::new(),
            rcu: Rcu::new(),
        };
        let sb = dc.new_super(fs)?;
        // SAFETY: just created; lives as long as the cache.
        dc.root = unsafe { (*sb).root.load(std::sync::atomic::Ordering::Relaxed) as *const Dentry };
        dc.ns.init_root(sb, dc.root);
        Ok(dc)
    }

    /// A new superblock for `fs`, with its root dentry (pinned for the
    /// superblock's life: the count of 1 is the filesystem's own).
    pub fn new_super(&self, fs: Arc<dyn FileSystem>) -> std::io::Result<*const Super> {
        let attr = fs.getattr(fs.root())?;
        let sb = Box::into_raw(Box::new(Super::new(fs, self.list)));
        // SAFETY: just allocated; freed only by `kill_super` or teardown.
        let sbr = unsafe { &*sb };
        // The root's implicit lookup reference is the filesystem's own.
        let inode = sbr.iget(&attr, false, &self.counters);
        let root = self.new_dentry(ROOT | self.layout, ptr::null(), Name { hash: 0, bytes: Box::new([]) }, inode, sb);
        // SAFETY: just allocated, not yet shared.
        unsafe { (*root).parent.store(root, Ordering::Relaxed) };
        sbr.root.store(root as usize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: just allocated, live.
        Self::alias_add(inode, unsafe { &*root });
        self.counters.add_dentry(1, false);
        self.supers.lock().push(sb as usize);
        Ok(sb)
    }

    fn new_dentry(
        &self,
        flags: u32,
        parent: *const Dentry,
        name: Name,
        inode: *const Inode,
        sb: *const Super,
    ) -> *mut Dentry {
        Box::into_raw(Box::new(Dentry {
            seq: SeqCount::new(),
            flags: AtomicU32::new(flags),
            parent: AtomicPtr::new(parent as *mut Dentry),
            name: AtomicPtr::new(Box::into_raw(Box::new(name))),
            inode: AtomicPtr::new(inode as *mut Inode),
            next: AtomicPtr::new(ptr::null_mut()),
            lockref_packed: self.new_lockref(),
            sb: AtomicPtr::new(sb as *mut Super),
            _pad: [std::sync::atomic::AtomicU64::new(0)],
            lockref_split: self.new_lockref(),
            tree: UnsafeCell::new(TreeLinks {
                first_child: ptr::null(),
                next_sibling: ptr::null(),
                prev_sibling: ptr::null(),
            }),
            lru: UnsafeCell::new(LruLinks { prev: ptr::null(), next: ptr::null() }),
            _tail: [std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0)],
            #[cfg(loom)]
            freed: loom::sync::atomic::AtomicBool::new(false),
        }))
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

    fn new_lockref(&self) -> Lockref {
        if self.lock_only {
            Lockref::new_lock_only(1)
        } else {
            Lockref::new(1)
        }
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

    fn bucket(&self, hash: u64) -> &Bucket {
        &self.buckets[(hash & self.mask) as usize]
    }

    /// Finds a hashed dentry for `name` under `parent` (`__d_lookup_rcu`).
    /// Returns it with the sequence count read before its name was
    /// compared. `None`: not found, or a writer was in progress on a
    /// candidate; the caller falls back to a locked lookup. The caller must
    /// be in a read section and owes the checks in the module doc.
    #[inline]
    pub fn lookup_rcu<'g>(&'g self, _guard: &RcuGuard<'_>, parent: &Dentry, name: &[u8]) -> Option<(&'g Dentry, u32)> {
        let hash = name_hash(parent, name);
        // Acquire on every link: pairs with the Release publication of a
        // dentry in `hash_insert`, so its fields are initialized.
        let mut p = self.bucket(hash).head.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: dentries reachable from a chain are freed only after
            // a grace period, and we are in a read section.
            let d = unsafe { &*p };
            p = d.next.load(Ordering::Acquire);
            let seq = d.seq.raw();
            // A reader can reach a dentry through a chain link loaded before
            // it was unhashed. If the count we just read is the one the
            // unhash published (`seq.invalidate`, Release fence, paired with
            // this Acquire load), the cleared `HASHED` flag is visible too:
            // skip the dentry, or a killed dentry's null inode would read as
            // a negative entry. If we read the count from before, the
            // caller's final check fails instead. (Linux: `d_unhashed` in
            // `__d_lookup_rcu`.)
            if d.flags.load(Ordering::Relaxed) & HASHED == 0 {
                continue;
            }
            if !ptr::eq(d.parent.load(Ordering::Relaxed), parent) {
                continue;
            }
            let n = d.name();
            if n.hash != hash || !same_name(&n.bytes, name) {
                continue;
            }
            if seq & 1 != 0 {
                return None;
            }
            return Some((d, seq));
        }
        None
    }

    /// Finds and references a hashed dentry for `name` under `parent`
    /// (`d_lookup`): a miss is retried while a rename ran concurrently, so a
    /// miss means the name was not cached at some instant of the call.
    pub fn d_lookup<'a>(&'a self, parent: &Dentry, name: &[u8]) -> Option<DRef<'a>> {
        loop {
            let guard = self.rcu.read_lock();
            let rs = self.rename_lock.seqcount().read_begin_spin();
            if let Some((d, seq)) = self.lookup_rcu(&guard, parent, name) {
                if d.lockref().get_not_dead() {
                    let r = DRef { d, dc: self };
                    if !d.seq.read_retry(seq) && d.is_hashed() {
                        return Some(r);
                    }
                    drop(r);
                }
                continue;
            }
            match rs {
                Some(rs) if !self.rename_lock.read_retry(rs) => return None,
                Some(_) => continue,
                None => {
                    // A rename stayed in progress: wait for it under its lock.
                    drop(self.rename_lock.read_locked());
                }
            }
        }
    }

    fn hash_insert(&self, d: &Dentry, hash: u64) {
        let b = self.bucket(hash);
        b.lock.lock();
        d.next.store(b.head.load(Ordering::Relaxed), Ordering::Relaxed);
        // Release: publishes the dentry's initialized fields to readers'
        // Acquire loads of the chain.
        b.head.store(d as *const Dentry as *mut Dentry, Ordering::Release);
        // SAFETY: locked just above.
        unsafe { b.lock.unlock() };
    }

    fn hash_remove(&self, d: &Dentry, hash: u64) {
        let b = self.bucket(hash);
        b.lock.lock();
        let mut link = &b.head;
        loop {
            let cur = link.load(Ordering::Relaxed);
            if cur.is_null() {
                break;
            }
            if ptr::eq(cur, d) {
                // Release: a reader that sees the new link sees the chain as
                // it is after the removal. `d.next` stays intact, so a
                // reader standing on `d` can go on.
                link.store(d.next.load(Ordering::Relaxed), Ordering::Release);
                crate::sync::audit::shared_writes(1);
                break;
            }
            // SAFETY: chain members are live while the bucket is locked.
            link = unsafe { &(*cur).next };
        }
        // SAFETY: locked above.
        unsafe { b.lock.unlock() };
    }

    /// Allocates a dentry for `name` under `parent` with `inode` (null for
    /// negative), hashes it, and returns a reference to it (`d_alloc` +
    /// `d_add`). The caller holds `parent`'s directory lock and a
    /// reference on `inode`, which passes to the dentry.
    pub fn d_add<'a>(&'a self, parent: &Dentry, name: &[u8], inode: *const Inode) -> DRef<'a> {
        let hash = name_hash(parent, name);
        parent.lockref().get(); // the child's reference on its parent
        let name = Name { hash, bytes: name.into() };
        let d = self.new_dentry(HASHED | self.layout, parent, name, inode, parent.sb.load(Ordering::Relaxed));
        // SAFETY: just allocated; published below.
        let dr = unsafe { &*d };
        let _t = self.tree_lock.lock();
        // SAFETY: tree_lock is held.
        unsafe { self.link_child(parent, dr) };
        self.hash_insert(dr, hash);
        self.counters.add_dentry(1, inode.is_null());
        Self::alias_add(inode, dr);
        drop(_t);
        self.shrink_to_target();
        DRef { d: dr, dc: self }
    }

    /// The dentry for `name` in `dir` naming the inode `ip` that the
    /// filesystem just returned for it (`d_splice_alias`); the caller's
    /// reference on `ip` passes to the result, and the caller holds `dir`'s
    /// directory lock.
    ///
    /// A directory inode has at most one dentry (Linux's rule): if it
    /// already has a live one, hashed elsewhere or unhashed by an
    /// invalidation while a handle still holds it, that dentry moves here
    /// instead of a second one being made. Two dentries of one directory
    /// would cache two sets of children, and a create made through one
    /// would hide behind a miss cached under the other. ELOOP (as Linux's
    /// `__d_unalias`) if the move would put a directory under itself, or
    /// move a filesystem's root.
    pub fn d_splice_alias<'a>(&'a self, dir: &Dentry, name: &[u8], ip: *const Inode) -> std::io::Result<DRef<'a>> {
        // SAFETY: the caller's reference keeps the inode live.
        let inode = unsafe { &*ip };
        if inode.kind == crate::fs::FileType::Dir {
            if let Some(alias) = self.live_alias(inode) {
                let _t = self.tree_lock.lock();
                // tree_lock freezes the tree's shape: the ancestry is exact.
                if alias.is_root() || self.is_ancestor(&alias, dir) {
                    drop(_t);
                    drop(alias);
                    // SAFETY: the caller's reference, not passed on.
                    unsafe { self.iput(ip) };
                    return crate::error::fail(crate::error::ELOOP);
                }
                let _w = self.rename_lock.write();
                // SAFETY: tree_lock and the rename lock's write section are
                // held; we hold a reference on `alias`.
                unsafe { self.rehash(&alias, dir, name) };
                drop(_w);
                drop(_t);
                // SAFETY: the alias holds its own reference on the inode.
                unsafe { self.iput(ip) };
                return Ok(alias);
            }
        }
        Ok(self.d_add(dir, name, ip))
    }

    /// A referenced live dentry naming `inode`, if any.
    fn live_alias(&self, inode: &Inode) -> Option<DRef<'_>> {
        let _g = self.rcu.read_lock();
        // Copied out first: `aliases` is a leaf lock, and a get may take
        // d_lock.
        let aliases: Vec<usize> = inode.aliases.lock().clone();
        aliases.into_iter().find_map(|d| {
            // SAFETY: on the alias list inside our read section, so freed
            // only after it ends; a dead one fails `get_not_dead`.
            let d = unsafe { &*(d as *const Dentry) };
            d.lockref().get_not_dead().then(|| DRef { d, dc: self })
        })
    }

    /// Runs the shrinker if the cache is past its size target or its
    /// negative-dentry target: in the allocating thread, a batch at a time.
    fn shrink_to_target(&self) {
        let (n, neg) = (self.counters.dentries(), self.counters.negative_dentries());
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

    /// Notes that `d`'s count just reached zero while hashed (`d_lru_add`):
    /// it goes on the LRU (referenced), or, already there, is marked
    /// referenced. The caller holds `d`'s `d_lock` (`_g`), under which alone
    /// `ON_LRU` changes, and `d` is not dead.
    fn lru_add_locked(&self, d: &Dentry, _g: &LockrefGuard<'_>) {
        d.check_live();
        let f = d.flags.load(Ordering::Relaxed);
        if f & ROOT != 0 {
            return;
        }
        if f & ON_LRU == 0 {
            let mut lru = self.lru.lock();
            d.flags.fetch_or(ON_LRU | REFERENCED, Ordering::Relaxed);
            crate::sync::audit::shared_writes(1);
            // SAFETY: the lru lock is held; `d` is live (we hold its d_lock
            // and it is not dead) and off the list (`ON_LRU` clear, which
            // cannot change without its d_lock).
            unsafe { Self::lru_append(&mut lru, d) };
        } else {
            mark_referenced(d);
        }
    }

    /// Puts `d` at the LRU's tail. The caller holds the lru lock.
    ///
    /// # Safety
    /// `d` is live and not on the list.
    unsafe fn lru_append(lru: &mut Lru, d: &Dentry) {
        d.check_live();
        // SAFETY: the lru lock is held (caller); members are live.
        unsafe {
            let l = &mut *d.lru.get();
            l.prev = lru.tail;
            l.next = ptr::null();
            match lru.tail.as_ref() {
                Some(t) => (*t.lru.get()).next = d,
                None => lru.head = d,
            }
        }
        lru.tail = d;
    }

    /// Takes `d` off the LRU for good (`d_lru_del`): unlinks it and clears
    /// `ON_LRU`. The caller holds the lru lock and `d`'s `d_lock`.
    ///
    /// # Safety
    /// `d` is on the list.
    unsafe fn lru_remove(lru: &mut Lru, d: &Dentry) {
        // SAFETY: the caller's contract.
        unsafe { Self::lru_unlink(lru, d) };
        d.flags.fetch_and(!ON_LRU, Ordering::Relaxed);
    }

    /// Unlinks `d` from the LRU, leaving `ON_LRU` alone (a rotation relinks
    /// it at once). The caller holds the lru lock.
    ///
    /// # Safety
    /// `d` is on the list.
    unsafe fn lru_unlink(lru: &mut Lru, d: &Dentry) {
        // SAFETY: the lru lock is held (caller); members are live.
        unsafe {
            let l = &mut *d.lru.get();
            match l.prev.as_ref() {
                Some(p) => (*p.lru.get()).next = l.next,
                None => lru.head = l.next,
            }
            match l.next.as_ref() {
                Some(n) => (*n.lru.get()).prev = l.prev,
                None => lru.tail = l.prev,
            }
            l.prev = ptr::null();
            l.next = ptr::null();
        }
    }

    /// Kills `d` in the sense of `lockref_mark_dead`, with its `d_lock`
    /// held (`g`) and its count zero (or the caller's last reference): it
    /// leaves the hash (and every RCU reader's validation fails from here),
    /// leaves the LRU, and is marked dead, so that no lookup can take it
    /// again and no `dput` touches its LRU state. Unlocks. The caller must
    /// then free it with `kill_locked` under `tree_lock`. Every kill goes
    /// through here, so that "dead" always means "off the hash and off the
    /// LRU".
    fn unhash_and_mark_dead(&self, d: &Dentry, mut g: LockrefGuard<'_>) {
        if d.flags.load(Ordering::Relaxed) & HASHED != 0 {
            self.hash_remove(d, d.name().hash);
            d.flags.fetch_and(!HASHED, Ordering::Relaxed);
            crate::sync::audit::shared_writes(1);
        }
        d.seq.invalidate();
        if d.flags.load(Ordering::Relaxed) & ON_LRU != 0 {
            let mut lru = self.lru.lock();
            // SAFETY: on the list (`ON_LRU`, stable under d_lock); both
            // locks held.
            unsafe { Self::lru_remove(&mut lru, d) };
        }
        g.mark_dead();
    }

    /// The shrinker (`prune_dcache`): frees up to `want` unused dentries
    /// (only negative ones if `negatives_only`), giving each referenced one
    /// a second chance: its bit is cleared and it goes to the back; on the
    /// next pass it is freed. Holds `tree_lock` (lookups do not take it).
    ///
    /// It walks the list under the lru lock and only *tries* each dentry's
    /// `d_lock` (Linux's `dentry_lru_isolate`): the order is `d_lock` before
    /// the lru lock, so waiting here could deadlock with a `dput` that holds
    /// one and wants the other. A busy dentry is rotated to the back.
    pub fn shrink(&self, want: usize, negatives_only: bool) {
        let _t = self.tree_lock.lock();
        let mut freed = 0;
        // A bounded walk (Linux's `nr_to_scan`): twice what we must free, so
        // that one call cannot sweep the whole list, clearing every bit and
        // then freeing what was just spared; the next allocation continues.
        // A negatives-only pass may walk the whole list: it skips positives.
        let mut budget = if negatives_only { self.counters.dentries().max(0) as usize + 16 } else { 2 * want + 16 };
        while freed < want && budget > 0 {
            budget -= 1;
            let (victim, g) = {
                let mut lru = self.lru.lock();
                // SAFETY: members of the list are live: a dentry leaves the
                // list, under this lock, before it is marked dead.
                let Some(d) = (unsafe { lru.head.as_ref() }) else { break };
                let Some(g) = d.lockref().try_lock() else {
                    // SAFETY: `d` is on the list; lock held. Rotating keeps
                    // `ON_LRU` as it is.
                    unsafe {
                        Self::lru_unlink(&mut lru, d);
                        Self::lru_append(&mut lru, d);
                    }
                    continue;
                };
                let f = d.flags.load(Ordering::Relaxed);
                if g.count() != 0 {
                    // In use: off the list until its count drops again.
                    // SAFETY: on the list; both locks held.
                    unsafe { Self::lru_remove(&mut lru, d) };
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
                        Self::lru_unlink(&mut lru, d);
                        Self::lru_append(&mut lru, d);
                    }
                    continue;
                }
                // SAFETY: on the list; both locks held.
                unsafe { Self::lru_remove(&mut lru, d) };
                (d, g)
            };
            // Unused, so childless (children hold references). Usually
            // hashed too, but not always: a dentry unhashed while in use
            // and then put is briefly unhashed at count zero, between its
            // `dput_last`'s decrement and its d_lock. We kill it then, and
            // that `dput` finds it dead.
            // SAFETY: tree_lock is held.
            debug_assert!(unsafe { victim.links().first_child.is_null() });
            self.unhash_and_mark_dead(victim, g);
            // SAFETY: tree_lock held; dead and unhashed.
            unsafe { self.kill_locked(victim) };
            freed += 1;
        }
    }

    /// # Safety
    /// The caller holds `tree_lock`.
    unsafe fn link_child(&self, parent: &Dentry, d: &Dentry) {
        // SAFETY: tree_lock is held (caller).
        unsafe {
            let pl = parent.links();
            let dl = d.links();
            dl.prev_sibling = ptr::null();
            dl.next_sibling = pl.first_child;
            if let Some(first) = pl.first_child.as_ref() {
                first.links().prev_sibling = d;
            }
            pl.first_child = d;
        }
    }

    /// # Safety
    /// The caller holds `tree_lock`.
    unsafe fn unlink_child(&self, parent: &Dentry, d: &Dentry) {
        // SAFETY: tree_lock is held (caller).
        unsafe {
            let dl = d.links();
            match dl.prev_sibling.as_ref() {
                Some(prev) => prev.links().next_sibling = dl.next_sibling,
                None => parent.links().first_child = dl.next_sibling,
            }
            if let Some(next) = dl.next_sibling.as_ref() {
                next.links().prev_sibling = dl.prev_sibling;
            }
            dl.prev_sibling = ptr::null();
            dl.next_sibling = ptr::null();
        }
    }

    /// Adds `d` to `inode`'s aliases.
    fn alias_add(inode: *const Inode, d: &Dentry) {
        // SAFETY: the caller passes a live inode reference to `d`.
        if let Some(i) = unsafe { inode.as_ref() } {
            i.aliases.lock().push(d as *const Dentry as usize);
        }
    }

    /// Removes `d` from `inode`'s aliases.
    fn alias_del(inode: *const Inode, d: &Dentry) {
        // SAFETY: `d` still holds its inode reference (the caller drops it
        // after this).
        if let Some(i) = unsafe { inode.as_ref() } {
            let mut a = i.aliases.lock();
            if let Some(k) = a.iter().position(|&x| x == d as *const Dentry as usize) {
                a.swap_remove(k);
            }
        }
    }

    /// Turns a negative dentry positive (`d_instantiate`). The caller holds
    /// the parent's directory lock and a reference on `inode`, which passes
    /// to the dentry.
    pub fn d_instantiate(&self, d: &Dentry, inode: *const Inode) {
        let _g = d.lockref().lock();
        debug_assert!(d.inode.load(Ordering::Relaxed).is_null());
        d.seq.write_begin();
        // Release: publishes the inode's fields (see `Dentry::inode`).
        d.inode.store(inode as *mut Inode, Ordering::Release);
        d.seq.write_end();
        self.counters.negative.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        Self::alias_add(inode, d);
    }

    /// Records that `d`'s name was removed (`d_delete`): if the caller's
    /// reference is the only one, `d` becomes negative in place; otherwise it
    /// is unhashed and lives on, positive, for its other holders.
    pub fn d_delete(&self, d: &Dentry) {
        let _t = self.tree_lock.lock();
        let g = d.lockref().lock();
        // SAFETY: tree_lock is held.
        let childless = unsafe { d.links().first_child.is_null() };
        if g.count() == 1 && childless {
            d.seq.write_begin();
            let inode = d.inode.swap(ptr::null_mut(), Ordering::Relaxed);
            d.seq.write_end();
            drop(g);
            Self::alias_del(inode, d);
            self.counters.negative.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !inode.is_null() {
                // SAFETY: the dentry owned this reference on the inode.
                unsafe { self.iput(inode) };
            }
        } else {
            drop(g);
            // SAFETY: tree_lock is held.
            unsafe { self.invalidate_locked(d) };
        }
    }

    /// Unhashes `d` (`__d_drop`) and every cached descendant (`d_invalidate`),
    /// killing whatever is unused. Takes `tree_lock`.
    pub fn d_invalidate(&self, d: &Dentry) {
        let _t = self.tree_lock.lock();
        // SAFETY: tree_lock is held.
        unsafe { self.invalidate_locked(d) };
    }

    /// # Safety
    /// The caller holds `tree_lock`.
    unsafe fn invalidate_locked(&self, d: &Dentry) {
        // Children first: collect them, then drop each subtree.
        let mut stack = vec![d as *const Dentry];
        let mut order: Vec<*const Dentry> = Vec::new();
        while let Some(x) = stack.pop() {
            order.push(x);
            // SAFETY: tree_lock is held; tree members are live.
            let mut c = unsafe { (*x).links().first_child };
            while !c.is_null() {
                stack.push(c);
                // SAFETY: as above.
                c = unsafe { (*c).links().next_sibling };
            }
        }
        // Pin every member while we drop, so a kill cannot free one we
        // still have to visit, then release the pins (which kills the
        // unused ones, leaves first).
        // A member already dead is being killed by its last holder, who
        // waits for tree_lock; it has no children and is unhashed: skip it.
        // SAFETY: live (above).
        order.retain(|&x| unsafe { (*x).lockref().get_not_dead() });
        for &x in order.iter().rev() {
            // SAFETY: pinned above; tree_lock held.
            unsafe {
                self.d_drop_locked(&*x);
                self.dput_locked(&*x);
            }
        }
    }

    /// Unhashes `d`; kills it if unused.
    ///
    /// # Safety
    /// The caller holds `tree_lock`.
    unsafe fn d_drop_locked(&self, d: &Dentry) {
        let g = d.lockref().lock();
        if d.flags.load(Ordering::Relaxed) & HASHED == 0 {
            return;
        }
        if g.count() == 0 {
            self.unhash_and_mark_dead(d, g);
            // SAFETY: tree_lock is held; `d` is dead and unhashed.
            unsafe { self.kill_locked(d) };
            return;
        }
        // In use: unhashed now, killed by its last `dput`.
        self.hash_remove(d, d.name().hash);
        d.flags.fetch_and(!HASHED, Ordering::Relaxed);
        crate::sync::audit::shared_writes(1);
        d.seq.invalidate();
    }

    /// Frees a dead dentry (`dentry_kill`): off its parent's children list,
    /// its inode reference returned, its memory retired through RCU, and
    /// its reference on its parent dropped (which may kill the parent).
    ///
    /// # Safety
    /// The caller holds `tree_lock`; `d` is dead and unhashed.
    unsafe fn kill_locked(&self, d: &Dentry) {
        let mut d = d as *const Dentry;
        loop {
            // SAFETY: `d` is dead but not yet retired.
            let dr = unsafe { &*d };
            debug_assert!(dr.flags.load(Ordering::Relaxed) & ON_LRU == 0, "marked dead while on the LRU");
            let parent = dr.parent.load(Ordering::Relaxed);
            // SAFETY: tree_lock is held.
            unsafe { self.unlink_child(&*parent, dr) };
            let inode = dr.inode.swap(ptr::null_mut(), Ordering::Relaxed);
            Self::alias_del(inode, dr);
            self.counters.add_dentry(-1, inode.is_null());
            if !inode.is_null() {
                // SAFETY: the dentry owned this reference.
                unsafe { self.iput(inode) };
            }
            let name = dr.name.load(Ordering::Relaxed);
            #[cfg(loom)]
            self.rcu.poison_after_grace_period(&dr.freed);
            // SAFETY: unhashed and off the tree: only RCU readers that found
            // it earlier can see it, and they are waited out.
            unsafe {
                self.rcu.retire_box(name);
                self.rcu.retire_box(d as *mut Dentry);
            }
            // Drop the reference on the parent.
            // SAFETY: the child's reference kept the parent live.
            if !self.put_or_mark_dead(unsafe { &*parent }) {
                return;
            }
            d = parent;
        }
    }

    /// Drops a reference through `put_or_lock`: not the last one, or the
    /// last one of a hashed dentry (which stays cached, unused, on the LRU),
    /// returns `false`. The last one of an unhashed dentry marks it dead and
    /// returns `true`: the caller must kill it under `tree_lock`. No window:
    /// the last reference is given up only under `d_lock`.
    fn put_or_mark_dead(&self, d: &Dentry) -> bool {
        match d.lockref().put_or_lock() {
            None => false,
            Some(g) => self.retain_or_mark_dead(d, g),
        }
    }

    /// The last reference's fate (`retain_dentry`), decided under `d_lock`
    /// (`g`) with the count at one: a hashed dentry stays cached at count
    /// zero, on the LRU; an unhashed one is marked dead, and `true` tells
    /// the caller to kill it under `tree_lock`.
    fn retain_or_mark_dead(&self, d: &Dentry, mut g: LockrefGuard<'_>) -> bool {
        debug_assert_eq!(g.count(), 1);
        if d.flags.load(Ordering::Relaxed) & (HASHED | ROOT) != 0 {
            g.set_count(0);
            self.lru_add_locked(d, &g);
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
                let _t = self.tree_lock.lock();
                // SAFETY: tree_lock held; dead and unhashed.
                unsafe { self.kill_locked(d) };
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
                let mut g = d.lockref().lock();
                if g.count() != 0 {
                    return; // revived, or already killed (DEAD)
                }
                // Ours again, to decide like any last reference.
                g.set_count(1);
                g
            }
            // The lock was held, or lost races: the locked path.
            None => match d.lockref().put_or_lock() {
                None => return,
                Some(g) => g,
            },
        };
        if self.retain_or_mark_dead(d, g) {
            let _t = self.tree_lock.lock();
            // SAFETY: tree_lock held; dead and unhashed.
            unsafe { self.kill_locked(d) };
        }
    }

    /// # Safety
    /// The caller holds `tree_lock` and a reference on `d`.
    unsafe fn dput_locked(&self, d: &Dentry) {
        if self.put_or_mark_dead(d) {
            // SAFETY: tree_lock held (caller); dead and unhashed.
            unsafe { self.kill_locked(d) };
        }
    }

    /// Records a rename the filesystem just made (`d_move`). `src` is the
    /// dentry of the old name; `dst` that of the new name (negative or not).
    /// The caller holds the directory locks of both parents.
    pub fn d_move(&self, src: &Dentry, new_parent: &Dentry, new_name: &[u8], dst: &Dentry, exchange: bool) {
        let _t = self.tree_lock.lock();
        let _w = self.rename_lock.write();
        if exchange {
            let (sp, sn) = (src.parent(), src.name().bytes.clone());
            // SAFETY: tree_lock is held.
            unsafe {
                self.rehash(src, new_parent, new_name);
                self.rehash(dst, sp, &sn);
            }
            return;
        }
        if !ptr::eq(src, dst) {
            // SAFETY: tree_lock is held.
            unsafe { self.invalidate_locked(dst) };
        }
        // SAFETY: tree_lock is held.
        unsafe { self.rehash(src, new_parent, new_name) };
    }

    /// Moves `d` to `name` under `parent`.
    ///
    /// # Safety
    /// The caller holds `tree_lock` and the rename lock's write section.
    unsafe fn rehash(&self, d: &Dentry, parent: &Dentry, name: &[u8]) {
        // The new parent's reference first: a get may take the parent's
        // d_lock, which comes before the child's.
        let old_parent = d.parent.load(Ordering::Relaxed);
        let moves = !ptr::eq(old_parent, parent);
        if moves {
            parent.lockref().get();
        }
        let g = d.lockref().lock();
        let old_name = d.name.load(Ordering::Relaxed);
        let hashed = d.flags.load(Ordering::Relaxed) & HASHED != 0;
        if hashed {
            // SAFETY: the old name is live until retired below.
            self.hash_remove(d, unsafe { (*old_name).hash });
        }
        let hash = name_hash(parent, name);
        d.seq.write_begin();
        let new_name = Box::into_raw(Box::new(Name { hash, bytes: name.into() }));
        d.name.store(new_name, Ordering::Release);
        if moves {
            // SAFETY: tree_lock is held.
            unsafe {
                self.unlink_child(&*old_parent, d);
                self.link_child(parent, d);
            }
            d.parent.store(parent as *const Dentry as *mut Dentry, Ordering::Release);
        }
        d.flags.fetch_or(HASHED, Ordering::Relaxed);
        crate::sync::audit::shared_writes(1);
        d.seq.write_end();
        self.hash_insert(d, hash);
        drop(g);
        // SAFETY: no longer reachable from the dentry; readers that loaded
        // it are waited out.
        unsafe { self.rcu.retire_box(old_name) };
        if moves {
            // SAFETY: tree_lock held; `d` held the reference we drop.
            unsafe { self.dput_locked(&*old_parent) };
        }
    }

    /// The path of `d` from the root (`d_path`), read under the rename
    /// seqlock so that a concurrent rename cannot give a mix of two paths;
    /// `None` for an unhashed dentry (a removed name).
    pub fn d_path(&self, d: &Dentry) -> Option<Vec<u8>> {
        loop {
            let _g = self.rcu.read_lock();
            let Some(s) = self.rename_lock.seqcount().read_begin_spin() else {
                drop(self.rename_lock.read_locked());
                continue;
            };
            let mut comps: Vec<&[u8]> = Vec::new();
            let mut cur = d;
            let mut live = true;
            while !cur.is_root() {
                if !cur.is_hashed() {
                    live = false;
                    break;
                }
                comps.push(&cur.name().bytes);
                cur = cur.parent();
            }
            let mut path = Vec::new();
            for c in comps.iter().rev() {
                path.push(b'/');
                path.extend_from_slice(c);
            }
            if self.rename_lock.read_retry(s) {
                continue;
            }
            if !live {
                return None;
            }
            if path.is_empty() {
                path.push(b'/');
            }
            return Some(path);
        }
    }

    /// The paths of the cached, hashed dentries that name `inode` (its
    /// aliases: hard links), sorted.
    pub fn alias_paths(&self, inode: &Inode) -> Vec<Vec<u8>> {
        let _g = self.rcu.read_lock();
        let ds: Vec<usize> = inode.aliases.lock().clone();
        // SAFETY: a dentry on an inode's alias list is live until it leaves
        // the list (kill, d_delete), and it is freed only through RCU, whose
        // read section we are in.
        let mut out: Vec<Vec<u8>> =
            ds.into_iter().filter_map(|d| self.d_path(unsafe { &*(d as *const Dentry) })).collect();
        out.sort();
        out
    }

    /// Is `anc` an ancestor of `d` (or `d` itself)? Reads the parent chain
    /// under RCU. Exact when the caller holds the rename mutex, so the tree's
    /// shape above both cannot change (a cross-directory rename, a mount);
    /// a same-directory rename asks only whether its source is the directory
    /// itself or above it, which no concurrent rename can change, since
    /// moving the source needs its directory's lock, held by the caller.
    pub fn is_ancestor(&self, anc: &Dentry, d: &Dentry) -> bool {
        let _g = self.rcu.read_lock();
        let mut cur = d;
        loop {
            if ptr::eq(cur, anc) {
                return true;
            }
            if cur.is_root() {
                return false;
            }
            cur = cur.parent();
        }
    }

    /// Kills every unused dentry (like dropping caches), leaves first.
    pub fn shrink_all(&self) {
        // The superblock list first (see the lock table): no superblock dies
        // while we walk its tree.
        let supers = self.supers.lock();
        let _t = self.tree_lock.lock();
        for &sb in supers.iter() {
            // SAFETY: superblocks on the list are live, and their roots.
            let root = unsafe { (*(sb as *const Super)).root.load(std::sync::atomic::Ordering::Relaxed) };
            // SAFETY: tree_lock is held; the root is live (above).
            unsafe { self.shrink_tree_locked(root as *const Dentry) };
        }
    }

    /// Checks the cache's structural invariants, stopping updates while it
    /// runs (the superblock list, `tree_lock`, then the lru lock): every
    /// dentry on the LRU is live, flagged `ON_LRU`, and in some superblock's
    /// tree; the list's links agree both ways; a dead dentry still in the
    /// tree (its last holder waits for `tree_lock` to free it) is unhashed
    /// and off the LRU; every hashed dentry is found in its hash chain; the
    /// live-dentry counter equals the tree's size. Returns the first
    /// violation found. A debugging aid for tests and bug reports.
    pub fn check_invariants(&self) -> Result<(), String> {
        use crate::sync::lockref::DEAD;
        let supers = self.supers.lock();
        let _t = self.tree_lock.lock();
        let mut tree = std::collections::HashSet::new();
        for &sb in supers.iter() {
            // SAFETY: superblocks on the list are live, and their roots.
            let root = unsafe { (*(sb as *const Super)).root.load(std::sync::atomic::Ordering::Relaxed) };
            let mut stack = vec![root as *const Dentry];
            while let Some(x) = stack.pop() {
                tree.insert(x as usize);
                // SAFETY: tree members are live while tree_lock is held
                // (they are freed only by `kill_locked`, under it).
                let d = unsafe { &*x };
                let f = d.flags.load(Ordering::Relaxed);
                if d.lockref().count_hint() == DEAD && f & (HASHED | ON_LRU) != 0 {
                    return Err(format!("dead dentry {x:p} still hashed or on the LRU (flags {f:#x})"));
                }
                if f & HASHED != 0 && f & ROOT == 0 {
                    let name = d.name();
                    let mut p = self.bucket(name.hash).head.load(Ordering::Acquire);
                    while !p.is_null() && !ptr::eq(p, d) {
                        // SAFETY: chain members are live (tree_lock held).
                        p = unsafe { (*p).next.load(Ordering::Acquire) };
                    }
                    if p.is_null() {
                        return Err(format!("hashed dentry {x:p} missing from its hash chain"));
                    }
                }
                // SAFETY: tree_lock held.
                let mut c = unsafe { d.links().first_child };
                while !c.is_null() {
                    // SAFETY: as above.
                    if !ptr::eq(unsafe { (*c).parent.load(Ordering::Relaxed) }, d) {
                        return Err(format!("dentry {c:p} on the children list of {x:p}, not its parent"));
                    }
                    stack.push(c);
                    // SAFETY: as above.
                    c = unsafe { (*c).links().next_sibling };
                }
            }
        }
        if self.counters.dentries() != tree.len() as i64 {
            return Err(format!(
                "the counter says {} dentries, the tree holds {}",
                self.counters.dentries(),
                tree.len()
            ));
        }
        let lru = self.lru.lock();
        let mut prev: *const Dentry = ptr::null();
        let mut p = lru.head;
        let mut n = 0;
        while !p.is_null() {
            if !tree.contains(&(p as usize)) {
                return Err(format!("dentry {p:p} on the LRU is not in any tree (killed, or freed)"));
            }
            // SAFETY: in the tree, hence live (above).
            let d = unsafe { &*p };
            if d.flags.load(Ordering::Relaxed) & ON_LRU == 0 || d.lockref().count_hint() == DEAD {
                return Err(format!("dentry {p:p} on the LRU is dead or not flagged ON_LRU"));
            }
            // SAFETY: the lru lock is held.
            let l = unsafe { &*d.lru.get() };
            if !ptr::eq(l.prev, prev) {
                return Err(format!("broken LRU back link at {p:p}"));
            }
            n += 1;
            if n > tree.len() {
                return Err("the LRU has a cycle".into());
            }
            prev = p;
            p = l.next;
        }
        if !ptr::eq(lru.tail, prev) {
            return Err("broken LRU tail".into());
        }
        Ok(())
    }

    /// Runs `f` on the live superblock serving `fs`, if any, with the
    /// superblock list locked: it cannot be torn down meanwhile.
    pub fn with_super<R>(&self, fs: *const (), f: impl FnOnce(&Super) -> R) -> Option<R> {
        let supers = self.supers.lock();
        for &sb in supers.iter() {
            // SAFETY: superblocks on the list are live.
            let sbr = unsafe { &*(sb as *const Super) };
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
        let ip = sb.itable.find_hold(ino)?;
        // SAFETY: `find_hold` took a reference.
        let found = self.live_alias(unsafe { &*ip });
        // SAFETY: the reference `find_hold` took.
        unsafe { self.iput(ip) };
        found
    }

    /// The in-core inode `ino` of `sb` with its attributes read again from
    /// the filesystem, if it is in core.
    pub fn refresh_inode(&self, sb: &Super, ino: crate::fs::Ino) {
        if let Some(ip) = sb.itable.find_hold(ino) {
            // SAFETY: we hold a reference.
            unsafe {
                (*ip).refresh(&*sb.fs);
                self.iput(ip);
            }
        }
    }

    /// Drops every cached name of `sb` (lost events).
    pub fn invalidate_super(&self, sb: &Super) {
        let root = sb.root.load(std::sync::atomic::Ordering::Relaxed) as *const Dentry;
        let _t = self.tree_lock.lock();
        // SAFETY: the caller holds the superblock list (`with_super`), so
        // the root is live; tree_lock is held.
        let kids: Vec<*const Dentry> = unsafe {
            let mut v = Vec::new();
            let mut c = (*root).links().first_child;
            while !c.is_null() {
                v.push(c);
                c = (*c).links().next_sibling;
            }
            v
        };
        for c in kids {
            // SAFETY: tree_lock held; children of a live root are live
            // until killed under tree_lock, which we hold.
            unsafe { self.invalidate_locked(&*c) };
        }
    }

    /// Kills every unused dentry under `root`, leaves first.
    ///
    /// # Safety
    /// The caller holds `tree_lock`; `root` is live.
    unsafe fn shrink_tree_locked(&self, root: *const Dentry) {
        loop {
            let mut victims = Vec::new();
            let mut stack = vec![root];
            while let Some(x) = stack.pop() {
                // SAFETY: tree_lock held; tree members are live.
                let mut c = unsafe { (*x).links().first_child };
                while !c.is_null() {
                    // SAFETY: as above.
                    let cr = unsafe { &*c };
                    // SAFETY: as above.
                    if unsafe { cr.links().first_child.is_null() } {
                        if cr.lockref().count_hint() == 0 {
                            victims.push(c);
                        }
                    } else {
                        stack.push(c);
                    }
                    // SAFETY: as above.
                    c = unsafe { cr.links().next_sibling };
                }
            }
            let mut killed = 0;
            for v in victims {
                // SAFETY: live: only this thread kills (tree_lock held), and
                // a count of zero means no child reference either.
                let d = unsafe { &*v };
                let g = d.lockref().lock();
                if g.count() != 0 {
                    continue; // revived, or being killed by its last holder
                }
                self.unhash_and_mark_dead(d, g);
                // SAFETY: tree_lock held; dead and unhashed.
                unsafe { self.kill_locked(d) };
                killed += 1;
            }
            if killed == 0 {
                return;
            }
        }
    }

    /// Tears down a superblock whose last mount is gone (`kill_super`,
    /// `shrink_dcache_for_umount`): no handle, file or mount uses any of its
    /// dentries, so every one is unused; they go, then its root, then its
    /// inodes, and the superblock itself after a grace period (RCU walkers
    /// that crossed into it earlier may still read it).
    pub fn kill_super(&self, sb: *const Super) {
        // Off the list first (under its lock): `with_super` users finish
        // before, and no new one finds it.
        self.supers.lock().retain(|&x| x != sb as usize);
        // SAFETY: the caller dropped the last mount; nothing else frees it.
        let sbr = unsafe { &*sb };
        let root = sbr.root.load(std::sync::atomic::Ordering::Relaxed) as *const Dentry;
        {
            let _t = self.tree_lock.lock();
            // SAFETY: tree_lock held; the root is pinned until below.
            unsafe { self.shrink_tree_locked(root) };
            // SAFETY: as above.
            let r = unsafe { &*root };
            // SAFETY: tree_lock held.
            assert!(unsafe { r.links().first_child.is_null() }, "a dentry of an unmounted filesystem is in use");
            r.seq.invalidate();
            let inode = r.inode.swap(ptr::null_mut(), Ordering::Relaxed);
            Self::alias_del(inode, r);
            self.counters.add_dentry(-1, false);
            // SAFETY: the root owned this reference; the root is off every
            // list and only RCU readers can still see it.
            unsafe {
                self.iput(inode);
                self.rcu.retire_box(r.name.load(Ordering::Relaxed));
                self.rcu.retire_box(root as *mut Dentry);
            }
        }
        sbr.itable.clear(&self.counters, &self.rcu);
        // SAFETY: off the list, with no dentry, inode or mount left.
        unsafe { self.rcu.retire_box(sb as *mut Super) };
    }
}

impl Drop for Dcache {
    /// Teardown (`shrink_dcache_for_umount`): the mounts go first (each
    /// filesystem mounted besides the root is killed with its last mount);
    /// then nothing else can reach the cache, so every dentry left goes
    /// without locks, then every inode.
    fn drop(&mut self) {
        self.umount_all();
        for sb in std::mem::take(&mut *self.supers.lock()) {
            // SAFETY: teardown: we own every superblock left.
            let sb = unsafe { Box::from_raw(sb as *mut Super) };
            let mut stack = vec![sb.root.load(std::sync::atomic::Ordering::Relaxed) as *const Dentry];
            while let Some(x) = stack.pop() {
                // SAFETY: teardown: we own every dentry in the tree.
                let d = unsafe { Box::from_raw(x as *mut Dentry) };
                // SAFETY: we own the whole tree; nobody else touches the links.
                let mut c = unsafe { (*d.tree.get()).first_child };
                while !c.is_null() {
                    stack.push(c);
                    // SAFETY: as above; `c` is freed only when popped.
                    c = unsafe { (*(*c).tree.get()).next_sibling };
                }
                let inode = d.inode.load(Ordering::Relaxed);
                self.counters.add_dentry(-1, inode.is_null());
                // SAFETY: the name is owned by the dentry.
                drop(unsafe { Box::from_raw(d.name.load(Ordering::Relaxed)) });
            }
            sb.itable.clear(&self.counters, &self.rcu);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
