//! The dentry: its layout (seed 002), flags, name, and counted references.

use crate::sync::atomic::UnsafeCell;
use std::ptr;

use super::Dcache;
use crate::inode::{Inode, Super};
use crate::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use crate::sync::index::{Index, Indexed};
use crate::sync::Lockref;

/// An immutable name, with its hash (which covers the parent too), in one
/// block: the hash, the length, then the bytes (16 bytes for a name of up
/// to 7). A dentry holds it by a thin pointer to its head ([`NameHead`]).
/// A name of up to [`INLINE_NAME`] bytes given at the dentry's creation is
/// kept inside the dentry's first line (Linux's `d_iname`), where the
/// lookup that compares it already reads; longer ones, and every name a
/// rename gives, are blocks of their own. A rename swaps in a new block
/// and retires the old name through RCU (an inline one is left in place,
/// unchanged, and goes with the dentry).
#[repr(C)]
pub(crate) struct Name {
    pub hash: u64,
    len: u8,
    pub bytes: [u8],
}

/// The head of a [`Name`], what a thin pointer to one points at.
#[repr(C)]
pub(crate) struct NameHead {
    hash: u64,
    len: u8,
}

impl Name {
    /// Where the bytes start: right after the length (`repr(C)`).
    const BYTES_AT: usize = std::mem::offset_of!(NameHead, len) + 1;
    /// Where the word that [`key`](Self::key) reads starts: the length.
    const KEY_AT: usize = std::mem::offset_of!(NameHead, len);

    /// The word after the hash: the length in its low byte, then the
    /// first 7 bytes of the name, zero past its end. For a name of at most
    /// 7 bytes it is the whole name: equal to
    /// [`crate::hash::short_key`] of the same bytes, and to nothing made
    /// from other bytes or another length, so one compare of words
    /// compares the names (Linux's `dentry_cmp` compares a word at a time
    /// too). The walk's scan makes the key of the name it looks for as it
    /// hashes it.
    #[inline(always)]
    pub fn key(&self) -> u64 {
        debug_assert!(std::mem::size_of_val(self) >= Self::KEY_AT + 8);
        // SAFETY: every name's block is at least 16 bytes (`layout` pads
        // 9 bytes or more to 8), within this reference, 8-aligned, and
        // `write_at` initialized the word.
        unsafe { (self as *const Name).cast::<u8>().add(Self::KEY_AT).cast::<u64>().read() }
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(Self::BYTES_AT + len, std::mem::align_of::<NameHead>())
            .expect("a name's size")
            .pad_to_align()
    }

    /// A new name, freed by [`free`](Self::free) or [`retire`](Self::retire).
    /// Names are at most NAME_MAX (255) bytes (the VFS refuses longer).
    pub fn alloc(hash: u64, bytes: &[u8]) -> *mut NameHead {
        assert!(bytes.len() <= u8::MAX as usize, "a name longer than NAME_MAX");
        let layout = Self::layout(bytes.len());
        // SAFETY: a layout of at least one byte (the head's).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: a fresh block of `layout`.
        unsafe { Self::write_at(p, hash, bytes) }
        // SAFETY: just made, by `alloc`.
        debug_assert_eq!(std::mem::size_of_val(unsafe { Self::from_thin(p.cast()) }), layout.size());
        p.cast()
    }

    /// Writes a name at `p`.
    ///
    /// # Safety
    /// `p` is writable for `layout(bytes.len())` and aligned for the head,
    /// and no one reads it meanwhile.
    unsafe fn write_at(p: *mut u8, hash: u64, bytes: &[u8]) {
        // SAFETY: the caller's contract; the block is at least 16 bytes
        // (`pad_to_align` of 9 or more), 8-aligned: the hash at 0, the word
        // at `KEY_AT` (8), then the bytes from `BYTES_AT`, written after
        // that word so that its zeroes do not overwrite them.
        unsafe {
            // Field by field, with the word after the hash zeroed first: a
            // write of the head as a struct would leave its padding (where
            // a short name's bytes go) uninitialized, and `key` reads that
            // word whole.
            p.add(std::mem::offset_of!(NameHead, hash)).cast::<u64>().write(hash);
            p.add(Self::KEY_AT).cast::<u64>().write(0);
            p.add(Self::KEY_AT).write(bytes.len() as u8);
            ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(Self::BYTES_AT), bytes.len());
        }
    }

    /// The name whose head `p` is.
    ///
    /// # Safety
    /// `p` came from [`alloc`](Self::alloc) and stays live for `'a`.
    #[inline]
    pub unsafe fn from_thin<'a>(p: *const NameHead) -> &'a Name {
        // SAFETY: the caller's contract; the length is the head's, and the
        // fat pointer is made from the block's own pointer, so it covers
        // the bytes.
        unsafe {
            let len = (*p).len as usize;
            &*(ptr::slice_from_raw_parts(p.cast::<u8>(), len) as *const Name)
        }
    }

    /// Frees a name now.
    ///
    /// # Safety
    /// `p` came from [`alloc`](Self::alloc), is freed once, and no one can
    /// read it any more.
    pub unsafe fn free(p: *mut NameHead) {
        // SAFETY: the caller's contract; the layout is the one it was
        // allocated with.
        unsafe {
            let len = (*p).len as usize;
            std::alloc::dealloc(p.cast(), Self::layout(len));
        }
    }

    /// Frees a name after a grace period of `rcu`.
    ///
    /// # Safety
    /// As [`free`](Self::free), except that readers that found it before
    /// this call may still read it (they are waited out).
    pub unsafe fn retire(rcu: &crate::sync::Rcu, p: *mut NameHead) {
        unsafe fn free_name(p: *mut ()) {
            // SAFETY: `retire`'s contract, once the grace period is over.
            unsafe { Name::free(p.cast()) }
        }
        // SAFETY: the caller's contract.
        unsafe {
            let size = Self::layout((*p).len as usize).size();
            rcu.retire_with(p.cast(), free_name, size);
        }
    }
}

// ---- flags (`Dentry::flags`) ----
//
// | bit(s) | flag         | changed under                 | meaning |
// |--------|--------------|-------------------------------|---------|
// | 0      | `HASHED`     | d_lock (and the parent's index home lock) | in its parent's index: lookups find it |
// | 1      | `ROOT`       | fixed at creation             | a superblock's root (its own parent) |
// | 2      | `PACKED`     | fixed at creation             | the count lives in line 0 (`packed` layout) |
// | 3      | `REFERENCED` | none (a hint; set only where clear) | looked up since the shrinker last passed |
// | 4      | `ON_LRU`     | d_lock and its LRU shard's lock | on an LRU shard's list |
// | 5      | `MOUNTED`    | the namespace lock            | something is mounted here |
// | 6      | `NEG_LRU`    | with `ON_LRU`                 | on its shard's negative list (set iff the dentry is negative while `ON_LRU`) |
// | 7      | `COMPLETE`   | set under d_lock before the inode is published; cleared by anyone, before the index change that calls for it | a directory all of whose names have hashed dentries here: a miss in its index is an answer (ENOENT) |
// | 8..13  | LRU shard    | with `ON_LRU`                 | which shard's list it is on |
// | 14     | `ABSENT_HELD` | d_lock                       | the directory's set of absent names holds a reference on it, and a list of such directories holds the directory (`absent`) |

pub const HASHED: u32 = 1;
pub const ROOT: u32 = 2;
/// This dentry keeps its count in line 0 (the `packed` layout).
pub const PACKED: u32 = 4;
/// Looked up since the shrinker last passed (second chance). Set only
/// where clear (test, then set), so a hot dentry costs no store.
pub const REFERENCED: u32 = 8;
/// On an LRU list (changed under the dentry's d_lock and the list's lock).
pub const ON_LRU: u32 = 16;
/// Something is mounted here (changed under the namespace lock).
pub const MOUNTED: u32 = 32;
/// On its LRU shard's list of negative dentries rather than its list of
/// positive ones; changes with `ON_LRU`, or where the dentry turns positive
/// or negative while on a list (`Dcache::lru_flip_locked`).
pub const NEG_LRU: u32 = 64;
/// A directory whose every name in its filesystem has a hashed, positive
/// dentry in its index (Solaris's DNLC "complete directory"; ramfs, whose
/// pinned dentries are the directory, relies on the same): a miss in its
/// index is the answer, ENOENT, without asking the filesystem or leaving a
/// negative dentry. Set only where the cache sees every change of the
/// directory: a memfs bound to this superblock, for its empty root and for
/// a directory that a mkdir just made, in `d_instantiate` before the
/// inode is published. Cleared, by whoever does it and before the index
/// changes, wherever a positive child leaves the index while its name
/// stays (the shrinker, `drop_caches`, an invalidation), where the index
/// closes, and where the dentry turns negative. Never set again on a
/// dentry once cleared while it stays positive. A reader that misses in
/// the index (its slot loads are Acquire, the removal a Release) then
/// loads this flag and sees it cleared if the name it missed was dropped.
pub const COMPLETE: u32 = 128;
/// This directory's set of absent names holds a counted reference on it,
/// and one of the cache's lists of such directories holds its pointer
/// (see `absent`). Changed under d_lock; whenever d_lock is free, a
/// non-empty set implies the flag.
pub const ABSENT_HELD: u32 = 1 << 14;
pub(crate) const LRU_SHARD_SHIFT: u32 = 8;
pub(crate) const LRU_SHARD_MASK: u32 = 0x3f << LRU_SHARD_SHIFT;

/// Links of an LRU shard's list, touched only under that shard's lock.
pub(super) struct LruLinks {
    pub prev: *const Dentry,
    pub next: *const Dentry,
    /// When it joined the tail (the shard's clock): which of a shard's two
    /// lists holds the older head.
    pub stamp: u64,
}

/// A dentry. The first cache line holds what the RCU lookup reads; the
/// reference count lives on the next one (seed 002's `split` layout), so
/// that reference changes by `rcuwalk` and `lockref` walkers do not
/// invalidate the line that lookups of the same name read. The `packed`
/// layout (before seed 002) uses the count slot in line 0 instead; the
/// `PACKED` flag, fixed at allocation, says which slot is live.
///
/// A directory's children are in its own index (`children`), read by
/// lookups under RCU: no global hash, no children list, no tree lock.
#[repr(C, align(64))]
pub(crate) struct Dentry {
    // ---- cache line 0: read by RCU lookup ----
    pub seq: crate::sync::SeqCount,
    pub flags: AtomicU32,
    pub parent: AtomicPtr<Dentry>,
    pub name: AtomicPtr<NameHead>,
    pub inode: AtomicPtr<Inode>,
    /// The children, by name (a directory's; empty for others).
    pub children: Index<Dentry>,
    /// The count in the `packed` layout.
    pub(super) lockref_packed: Lockref,
    /// The name given at creation if it is short (a [`Name`] of up to
    /// [`INLINE_NAME`] bytes, which `name` then points at), else unused.
    /// Written once, before the dentry is shared. In a cell, like every
    /// other field interior-mutable, so that a pointer derived from a
    /// shared reference may free the dentry: under Stacked Borrows a shared
    /// reference grants write access only to interior-mutable bytes (Miri
    /// caught plain padding here).
    iname: std::cell::UnsafeCell<[u64; 2]>,
    // ---- cache line 1: written by reference changes and updates ----
    /// The count in the `split` layout.
    pub(super) lockref_split: Lockref,
    pub(super) lru: UnsafeCell<LruLinks>,
    /// The next dentry naming the same inode (its alias list, headed in the
    /// inode and under the inode's alias lock).
    pub(super) alias_next: UnsafeCell<*const Dentry>,
    /// The superblock (fixed at allocation; it outlives its dentries). Read
    /// where a walk starts or crosses a mount, at a root, whose count is
    /// rarely the one that changes.
    pub(super) sb: AtomicPtr<Super>,
    /// Names its filesystem said are absent from this directory, cached
    /// without a dentry each (`absent`: a cached miss in 16 to 264 bytes
    /// and a slot, not a 128-byte negative dentry). Empty for others.
    pub(super) absent: Index<NameHead>,
    /// Explicit (atomic) tail, so the struct has no implicit padding: see
    /// `iname` (Miri caught the tail padding too).
    pub(super) _tail: std::sync::atomic::AtomicU64,
    /// Set by the loom RCU stand-in once the grace period that began at
    /// this dentry's kill has ended, when the real build may free it: every
    /// touch checks it (`check_live`).
    #[cfg(loom)]
    pub(crate) freed: loom::sync::atomic::AtomicBool,
    /// Under loom: creation order, the stand-in for the address in lock
    /// orders (a model must run the same way in every execution, and heap
    /// addresses differ between executions).
    #[cfg(loom)]
    id: usize,
}

#[cfg(loom)]
static NEXT_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

// SAFETY: the atomics are shared freely; `lru` is touched only under its
// shard's lock.
unsafe impl Send for Dentry {}
// SAFETY: as above.
unsafe impl Sync for Dentry {}

#[cfg(not(loom))]
const _: () = assert!(
    std::mem::offset_of!(Dentry, lockref_split) == 64
        && std::mem::offset_of!(Dentry, lockref_packed) < 64
        && std::mem::size_of::<Dentry>() == 128
        && std::mem::offset_of!(Dentry, iname) + 16 <= 64
);

/// The longest name kept inside its dentry (16 bytes of line 0: the hash,
/// the length and 7 bytes).
pub(crate) const INLINE_NAME: usize = 7;

impl Indexed for NameHead {
    /// The hash it was made with (immutable): a directory's set of absent
    /// names is an index of bare names.
    fn index_hash(&self) -> u64 {
        self.hash
    }
}

impl Indexed for Dentry {
    /// The hash of the name it was inserted under: stable while it is in an
    /// index, since a rename changes the name only under both home locks
    /// and removes it from its old index before letting them go.
    fn index_hash(&self) -> u64 {
        self.name().hash
    }

    /// Folded: a directory's names share their tags' top bits with their
    /// homes, so that in a table of 2^13 homes or more, prefix tags made
    /// most probes for an absent name meet another name's tag, and only a
    /// probe that meets none is an answer in a complete directory
    /// (`misses_cleanly_h`): 14% of misses in a directory of 10,000 names
    /// and 36-47% from 50,000 went on to the filesystem and left a negative
    /// dentry each. A resize reads its entries' hashes instead (prefetched).
    const FOLDED_TAGS: bool = true;
}

impl Dentry {
    /// A new dentry named `name` (whose hash is `hash`), not yet shared.
    pub(super) fn new(
        flags: u32,
        parent: *const Dentry,
        hash: u64,
        name: &[u8],
        inode: *const Inode,
        sb: *const Super,
        lockref: fn() -> Lockref,
    ) -> *mut Dentry {
        let d = Box::into_raw(Box::new(Dentry {
            seq: crate::sync::SeqCount::new(),
            flags: AtomicU32::new(flags),
            parent: AtomicPtr::new(parent as *mut Dentry),
            name: AtomicPtr::new(ptr::null_mut()),
            inode: AtomicPtr::new(inode as *mut Inode),
            children: Index::new(),
            lockref_packed: lockref(),
            iname: std::cell::UnsafeCell::new([0; 2]),
            lockref_split: lockref(),
            lru: UnsafeCell::new(LruLinks { prev: ptr::null(), next: ptr::null(), stamp: 0 }),
            alias_next: UnsafeCell::new(ptr::null()),
            sb: AtomicPtr::new(sb as *mut Super),
            absent: Index::new(),
            _tail: std::sync::atomic::AtomicU64::new(0),
            #[cfg(loom)]
            freed: loom::sync::atomic::AtomicBool::new(false),
            #[cfg(loom)]
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }));
        let n = if name.len() <= INLINE_NAME {
            // SAFETY: not shared yet; the cell holds 16 bytes, 8-aligned,
            // which is `Name::layout` of up to 7 bytes.
            unsafe {
                let p = std::cell::UnsafeCell::raw_get(ptr::addr_of!((*d).iname)).cast::<u8>();
                Name::write_at(p, hash, name);
                p.cast::<NameHead>()
            }
        } else {
            Name::alloc(hash, name)
        };
        // Relaxed: published with the dentry (by the index's Release).
        // SAFETY: not shared yet.
        unsafe { (*d).name.store(n, Ordering::Relaxed) };
        d
    }

    /// Frees `n`, a name this dentry held, at once, unless it is the
    /// dentry's own inline name (which goes with the dentry).
    ///
    /// # Safety
    /// As [`Name::free`].
    pub(super) unsafe fn free_name(&self, n: *mut NameHead) {
        if !self.is_inline(n) {
            // SAFETY: the caller's contract; a block of its own.
            unsafe { Name::free(n) }
        }
    }

    /// Frees `n`, a name this dentry held, after a grace period of `rcu`,
    /// unless it is the dentry's own inline name.
    ///
    /// # Safety
    /// As [`Name::retire`].
    pub(super) unsafe fn retire_name(&self, rcu: &crate::sync::Rcu, n: *mut NameHead) {
        if !self.is_inline(n) {
            // SAFETY: the caller's contract; a block of its own.
            unsafe { Name::retire(rcu, n) }
        }
    }

    fn is_inline(&self, n: *mut NameHead) -> bool {
        ptr::eq(n.cast::<u8>(), self.iname.get().cast::<u8>())
    }

    /// The key that orders two dentries' locks (unrelated `d_lock`s, two
    /// children indexes): the address, or under loom the creation order.
    #[inline]
    pub(crate) fn order_key(&self) -> usize {
        #[cfg(loom)]
        return self.id;
        #[cfg(not(loom))]
        return self as *const Dentry as usize;
    }

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

    /// The name. The caller is in an RCU read section, or holds this
    /// dentry's `d_lock` or its name's name lock (a rename swaps names only
    /// under both, and retires the old one through RCU).
    #[inline]
    pub fn name(&self) -> &Name {
        // SAFETY: as the doc says: the name is freed only a grace period
        // after it was replaced, and it is replaced only under the locks.
        unsafe { Name::from_thin(self.name.load(Ordering::Acquire)) }
    }

    /// Starts loading the line of its parent's index where it sits (the
    /// shrinker's next victim, whose unhash then does not wait for it).
    /// `g` keeps the parent and its index's table allocated.
    pub(super) fn prefetch_slot(&self, g: &crate::sync::RcuGuard<'_>) {
        // Relaxed: a hint; a parent changed by a rename meanwhile only
        // loads the wrong line.
        let p = self.parent.load(Ordering::Relaxed);
        if p.is_null() || ptr::eq(p, self) {
            return;
        }
        // SAFETY: a dentry reached under `g` is freed only a grace period
        // after it was killed, and so is any parent it pointed to.
        unsafe { &*p }.children.prefetch(g, self.name().hash);
    }

    #[inline]
    pub fn parent(&self) -> &Dentry {
        // SAFETY: a dentry holds a reference on its parent; a parent reached
        // by an RCU reader is freed only after a grace period.
        unsafe { &*self.parent.load(Ordering::Acquire) }
    }

    /// The superblock of a positive dentry (the directory a lookup or an
    /// update works in), read from its inode rather than from the
    /// dentry's second line, which its children's references write: two
    /// threads creating in one directory would pass that line back and
    /// forth for this read too, while the inode's line that holds it is
    /// one their filesystem reads anyway (a memfs directory's index).
    #[inline]
    pub fn dir_sb(&self) -> &Super {
        self.inode().expect("a positive dentry").sb()
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

    /// Whether a miss in this directory's index is an answer (`COMPLETE`).
    /// The caller has already probed the index (the flag is read after).
    #[inline]
    pub fn is_complete(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & COMPLETE != 0
    }

    /// Clears `COMPLETE` (a name of this directory is about to leave its
    /// index, or may have): before that index change, which publishes it.
    #[inline]
    pub(super) fn set_incomplete(&self) {
        if self.flags.load(Ordering::Relaxed) & COMPLETE != 0 {
            self.flags.fetch_and(!COMPLETE, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn is_dir(&self) -> bool {
        self.inode().is_some_and(|i| i.kind == crate::fs::FileType::Dir)
    }
}

/// Sets `REFERENCED` on `d` unless it is set already: a lookup of a hot
/// dentry stores nothing. The caller keeps `d` allocated (a reference, or
/// an RCU read section).
#[inline]
pub(crate) fn mark_referenced(d: &Dentry) {
    d.check_live();
    if d.flags.load(Ordering::Relaxed) & REFERENCED == 0 {
        d.flags.fetch_or(REFERENCED, Ordering::Relaxed);
        crate::sync::audit::shared_writes(1);
    }
}

/// The hash of `name` under `parent` (see [`crate::hash::name_hash`]; the
/// parent's address is the seed).
#[inline]
pub(crate) fn name_hash(parent: *const Dentry, name: &[u8]) -> u64 {
    crate::hash::name_hash(name_seed(parent), name)
}

/// The seed of the hashes of names under `parent` ([`name_hash`]; a
/// [`PathScan`](crate::hash::PathScan) takes it too).
#[inline(always)]
pub(crate) fn name_seed(parent: *const Dentry) -> u64 {
    // Under loom the parent does not take part: its address differs
    // between a model's executions, and the hash picks paths (index homes,
    // name-lock stripes) that must not.
    #[cfg(loom)]
    let parent = {
        let _ = parent;
        1usize as *const Dentry
    };
    parent as usize as u64
}

pub(crate) use crate::hash::same_name;

/// A counted reference to a dentry (`dget`'d); `dput` on drop.
pub(crate) struct DRef<'a> {
    pub(super) d: &'a Dentry,
    pub(super) dc: &'a Dcache,
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

impl std::ops::Deref for DRef<'_> {
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A name's key, whether the name is a block of its own (long ones, and
    /// every name a rename gives) or kept inline: for names of 1 to 7 bytes
    /// it is the walk's `short_key` of the same bytes and of no other name;
    /// for longer ones it is no short name's key. Fails when the word after
    /// the hash is not zeroed before the bytes go in (garbage past a short
    /// name's end), or when the length is left out of it ("a" and "a\0").
    #[test]
    fn a_names_key_is_its_short_key_and_no_other_names() {
        use crate::hash::short_key;
        let names: Vec<Vec<u8>> = (0..=12usize)
            .flat_map(|n| {
                let a: Vec<u8> = (0..n).map(|i| b'a' + i as u8).collect();
                let mut z = a.clone();
                z.push(0);
                [a, z]
            })
            .collect();
        for bytes in &names {
            // A block of its own, first filled with garbage as a reused one
            // would be.
            let layout = Name::layout(bytes.len());
            // SAFETY: a fresh block of `layout`, freed below.
            let own = unsafe {
                let p = std::alloc::alloc(layout);
                p.write_bytes(0xa5, layout.size());
                Name::write_at(p, 7, bytes);
                p
            };
            // Inline, as a dentry keeps a short one.
            let mut inline = [u64::MAX; 2];
            if bytes.len() <= INLINE_NAME {
                // SAFETY: 16 bytes, 8-aligned: `layout` of up to 7 bytes.
                unsafe { Name::write_at(inline.as_mut_ptr().cast(), 7, bytes) };
            }
            for p in [own, inline.as_mut_ptr().cast::<u8>()] {
                if p != own && bytes.len() > INLINE_NAME {
                    continue;
                }
                // SAFETY: written above.
                let n = unsafe { Name::from_thin(p.cast()) };
                assert_eq!(&n.bytes, &bytes[..]);
                for other in &names {
                    let k = short_key(other);
                    if k != 0 {
                        assert_eq!(n.key() == k, other == bytes, "{bytes:?} against {other:?}");
                    }
                }
            }
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(own, layout) };
        }
    }
}
