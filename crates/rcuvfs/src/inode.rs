//! In-core inodes: the VFS's copy of a filesystem inode's attributes,
//! readable with no lock and no store; and, for memfs, the inode itself.
//!
//! # Two owners
//!
//! Most filesystems keep their own truth and hand the VFS attributes: the
//! VFS then keeps an in-core copy for as long as a dentry or an open file
//! refers to it, and frees it at its last reference (returning the
//! filesystem's lookup count with `FileSystem::forget`). memfs instead keeps
//! its truth *in* in-core inodes, as tmpfs keeps its in the kernel's inodes:
//! its inodes are the VFS's, found by number in one table, so nothing exists
//! twice and nothing needs refreshing after an update. Such an inode lives
//! while it has a link or a VFS reference; the last of the two to go frees
//! it. [`InodeTable::owned`] says which kind a table holds.
//!
//! # Locks
//!
//! | lock / protocol        | protects                                          |
//! |------------------------|---------------------------------------------------|
//! | `Inode::attrs` (seqlock) | every attribute field; writers hold its lock    |
//! | `Inode::refs`' lock (a lockref) | the reference count's transitions to and from zero, and the decision to free (with `nlink` for an owned inode) |
//! | the table's index home locks | a table of copies' ino -> inode index (`sync::index`); an owned table's (`sync::chunk_map`) takes none but to add or drop a chunk's leaf |
//! | `InodeTable::list`'s locks | the superblock's inode list (one lock, or one per shard; see `sync::list_batch`) |
//! | `Inode::times.alias_lock` | the list of dentries that name the inode (`alias_head`, and each dentry's `alias_next`; a leaf) |
//!
//! Order: the dcache's locks (see `dcache`), then `refs`' lock, then an
//! index home lock, then `attrs`' lock; the list's locks and `alias_lock`
//! are leaves. A filesystem's own locks come after all of these (`iget` asks the
//! filesystem for a new inode's symlink target; the last `iput` calls
//! `forget` holding none).
//!
//! # Reading attributes
//!
//! Attributes are atomics written under `attrs`' write section and read
//! under its sequence count ([`Inode::attr`]): a stat of a cached path
//! reads them with relaxed loads, validates the count, and retries a bounded
//! number of times before taking the lock. Nothing is stored.
//!
//! # Lifetime
//!
//! An inode is freed through `call_rcu` of the VFS's RCU domain (memfs's
//! included: memfs is bound to its VFS's domain), because an RCU walker may
//! still be reading it. It leaves its table and the superblock list first.

use crate::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::ptr;
use std::sync::Arc;

use crate::counters::LiveCounters;
use crate::filemap::PageCache;
use crate::fs::{Attr, FileSystem, FileType, Ino, Timespec};
use crate::sync::chunk_map::ChunkMap;
use crate::sync::index::{Index, InsertError, Probe};
use crate::sync::list_batch::{InodeList, Link, ListMode};
use crate::sync::lockref::DEAD;
use crate::sync::shard::{Padded, THREAD_SHARDS};
use crate::sync::{Lockref, Rcu, SeqLock};

/// The three times, as atomics: seconds and nanoseconds apart (one 40-byte
/// block, not three padded 16-byte ones), with a spare byte that holds the
/// inode's alias lock.
#[repr(C)]
struct Times {
    sec: [AtomicI64; 3],
    nsec: [AtomicU32; 3],
    /// The inode's alias lock (the dentries that name it are listed under
    /// it, Linux's `i_lock` over `i_dentry`), in what would be padding.
    alias_lock: crate::sync::RawMutex,
    /// Set by the first stat or open that found the inode in the bound
    /// memfs with no dentry ([`Inode::first_seen`]), in what would be
    /// padding too. Plain std atomic: a hint, part of no protocol.
    seen: std::sync::atomic::AtomicBool,
}

const ATIME: usize = 0;
const MTIME: usize = 1;
const CTIME: usize = 2;

impl Times {
    fn new(a: &Attr) -> Times {
        Times {
            sec: [AtomicI64::new(a.atime.sec), AtomicI64::new(a.mtime.sec), AtomicI64::new(a.ctime.sec)],
            nsec: [AtomicU32::new(a.atime.nsec), AtomicU32::new(a.mtime.nsec), AtomicU32::new(a.ctime.nsec)],
            alias_lock: crate::sync::RawMutex::new(),
            seen: std::sync::atomic::AtomicBool::new(false),
        }
    }
    fn load(&self, k: usize) -> Timespec {
        Timespec { sec: self.sec[k].load(Ordering::Relaxed), nsec: self.nsec[k].load(Ordering::Relaxed) }
    }
    fn store(&self, k: usize, t: Timespec) {
        self.sec[k].store(t.sec, Ordering::Relaxed);
        self.nsec[k].store(t.nsec, Ordering::Relaxed);
    }
}

/// `Inode::data` when the filesystem keeps a regular file's data without a
/// page cache (set once, like a page cache). Never a real cache's address
/// (a `PageCache` is 128-byte aligned; this is the dangling address of that
/// alignment, which no allocation returns).
fn no_page_cache() -> *mut PageCache {
    ptr::NonNull::<PageCache>::dangling().as_ptr()
}

/// The key of an inode number in a table of copies (a multiplicative mix,
/// so that the index's homes, its top bits, spread whatever numbers the
/// filesystem hands out).
#[inline]
pub(crate) fn ino_hash(ino: Ino) -> u64 {
    let x = ino.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x ^ (x >> 29)).wrapping_mul(0x94d0_49bb_1331_11eb) | 1
}

/// A read's ticket: the attributes' version when it began (a version
/// moves by 2 a write section), in 16 bits.
#[inline]
fn ticket(version: u32) -> u16 {
    (version >> 1) as u16
}

/// How far behind the version the stored answer's ticket is raised to
/// before every comparison (between them it may fall one section further),
/// and the age (in tickets: two versions each) past which a read is
/// refused: a quarter of the 16-bit range, so that every ticket compared
/// lies within half of it.
const TICKET_WINDOW: u16 = 0x4000;

/// Set in the address of an inode's cached symlink target (a `Box`, so
/// 8-aligned) when the target is not a valid path: the RCU walk then leaves
/// it to REF-walk ([`Inode::walkable_link`]).
const LINK_UNWALKABLE: usize = 1;

/// An in-core inode.
///
/// Laid out by hand (`repr(C)`, 64-byte aligned, 192 bytes): what a stat
/// reads (the attributes, their sequence count, the page cache pointer for
/// the size) fills the first two cache lines, and what updates write (the
/// references, the lookup count, the list node, the alias list) the third,
/// so a stat of a cold inode costs two misses, and a dget elsewhere does
/// not invalidate the lines a stat reads. (It was 256 bytes, four lines: a
/// `Mutex<Vec>` of aliases, with a heap block per inode, padded times and
/// two `OnceLock`s; at a million files the quarter less is what fits in
/// the caches, and one allocation less per file.)
#[repr(C, align(64))]
pub(crate) struct Inode {
    // ---- line 0: what a stat reads ----
    // Read under `attrs`' sequence count with relaxed loads; written in its
    // write sections with relaxed stores (the seqlock's fences order them).
    attrs: SeqLock,
    pub kind: FileType,
    /// The filesystem's own inode (memfs), not a copy: its attributes are
    /// the truth and are never set from outside.
    owned: bool,
    /// The ticket of the read whose answer the attributes hold (see
    /// `set_attr_read`); read and written only under `attrs`' lock (a
    /// cell, not an atomic: loom then checks that order instead of
    /// branching on each access). (In the padding after `owned`.)
    read_stored: crate::sync::atomic::UnsafeCell<u16>,
    /// Odd while the cached attributes may be older than the filesystem's
    /// (an update of a copied inode, see `mark_stale`); each mark and each
    /// refresh that cleans moves it on. Read by `attr` on the same line as
    /// the attributes; never written by a read of clean attributes.
    stale: AtomicU32,
    pub ino: Ino,
    perm: AtomicU32,
    nlink: AtomicU32,
    uid: AtomicU32,
    gid: AtomicU32,
    size: AtomicU64,
    blocks: AtomicU64,
    rdev: AtomicU64,
    // ---- line 1: the times, and what is set once ----
    times: Times,
    /// A regular file's page cache (an `Arc::into_raw`), asked of the
    /// filesystem the first time data is read or written; null: not asked
    /// yet; `no_page_cache()`: the filesystem has none, data goes through
    /// `read` and `write`. An empty file never has one. Set once.
    data: AtomicPtr<PageCache>,
    /// The superblock this inode belongs to; it outlives its inodes. Set once
    /// (for an owned inode, when its filesystem is bound to a superblock).
    owner: AtomicPtr<Super>,
    /// memfs: a directory's entries (an index closed when it is removed).
    pub(crate) entries: Index<crate::fs::memfs::Dirent>,
    // ---- line 2: what updates and rarer paths write ----
    /// VFS references (dentries and open files), with the lock that decides
    /// the inode's end.
    refs: Lockref,
    /// A copy: the lookups the VFS owes the filesystem. An owned inode:
    /// the lookups its filesystem handed out and was not yet paid back
    /// (FUSE's `nlookup`, kept in the inode itself).
    nlookup: AtomicU64,
    /// memfs: the extended attributes, an immutable list replaced whole by
    /// each change and read under RCU (null: none).
    xattrs: AtomicPtr<Xattrs>,
    /// A symlink's target (a `Box<Box<[u8]>>`, null until read), set once:
    /// targets never change. [`LINK_UNWALKABLE`] in the address marks a
    /// target that is not a valid path.
    link: AtomicPtr<Box<[u8]>>,
    /// The first cached dentry that names this inode (Linux `i_dentry`, seed
    /// 003's figure 5: hard links are aliases); the rest follow through
    /// their `alias_next`. Under `times.alias_lock`.
    alias_head: crate::sync::atomic::UnsafeCell<*const crate::dcache::Dentry>,
    /// Membership of the superblock's inode list. Its spare word is the
    /// inode's count of open files (`File`s), plus [`DATA_GONE`] once an
    /// owned inode's data went with its last link while no file had it
    /// open ([`Inode::drop_data_if_orphaned`]): an open then fails, as one
    /// after the unlink would. One word, so that an open and that drop,
    /// each an atomic RMW of it, cannot both succeed.
    sb_link: Link,
}

/// In the open count (`Inode::opens`): the data is gone; no file may open
/// the inode.
const DATA_GONE: u32 = 1 << 31;

/// Pages from which an orphaned file's data goes before its inode does
/// (`drop_data_if_orphaned`): the page cache's expedite mark; under loom
/// one, so that a model's one-page file takes that path.
#[cfg(not(loom))]
const ORPHAN_DROP_PAGES: u64 = crate::filemap::EXPEDITE_PAGES as u64;
#[cfg(loom)]
const ORPHAN_DROP_PAGES: u64 = 1;

#[cfg(not(loom))]
const _: () = assert!(
    std::mem::size_of::<Inode>() == 192
        && std::mem::offset_of!(Inode, times) == 64
        && std::mem::offset_of!(Inode, ino) == 16
        && std::mem::offset_of!(Inode, refs) == 128
);

/// One extended attribute: its name and its value.
pub(crate) type Xattr = (Box<[u8]>, Box<[u8]>);

/// An inode's extended attributes, sorted by name.
#[derive(Clone, Default)]
pub(crate) struct Xattrs(pub Vec<Xattr>);

impl Xattrs {
    pub fn find(&self, name: &[u8]) -> std::result::Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    /// Bytes charged for them: names and values.
    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|(n, v)| (n.len() + v.len()) as u64).sum()
    }
}

impl Drop for Inode {
    fn drop(&mut self) {
        let x = self.xattrs.load(Ordering::Relaxed);
        if !x.is_null() {
            // SAFETY: the inode is being freed (after its grace period), so
            // no reader holds its list.
            drop(unsafe { Box::from_raw(x) });
        }
        let l = self.link.load(Ordering::Relaxed).map_addr(|a| a & !LINK_UNWALKABLE);
        if !l.is_null() {
            // SAFETY: set once from `Box::into_raw` (less the mark); no
            // reader is left.
            drop(unsafe { Box::from_raw(l) });
        }
        let d = self.data.load(Ordering::Relaxed);
        if !d.is_null() && d != no_page_cache() {
            // SAFETY: set once from `Arc::into_raw`; this is that reference.
            drop(unsafe { Arc::from_raw(d) });
        }
    }
}

// SAFETY: `owner` points at a superblock that outlives the inode (teardown
// frees inodes first); everything else is Send + Sync.
unsafe impl Send for Inode {}
// SAFETY: as above.
unsafe impl Sync for Inode {}

impl crate::sync::index::Indexed for Inode {
    fn index_hash(&self) -> u64 {
        ino_hash(self.ino)
    }
}

impl Inode {
    /// A copy of a filesystem's inode, with `a`'s attributes and no
    /// reference.
    pub(crate) fn new(a: &Attr, owner: *const Super) -> Inode {
        Self::make(a, owner, false)
    }

    /// A filesystem's own inode (memfs), with no reference and no lookup;
    /// `owner` may be null (not bound to a superblock yet).
    pub(crate) fn new_owned(a: &Attr, owner: *const Super) -> Inode {
        Self::make(a, owner, true)
    }

    /// An owned inode born with `refs` VFS references and `lookups`
    /// lookups out: counts set before it is shared, where an RMW each on
    /// a new inode cost a create two locked instructions (memfs's `alloc`).
    pub(crate) fn new_owned_counted(a: &Attr, owner: *const Super, refs: i32, lookups: u64) -> Inode {
        let mut i = Self::make(a, owner, true);
        i.refs = Lockref::new(refs);
        i.nlookup = AtomicU64::new(lookups);
        i
    }

    fn make(a: &Attr, owner: *const Super, owned: bool) -> Inode {
        Inode {
            owner: AtomicPtr::new(owner as *mut Super),
            ino: a.ino,
            kind: a.kind,
            owned,
            attrs: SeqLock::new(),
            alias_head: crate::sync::atomic::UnsafeCell::new(ptr::null()),
            times: Times::new(a),
            perm: AtomicU32::new(a.perm),
            nlink: AtomicU32::new(a.nlink),
            uid: AtomicU32::new(a.uid),
            gid: AtomicU32::new(a.gid),
            size: AtomicU64::new(a.size),
            blocks: AtomicU64::new(a.blocks),
            rdev: AtomicU64::new(a.rdev),
            stale: AtomicU32::new(0),
            read_stored: crate::sync::atomic::UnsafeCell::new(0),
            link: AtomicPtr::new(ptr::null_mut()),
            data: AtomicPtr::new(ptr::null_mut()),
            refs: Lockref::new(0),
            nlookup: AtomicU64::new(0),
            sb_link: Link::new(),
            entries: Index::new(),
            xattrs: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The bytes of the extended attributes of an inode being freed (no
    /// one can change them any more).
    pub(crate) fn xattr_bytes_when_freed(&self) -> u64 {
        // SAFETY: the list is freed only with the inode, which is still
        // here (its grace period has not even begun).
        unsafe { self.xattrs.load(Ordering::Acquire).as_ref() }.map_or(0, |x| x.bytes())
    }

    /// The extended attributes (memfs), for a reader in a read section of
    /// the inode's RCU domain.
    pub(crate) fn xattrs<'g>(&'g self, _g: &'g crate::sync::RcuGuard<'_>) -> Option<&'g Xattrs> {
        // Acquire: pairs with the Release in `update_xattrs`, so the list
        // is initialized. SAFETY: a replaced list is retired through the
        // domain the caller reads in.
        unsafe { self.xattrs.load(Ordering::Acquire).as_ref() }
    }

    /// Replaces the extended attributes with what `f` makes of the current
    /// ones (copy on write; retried if another change came first). `f`
    /// returns the new list (`None`: none left) and a value passed back.
    /// `undo` takes back what `f` did (a charge) when the list it made lost
    /// the race and `f` runs again.
    pub(crate) fn update_xattrs<R>(
        &self,
        rcu: &Rcu,
        mut f: impl FnMut(Option<&Xattrs>) -> crate::error::Result<(Option<Xattrs>, R)>,
        mut undo: impl FnMut(&R),
    ) -> crate::error::Result<R> {
        let g = rcu.read_lock();
        loop {
            let cur = self.xattrs.load(Ordering::Acquire);
            // SAFETY: as in `xattrs`; we are in a read section.
            let (new, r) = f(unsafe { cur.as_ref() })?;
            let new = new.map_or(std::ptr::null_mut(), |x| Box::into_raw(Box::new(x)));
            // Release: the new list is initialized before it is reachable.
            match self.xattrs.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    drop(g);
                    if !cur.is_null() {
                        // SAFETY: unreachable now; readers are waited out.
                        unsafe { rcu.retire_box(cur) };
                    }
                    return Ok(r);
                }
                Err(_) => {
                    undo(&r);
                    if !new.is_null() {
                        // SAFETY: never published.
                        drop(unsafe { Box::from_raw(new) });
                    }
                }
            }
        }
    }

    /// The size in core, one load outside the sequence count: for a loom
    /// model, where a whole `attr` multiplies the interleavings to explore.
    #[cfg(loom)]
    pub(crate) fn size_now(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// The attributes, as one consistent snapshot. Writes nothing shared
    /// (unless a writer stays in progress past the bounded retries, when it
    /// takes the lock).
    #[inline]
    pub fn attr(&self) -> Attr {
        if !self.owned {
            self.refresh_stale();
        }
        if self.owned && self.kind == FileType::Dir {
            // A directory's size is its entry count, read from its index.
            let sb = self.owner.load(Ordering::Relaxed);
            if !sb.is_null() {
                // SAFETY: a bound inode's superblock outlives it.
                let g = unsafe { &*sb }.rcu.read_lock();
                return self.attr_with(&g);
            }
        }
        let mut a = self.cached_attr();
        if let Some(pc) = self.data_if_any() {
            a.size = pc.size();
            a.blocks = pc.pages() * 8;
        }
        a
    }

    /// The attributes a permission check reads (kind, mode, owner): the
    /// cached ones, without a directory's size, which memfs counts from its
    /// index (summing per-shard counts that its writers keep changing).
    #[inline]
    pub fn access_attr(&self) -> Attr {
        self.cached_attr()
    }

    /// [`attr`](Self::attr) for a caller in a read section of the inode's
    /// RCU domain (memfs).
    pub(crate) fn attr_with(&self, g: &crate::sync::RcuGuard<'_>) -> Attr {
        let mut a = self.cached_attr();
        if let Some(pc) = self.data_if_any() {
            a.size = pc.size();
            a.blocks = pc.pages() * 8;
        } else if self.owned && self.kind == FileType::Dir {
            a.size = self.entries.len(g) as u64;
        }
        a
    }

    fn cached_attr(&self) -> Attr {
        self.attrs.read(|| self.cached_attr_locked())
    }

    /// Begins a read of the attributes from the filesystem: moves their
    /// version on and returns it, the read's start for `set_attr_read`.
    /// Reads are ordered by their starts, which is the order in which they
    /// began.
    fn begin_read(&self) -> u32 {
        let mut start = 0;
        // A write section with nothing written: moves the version by 2.
        drop(self.attrs.write_if(|v| {
            start = v.wrapping_add(2);
            // SAFETY: under the lock (`write_if` holds it while it calls this).
            unsafe { self.keep_stored_in_window(start) };
            true
        }));
        start
    }

    /// Raises `read_stored` to within [`TICKET_WINDOW`] tickets of the
    /// version `now`, where a 16-bit comparison with the ticket of any read
    /// younger than the window is exact. Called in every section that moves
    /// the version (a read's start, a store), before it compares, so that
    /// the ticket never falls more than one section behind the window and
    /// this test itself stays exact. Raising it to the window's floor changes
    /// no answer: every read it could refuse is refused by age already.
    ///
    /// # Safety
    /// Under the attributes' lock.
    unsafe fn keep_stored_in_window(&self, now: u32) {
        let floor = ticket(now).wrapping_sub(TICKET_WINDOW);
        // SAFETY: the caller holds the lock.
        let stored = unsafe { crate::sync::atomic::cell_get(&self.read_stored) };
        if (stored.wrapping_sub(floor) as i16) < 0 {
            // SAFETY: as above.
            unsafe { crate::sync::atomic::cell_set(&self.read_stored, floor) };
        }
    }

    /// Replaces the cached attributes with `a`, the answer of the read
    /// that began at `start` (`begin_read`), unless the answer of a read
    /// that began after it is stored already. Returns whether in core is
    /// now this answer or a newer one: `false` only for a read older than
    /// the window (below), refused whatever is in core.
    ///
    /// A read that began later saw every change that was over when this
    /// one began, and maybe more: the newest begun is the best answer in
    /// hand. And when every change is over, the last read begun is one
    /// begun after them all, whose answer is in core once it lands. Two
    /// rules this keeps:
    /// - A read begun during a change (a watcher's, torn: a host write sets
    ///   ctime before it grows the size) never replaces the answer of the
    ///   change's own refresh, which begins after the change.
    /// - A refresh that returns leaves its answer in core or a newer one,
    ///   even while reads begun later are under way: a stat answered from
    ///   core right after a write's refresh sees the write. (Refusing
    ///   every store made after a later read began, as this did first,
    ///   left the older answer in core until that read landed: CI's fsx
    ///   through the io_uring passthrough mount, a stat after a write in
    ///   two halves finding the first half's size.)
    ///
    /// The stored answer's ticket is 16 bits (it lives in the inode's
    /// padding), raised to within [`TICKET_WINDOW`] of the version before
    /// each comparison (`keep_stored_in_window`). A read that lands after
    /// that many other reads and stores of the inode began (a getattr
    /// blocked for that long) is refused by its age, measured on its
    /// 32-bit start: its order with the stored answer cannot be told.
    /// An owned inode is the truth, and keeps its own.
    pub fn set_attr_read(&self, a: &Attr, start: u32) -> bool {
        debug_assert_eq!(a.ino, self.ino);
        if self.owned {
            return true;
        }
        let mut young = true;
        let newer = |v: u32| {
            if v.wrapping_sub(start) >= 2 * u32::from(TICKET_WINDOW) {
                young = false;
                return false;
            }
            // SAFETY: `read_stored` is read and written only under the
            // lock, which `write_if` holds while it calls this.
            unsafe { self.keep_stored_in_window(v) };
            // SAFETY: as above.
            let stored = unsafe { crate::sync::atomic::cell_get(&self.read_stored) };
            (ticket(start).wrapping_sub(stored) as i16) > 0
        };
        let Some(_w) = self.attrs.write_if(newer) else { return young };
        self.store_checked(a, ticket(start));
        true
    }

    /// In a write section: stores `a`, stamped `ticket`, unless its ctime
    /// is older than what is in core. Every change moves ctime forward, so
    /// an answer with an older ctime is an older state (a filesystem whose
    /// truth is shared between machines keeps ctime strictly increasing
    /// per inode whatever their clocks: see `fs::etcd`). An equal ctime is
    /// no evidence of order: the ticket is.
    /// Returns whether it stored. (`ticket` is within the window: a young
    /// read's, or the version's own in `set_attr_after`. One refused by
    /// ctime leaves `read_stored` where it was, raised by the next section
    /// that compares.)
    fn store_checked(&self, a: &Attr, ticket: u16) -> bool {
        if a.ctime < self.times.load(CTIME) {
            return false;
        }
        self.store_attr(a);
        // SAFETY: in a write section, under the lock.
        unsafe { crate::sync::atomic::cell_set(&self.read_stored, ticket) };
        true
    }

    fn store_attr(&self, a: &Attr) {
        self.perm.store(a.perm, Ordering::Relaxed);
        self.nlink.store(a.nlink, Ordering::Relaxed);
        self.uid.store(a.uid, Ordering::Relaxed);
        self.gid.store(a.gid, Ordering::Relaxed);
        self.size.store(a.size, Ordering::Relaxed);
        self.blocks.store(a.blocks, Ordering::Relaxed);
        self.rdev.store(a.rdev, Ordering::Relaxed);
        self.times.store(ATIME, a.atime);
        self.times.store(MTIME, a.mtime);
        self.times.store(CTIME, a.ctime);
    }

    /// Changes attributes as one write section: `f` gets the current
    /// attributes and changes what it wants; they are stored if they
    /// differ. For a filesystem whose truth these are (memfs). Returns `f`'s
    /// result and the attributes after.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut Attr) -> R) -> (R, Attr) {
        // The writers' lock without a write section: readers run on while
        // `f` decides, and are disturbed only if something changes.
        let _w = self.attrs.read_locked();
        let old = self.cached_attr_locked();
        let mut a = old.clone();
        let r = f(&mut a);
        if a != old {
            let s = self.attrs.seqcount();
            s.write_begin();
            self.store_attr(&a);
            s.write_end();
        }
        (r, a)
    }

    /// The attributes, read while holding `attrs`' lock (no writer runs),
    /// or inside `attrs.read` (which retries a torn read).
    #[inline(always)]
    fn cached_attr_locked(&self) -> Attr {
        Attr {
            ino: self.ino,
            kind: self.kind,
            perm: self.perm.load(Ordering::Relaxed),
            nlink: self.nlink.load(Ordering::Relaxed),
            uid: self.uid.load(Ordering::Relaxed),
            gid: self.gid.load(Ordering::Relaxed),
            size: self.size.load(Ordering::Relaxed),
            blocks: self.blocks.load(Ordering::Relaxed),
            atime: self.times.load(ATIME),
            mtime: self.times.load(MTIME),
            ctime: self.times.load(CTIME),
            rdev: self.rdev.load(Ordering::Relaxed),
        }
    }

    /// The link count, as a hint (one load).
    pub(crate) fn nlink_hint(&self) -> u32 {
        self.nlink.load(Ordering::Relaxed)
    }

    /// Sets mtime (if `modify`) and ctime to `t`, unless they are already
    /// `t`: with the coarse clock, a burst of changes stores once per tick.
    pub(crate) fn touch(&self, t: Timespec, modify: bool) {
        if self.times.load(CTIME) == t && (!modify || self.times.load(MTIME) == t) {
            return;
        }
        self.update(|a| {
            a.ctime = t;
            if modify {
                a.mtime = t;
            }
        });
    }

    /// Sets atime to `t` (a read), unless it is `t` already.
    pub(crate) fn touch_atime(&self, t: Timespec) {
        if self.times.load(ATIME) != t {
            self.update(|a| a.atime = t);
        }
    }

    /// An owned inode: counts `n` lookups handed out (memfs).
    ///
    /// Relaxed here and in `lookups_sub`: the count is read to decide a
    /// free only under the references' lock (`release_if_unused`, `iput`),
    /// which whoever changes it takes afterwards; the lock orders the two.
    pub(crate) fn lookups_add(&self, n: u64) {
        self.nlookup.fetch_add(n, Ordering::Relaxed);
    }

    /// An owned inode found by one of its names, read without a lock
    /// (memfs's `lookup`): counts one lookup handed out, unless the inode
    /// died meanwhile (its last name went and a free was decided). Under
    /// the references' lock, which that decision is taken under
    /// (`release_if_unused`): the free either sees this lookup, or this
    /// sees the inode dead and counts nothing (`false`). Counted with no
    /// lock (until 2026-11-29), a lookup racing the unlink of the name was
    /// handed out on an inode already freed.
    pub(crate) fn lookups_add_live(&self) -> bool {
        let g = self.refs.lock();
        let live = g.count() != DEAD;
        if live {
            self.nlookup.fetch_add(1, Ordering::Relaxed);
        }
        drop(g);
        live
    }

    /// An owned inode: `n` lookups paid back (saturating: a filesystem
    /// cannot trust its callers' counts).
    pub(crate) fn lookups_sub(&self, n: u64) {
        let _ = self.nlookup.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c.saturating_sub(n)));
    }

    /// The superblock this inode is set to (null for an owned inode made
    /// before its filesystem was bound): for the models.
    #[cfg(loom)]
    pub(crate) fn owner_ptr(&self) -> *const Super {
        self.owner.load(Ordering::Relaxed)
    }

    /// Sets the superblock of an owned inode (memfs's `bind`).
    ///
    /// Relaxed: set before the VFS can reach the inode (the superblock is
    /// published after `bind`, with a Release), or cleared once it cannot
    /// (`InodeTable::clear`).
    pub(crate) fn set_owner(&self, sb: *const Super) {
        self.owner.store(sb as *mut Super, Ordering::Relaxed);
    }

    /// Whether any extended attribute was ever set on this owned inode
    /// (memfs keeps them on the inode).
    pub fn has_xattrs(&self) -> bool {
        !self.xattrs.load(Ordering::Acquire).is_null()
    }

    /// Whether this is its filesystem's own inode (memfs), whose attributes
    /// are the truth.
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// Marks the cached attributes as older than the filesystem's after an
    /// update the filesystem made (a name created or removed in this
    /// directory, a link dropped, a rename's ctime): the next `attr` reads
    /// them again, once, instead of every update paying a call at once
    /// that no one may need (a round trip to etcd, a statx on the host).
    /// Nothing to do for an inode that is the filesystem's truth.
    ///
    /// A refresh that began before this mark cannot clean it: the
    /// generation it read is gone (see `refresh_stale`).
    pub fn mark_stale(&self) {
        if self.owned {
            return;
        }
        let mut g = self.stale.load(Ordering::Relaxed);
        loop {
            // Even (clean) -> odd; odd -> the next odd, so that a refresh in
            // flight, which read the old odd value, leaves it stale.
            let next = if g & 1 == 1 { g.wrapping_add(2) } else { g.wrapping_add(1) };
            // Release: pairs with `refresh_stale`'s Acquire; the update this
            // marks happened before, so a refresh that sees the mark reads
            // the update's result.
            match self.stale.compare_exchange_weak(g, next, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => g = now,
            }
        }
    }

    /// Reads the attributes again if they were marked stale, and cleans the
    /// mark if no other was made meanwhile and in core is now this read's
    /// answer or a newer one (one begun after it, so after the mark, or
    /// one with a newer ctime). A call that fails leaves the mark (the next
    /// `attr` tries again), and so does a read refused for its age; except
    /// ENOENT and ESTALE: the inode is gone from the filesystem, and nothing
    /// newer will come.
    fn refresh_stale(&self) {
        let g = self.stale.load(Ordering::Acquire);
        if g & 1 == 0 {
            return;
        }
        let start = self.begin_read();
        match self.fs().getattr(self.ino) {
            Ok(a) => {
                if !self.set_attr_read(&a, start) {
                    return;
                }
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESTALE)) => {}
            Err(_) => return,
        }
        // Release: a reader that sees it clean (Acquire in a later
        // `refresh_stale`) sees the attributes stored above.
        let _ = self.stale.compare_exchange(g, g.wrapping_add(1), Ordering::Release, Ordering::Relaxed);
    }

    /// Re-reads the attributes from the filesystem after a change (nothing
    /// to do for an inode that is the filesystem's truth).
    pub fn refresh(&self, fs: &dyn FileSystem) {
        let _ = self.reread(fs);
    }

    /// `refresh`, with the filesystem's answer or error. The answer is
    /// returned even where its store was refused: it was read after this
    /// call began, so it is no older than what the caller asks about. An
    /// owned inode answers from core.
    ///
    /// A change is over when this is called, so this read begins after it
    /// and is ordered after every read begun before (`set_attr_read`): one
    /// of those may have seen the change half made, and it is not stored
    /// once this is. If this read fails, or is refused for its age, one of
    /// those may be what stays in core: the attributes are marked stale,
    /// and the next `attr` reads again.
    pub fn reread(&self, fs: &dyn FileSystem) -> crate::error::Result<Attr> {
        if self.owned {
            return Ok(self.attr());
        }
        let start = self.begin_read();
        let a = fs.getattr(self.ino).inspect_err(|_| self.mark_stale())?;
        if !self.set_attr_read(&a, start) {
            self.mark_stale();
        }
        Ok(a)
    }

    /// Stores the attributes a filesystem call returned after changing the
    /// object (a setattr), read at its end: `since` is the version read
    /// before the call. If nothing began or was stored meanwhile, the
    /// answer is the newest there is, and is stored as a read begun now
    /// (unless its ctime is older than what is in core: then the
    /// attributes are marked stale). If something did, that may be newer
    /// than this answer (a write's refresh, begun after
    /// this call's answer was read but before this), or miss this change
    /// (a read begun before it): read again.
    pub fn set_attr_after(&self, a: &Attr, since: u32) {
        if self.owned {
            return;
        }
        let unchanged = |v: u32| {
            if v != since {
                return false;
            }
            // SAFETY: under the lock (`write_if` holds it while it calls
            // this). The section about to open moves the version to `v + 2`.
            unsafe { self.keep_stored_in_window(v.wrapping_add(2)) };
            true
        };
        let stored = match self.attrs.write_if(unchanged) {
            // The section's end moves the version to `since + 2`: the
            // ticket a read begun now would have, and no read has.
            Some(_w) => self.store_checked(a, ticket(since.wrapping_add(2))),
            None => return self.refresh(self.fs()),
        };
        if !stored {
            // Refused by ctime (a host clock stepped back): in core is
            // not this change's result; the next `attr` reads again.
            self.mark_stale();
        }
    }

    /// The attributes' version now, for `set_attr_after`.
    pub fn attr_version(&self) -> u32 {
        self.attrs.version()
    }

    /// The page cache holding a regular file's data, asked of the
    /// filesystem the first time (memfs makes one then); `None` if the
    /// filesystem keeps data elsewhere, or this is not a regular file.
    pub fn data(&self) -> Option<&PageCache> {
        if self.kind != FileType::File {
            return None;
        }
        self.data_or_init_with(|| match self.fs().as_memfs() {
            // Its own inode: made in place (no reentry into `data`).
            Some(m) if self.owned => Some(m.new_page_cache()),
            _ => self.fs().page_cache(self.ino),
        })
    }

    /// `data`'s pointer, set to what `make` returns unless another thread
    /// set it first (then `make`'s answer is dropped).
    fn data_or_init_with(&self, make: impl FnOnce() -> Option<Arc<PageCache>>) -> Option<&PageCache> {
        let p = self.data_ptr_or_init(make);
        // SAFETY: set once to a cache the inode holds a reference on until
        // it is dropped.
        (p != no_page_cache()).then(|| unsafe { &*p })
    }

    /// As [`data_or_init_with`](Self::data_or_init_with), the pointer as
    /// `Arc::into_raw` gave it (its provenance covers the `Arc`'s counts,
    /// which a pointer taken from a `&PageCache` does not).
    fn data_ptr_or_init(&self, make: impl FnOnce() -> Option<Arc<PageCache>>) -> *mut PageCache {
        // Acquire: pairs with the Release publication below.
        let mut p = self.data.load(Ordering::Acquire);
        if p.is_null() {
            let n = make().map_or(no_page_cache(), |pc| Arc::into_raw(pc) as *mut PageCache);
            // AcqRel: publishes the cache, or reads the winner's.
            match self.data.compare_exchange(ptr::null_mut(), n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => p = n,
                Err(cur) => {
                    if n != no_page_cache() {
                        // SAFETY: never published; made by `Arc::into_raw`.
                        drop(unsafe { Arc::from_raw(n) });
                    }
                    p = cur;
                }
            }
        }
        p
    }

    /// The page cache if the file has one already (no call).
    pub fn data_if_any(&self) -> Option<&PageCache> {
        let p = self.data.load(Ordering::Acquire);
        // SAFETY: as in `data_or_init_with`.
        (!p.is_null() && p != no_page_cache()).then(|| unsafe { &*p })
    }

    /// The page cache to read through: for an owned inode only one that
    /// exists (a file never written has no data, and its filesystem's
    /// `read` answers that without making one).
    pub fn data_for_read(&self) -> Option<&PageCache> {
        if self.owned {
            self.data_if_any()
        } else {
            self.data()
        }
    }

    /// The page cache, made with `make` if there is none yet (memfs, for
    /// its own inodes).
    pub(crate) fn data_or_init(&self, make: impl FnOnce() -> Arc<PageCache>) -> &PageCache {
        self.data_or_init_with(|| Some(make())).expect("a file's page cache")
    }

    /// Whether the page cache is the inode's alone (no `data_arc` handed
    /// out). Read after the `DATA_GONE` claim, which no later `data_arc`
    /// passes, and which acquires what an earlier one did under its count.
    fn data_unshared(&self) -> bool {
        let p = self.data.load(Ordering::Acquire);
        if p.is_null() || p == no_page_cache() {
            return true;
        }
        // SAFETY: set once from `Arc::into_raw`; the inode holds that
        // reference, which this borrows without dropping.
        let a = std::mem::ManuallyDrop::new(unsafe { Arc::from_raw(p) });
        if Arc::strong_count(&a) != 1 {
            return false;
        }
        // As `Arc::drop` before it frees: whatever the last other holder
        // read through its reference (a copy's reads, then its Release
        // decrement) happens before the pages are freed and reused.
        crate::sync::atomic::fence(Ordering::Acquire);
        true
    }

    /// A counted reference to the page cache, as [`data_arc`](Self::data_arc),
    /// unless its data went with the file's last link (`None`): taken under
    /// the open count, so that the orphan drop sees the reference it must
    /// leave its readers (or this sees `DATA_GONE` and takes none).
    pub(crate) fn data_arc_unless_gone(&self, make: impl FnOnce() -> Arc<PageCache>) -> Option<Arc<PageCache>> {
        self.read_unopened(|| self.data_arc(make))
    }

    /// Runs `f`, which reads the page cache by number with no file open
    /// (memfs's `read`), counted as an open file: `None` if the data went
    /// with the file's last link. The orphan drop frees pages at once, so
    /// a reader it cannot see must not exist.
    pub(crate) fn read_unopened<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        if !self.open_begin() {
            return None;
        }
        let r = f();
        self.open_end();
        Some(r)
    }

    /// A counted reference to the page cache, made with `make` if there is
    /// none yet (memfs, for another superblock's copies).
    fn data_arc(&self, make: impl FnOnce() -> Arc<PageCache>) -> Arc<PageCache> {
        // The stored pointer itself, not one taken from `&PageCache`: the
        // count lives before the cache, outside what such a reference may
        // reach (Miri's Stacked Borrows check failed on it).
        let pc = self.data_ptr_or_init(|| Some(make()));
        assert!(pc != no_page_cache(), "a file's page cache");
        // SAFETY: `pc` came from `Arc::into_raw` and the inode holds that
        // reference while we take another.
        unsafe {
            Arc::increment_strong_count(pc);
            Arc::from_raw(pc)
        }
    }

    /// A symlink's target, once read or set.
    pub fn link(&self) -> Option<&[u8]> {
        // Acquire: pairs with the Release publication in `set_link`.
        let p = self.link.load(Ordering::Acquire).map_addr(|a| a & !LINK_UNWALKABLE);
        // SAFETY: set once, freed with the inode.
        unsafe { p.as_ref() }.map(|b| &**b)
    }

    /// The target for an RCU walk to follow: `None` until it is read, and
    /// for a target that is not a valid path (empty, a NUL byte, too long:
    /// a filesystem may hold one, though a symlink call refuses to make
    /// it), whose error REF-walk's `link_target` gives. Checked once, in
    /// `set_link`, not at every follow.
    #[inline]
    pub(crate) fn walkable_link(&self) -> Option<&[u8]> {
        // Acquire: as in `link`.
        let p = self.link.load(Ordering::Acquire);
        if p.addr() & LINK_UNWALKABLE != 0 {
            return None;
        }
        // SAFETY: as in `link` (no mark).
        unsafe { p.as_ref() }.map(|b| &**b)
    }

    /// Sets a symlink's target, unless it is set already, marking it
    /// unwalkable if it is not a valid path.
    pub(crate) fn set_link(&self, target: Box<[u8]>) {
        let bad = crate::namei::check_path(&target).is_err();
        let n = Box::into_raw(Box::new(target));
        let marked = n.map_addr(|a| if bad { a | LINK_UNWALKABLE } else { a });
        // Release: publishes the target.
        if self.link.compare_exchange(ptr::null_mut(), marked, Ordering::AcqRel, Ordering::Acquire).is_err() {
            // SAFETY: never published.
            drop(unsafe { Box::from_raw(n) });
        }
    }

    /// Runs `f` on the alias list's head under the alias lock.
    pub(crate) fn with_aliases<R>(&self, f: impl FnOnce(&mut *const crate::dcache::Dentry) -> R) -> R {
        self.times.alias_lock.lock();
        // SAFETY: under the alias lock (a leaf: `f` takes no lock).
        let r = self.alias_head.with_mut(|p| f(unsafe { &mut *p }));
        // SAFETY: locked above.
        unsafe { self.times.alias_lock.unlock() };
        r
    }

    /// The superblock this inode belongs to.
    #[inline]
    pub fn sb(&self) -> &Super {
        // SAFETY: a superblock outlives its inodes; an owned inode's is set
        // when its filesystem is bound, before the VFS can reach it.
        unsafe { &*self.owner.load(Ordering::Relaxed) }
    }

    /// The filesystem that holds this inode's truth.
    #[inline]
    pub fn fs(&self) -> &dyn FileSystem {
        &*self.sb().fs
    }

    /// Takes a reference; the caller already holds one (directly or through
    /// a dentry it holds), so the count is not zero.
    pub fn hold(&self) {
        debug_assert!(self.refs.count_hint() > 0);
        self.refs.get();
    }

    /// Whether the inode has been marked for freeing.
    pub(crate) fn is_dead(&self) -> bool {
        self.refs.count_hint() == DEAD
    }

    /// Whether this is the first stat or open that found the inode in the
    /// bound memfs with no dentry (`Dcache::stays_bare`): `true` once,
    /// storing the mark then (a load only after).
    pub(crate) fn first_seen(&self) -> bool {
        let s = &self.times.seen;
        if s.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        s.store(true, std::sync::atomic::Ordering::Relaxed);
        crate::sync::audit::shared_writes(1);
        true
    }

    /// The count of open files (in the list node's spare word).
    fn opens(&self) -> &AtomicU32 {
        &self.sb_link.spare
    }

    /// Counts a file opening this inode; `false`, counting nothing, if its
    /// data went with its last link (the open must fail).
    pub(crate) fn open_begin(&self) -> bool {
        // SeqCst: see `drop_data_if_orphaned`.
        if self.opens().fetch_add(1, Ordering::SeqCst) & DATA_GONE != 0 {
            // Relaxed: undoes our own increment; with `DATA_GONE` set, no
            // one decides anything from the count any more.
            self.opens().fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Whether the data went with the file's last link (`DATA_GONE`): no
    /// open can succeed any more.
    ///
    /// Relaxed: a hint for a retry (a walk that found a file which a
    /// concurrent unlink or rename is taking away); the claim itself is
    /// decided by `open_begin`'s RMW, and the mark, once set, stays.
    pub(crate) fn data_gone(&self) -> bool {
        self.opens().load(Ordering::Relaxed) & DATA_GONE != 0
    }

    /// Uncounts a file that `open_begin` counted, as it closes; the last
    /// one of an owned inode with no link left takes its data with it.
    pub(crate) fn open_end(&self) {
        // SeqCst: see `drop_data_if_orphaned`.
        if self.opens().fetch_sub(1, Ordering::SeqCst) == 1 && self.owned {
            // Only a file open here, or a holder of a lookup (whose forget
            // looks again, after its fence), adds pages: too few now stays
            // too few, so the last close of a small file pays no fence.
            if self.data_worth_dropping().is_some() {
                crate::sync::atomic::fence(Ordering::SeqCst);
                self.drop_data_if_orphaned_fenced();
            }
        }
    }

    /// An owned inode's data goes now once it has no link, no open file
    /// and no lookup handed out (a large file's: at least
    /// `EXPEDITE_PAGES`; a small one's goes as its inode is freed, in
    /// memfs's `inode_freed`), refunded to its filesystem's budget, as
    /// the kernel's last `iput` truncates a deleted inode. Called by
    /// whoever ends one of the three: memfs as it drops the last link and
    /// as it is paid back the last lookup (this), and the last close
    /// (`open_end`). Its pages are freed at once, with no grace period
    /// (`drop_data_unless_open`). The VFS's own references (its handles: FUSE's lookups
    /// through a mount, an `Entry`) may still keep the inode: they cannot
    /// open it any more, so no one sees the data go. A lookup memfs handed
    /// out (a copy in another superblock, a caller of memfs itself, which
    /// reads and writes by number without opening) keeps the data.
    ///
    /// The three meet as Dekker's pattern: each writes its own count, then,
    /// after a SeqCst fence, reads the others; whoever's fence comes last
    /// sees all three at 0. None of them rises again from 0 for a file
    /// with no name (a link count of 0 stays 0, and no lookup finds it),
    /// but the open count, which the claim takes by one CAS, 0 to
    /// `DATA_GONE`: an open's increment makes it fail, and it makes a
    /// later open fail.
    pub(crate) fn drop_data_if_orphaned(&self) {
        crate::sync::atomic::fence(Ordering::SeqCst);
        self.drop_data_if_orphaned_fenced();
    }

    /// The page cache, if it holds enough to drop before the inode goes.
    fn data_worth_dropping(&self) -> Option<&PageCache> {
        self.data_if_any().filter(|pc| pc.pages() >= ORPHAN_DROP_PAGES)
    }

    /// `drop_data_if_orphaned` after its fence.
    fn drop_data_if_orphaned_fenced(&self) {
        if self.nlink.load(Ordering::Relaxed) != 0 || self.nlookup.load(Ordering::Relaxed) != 0 {
            return;
        }
        if self.data_worth_dropping().is_some() {
            self.drop_data_unless_open();
        }
    }

    /// Takes the data away (after this no open succeeds) unless a file has
    /// it open, and frees it: the orphan drop above, and memfs as it frees
    /// an inode (`inode_freed`: no reference keeps it, but a read by
    /// number that found it before may still be counted). The pages go at
    /// once, with no grace period (`PageCache::drop_unread`): every reader
    /// of them counts in the open count, so none is left, unless someone
    /// holds the cache itself (`data_arc_unless_gone`), whose readers are
    /// then waited out. A small file's frames thus go back to the pool
    /// while they are still in this core's caches.
    ///
    /// Why a small file's data waits for the inode's end, not its last
    /// link: a handle of the VFS's own (FUSE's lookup through a mount)
    /// cannot open a file whose data went, and the kernel opens by that
    /// handle what it looked up by name just before, so an `open` racing
    /// a rename over the name would fail with ENOENT (`scripts/mount-stress`
    /// counted 64 such wrong answers in 5 s when small files went at their
    /// last link too). A large file's goes at its last link all the same,
    /// for its space (xfstests' generic/213).
    pub(crate) fn drop_data_unless_open(&self) {
        let Some(pc) = self.data_if_any().filter(|pc| pc.pages() > 0) else { return };
        if self.opens().compare_exchange(0, DATA_GONE, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            if self.data_unshared() {
                // SAFETY: no file has it open and none can open it now (its
                // readers all count in `opens`: a `File`, and memfs's reads
                // by number, `read_unopened`); no lookup is out and the
                // cache is the inode's alone, and no one can take another
                // reference to it (`data_arc_unless_gone`).
                unsafe { pc.drop_unread() };
            } else {
                // Someone else holds the cache (a caller of `page_cache`
                // with no lookup counted): its readers are waited out.
                let _ = pc.set_len(0);
            }
        }
    }
}

/// A superblock: one instance of a filesystem, with its in-core inodes and
/// its root dentry. Every mount of it (bind mounts included) counts in
/// `mounts`; when the last one goes, the superblock is torn down
/// (`kill_super`: its dentries, then its inodes) and freed after a grace
/// period, since an RCU walker may still read it.
pub(crate) struct Super {
    pub fs: Arc<dyn FileSystem>,
    pub itable: Arc<InodeTable>,
    /// The VFS's RCU domain (its inodes and dentries are freed through it).
    pub rcu: Arc<Rcu>,
    /// Cached names must be revalidated (`fs.revalidates()`, and then what
    /// the filesystem says through `Notify::set_revalidate`): RCU-walk gives
    /// up in such a filesystem. Read with a relaxed load, written rarely.
    pub revalidates: std::sync::atomic::AtomicBool,
    /// The root dentry, set once at creation.
    pub root: AtomicPtr<crate::dcache::Dentry>,
    /// Mounts of this superblock; changed under the namespace lock.
    pub mounts: AtomicUsize,
    /// A bound memfs's mark that something else serves it too (see
    /// [`Super::dirs_complete`]); None for any other filesystem.
    shared: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Super {
    /// A superblock for `fs`. A memfs that can be bound to it (it serves no
    /// other superblock, and lives in the VFS's RCU domain or in none yet)
    /// lends its own inode table: its inodes are then the in-core inodes.
    /// Any other filesystem gets a table of copies, in list mode `list`.
    pub fn new(fs: Arc<dyn FileSystem>, list: ListMode, rcu: Arc<Rcu>) -> *const Super {
        let lent = fs.as_memfs().map(|m| m.table().clone());
        let sb = Box::into_raw(Box::new(Super {
            revalidates: std::sync::atomic::AtomicBool::new(fs.revalidates()),
            itable: lent.unwrap_or_else(|| Arc::new(InodeTable::new(list, false))),
            fs,
            rcu,
            root: AtomicPtr::new(ptr::null_mut()),
            mounts: AtomicUsize::new(0),
            shared: None,
        }));
        // SAFETY: just allocated, not shared yet.
        let sbr = unsafe { &mut *sb };
        if let Some(m) = sbr.fs.as_memfs() {
            if m.bind(sb, &sbr.rcu) {
                sbr.shared = Some(m.shared_mark().clone());
            } else {
                // Bound elsewhere, or in another RCU domain: copies, as for
                // any filesystem. The superblock it is bound to, if any, can
                // no longer trust that it sees every change.
                m.shared_mark().store(true, std::sync::atomic::Ordering::SeqCst);
                sbr.itable = Arc::new(InodeTable::new(list, false));
            }
        }
        sb
    }

    /// Whether a `COMPLETE` directory of this superblock may answer a miss
    /// now: its memfs is bound here and served nowhere else. A second
    /// `Vfs` over the same memfs changes it behind this cache's back (its
    /// creates land in memfs alone), so from the moment one is built, no
    /// directory here is trusted again. SeqCst, with the store in `new`.
    #[inline]
    pub fn dirs_complete(&self) -> bool {
        self.shared.as_ref().is_some_and(|s| !s.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// `iget` in this superblock's table.
    pub fn iget(&self, attr: &Attr, counted_lookup: bool, counters: &LiveCounters) -> std::io::Result<*const Inode> {
        self.itable.iget(attr, counted_lookup, self, counters, &self.rcu)
    }
}

/// Inode numbers come in chunks of this many (memfs hands each thread's
/// shard its own chunks): an owned table keeps a leaf of slots per chunk
/// (`sync::chunk_map`). Under loom and Miri, four: a model or a test
/// there fills and empties chunks with a few inodes.
pub(crate) const INO_CHUNK: u64 = if cfg!(any(loom, miri)) { 4 } else { 1024 };

/// An owned table: inode numbers to inodes, a leaf per chunk.
type OwnedMap = ChunkMap<Inode, { INO_CHUNK as usize }>;

fn new_parts() -> Box<[Padded<Index<Inode, true>>]> {
    (0..THREAD_SHARDS).map(|_| Padded(Index::new_sharded())).collect()
}

/// What an owned table calls as it frees each inode.
pub(crate) type OnFree = Box<dyn Fn(&Inode) + Send + Sync>;

/// How a table finds its inodes by number.
enum Numbers {
    /// A table of copies: one index per partition ([`InodeTable::part`]),
    /// so that creates anywhere write no common line, and a resize (to
    /// drop the tombstones that create/unlink churn leaves) freezes one
    /// partition, not the table. Each on lines of its own: a resize of one
    /// partition stores its table pointer, which must not evict the
    /// others' from their readers.
    Copies(Box<[Padded<Index<Inode, true>>]>),
    /// An owned table (the filesystem owns the inodes, memfs: they are its
    /// truth, live while linked, looked up or referenced, and the VFS only
    /// references them), whose numbers the filesystem hands out a chunk at
    /// a time: a create stores one slot, with no lock (until 2026-11-29
    /// they were in a sharded index too, at seven atomic RMWs a create and
    /// eleven an unlink).
    Owned(OwnedMap),
}

/// The ino -> in-core inode table of one superblock (Linux's inode hash,
/// with `iget` and `iput`).
pub(crate) struct InodeTable {
    numbers: Numbers,
    /// The superblock's list of in-core inodes (`s_inodes`), in the mode
    /// chosen at build time (seed 004).
    pub list: InodeList,
    /// Called on an owned inode as it is freed (its filesystem's
    /// accounting).
    on_free: Option<OnFree>,
}

// SAFETY: the raw pointers are owned by the table (allocated by `iget` or
// the owning filesystem, freed through RCU); `Inode` is Send + Sync.
unsafe impl Send for InodeTable {}
// SAFETY: as above.
unsafe impl Sync for InodeTable {}

impl InodeTable {
    /// Calls `f` with the number of every inode on the superblock's list.
    pub fn for_each_ino(&self, mut f: impl FnMut(Ino)) {
        self.list.for_each(|n| {
            // SAFETY: every node on this list is the `sb` field of a live
            // inode (it leaves the list before it is freed, and we hold the
            // sublist's lock), added as a pointer into the whole inode
            // (`addr_of!` through a reference to it): stepping back to the
            // inode stays within what the pointer may reach.
            let i = unsafe { &*((n as *const u8).sub(std::mem::offset_of!(Inode, sb_link)) as *const Inode) };
            f(i.ino)
        });
    }

    /// A table of copies.
    pub fn new(list: ListMode, owned: bool) -> InodeTable {
        debug_assert!(!owned, "an owned table is made with `new_owned`");
        InodeTable { numbers: Numbers::Copies(new_parts()), list: InodeList::new(list), on_free: None }
    }

    /// A filesystem's own table (memfs); `on_free` sees each inode as it is
    /// freed.
    pub fn new_owned(list: ListMode, on_free: OnFree) -> InodeTable {
        InodeTable { numbers: Numbers::Owned(OwnedMap::new()), list: InodeList::new(list), on_free: Some(on_free) }
    }

    /// Whether the filesystem owns the inodes (memfs; see [`Numbers`]).
    #[inline]
    pub fn owned(&self) -> bool {
        matches!(self.numbers, Numbers::Owned(_))
    }

    /// An owned table's map.
    #[inline]
    fn owned_map(&self) -> &OwnedMap {
        let Numbers::Owned(m) = &self.numbers else { unreachable!("an owned table") };
        m
    }

    /// The partition of a table of copies that holds inode `ino`.
    #[inline]
    fn part(&self, ino: Ino) -> &Index<Inode, true> {
        let Numbers::Copies(parts) = &self.numbers else { unreachable!("a table of copies") };
        &parts[(ino_hash(ino) >> 40) as usize % THREAD_SHARDS]
    }

    /// The inode numbered `ino`, live at the time of the probe; the caller
    /// is in a read section of the table's RCU domain.
    pub fn get<'g>(&'g self, guard: &'g crate::sync::RcuGuard<'_>, ino: Ino) -> Option<&'g Inode> {
        if let Numbers::Owned(m) = &self.numbers {
            return m.get(guard, ino).filter(|i| !i.is_dead());
        }
        self.part(ino).find(guard, ino_hash(ino), |i| {
            if i.ino == ino && !i.is_dead() {
                Probe::Stop(i)
            } else {
                Probe::Skip
            }
        })
    }

    /// Every inode in the table (a snapshot of no instant).
    pub fn for_each<'g>(&'g self, guard: &'g crate::sync::RcuGuard<'_>, mut f: impl FnMut(&'g Inode)) {
        match &self.numbers {
            Numbers::Owned(m) => m.for_each(guard, f),
            Numbers::Copies(parts) => parts.iter().for_each(|p| p.for_each(guard, &mut f)),
        }
    }

    /// The leaves of an owned table (one per chunk of numbers with an
    /// inode still in it, or still being handed out).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn leaves(&self, guard: &crate::sync::RcuGuard<'_>) -> usize {
        self.owned_map().leaves(guard)
    }

    /// Puts a new owned inode in the table and on the list (made by its
    /// filesystem, with no reference). Returns its address.
    ///
    /// # Safety
    /// The inode's number was handed out by the filesystem for this inode
    /// alone, and `numbers` is how many of its chunk ([`INO_CHUNK`]) the
    /// filesystem puts in the table, the same for every inode of the chunk
    /// (see `ChunkMap::insert`).
    pub unsafe fn insert_new(&self, inode: Box<Inode>, numbers: u32, rcu: &Rcu) -> *const Inode {
        debug_assert!(inode.owned);
        let p = Box::into_raw(inode) as *const Inode;
        // SAFETY: just allocated; shared from the insert on.
        let i = unsafe { &*p };
        // SAFETY: the caller's contract; the inode is freed only through
        // RCU, after `free` removes it.
        unsafe { self.owned_map().insert(i.ino, p, numbers, rcu) };
        // SAFETY: a new inode, on no list; it leaves the list before it is
        // freed (`free`).
        unsafe { self.list.add(ptr::addr_of!(i.sb_link)) };
        p
    }

    /// The in-core inode for `attr` with one more reference, created (with
    /// `attr`'s attributes) if absent. `counted_lookup`: the filesystem
    /// counted a lookup for this call, which we now owe (for an owned
    /// inode, our reference takes its place at once). ENOENT only for an
    /// owned inode that went meanwhile (its last name removed by a caller
    /// that bypassed the VFS's name locks).
    pub fn iget(
        &self,
        attr: &Attr,
        counted_lookup: bool,
        sb: &Super,
        counters: &LiveCounters,
        rcu: &Rcu,
    ) -> std::io::Result<*const Inode> {
        loop {
            if let Some(p) = self.try_get(attr, counters, rcu) {
                // SAFETY: we hold a reference.
                let i = unsafe { &*p };
                if counted_lookup {
                    if self.owned() {
                        // Our reference keeps it now.
                        i.lookups_sub(1);
                    } else {
                        i.nlookup.fetch_add(1, Ordering::Relaxed);
                    }
                }
                return Ok(p);
            }
            if self.owned() {
                return crate::error::fail(crate::error::ENOENT);
            }
            // Not in core: a new one, unless another thread adds it first.
            let fs = &*sb.fs;
            let inode = Box::new(Inode::new(attr, sb));
            if attr.kind == FileType::Symlink {
                if let Ok(t) = fs.readlink(attr.ino) {
                    inode.set_link(t.into_boxed_slice());
                }
            }
            inode.refs.get();
            if counted_lookup {
                inode.nlookup.store(1, Ordering::Relaxed);
            }
            let hash = ino_hash(attr.ino);
            let p = Box::into_raw(inode) as *const Inode;
            // SAFETY: ours until inserted.
            let i = unsafe { &*p };
            let mut l = self.part(attr.ino).lock(hash, rcu);
            let present = l
                .find(hash, |x| if x.ino == attr.ino && !x.is_dead() { Probe::Stop(()) } else { Probe::Skip })
                .is_some();
            if present {
                drop(l);
                // SAFETY: never shared.
                drop(unsafe { Box::from_raw(p as *mut Inode) });
                continue;
            }
            // The pointer from `Box::into_raw`, not one made from `i`: the
            // index's copy is the one the inode is freed by.
            match l.insert(p, hash) {
                Ok(()) => {}
                Err(InsertError::Full) => {
                    drop(l);
                    // SAFETY: never shared.
                    drop(unsafe { Box::from_raw(p as *mut Inode) });
                    self.part(attr.ino).grow(rcu);
                    continue;
                }
                Err(InsertError::Closed) => unreachable!("inode tables are never closed"),
            }
            drop(l);
            counters.add_inode(1);
            // SAFETY: a new inode, on no list; it leaves the list before it
            // is freed. Our reference keeps it alive meanwhile.
            unsafe { self.list.add(ptr::addr_of!(i.sb_link)) };
            return Ok(p);
        }
    }

    /// A referenced in-core inode for `attr.ino`, if one is in core and not
    /// dying. A copy whose attributes differ from `attr` (a lookup's
    /// answer) is marked stale rather than given them: the lookup read the
    /// filesystem without a ticket (it did not know the inode yet), so its
    /// answer may be older than what is in core, or read in the middle of
    /// a change; the next `attr` reads again, with one.
    fn try_get(&self, attr: &Attr, counters: &LiveCounters, rcu: &Rcu) -> Option<*const Inode> {
        let g = rcu.read_lock();
        let i = self.get(&g, attr.ino)?;
        if !self.take_ref(i, counters) {
            return None;
        }
        if !i.owned && i.cached_attr() != *attr {
            i.mark_stale();
        }
        Some(i as *const Inode)
    }

    /// Takes a reference on `i` unless it is dying; an owned inode's first
    /// VFS reference counts it as in core.
    fn take_ref(&self, i: &Inode, counters: &LiveCounters) -> bool {
        if !self.owned() {
            return i.refs.get_not_dead();
        }
        if i.refs.get_if_positive() {
            return true;
        }
        // 0 -> 1 under the lock, to count it in core once.
        let g = i.refs.lock();
        let c = g.count();
        if c < 0 {
            return false;
        }
        if c == 0 {
            counters.add_inode(1);
        }
        g.unlock_with(c + 1);
        true
    }

    /// `i`, an inode of this table its caller reached under RCU, with one
    /// more reference, unless it is dying.
    pub(crate) fn hold(&self, i: &Inode, counters: &LiveCounters) -> Option<*const Inode> {
        self.take_ref(i, counters).then_some(i as *const Inode)
    }

    /// The in-core inode `ino` with one more reference, if it is in core.
    pub fn find_hold(&self, ino: Ino, counters: &LiveCounters, rcu: &Rcu) -> Option<*const Inode> {
        let g = rcu.read_lock();
        let i = self.get(&g, ino)?;
        self.take_ref(i, counters).then_some(i as *const Inode)
    }

    /// Drops a reference. The last one frees a copy (returning the
    /// filesystem's lookups with `forget`); an owned inode is freed only if
    /// it has no link and no lookup left either, else it stays with its
    /// filesystem, unreferenced.
    ///
    /// # Safety
    /// `p` came from `iget` (or `find_hold`) and the caller owns one of its
    /// references.
    pub unsafe fn iput(&self, p: *const Inode, rcu: &Rcu, counters: &LiveCounters) {
        // SAFETY: the caller owns a reference, so the inode is live.
        let inode = unsafe { &*p };
        crate::sync::audit::shared_writes(1);
        let Some(g) = inode.refs.put_or_lock() else { return };
        counters.add_inode(-1);
        if self.owned() {
            // Decided under the lock; the count set as it is let go.
            if !Self::unused_owned(inode) {
                g.unlock_with(0);
                return;
            }
            g.unlock_dead();
            self.free(inode, rcu);
            return;
        }
        g.unlock_dead();
        // Before the free: once retired, the inode may be gone by the time
        // we would read it (we are in no read section).
        let n = inode.nlookup.load(Ordering::Relaxed);
        if n > 0 {
            inode.fs().forget(inode.ino, n);
        }
        self.free(inode, rcu);
    }

    /// Whether an owned inode has nothing left that keeps it: no link and
    /// no lookup (its references are the caller's to check, under their
    /// lock).
    fn unused_owned(inode: &Inode) -> bool {
        inode.nlink_hint() == 0 && inode.nlookup.load(Ordering::Relaxed) == 0
    }

    /// Frees an owned inode if nothing keeps it any more: no link, no
    /// lookup and no VFS reference. Its filesystem calls this after
    /// dropping the last of the first two (the last `iput` checks the same
    /// for the third). The decision is taken under the references' lock,
    /// so exactly one of the racing callers frees it. The caller is in a
    /// read section of the table's RCU domain (another caller may have
    /// freed the inode already: it is then dead, and retired, not gone).
    pub fn release_if_unused(&self, inode: &Inode, rcu: &Rcu) {
        let g = inode.refs.lock();
        if g.count() != 0 || !Self::unused_owned(inode) {
            return;
        }
        g.unlock_dead();
        self.free(inode, rcu);
    }

    /// Takes a dead inode out of the table and the list, and retires it.
    fn free(&self, inode: &Inode, rcu: &Rcu) {
        let owned = if let Numbers::Owned(m) = &self.numbers {
            // SAFETY: inserted at its birth; this, its end, removes it.
            Some(unsafe { m.remove(inode.ino, rcu) })
        } else {
            let hash = ino_hash(inode.ino);
            let part = self.part(inode.ino);
            let owned = part.lock(hash, rcu).take(inode, hash);
            part.shrink_if_sparse(rcu);
            owned
        };
        debug_assert!(owned.is_some(), "an inode being freed is in its table");
        // SAFETY: added when the inode was made; only this, its end,
        // deletes it.
        unsafe { self.list.del(ptr::addr_of!(inode.sb_link)) };
        if let Some(f) = &self.on_free {
            f(inode);
        }
        // SAFETY: out of the table and off the list, with no reference: only
        // RCU readers that loaded it earlier can see it; they are waited out.
        unsafe { rcu.retire_box(owned.unwrap_or(inode as *const Inode as *mut Inode)) };
    }

    /// Teardown of the superblock: evicts every copy left (nothing can
    /// reach them any more), checking the superblock list against the table
    /// as unmount's `evict_inodes` walks it. An owned table's inodes stay
    /// with their filesystem, unbound from the superblock: the references
    /// the VFS held on them are gone (a teardown frees dentries without
    /// `iput`), and those that nothing else keeps are freed.
    pub fn clear(&self, sb: &Super, counters: &LiveCounters, rcu: &Rcu) {
        if self.owned() {
            if let Some(m) = sb.fs.as_memfs() {
                m.unbind(sb);
            }
            // One read section over the whole walk: the filesystem, used
            // through another handle meanwhile, may free any inode that no
            // reference keeps (an unlink, a forget), and a freed inode is
            // retired, so it stays readable until the section ends. A dead
            // one is skipped by both steps below.
            let g = rcu.read_lock();
            self.for_each(&g, |i| {
                i.set_owner(ptr::null());
                let mut r = i.refs.lock();
                if r.count() > 0 {
                    r.set_count(0);
                    counters.add_inode(-1);
                }
                drop(r);
                self.release_if_unused(i, rcu);
            });
            return;
        }
        let g = rcu.read_lock();
        let mut left: Vec<*const Inode> = Vec::new();
        self.for_each(&g, |i| {
            if !i.is_dead() {
                left.push(i);
            }
        });
        drop(g);
        let mut listed = 0;
        self.list.for_each(|_| listed += 1);
        assert_eq!(listed, left.len(), "the superblock list and the inode table disagree");
        for p in left {
            // SAFETY: teardown: no dentry or file refers to it any more;
            // freed through RCU since walkers may still read it.
            let i = unsafe { &*p };
            i.refs.lock().mark_dead();
            counters.add_inode(-1);
            self.free(i, rcu);
        }
        debug_assert!(self.list.is_empty());
    }

    /// Frees every inode of an owned table at once, with `f` called on each
    /// first (its filesystem's teardown).
    ///
    /// # Safety
    /// Nothing can reach the table or its inodes any more, and no RCU
    /// reader can still hold one of them.
    pub unsafe fn drop_owned(&self, mut f: impl FnMut(&Inode)) {
        let mut all: Vec<*const Inode> = Vec::new();
        // SAFETY: the caller's contract.
        unsafe { self.owned_map().drain_now(|i| all.push(i)) };
        for p in all {
            // SAFETY: the caller's contract.
            let i = unsafe { &*p };
            f(i);
            // SAFETY: on the list since its creation.
            unsafe { self.list.del(ptr::addr_of!(i.sb_link)) };
            // SAFETY: the caller's contract: no reader is left.
            drop(unsafe { Box::from_raw(p as *mut Inode) });
        }
    }
}

/// loom model of the extended attributes' copy-on-write protocol: two
/// writers replace the list at once while a reader reads it under RCU.
/// No update is lost, and the reader sees only lists some writer
/// published whole.
#[cfg(all(test, loom))]
mod loom_xattr {
    use super::*;
    use crate::sync::atomic::loom_model as model;

    /// A regular file's attributes (the dcache models' helper: inodes
    /// from 10 up are files).
    fn attr() -> Attr {
        crate::dcache::loom_tests::attr(10)
    }

    fn add(name: &'static [u8]) -> impl FnMut(Option<&Xattrs>) -> crate::error::Result<(Option<Xattrs>, ())> {
        move |cur| {
            let mut x = cur.cloned().unwrap_or_default();
            if let Err(k) = x.find(name) {
                x.0.insert(k, (name.into(), name.into()));
            }
            Ok((Some(x), ()))
        }
    }

    #[test]
    fn loom_xattr_writers_lose_nothing_and_readers_see_whole_lists() {
        model(|| {
            let inode = Arc::new(Inode::new_owned(&attr(), ptr::null()));
            let rcu = Arc::new(Rcu::new());
            let writers: Vec<_> = [&b"user.a"[..], b"user.b"]
                .into_iter()
                .map(|name| {
                    let (inode, rcu) = (inode.clone(), rcu.clone());
                    loom::thread::spawn(move || inode.update_xattrs(&rcu, add(name), |_| ()).unwrap())
                })
                .collect();
            {
                loom::thread::yield_now();
                let g = rcu.read_lock();
                if let Some(x) = inode.xattrs(&g) {
                    assert!(!x.0.is_empty() && x.0.len() <= 2);
                    assert!(x.0.windows(2).all(|w| w[0].0 < w[1].0), "unsorted");
                    assert!(x.0.iter().all(|(n, v)| n == v), "a torn entry");
                }
            }
            for w in writers {
                w.join().unwrap();
            }
            let g = rcu.read_lock();
            let x = inode.xattrs(&g).expect("both set");
            assert_eq!(x.0.len(), 2, "an update was lost");
        });
    }
}

/// loom models of an orphaned file's data (`drop_data_if_orphaned`): the
/// last close, the last forget and the last unlink, racing, leave no data
/// behind (at least one of them drops it); an open that succeeds never
/// sees it go.
#[cfg(all(test, loom))]
mod loom_orphan {
    use super::*;
    use crate::filemap::{CacheMode, PageCache};
    use crate::sync::atomic::loom_model as model;

    /// An owned file of one link, with a page cache holding `data` (one
    /// page, or none).
    fn file(data: &[u8]) -> Arc<Inode> {
        let i = Arc::new(Inode::new_owned(&crate::dcache::loom_tests::attr(10), ptr::null()));
        let pc = i.data_or_init(|| Arc::new(PageCache::new(CacheMode::Lockless)));
        if !data.is_empty() {
            pc.write(Some(0), data).unwrap();
        }
        i
    }

    fn pages(i: &Inode) -> u64 {
        i.data_if_any().expect("made").pages()
    }

    /// What memfs does as the last name goes.
    fn unlink(i: &Inode) {
        i.update(|a| a.nlink = 0);
        i.drop_data_if_orphaned();
    }

    /// Runs `a` and `b` on `i` in two threads, and waits for both.
    fn race(i: &Arc<Inode>, a: fn(&Inode), b: fn(&Inode)) {
        let t: Vec<_> = [a, b]
            .into_iter()
            .map(|f| {
                let i = i.clone();
                loom::thread::spawn(move || f(&i))
            })
            .collect();
        for t in t {
            t.join().unwrap();
        }
    }

    #[test]
    fn loom_the_last_close_or_the_last_unlink_drops_the_data() {
        model(|| {
            let i = file(&[1; 8]);
            assert!(i.open_begin());
            race(&i, unlink, |i| i.open_end());
            assert_eq!(pages(&i), 0, "neither the last close nor the last unlink dropped the data");
        });
    }

    /// A file that grows while open (its writer closes last) and its last
    /// unlink: the unlink must not judge the size before its fence (the
    /// review found that interleaving: the unlink saw no pages yet, the
    /// close saw the link still there).
    #[test]
    fn loom_a_file_grown_while_open_loses_its_data_at_the_end() {
        model(|| {
            let i = file(&[]);
            assert!(i.open_begin());
            let grow_and_close = |i: &Inode| {
                i.data_if_any().expect("made").write(Some(0), &[1; 8]).unwrap();
                i.open_end();
            };
            race(&i, grow_and_close, unlink);
            assert_eq!(pages(&i), 0, "the data outlived its last link and its last open");
        });
    }

    /// A lookup handed out (a copy elsewhere, a caller of memfs itself,
    /// which reads by number without opening) keeps the data; its forget,
    /// racing the last unlink, lets it go.
    #[test]
    fn loom_the_last_forget_or_the_last_unlink_drops_the_data() {
        model(|| {
            let i = file(&[1; 8]);
            i.lookups_add(1);
            let forget = |i: &Inode| {
                i.lookups_sub(1);
                i.drop_data_if_orphaned();
            };
            race(&i, unlink, forget);
            assert_eq!(pages(&i), 0, "neither the last forget nor the last unlink dropped the data");
        });
    }

    /// A cache taken by number (`page_cache`, as another superblock's copy
    /// takes it, or a caller of memfs with no lookup) racing the last
    /// unlink: whoever holds one is never left with pages freed at once;
    /// they are retired, so its readers are waited out. Alone, the unlink
    /// frees them at once.
    #[test]
    fn loom_a_cache_taken_by_number_is_never_freed_under_its_holder() {
        model(|| {
            let i = file(&[1; 8]);
            let held = Arc::new(loom::sync::Mutex::new(None));
            let h = held.clone();
            let j = i.clone();
            let t = loom::thread::spawn(move || {
                *h.lock().unwrap() = j.data_arc_unless_gone(|| unreachable!("the cache exists"));
            });
            unlink(&i);
            t.join().unwrap();
            let pc = i.data_if_any().expect("made");
            let taken = held.lock().unwrap().is_some();
            let at_once = pc.dropped_unread.load(std::sync::atomic::Ordering::Relaxed);
            assert!(!(taken && at_once), "pages freed at once while another held the cache");
            assert_eq!(pages(&i), 0, "the data outlived its last link");
            if !taken {
                assert!(at_once, "the cache was the inode's alone, yet its pages waited for a grace period");
            }
        });
    }

    /// memfs's read by number (`read_unopened`) racing the last unlink:
    /// a read that starts reads the whole data; the pages go at once in
    /// either order (by the unlink, or by the read's close after it).
    #[test]
    fn loom_a_read_by_number_never_sees_its_pages_go() {
        model(|| {
            let i = file(&[1; 8]);
            let j = i.clone();
            let t = loom::thread::spawn(move || {
                j.read_unopened(|| {
                    let mut buf = [0u8; 8];
                    let n = j.data_if_any().expect("made").read(0, &mut buf);
                    assert_eq!((n, buf), (8, [1; 8]), "a counted read lost its data");
                })
            });
            unlink(&i);
            // The read either ran whole (asserted inside) or was refused.
            let _read: Option<()> = t.join().unwrap();
            assert_eq!(pages(&i), 0, "the data outlived its last link and its read");
            let at_once = i.data_if_any().expect("made").dropped_unread.load(std::sync::atomic::Ordering::Relaxed);
            assert!(at_once, "nothing else held the cache, yet its pages waited for a grace period");
        });
    }

    #[test]
    fn loom_an_open_file_keeps_its_data() {
        model(|| {
            let i = file(&[1; 8]);
            let open_read_close = |i: &Inode| {
                if i.open_begin() {
                    assert_eq!(pages(i), 1, "the data went while a file had it open");
                    i.open_end();
                }
            };
            race(&i, unlink, open_read_close);
            assert_eq!(pages(&i), 0, "the data outlived its last link and its last open");
        });
    }
}

#[cfg(all(test, not(loom)))]
#[test]
fn what_a_stat_reads_fills_the_first_two_lines() {
    use crate::fs::FileSystem;
    assert_eq!((std::mem::size_of::<Inode>(), std::mem::align_of::<Inode>()), (192, 64));
    let i = Inode::new_owned(&crate::fs::memfs::MemFs::default().getattr(1).unwrap(), ptr::null());
    let at = |p: *const u8| p as usize - &i as *const Inode as usize;
    for (what, off) in [
        ("attrs", at(&i.attrs as *const _ as *const u8)),
        ("ino", at(&i.ino as *const _ as *const u8)),
        ("kind", at(&i.kind as *const _ as *const u8)),
        ("rdev", at(&i.rdev as *const _ as *const u8)),
        ("times", at(&i.times as *const _ as *const u8) + std::mem::size_of::<Times>() - 1),
        ("data", at(&i.data as *const _ as *const u8) + std::mem::size_of_val(&i.data) - 1),
    ] {
        assert!(off < 128, "{what} at byte {off}");
    }
    for (what, off) in [
        ("refs", at(&i.refs as *const _ as *const u8)),
        ("nlookup", at(&i.nlookup as *const _ as *const u8)),
        ("the list link", at(&i.sb_link as *const _ as *const u8)),
    ] {
        assert!(off >= 128, "{what} shares a line with the attributes (byte {off})");
    }
}

/// A filesystem's answers may reach the in-core inode in the other order
/// than it made the changes (a truncate's, then a write's refresh read
/// before the truncate): the older attributes, by ctime, must not replace
/// the newer; of two reads, the one begun later wins whichever lands
/// first; a setattr's answer stands only if nothing began meanwhile.
#[cfg(all(test, not(loom)))]
#[test]
fn set_attr_read_keeps_the_newer_of_two_answers() {
    use crate::fs::{FileSystem, Timespec};
    let mut old = crate::fs::memfs::MemFs::default().getattr(1).unwrap();
    old.size = 100;
    old.ctime = Timespec { sec: 10, nsec: 0 };
    let i = Inode::new(&old, ptr::null());
    let mut new = old.clone();
    new.size = 5;
    new.ctime = Timespec { sec: 10, nsec: 1 };
    assert!(i.set_attr_read(&new, i.begin_read()));
    assert!(i.set_attr_read(&old, i.begin_read()));
    assert_eq!(i.attr().size, 5, "an older answer, by ctime, replaced a newer one");
    // The same ctime (a coarse clock) is no evidence of order: the start
    // is. Begun first, landed last: refused (what is in core is newer).
    let (first, second) = (i.begin_read(), i.begin_read());
    let (mut torn, mut same) = (new.clone(), new.clone());
    torn.size = 6;
    same.size = 7;
    assert!(i.set_attr_read(&same, second));
    assert!(i.set_attr_read(&torn, first));
    assert_eq!(i.attr().size, 7, "a read begun before another landed after it");
    // Begun first, landed first: stored, then replaced by the later read.
    let (first, second) = (i.begin_read(), i.begin_read());
    torn.size = 8;
    same.size = 9;
    assert!(i.set_attr_read(&torn, first));
    assert_eq!(i.attr().size, 8, "a read was refused for one begun after it, still under way");
    assert!(i.set_attr_read(&same, second));
    assert_eq!(i.attr().size, 9);
    if cfg!(miri) {
        // What follows runs about 180,000 sections (the tickets' wrap and
        // window): tens of minutes under Miri, which has checked the
        // sections and the ticket's cell above.
        return;
    }
    // Tickets are 16 bits: the order holds across their wrap, and after
    // many reads that stored nothing (failed, or refused by ctime).
    for _ in 0..40_000 {
        assert!(i.set_attr_read(&same, i.begin_read()));
    }
    for _ in 0..70_000 {
        i.begin_read();
    }
    let (first, second) = (i.begin_read(), i.begin_read());
    torn.size = 11;
    same.size = 12;
    assert!(i.set_attr_read(&torn, first));
    assert_eq!(i.attr().size, 11, "a young read was refused after many reads that stored nothing");
    assert!(i.set_attr_read(&same, second));
    assert!(i.set_attr_read(&torn, first));
    assert_eq!(i.attr().size, 12, "a read begun first landed last after the tickets wrapped");
    // A read older than the window is refused whatever is in core.
    let ancient = i.begin_read();
    for _ in 0..TICKET_WINDOW {
        i.begin_read();
    }
    assert!(!i.set_attr_read(&torn, ancient), "a read older than the window was stored");
    assert_eq!(i.attr().size, 12);
    // A setattr's answer: stored if nothing began since the call began,
    // and newer than any read begun before.
    let before = i.begin_read();
    let since = i.attr_version();
    same.size = 10;
    i.set_attr_after(&same, since);
    assert_eq!(i.attr().size, 10);
    assert!(i.set_attr_read(&torn, before));
    assert_eq!(i.attr().size, 10, "a read begun before a setattr's answer landed after it");
    // setattr answers refused by ctime (a host clock stepped back) move
    // the version and store nothing: a read begun after 50,000 of them is
    // still ordered right. (They mark the attributes stale, and `attr`
    // would read this inode's filesystem, which it has not: read the cache.)
    let mut back = same.clone();
    back.ctime = Timespec { sec: 1, nsec: 0 };
    for _ in 0..50_000 {
        i.set_attr_after(&back, i.attr_version());
    }
    let mut later = same.clone();
    later.size = 13;
    later.ctime = Timespec { sec: 20, nsec: 0 };
    assert!(i.set_attr_read(&later, i.begin_read()));
    assert_eq!(i.cached_attr().size, 13, "a read was refused after setattr answers refused by ctime");
}
