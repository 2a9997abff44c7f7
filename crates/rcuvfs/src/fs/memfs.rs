//! `memfs`: the embedded in-memory filesystem (tmpfs-like), the default under
//! a `Vfs`.
//!
//! # One inode per file
//!
//! memfs keeps its inodes as the VFS's in-core inodes ([`Inode`]), in one
//! table by number (partitioned by the thread shard that made them), as
//! tmpfs keeps its truth in the kernel's inodes. A
//! memfs bound to a superblock (see [`MemFs::bind`]: the `Vfs` it is the
//! root of, or the first that mounts it in the same RCU domain) lends that
//! table to it: a file then exists once, as one inode and one name in its
//! directory here, plus a dentry in the dcache while one is cached (for a
//! file, in the VFS's default mode, only once something needs one, a
//! handle's lookup, a link or a rename; in the other modes, none made by a
//! create at the cache's size target, which would only evict another: the
//! VFS's RCU walk reads this memfs's index for names it lacks), and an
//! update is visible to the VFS the moment memfs makes it.
//! Served any other way (a second `Vfs`, a wrapper), memfs is an ordinary
//! filesystem and the VFS keeps copies.
//!
//! A bound memfs changes through its `Vfs`, which is what lets that `Vfs`
//! know a directory complete (`VfsBuilder::complete_dirs`) and answer a
//! miss there without asking: a name added by calling this memfs's
//! `FileSystem` methods directly is not seen in such a directory (as one
//! cached negative would hide it in any). A second `Vfs` over the same
//! memfs turns completeness off in the first for good, since its changes
//! reach memfs alone. In a directory that is not complete, the bound
//! `Vfs`'s RCU walk reads this memfs's index itself for a name its dcache
//! lacks (`find_bound`): a miss and a stat are answered here, with no
//! dentry made.
//!
//! Its inodes live while they have a link, a lookup memfs handed out and
//! was not paid back (FUSE's protocol, counted in the inode), or a VFS
//! reference; whoever drops the last of the three frees the inode
//! ([`InodeTable::release_if_unused`]). A regular file's page cache is made
//! at its first write: an empty file has none.
//!
//! # Directories
//!
//! A directory's entries are [`Dirent`]s in an RCU index of its own
//! (`sync::index`): a lookup takes no lock and stores nothing; a create,
//! unlink or rename takes only the index's home locks of the names it
//! changes, so updates of different names run in parallel, even in one
//! directory. readdir's cookie is the name's hash (less its low bit): a listing resumes after
//! the last hash it returned and sees each entry present throughout once,
//! whatever resizes happen meanwhile. A directory's size is its entry
//! count, read from its index.
//!
//! # Locks
//!
//! | lock | protects |
//! |------|----------|
//! | a directory index's home lock | the entries whose name hashes there: their presence and the inode each names |
//! | `Inode::attrs` (a seqlock) | an inode's attributes, link count included (`Inode::update`) |
//! | `Inode::refs`' lock | the decision to free an inode (`release_if_unused`) |
//! | the inode table's home locks, the inode list's | inodes' membership (see `inode`) |
//! | a file's page cache (its writer and mode locks) | its pages; taken alone |
//!
//! Order: directory home locks (two at once only in a rename, in
//! `Index::lock2`'s order), then the inode table's, then `attrs`; `refs`'
//! lock after `attrs`' is never needed (a link count is written under
//! `attrs` and read under `refs`' lock, which comes first where both are
//! held). memfs takes these after every VFS lock (the VFS calls it holding
//! its name locks), and while holding one calls nothing of the VFS's but
//! the checks an unlink or rmdir without a dentry hands it
//! (`unlink_bound_checked`, `rmdir_bound_checked`), which read attributes
//! and take no lock.
//!
//! A directory that is removed has its index closed first
//! (`close_empty`, one CAS against inserts' reservations): `rmdir`
//! and a rename over a directory fail with ENOTEMPTY if anything is in it,
//! and once closed no create can add to it (ENOENT). That is done before
//! the parent's home lock is taken, never under it, since closing may wait
//! for a resize of the victim's index.

use std::ptr;
use std::sync::{Arc, OnceLock};

use super::{
    Attr, DirEntry, FileSystem, FileType, Ino, NewNode, Owner, RenameFlags, SetAttr, StatFs, Timespec, WritePos,
    XattrSet, XATTR_LIST_MAX,
};
use crate::error::{err, fail, Result, EEXIST, EINVAL, EISDIR, ENODATA, ENOENT, ENOSPC, ENOTDIR, ENOTEMPTY, EPERM};
use crate::filemap::{Accounting, CacheMode, PageCache, PAGE};
use crate::hash::same_name;
use crate::inode::{Inode, InodeTable, Super};
use crate::sync::atomic::{prefetch, AtomicPtr, Ordering};
use crate::sync::index::{Index, Indexed, InsertError, Locked, Probe};
use crate::sync::list_batch::ListMode;
use crate::sync::shard::{Budget, Padded, THREAD_SHARDS};
use crate::sync::{Rcu, RcuGuard};
use crate::time::now;

pub const ROOT_INO: Ino = 1;
const BLOCK: u64 = 4096;
use crate::inode::INO_CHUNK;
/// Entries one `readdir` call returns at least (when there are that many).
const READDIR_BATCH: usize = 256;

pub use crate::modes::AtimePolicy;

/// memfs limits and options.
#[derive(Clone, Copy, Debug)]
pub struct MemFsOptions {
    /// Bytes of file data (whole 4 KiB pages; holes take none) and symlink
    /// targets; ENOSPC past it.
    pub max_bytes: u64,
    /// Inodes, the root included; ENOSPC past it.
    pub max_inodes: u64,
    pub atime: AtimePolicy,
    /// How file data's page cache is locked (seed 001).
    pub cache: CacheMode,
    /// How the list of memfs's inodes is locked (seed 004): its inodes are
    /// the in-core inodes of the superblock it is bound to, on this list.
    pub inode_list: ListMode,
}

impl Default for MemFsOptions {
    fn default() -> Self {
        Self {
            max_bytes: u64::MAX / 2,
            max_inodes: u64::MAX / 2,
            atime: AtimePolicy::Relatime,
            cache: CacheMode::default(),
            inode_list: ListMode::default(),
        }
    }
}

/// A name in a directory and the inode it names (changed in place, under
/// the name's home lock, by a rename over it or an exchange): 16 bytes, in
/// one block for a name of up to 7 bytes. The index key (and readdir's
/// cookie) is not stored: it is [`name_key`] of the bytes, computed again
/// where the index needs it (a resize, a listing), which costs a few
/// nanoseconds against 8 bytes per file.
///
/// The word `inode` carries the inode's address, 64-byte aligned, and in
/// its low bits the name's form, fixed at creation ([`NameForm`]): an
/// inline name's length (1 to 7; names are never empty), or `HEAP`.
#[repr(C)]
pub(crate) struct Dirent {
    inode: AtomicPtr<Inode>,
    name: NameCell,
}

/// The name's bytes, inline, or a block on the heap: its length, then the
/// bytes. Which one is said by the low bits of `Dirent::inode`.
union NameCell {
    inline: [u8; 8],
    heap: *mut u8,
}

/// The low bits of `Dirent::inode` that hold the name's form.
const FORM: usize = 15;
/// The form of a name kept on the heap (longer than 7 bytes).
const HEAP: usize = 8;

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Dirent>() == 16 && std::mem::align_of::<Inode>() > FORM);

impl Indexed for Dirent {
    fn index_hash(&self) -> u64 {
        name_key(self.name())
    }
}

impl Dirent {
    fn heap_layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::array::<u8>(1 + len).expect("a name's size")
    }

    /// A new entry, not yet shared: the caller inserts it, or frees it with
    /// [`free`](Self::free). `name` is 1 to 255 bytes.
    fn new_raw(inode: &Inode, name: &[u8]) -> *mut Dirent {
        assert!(!name.is_empty() && name.len() <= u8::MAX as usize, "a name of 1 to NAME_MAX bytes");
        let (form, cell) = if name.len() <= 7 {
            let mut inline = [0; 8];
            inline[..name.len()].copy_from_slice(name);
            (name.len(), NameCell { inline })
        } else {
            let layout = Self::heap_layout(name.len());
            // SAFETY: a layout of at least 9 bytes.
            let p = unsafe { std::alloc::alloc(layout) };
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            // SAFETY: a fresh block of 1 + len bytes.
            unsafe {
                p.write(name.len() as u8);
                ptr::copy_nonoverlapping(name.as_ptr(), p.add(1), name.len());
            }
            (HEAP, NameCell { heap: p })
        };
        let i = (inode as *const Inode as *mut Inode).map_addr(|a| a | form);
        Box::into_raw(Box::new(Dirent { inode: AtomicPtr::new(i), name: cell }))
    }

    /// Frees an entry now.
    ///
    /// # Safety
    /// `p` came from [`new_raw`](Self::new_raw), is freed once, and no one
    /// can read it any more.
    unsafe fn free(p: *mut ()) {
        // SAFETY: the caller's contract; a heap name is the entry's own.
        unsafe {
            let d = Box::from_raw(p as *mut Dirent);
            if d.form() == HEAP {
                let h = d.name.heap;
                std::alloc::dealloc(h, Self::heap_layout(*h as usize));
            }
        }
    }

    /// Frees an entry after a grace period of `rcu`.
    ///
    /// # Safety
    /// As [`free`](Self::free), except that readers that found it before
    /// this call may still read it (they are waited out).
    unsafe fn retire(rcu: &Rcu, p: *const Dirent) {
        // SAFETY: the caller's contract.
        unsafe { rcu.retire_with(p as *mut (), Self::free, std::mem::size_of::<Dirent>()) }
    }

    fn form(&self) -> usize {
        // Relaxed: the form bits never change.
        self.inode.load(Ordering::Relaxed).addr() & FORM
    }

    fn name(&self) -> &[u8] {
        let form = self.form();
        // SAFETY: the form says which field was written; a heap block
        // starts with its length and lives as long as the entry.
        unsafe {
            if form == HEAP {
                let h = self.name.heap;
                std::slice::from_raw_parts(h.add(1), *h as usize)
            } else {
                &self.name.inline[..form]
            }
        }
    }

    fn inode(&self) -> &Inode {
        // SAFETY: an entry's inode has a link (this entry) while the entry
        // is in its directory, and is freed only through RCU after its last
        // link goes; a reader of the entry is in a read section.
        unsafe { &*self.inode_ptr(Ordering::Acquire) }
    }

    fn inode_ptr(&self, o: Ordering) -> *const Inode {
        self.inode.load(o).map_addr(|a| a & !FORM)
    }

    /// Makes this entry name `i` (its name's form is kept).
    fn set_inode(&self, i: &Inode, o: Ordering) {
        let form = self.form();
        self.inode.store((i as *const Inode as *mut Inode).map_addr(|a| a | form), o);
    }
}

// SAFETY: the heap name is owned by the entry and never written after it
// is made; the rest is atomic.
unsafe impl Send for Dirent {}
// SAFETY: as above.
unsafe impl Sync for Dirent {}

/// The key of a name in a directory: odd, and at least 3, so that
/// `key >> 1`, readdir's cookie, is never 0 (the first cookie) and below
/// 2^63 - 4: a cookie must fit an `off_t` (`seekdir` through a mount takes
/// an `lseek`), with room for FUSE's "." and "..".
pub(crate) fn name_key(name: &[u8]) -> u64 {
    (crate::hash::name_hash(0, name) | 1).clamp(3, u64::MAX - 8)
}

/// What keeps a new inode from being freed until its creator is done
/// with it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keeper {
    /// A lookup, which the `FileSystem` call's caller then owes.
    Lookup,
    /// A VFS reference, for the VFS of the superblock this memfs is bound
    /// to.
    Reference,
    /// Nothing but its nlink of 1, for a VFS create whose caller keeps
    /// nothing of the inode ([`MemFs::create_bound`]).
    Link,
}

/// A directory's link for a subdirectory just put in it, counted after
/// the entry's lock is let go, unless the directory was removed
/// meanwhile (its count set to 0: the subdirectory was removed, then the
/// directory, in between). Raised from 0 (until 2026-11-29), the count
/// kept the removed directory alive for good (helper-32's review). Only
/// through these calls directly: the VFS holds `x`'s name lock across a
/// mkdir, so an rmdir of `x` waits for the count. No test shows it: loom
/// did not reach the window (between the rmdir's update of the count and
/// its look at it) in a model of the three calls.
fn gain_subdir_link(a: &mut Attr) {
    if a.nlink != 0 {
        a.nlink += 1;
    }
}

/// readdir's cookie of a key (losing only the low bit, always set).
fn cookie_of(key: u64) -> u64 {
    key >> 1
}

/// The key after which a listing resumes from `cookie` (`None`: past every
/// key).
fn key_after(cookie: u64) -> Option<u64> {
    cookie.checked_mul(2).map(|k| k | 1)
}

/// What memfs counts, shared with its inode table's free hook: budgets
/// that each thread charges on a line of its own (`shard::Budget`), so two
/// creates or two writes anywhere share no counter.
struct Usage {
    /// Inodes alive (linked, looked up or referenced), against `max_inodes`.
    inodes: Budget,
    /// Bytes of data and symlink targets, against `max_bytes`.
    bytes: Budget,
}

/// Inodes a shard reserves at a time.
const INODE_CHUNK: u64 = 64;
/// Bytes a shard reserves at a time (64 pages).
const BYTE_CHUNK: u64 = 64 * PAGE as u64;

impl Usage {
    fn inode_freed(&self, i: &Inode) {
        // Its data goes now, not with the inode at the end of its grace
        // period (which waits for this shard's reclamation batch to fill):
        // as the kernel's evict truncates the pages of a deleted inode.
        // Nothing can open the inode any more; a read by number that found
        // it before counts as an open (then the data goes with the inode).
        i.drop_data_unless_open();
        self.inodes.refund(1);
        let mut bytes = i.link().map_or(0, |t| t.len() as u64);
        bytes += i.xattr_bytes_when_freed();
        self.bytes.refund(bytes);
    }

    /// Charges (or, negative, refunds) `bytes` against `max_bytes`.
    fn charge(&self, bytes: i64) -> Result<()> {
        if bytes < 0 {
            self.bytes.refund(bytes.unsigned_abs());
            Ok(())
        } else if self.bytes.charge(bytes as u64) {
            Ok(())
        } else {
            fail(ENOSPC)
        }
    }
}

/// The in-memory filesystem.
pub struct MemFs {
    opts: MemFsOptions,
    /// The RCU domain its indexes and inodes are read and freed in: the
    /// VFS's once bound (set at the first use or the first `bind`).
    rcu: OnceLock<Arc<Rcu>>,
    /// The superblock it is bound to, or null.
    bound: std::sync::atomic::AtomicPtr<Super>,
    /// Set once a superblock other than the bound one serves this memfs
    /// (`Super::dirs_complete`).
    shared: Arc<std::sync::atomic::AtomicBool>,
    table: Arc<InodeTable>,
    root: *const Inode,
    /// Per shard: the next inode number of its chunk (0: take a chunk),
    /// and the chunks it took. Shard `s`'s `k`-th chunk is `k * SHARDS + s`
    /// (from `k = 1`; chunk 0 holds the root), every number of it handed
    /// out, one leaf of the inode table (`sync::chunk_map`).
    next_ino: Box<[Padded<(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)>]>,
    usage: Arc<Usage>,
    /// Charges a page cache's pages to `usage.bytes`.
    acct: Accounting,
}

// SAFETY: `root` points into `table`, which the filesystem owns; everything
// else is Send + Sync.
unsafe impl Send for MemFs {}
// SAFETY: as above.
unsafe impl Sync for MemFs {}

impl Default for MemFs {
    fn default() -> Self {
        Self::new(MemFsOptions::default())
    }
}

impl MemFs {
    pub fn new(opts: MemFsOptions) -> MemFs {
        let usage = Arc::new(Usage {
            inodes: Budget::new(opts.max_inodes, INODE_CHUNK),
            bytes: Budget::new(opts.max_bytes, BYTE_CHUNK),
        });
        // The root.
        usage.inodes.force(1);
        let u = usage.clone();
        let table = Arc::new(InodeTable::new_owned(opts.inode_list, Box::new(move |i| u.inode_freed(i))));
        let u = usage.clone();
        let acct = Accounting::new(move |pages: i64| u.charge(pages * PAGE as i64));
        let t = now();
        let attr = Attr {
            ino: ROOT_INO,
            kind: FileType::Dir,
            perm: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            rdev: 0,
        };
        let root = Box::new(Inode::new_owned(&attr, ptr::null()));
        // The root's implicit lookup: it is never freed.
        root.lookups_add(1);
        // No domain is chosen yet (the first `bind` or use chooses it): the
        // first insert into an empty table retires nothing, so a domain of
        // its own for this one call is enough.
        // SAFETY: the root's number is the only one memfs uses in its chunk
        // (`next_ino` hands out chunks from the second on).
        let root = unsafe { table.insert_new(root, 1, &Rcu::new()) };
        MemFs {
            opts,
            rcu: OnceLock::new(),
            bound: std::sync::atomic::AtomicPtr::new(ptr::null_mut()),
            shared: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            table,
            root,
            next_ino: (0..THREAD_SHARDS).map(|_| Padded(Default::default())).collect(),
            usage,
            acct,
        }
    }

    /// Inodes alive in memfs (linked, looked up or referenced): for leak
    /// checks.
    pub fn live_inodes(&self) -> u64 {
        self.usage.inodes.used()
    }

    /// Bytes of data stored.
    pub fn used_bytes(&self) -> u64 {
        self.usage.bytes.used()
    }

    fn rcu(&self) -> &Rcu {
        self.domain()
    }

    /// Its RCU domain, chosen now if it has none yet.
    pub(crate) fn domain(&self) -> &Arc<Rcu> {
        self.rcu.get_or_init(|| Arc::new(Rcu::new()))
    }

    /// The table of its inodes (lent to the superblock it is bound to).
    pub(crate) fn table(&self) -> &Arc<InodeTable> {
        &self.table
    }

    /// Binds memfs to superblock `sb` of a VFS whose RCU domain is `rcu`:
    /// its inodes become that superblock's in-core inodes. Fails (`false`)
    /// if it is bound already, or already lives in another domain.
    pub(crate) fn bind(&self, sb: *const Super, rcu: &Arc<Rcu>) -> bool {
        if !Arc::ptr_eq(self.rcu.get_or_init(|| rcu.clone()), rcu) {
            return false;
        }
        let s = std::sync::atomic::Ordering::SeqCst;
        if self.bound.compare_exchange(ptr::null_mut(), sb as *mut Super, s, s).is_err() {
            return false;
        }
        // Every inode made before learns its superblock. One made meanwhile
        // either is seen here or sees `bound` itself (`alloc`: insert, fence,
        // load; here: store, fence, walk: a SeqCst fence on each side, since
        // the table pointers and slots are not all written and read SeqCst).
        crate::sync::atomic::fence(s);
        let g = rcu.read_lock();
        self.table.for_each(&g, |i| i.set_owner(sb));
        true
    }

    /// The mark that a superblock other than the bound one serves this
    /// memfs (`Super::dirs_complete`).
    pub(crate) fn shared_mark(&self) -> &Arc<std::sync::atomic::AtomicBool> {
        &self.shared
    }

    /// Undoes [`bind`](Self::bind) (the superblock's teardown; the table
    /// resets its inodes).
    pub(crate) fn unbind(&self, sb: &Super) {
        let s = std::sync::atomic::Ordering::SeqCst;
        let _ = self.bound.compare_exchange(sb as *const Super as *mut Super, ptr::null_mut(), s, s);
    }

    /// Whether this memfs is bound to the superblock `sb` (its inodes are
    /// that VFS's), for the `*_bound` shortcuts the VFS takes.
    #[inline]
    pub(crate) fn bound_to(&self, sb: &Super) -> bool {
        // Relaxed: only compared. `sb` reaches us through the VFS that
        // `bind` published this binding to (it stored `bound` before the
        // superblock was made reachable), and an unbind comes only with
        // that superblock's teardown, after its last call.
        ptr::eq(self.bound.load(Ordering::Relaxed), sb)
    }

    /// For the VFS of the superblock `sb`, if this memfs is bound to it
    /// (its inodes are that VFS's): the inode `name` names in directory
    /// `dir` (an inode of this memfs), with a VFS reference, found from
    /// the directory's inode the VFS already holds, with no probe of the
    /// inode table by number, no lookup counted and paid back, and no
    /// attributes copied (a cold lookup's misses: at 10M files, past the
    /// dcache target, every stat takes this path). `Some(None)`: no such
    /// name. `None`: not bound to `sb`, or the inode is dying: the general
    /// path decides.
    pub(crate) fn lookup_bound(
        &self,
        sb: &Super,
        dir: &Inode,
        name: &[u8],
        counters: &crate::counters::LiveCounters,
    ) -> Option<Option<*const Inode>> {
        if !self.bound_to(sb) {
            return None;
        }
        let g = self.rcu().read_lock();
        match Self::find(&g, dir, name, name_key(name)) {
            None => Some(None),
            Some(e) => self.table.hold(e.inode(), counters).map(Some),
        }
    }

    /// For the VFS of the superblock `sb`, if this memfs is bound to it:
    /// the inode that `name` names in directory `dir` (an inode of this
    /// memfs), or `Some(None)` if none, probed in the VFS's read section
    /// `g` (a bound memfs shares its RCU domain, so the inode stays
    /// readable while `g` lasts). `None` when not bound: the caller asks
    /// through the VFS.
    pub(crate) fn find_bound<'g>(
        &self,
        sb: &Super,
        g: &'g RcuGuard<'_>,
        dir: &'g Inode,
        name: &[u8],
    ) -> Option<Option<&'g Inode>> {
        if !self.bound_to(sb) || dir.kind != FileType::Dir {
            return None;
        }
        Some(Self::find(g, dir, name, name_key(name)).map(|e| e.inode()))
    }

    /// For the VFS of the superblock `sb`, if this memfs is bound to it:
    /// starts loading the line of `dir`'s index where `name` is or would
    /// be, for an update of that name whose walk is about to miss in the
    /// dcache's index; the two misses then overlap. `g`: a read section of
    /// the VFS's RCU domain, which a bound memfs shares.
    pub(crate) fn prefetch_bound(&self, sb: &Super, g: &RcuGuard<'_>, dir: &Inode, name: &[u8]) {
        if self.bound_to(sb) {
            dir.entries.prefetch(g, name_key(name));
        }
    }

    /// A new, empty page cache whose pages are charged to this memfs.
    pub(crate) fn new_page_cache(&self) -> Arc<PageCache> {
        Arc::new(PageCache::with_accounting(self.opts.cache, Some(self.acct.handle())))
    }

    /// The live inode `ino`.
    fn get<'g>(&'g self, g: &'g RcuGuard<'_>, ino: Ino) -> Result<&'g Inode> {
        if ino == ROOT_INO {
            // SAFETY: the root lives as long as memfs.
            return Ok(unsafe { &*self.root });
        }
        self.table.get(g, ino).ok_or_else(|| err(ENOENT))
    }

    /// The live directory `ino`.
    fn dir<'g>(&'g self, g: &'g RcuGuard<'_>, ino: Ino) -> Result<&'g Inode> {
        let d = self.get(g, ino)?;
        if d.kind != FileType::Dir {
            return fail(ENOTDIR);
        }
        Ok(d)
    }

    fn find<'g>(g: &'g RcuGuard<'_>, dir: &'g Inode, name: &[u8], key: u64) -> Option<&'g Dirent> {
        // `same_name`: no call to `memcmp` for a short name.
        dir.entries.find(g, key, |e| if same_name(e.name(), name) { Probe::Stop(e) } else { Probe::Skip })
    }

    /// `name` in the index under its home lock `l`: present until the
    /// holder removes it, and readable for as long as `_g`, the caller's
    /// read section, lasts.
    fn find_locked<'g>(_g: &'g RcuGuard<'_>, l: &Locked<'_, Dirent>, name: &[u8], key: u64) -> Option<&'g Dirent> {
        l.find(key, |e| if same_name(e.name(), name) { Probe::Stop(e as *const Dirent) } else { Probe::Skip })
            // SAFETY: entries are freed a grace period after their removal,
            // and `_g` is a read section.
            .map(|p| unsafe { &*p })
    }

    /// The next inode number: from the calling thread's shard's chunk, so
    /// that creates on different threads share no line.
    fn next_ino(&self) -> Ino {
        use std::sync::atomic::Ordering::Relaxed;
        let shard = crate::sync::shard::thread();
        let (s, taken) = &self.next_ino[shard].0;
        let mut v = s.load(Relaxed);
        loop {
            if v.is_multiple_of(INO_CHUNK) {
                // The chunk is used up (or none was taken): a new one. A
                // chunk lost to a racing thread of the same shard is only
                // numbers.
                let k = taken.fetch_add(1, Relaxed) + 1;
                let c = (k * THREAD_SHARDS as u64 + shard as u64) * INO_CHUNK;
                match s.compare_exchange(v, c + 1, Relaxed, Relaxed) {
                    Ok(_) => return c,
                    Err(x) => v = x,
                }
            } else {
                match s.compare_exchange_weak(v, v + 1, Relaxed, Relaxed) {
                    Ok(_) => return v,
                    Err(x) => v = x,
                }
            }
        }
    }

    /// A new inode, in the table, with one lookup (the caller's to hand
    /// out), or with `held` one VFS reference instead (`create_bound`'s),
    /// and the link its name will be (two for a directory).
    fn alloc(
        &self,
        kind: FileType,
        perm: u32,
        rdev: u64,
        owner: Owner,
        target: Option<&[u8]>,
        keeper: Keeper,
    ) -> Result<&Inode> {
        if !self.usage.inodes.charge(1) {
            return fail(ENOSPC);
        }
        let bytes = target.map_or(0, |t| t.len() as u64);
        if let Err(e) = self.usage.charge(bytes as i64) {
            self.usage.inodes.refund(1);
            return Err(e);
        }
        let t = now();
        let attr = Attr {
            ino: self.next_ino(),
            kind,
            perm: perm & 0o7777,
            nlink: if kind == FileType::Dir { 2 } else { 1 },
            uid: owner.uid,
            gid: owner.gid,
            size: bytes,
            blocks: bytes.div_ceil(BLOCK) * (BLOCK / 512),
            atime: t,
            mtime: t,
            ctime: t,
            rdev,
        };
        let sb = self.bound.load(std::sync::atomic::Ordering::SeqCst);
        // What keeps it until its caller has it ([`Keeper`]).
        let (refs, lookups) = match keeper {
            Keeper::Lookup => (0, 1),
            Keeper::Reference => (1, 0),
            Keeper::Link => (0, 0),
        };
        let inode = Box::new(Inode::new_owned_counted(&attr, sb, refs, lookups));
        if let Some(t) = target {
            inode.set_link(t.into());
        }
        // SAFETY: `next_ino` handed this number out once, and every number
        // of its chunk (the second on) to an inode made here.
        let p = unsafe { self.table.insert_new(inode, INO_CHUNK as u32, self.rcu()) };
        // SAFETY: in the table, with a lookup or a reference: it stays
        // until that is given back. With neither (`Keeper::Link`), its
        // nlink of 1 keeps it from being freed by anything but its
        // creator's `unalloc`, before or after it is named, and the
        // creator's read section keeps its memory past any unlink.
        let i = unsafe { &*p };
        // Bound meanwhile? (see `bind`: the fence orders our insert before
        // this load, against bind's store, fence and walk; loom model
        // `loom_bind_vs_create`). A fence, not `sc_fence`: the insert is a
        // Release store, to a leaf that reached us through a hint or the
        // leaves' index, by no SeqCst operation, so without it bind's walk
        // could read an older index while this load reads an older `bound`
        // (helper-31's review; allowed by the language, not by x86 or
        // ARMv8). The fences order our store, and what we read before it,
        // against bind's walk (helper-33's review).
        crate::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let now_sb = self.bound.load(std::sync::atomic::Ordering::SeqCst);
        if now_sb != sb {
            i.set_owner(now_sb);
        }
        Ok(i)
    }

    /// Takes back a new inode that got no name (its create failed), made
    /// with a lookup or with nothing (`keeper`; one made with a reference
    /// is `create_bound`'s to put).
    fn unalloc(&self, i: &Inode, keeper: Keeper) {
        debug_assert!(keeper != Keeper::Reference);
        Self::unname_new(i);
        if keeper == Keeper::Lookup {
            i.lookups_sub(1);
        }
        self.table.release_if_unused(i, self.rcu());
    }

    /// Takes back the link a new inode was made with, for the name it did
    /// not get. A link it got meanwhile (`link` by number, from a caller
    /// that guessed the number) stays, with its count: the two updates are
    /// ordered by the attributes' lock, and `link` adds no name to a count
    /// of 0. (Until 2026-11-29 this set the count to 0, and such a link's
    /// name was left naming a freed inode.)
    fn unname_new(i: &Inode) {
        i.update(|a| a.nlink = if i.kind == FileType::Dir { 0 } else { a.nlink.saturating_sub(1) });
    }

    /// Drops one link of `i` (a name of it went; a directory loses both of
    /// its own), and frees it if nothing else keeps it. `kept`: the caller
    /// holds a counted reference on `i` throughout (the VFS's, through the
    /// dentry it unlinks), so no look at the count is needed: it cannot be
    /// 0, and whoever drops the last reference frees `i`.
    fn drop_link(&self, i: &Inode, t: Timespec, kept: bool) {
        let (_, a) = i.update(|a| {
            a.nlink = if i.kind == FileType::Dir { 0 } else { a.nlink.saturating_sub(1) };
            a.ctime = t;
        });
        if a.nlink == 0 {
            // A large file's data goes now if nothing has it open and no
            // lookup of it is out, even if the VFS's handles (FUSE's
            // lookups through a mount) keep the inode a while longer.
            i.drop_data_if_orphaned();
            if !kept {
                self.table.release_if_unused(i, self.rcu());
            }
        }
    }

    /// Adds an entry `name` -> `inode` to `dir` (`key` is the name's),
    /// unless the name is there (EEXIST) or the directory was removed
    /// (ENOENT); on failure nothing was shared.
    fn insert_entry(&self, dir: &Inode, key: u64, inode: &Inode, name: &[u8]) -> Result<()> {
        let rcu = self.rcu();
        let g = rcu.read_lock();
        let d = Dirent::new_raw(inode, name);
        let fail_with = |errno| {
            // SAFETY: never shared.
            unsafe { Dirent::free(d.cast()) };
            fail(errno)
        };
        loop {
            let mut l = dir.entries.lock(key, rcu);
            if Self::find_locked(&g, &l, name, key).is_some() {
                drop(l);
                return fail_with(EEXIST);
            }
            match l.insert(d, key) {
                Ok(()) => return Ok(()),
                Err(InsertError::Full) => {
                    drop(l);
                    dir.entries.grow(rcu);
                }
                Err(InsertError::Closed) => {
                    drop(l);
                    return fail_with(ENOENT);
                }
            }
        }
    }

    /// Creates `name` in `parent` for a new inode made by `make`.
    fn add_entry<'a>(
        &'a self,
        parent: Ino,
        name: &[u8],
        make: impl FnOnce() -> Result<&'a Inode>,
        unmake: impl FnOnce(&Inode),
    ) -> Result<Attr> {
        let g = self.rcu().read_lock();
        let dir = self.dir(&g, parent)?;
        let inode = self.add_entry_in(&g, dir, name, make, unmake)?;
        Ok(inode.attr_with(&g))
    }

    /// A new inode of the kind `node` says, made by `alloc`.
    fn alloc_node(&self, node: &NewNode<'_>, perm: u32, owner: Owner, keeper: Keeper) -> Result<&Inode> {
        match *node {
            NewNode::File => self.alloc(FileType::File, perm, 0, owner, None, keeper),
            NewNode::Dir => self.alloc(FileType::Dir, perm, 0, owner, None, keeper),
            NewNode::Special(FileType::Dir | FileType::Symlink, _) => fail(EINVAL),
            NewNode::Special(kind, rdev) => self.alloc(kind, perm, rdev, owner, None, keeper),
            NewNode::Symlink(target) => self.alloc(FileType::Symlink, 0o777, 0, owner, Some(target), keeper),
        }
    }

    /// For the VFS of the superblock `sb`, if this memfs is bound to it:
    /// creates `name` in `dir` (an inode of this memfs the VFS holds) as
    /// the `FileSystem` calls do, and returns the new inode, with no probe
    /// of the inode table by number (for the directory or the new inode)
    /// and no attributes copied. `held`: with a VFS reference (counted in
    /// core), as `iget` would make it, but born with it instead of a
    /// lookup; else with none ([`Keeper::Link`]), for a caller that keeps
    /// nothing of the inode and is in a read section of the VFS's RCU
    /// domain (which a bound memfs shares), which keeps its memory while
    /// the caller looks. `None`: not bound to `sb`; the general path
    /// decides.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_bound(
        &self,
        sb: &Super,
        dir: &Inode,
        name: &[u8],
        node: &NewNode<'_>,
        perm: u32,
        owner: Owner,
        held: bool,
        counters: &crate::counters::LiveCounters,
    ) -> Option<Result<*const Inode>> {
        if !self.bound_to(sb) {
            return None;
        }
        let g = self.rcu().read_lock();
        // Born with the VFS reference (counted in core at once), which
        // keeps it whatever a caller that bypasses the VFS does to its name
        // meanwhile: no lookup to count and pay back, no lock to take. Or
        // born with nothing but the link it is about to get: a reference
        // taken and given back at once would be four atomic operations on
        // two lines (the inode's count and the counters').
        let make = || {
            if !held {
                return self.alloc_node(node, perm, owner, Keeper::Link);
            }
            let i = self.alloc_node(node, perm, owner, Keeper::Reference)?;
            counters.add_inode(1);
            Ok(i)
        };
        let unmake = |i: &Inode| {
            if !held {
                return self.unalloc(i, Keeper::Link);
            }
            Self::unname_new(i);
            // SAFETY: the reference it was born with, ours.
            unsafe { self.table.iput(i, self.rcu(), counters) };
        };
        Some(self.add_entry_in(&g, dir, name, make, unmake).map(|i| i as *const Inode))
    }

    /// Creates `name` in `dir` for a new inode made by `make`, and returns
    /// it with what `alloc` counted; `unmake` takes back an inode that got
    /// no name.
    fn add_entry_in<'a>(
        &'a self,
        g: &RcuGuard<'_>,
        dir: &Inode,
        name: &[u8],
        make: impl FnOnce() -> Result<&'a Inode>,
        unmake: impl FnOnce(&Inode),
    ) -> Result<&'a Inode> {
        if dir.kind != FileType::Dir {
            return fail(ENOTDIR);
        }
        let key = name_key(name);
        // Most creates of an existing name stop here, making nothing.
        if Self::find(g, dir, name, key).is_some() {
            return fail(EEXIST);
        }
        let inode = make()?;
        if let Err(e) = self.insert_entry(dir, key, inode, name) {
            unmake(inode);
            return Err(e);
        }
        let t = now();
        if inode.kind == FileType::Dir {
            dir.update(|a| {
                gain_subdir_link(a);
                a.mtime = t;
                a.ctime = t;
            });
        } else {
            dir.touch(t, true);
        }
        Ok(inode)
    }

    /// One batch of a listing of directory `ino` after cookie `offset`,
    /// made by `f` from each entry and its inode, in the read section the
    /// directory's index was scanned in. Misses overlap: the scan prefetches
    /// the entries, then this their names and inodes, before reading any.
    fn list<R>(
        &self,
        ino: Ino,
        offset: u64,
        mut f: impl FnMut(DirEntry, &Inode, &RcuGuard<'_>) -> R,
    ) -> Result<Vec<R>> {
        /// Entries ahead of the one made whose name and inode are prefetched.
        const AHEAD: usize = 12;
        let g = self.rcu().read_lock();
        let dir = self.dir(&g, ino)?;
        let mut found = Vec::new();
        if let Some(after) = key_after(offset) {
            dir.entries.scan_after(&g, after, READDIR_BATCH, &mut found);
        }
        let mut out = Vec::with_capacity(found.len());
        for (j, &(h, e)) in found.iter().enumerate() {
            if let Some(&(_, a)) = found.get(j + AHEAD) {
                // Relaxed: only a prefetch's address (the entry is read
                // with `inode()` below).
                let i = a.inode_ptr(Ordering::Relaxed) as *const u8;
                prefetch(a.name().as_ptr());
                // The attributes, the kind and the data's cell: the
                // inode's first two lines (see its layout).
                prefetch(i);
                prefetch(i.wrapping_add(64));
            }
            let i = e.inode();
            let entry = DirEntry { ino: i.ino, name: e.name().to_vec(), kind: i.kind, offset: cookie_of(h) };
            out.push(f(entry, i, &g));
        }
        let t = now();
        if self.atime_due(dir, &g, t) {
            dir.touch_atime(t);
        }
        Ok(out)
    }

    /// Sets (`Some`) or removes (`None`) an extended attribute: a new list
    /// replaces the old (readers keep the one they loaded), the change in
    /// bytes is charged against the size limit, and ctime is set.
    fn change_xattr(&self, ino: Ino, name: &[u8], set: Option<(&[u8], XattrSet)>) -> Result<()> {
        let g = self.rcu().read_lock();
        let i = self.get(&g, ino)?;
        // Lets loom run an unlink of the last name here.
        crate::sync::atomic::preemption_point();
        // Held as a lookup for the change: an inode is freed only with none
        // (decided under the references' lock), and its free refunds the
        // list it has then. Without it, a change racing the last unlink
        // published its list after the free had counted the one before,
        // and its bytes stayed charged (helper-32's audit; loom model
        // `loom_setxattr_vs_unlink_of_the_last_name`). Five atomic
        // operations, on a rare call.
        if !i.lookups_add_live() {
            return fail(ENOENT);
        }
        let r = self.change_xattr_held(i, name, set);
        i.lookups_sub(1);
        self.table.release_if_unused(i, self.rcu());
        r
    }

    /// [`change_xattr`](Self::change_xattr) on an inode its caller keeps.
    fn change_xattr_held(&self, i: &Inode, name: &[u8], set: Option<(&[u8], XattrSet)>) -> Result<()> {
        i.update_xattrs(
            self.rcu(),
            |cur| {
                let mut x = cur.cloned().unwrap_or_default();
                let before = x.bytes() as i64;
                match (x.find(name), set) {
                    (Ok(_), Some((_, XattrSet::Create))) => return fail(EEXIST),
                    (Err(_), Some((_, XattrSet::Replace))) | (Err(_), None) => return fail(ENODATA),
                    (Ok(k), Some((v, _))) => x.0[k].1 = v.into(),
                    (Err(k), Some((v, _))) => x.0.insert(k, (name.into(), v.into())),
                    (Ok(k), None) => {
                        x.0.remove(k);
                    }
                }
                // The list, as listxattr returns it, must fit its limit.
                if x.0.iter().map(|(n, _)| n.len() + 1).sum::<usize>() > XATTR_LIST_MAX {
                    return fail(ENOSPC);
                }
                let delta = x.bytes() as i64 - before;
                self.usage.charge(delta)?;
                Ok((if x.0.is_empty() { None } else { Some(x) }, delta))
            },
            |&delta| {
                // Taking back a refund cannot be refused (it must not fail
                // against a limit others have filled meanwhile).
                if delta > 0 {
                    self.usage.bytes.refund(delta as u64);
                } else {
                    self.usage.bytes.force(delta.unsigned_abs());
                }
            },
        )?;
        let t = now();
        i.update(|a| a.ctime = t);
        Ok(())
    }

    fn not_a_file(i: &Inode) -> std::io::Error {
        err(if i.kind == FileType::Dir { EISDIR } else { EINVAL })
    }

    /// Reads of `i` are due to set its atime, by the policy.
    fn atime_due(&self, i: &Inode, g: &RcuGuard<'_>, t: Timespec) -> bool {
        match self.opts.atime {
            AtimePolicy::Noatime => false,
            AtimePolicy::Strict => true,
            AtimePolicy::Relatime => {
                let a = i.attr_with(g);
                a.atime != t && (a.atime <= a.mtime || a.atime <= a.ctime || t.sec - a.atime.sec >= 24 * 3600)
            }
        }
    }

    /// Takes `e`, found in `dir` under its home lock `l`, out of the
    /// index, releases the lock and retires the entry.
    fn remove_locked(rcu: &Rcu, dir: &Inode, mut l: Locked<'_, Dirent>, e: &Dirent, key: u64) {
        let e = l.take(e, key).expect("found under the lock");
        drop(l);
        // SAFETY: out of the index (by the pointer it was inserted by);
        // readers are waited out.
        unsafe { Dirent::retire(rcu, e) };
        dir.entries.shrink_if_sparse(rcu);
    }

    /// Removes `name` (not a directory) from `parent`.
    fn unlink_entry(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let g = self.rcu().read_lock();
        let dir = self.dir(&g, parent)?;
        self.unlink_in(&g, dir, name, |_| Ok(()), None)
    }

    /// For the VFS of the superblock `sb`, if this memfs is bound to it:
    /// unlinks `name` from `dir` (an inode of this memfs the VFS holds) as
    /// `unlink` does, with no probe of the inode table for the directory.
    /// `None`: not bound to `sb`.
    /// `held`: the inode the VFS's dentry of `name` names, on which the VFS
    /// holds a reference until after this call (if memfs finds `name`
    /// naming it, as it does unless a caller of memfs itself changed the
    /// name behind the cache, the reference keeps it and its count needs
    /// no look).
    pub(crate) fn unlink_bound(&self, sb: &Super, dir: &Inode, name: &[u8], held: &Inode) -> Option<Result<()>> {
        self.in_bound_dir(sb, dir, |g| self.unlink_in(g, dir, name, |_| Ok(()), Some(held)))
    }

    /// [`unlink_bound`](Self::unlink_bound), calling `check` with the
    /// inode `name` names, under the lock that keeps it named so, before
    /// anything changes: the VFS's checks of an unlink whose name it has
    /// no dentry for (permissions, the sticky bit, the kind), which refuse
    /// with their error.
    pub(crate) fn unlink_bound_checked(
        &self,
        sb: &Super,
        dir: &Inode,
        name: &[u8],
        check: impl FnOnce(&Inode) -> Result<()>,
    ) -> Option<Result<()>> {
        self.in_bound_dir(sb, dir, |g| self.unlink_in(g, dir, name, check, None))
    }

    /// Runs `f` in a read section on the directory `dir` of the VFS of
    /// superblock `sb`, if this memfs is bound to it (`None` if not):
    /// ENOTDIR if `dir` is no directory.
    fn in_bound_dir(&self, sb: &Super, dir: &Inode, f: impl FnOnce(&RcuGuard<'_>) -> Result<()>) -> Option<Result<()>> {
        if !self.bound_to(sb) {
            return None;
        }
        if dir.kind != FileType::Dir {
            return Some(fail(ENOTDIR));
        }
        Some(f(&self.rcu().read_lock()))
    }

    /// Removes the non-directory `name` from `dir`, if `check` allows.
    fn unlink_in(
        &self,
        g: &RcuGuard<'_>,
        dir: &Inode,
        name: &[u8],
        check: impl FnOnce(&Inode) -> Result<()>,
        held: Option<&Inode>,
    ) -> Result<()> {
        let rcu = self.rcu();
        let key = name_key(name);
        let l = dir.entries.lock(key, rcu);
        let e = Self::find_locked(g, &l, name, key).ok_or_else(|| err(ENOENT))?;
        let victim = e.inode();
        check(victim)?;
        if victim.kind == FileType::Dir {
            return fail(EISDIR);
        }
        let kept = held.is_some_and(|h| ptr::eq(h, victim));
        Self::remove_locked(rcu, dir, l, e, key);
        let t = now();
        self.drop_link(victim, t, kept);
        dir.touch(t, true);
        Ok(())
    }

    /// Removes the empty directory `name` from `parent`.
    fn rmdir_entry(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let g = self.rcu().read_lock();
        let dir = self.dir(&g, parent)?;
        self.rmdir_in(&g, dir, name, |_| Ok(()))
    }

    /// For the VFS of the superblock `sb`, if this memfs is bound to it:
    /// removes the empty directory `name` from `dir`, calling `check` with
    /// the directory to remove before anything changes (the VFS's checks
    /// of a removal whose name it has no dentry for; see
    /// [`unlink_bound_checked`](Self::unlink_bound_checked)). `None` when
    /// not bound.
    pub(crate) fn rmdir_bound_checked(
        &self,
        sb: &Super,
        dir: &Inode,
        name: &[u8],
        check: impl FnMut(&Inode) -> Result<()>,
    ) -> Option<Result<()>> {
        self.in_bound_dir(sb, dir, |g| self.rmdir_in(g, dir, name, check))
    }

    /// Removes the empty directory `name` from `dir`, if `check` allows the
    /// directory it names (asked again if the name changes meanwhile).
    fn rmdir_in(
        &self,
        g: &RcuGuard<'_>,
        dir: &Inode,
        name: &[u8],
        mut check: impl FnMut(&Inode) -> Result<()>,
    ) -> Result<()> {
        let rcu = self.rcu();
        let key = name_key(name);
        loop {
            let e = Self::find(g, dir, name, key).ok_or_else(|| err(ENOENT))?;
            let victim = e.inode();
            check(victim)?;
            if victim.kind != FileType::Dir {
                return fail(ENOTDIR);
            }
            // Closed before the parent's lock is taken (module doc).
            match victim.entries.close_empty(rcu) {
                crate::sync::index::Close::NotEmpty => return fail(ENOTEMPTY),
                // Another removal of it runs: it goes, or comes back.
                crate::sync::index::Close::AlreadyClosed => {
                    crate::sync::atomic::spin_hint();
                    continue;
                }
                crate::sync::index::Close::Closed => {}
            }
            let l = dir.entries.lock(key, rcu);
            let now_e = Self::find_locked(g, &l, name, key);
            if !now_e.is_some_and(|x| ptr::eq(x, e) && ptr::eq(x.inode(), victim)) {
                // Renamed or replaced meanwhile: as it was, and again.
                drop(l);
                victim.entries.reopen(rcu);
                continue;
            }
            Self::remove_locked(rcu, dir, l, e, key);
            let t = now();
            self.drop_link(victim, t, false);
            dir.update(|a| {
                a.nlink = a.nlink.saturating_sub(1);
                a.mtime = t;
                a.ctime = t;
            });
            return Ok(());
        }
    }

    fn rename_entry(
        &self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let rcu = self.rcu();
        let g = rcu.read_lock();
        let src_dir = self.dir(&g, parent)?;
        let dst_dir = self.dir(&g, new_parent)?;
        let (k1, k2) = (name_key(name), name_key(new_name));
        loop {
            // A directory to be replaced is closed first, before any home
            // lock (module doc), then checked again under the locks.
            let pre_src = Self::find(&g, src_dir, name, k1).ok_or_else(|| err(ENOENT))?;
            let pre_dst = Self::find(&g, dst_dir, new_name, k2);
            let mut closed: Option<&Inode> = None;
            if let Some(d) = pre_dst {
                let (s, v) = (pre_src.inode(), d.inode());
                if !flags.exchange
                    && !flags.noreplace
                    && !ptr::eq(s, v)
                    && s.kind == FileType::Dir
                    && v.kind == FileType::Dir
                {
                    match v.entries.close_empty(rcu) {
                        crate::sync::index::Close::NotEmpty => return fail(ENOTEMPTY),
                        crate::sync::index::Close::AlreadyClosed => {
                            crate::sync::atomic::spin_hint();
                            continue;
                        }
                        crate::sync::index::Close::Closed => closed = Some(v),
                    }
                }
            }
            let (l1, l2) = Index::lock2(
                (&src_dir.entries, k1, src_dir as *const Inode as usize),
                (&dst_dir.entries, k2, dst_dir as *const Inode as usize),
                rcu,
            );
            let src = Self::find_locked(&g, &l1, name, k1);
            let dst = Self::find_locked(&g, l2.as_ref().unwrap_or(&l1), new_name, k2);
            let same = |a: Option<&Dirent>, b: Option<&Dirent>| match (a, b) {
                (Some(a), Some(b)) => ptr::eq(a, b),
                (None, None) => true,
                _ => false,
            };
            let unchanged = same(src, Some(pre_src))
                && same(dst, pre_dst)
                && closed.is_none_or(|v| dst.is_some_and(|d| ptr::eq(d.inode(), v)));
            if !unchanged {
                drop((l1, l2));
                if let Some(v) = closed {
                    v.entries.reopen(rcu);
                }
                continue;
            }
            let src = src.expect("checked");
            let r = self.rename_locked(l1, l2, src_dir, dst_dir, src, dst, new_name, k1, k2, flags);
            if !matches!(r, Ok(true)) {
                if let Some(v) = closed {
                    v.entries.reopen(rcu);
                }
            }
            match r {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The rename itself, holding the home locks of both names (`l2`:
    /// `None` when one lock covers both). `Ok(false)`: the destination's
    /// index had to grow first; the caller starts again.
    #[allow(clippy::too_many_arguments)]
    fn rename_locked<'l>(
        &self,
        mut l1: Locked<'l, Dirent>,
        mut l2: Option<Locked<'l, Dirent>>,
        src_dir: &Inode,
        dst_dir: &Inode,
        src: &Dirent,
        dst: Option<&Dirent>,
        new_name: &[u8],
        k1: u64,
        k2: u64,
        flags: RenameFlags,
    ) -> Result<bool> {
        let rcu = self.rcu();
        let moved = src.inode();
        let cross = !ptr::eq(src_dir, dst_dir);
        let t = now();
        if flags.exchange {
            let Some(dst) = dst else { return fail(ENOENT) };
            let other = dst.inode();
            if ptr::eq(moved, other) {
                return Ok(true);
            }
            // Each name now names the other's inode.
            src.set_inode(other, Ordering::Release);
            dst.set_inode(moved, Ordering::Release);
            drop((l1, l2));
            let (md, od) = (moved.kind == FileType::Dir, other.kind == FileType::Dir);
            if cross && md != od {
                let (gain, lose) = if md { (dst_dir, src_dir) } else { (src_dir, dst_dir) };
                gain.update(gain_subdir_link);
                lose.update(|a| a.nlink = a.nlink.saturating_sub(1));
            }
            for d in [src_dir, dst_dir] {
                d.touch(t, true);
            }
            moved.touch(t, false);
            other.touch(t, false);
            return Ok(true);
        }
        let mut victim = None;
        if let Some(dst) = dst {
            if flags.noreplace {
                return fail(EEXIST);
            }
            let v = dst.inode();
            if ptr::eq(v, moved) {
                return Ok(true); // two links of one inode: rename does nothing
            }
            match (moved.kind == FileType::Dir, v.kind == FileType::Dir) {
                (true, false) => return fail(ENOTDIR),
                (false, true) => return fail(EISDIR),
                _ => {}
            }
            // In place: the name is never missing.
            dst.set_inode(moved, Ordering::Release);
            victim = Some(v);
        } else {
            let d = Dirent::new_raw(moved, new_name);
            let l = l2.as_mut().unwrap_or(&mut l1);
            match l.insert(d, k2) {
                Ok(()) => {}
                Err(e) => {
                    // SAFETY: never shared.
                    unsafe { Dirent::free(d.cast()) };
                    drop((l1, l2));
                    if e == InsertError::Full {
                        dst_dir.entries.grow(rcu);
                        return Ok(false);
                    }
                    return fail(ENOENT); // the destination was removed
                }
            }
        }
        let s = l1.take(src, k1).expect("found under the lock");
        drop((l1, l2));
        // SAFETY: out of the index; readers are waited out.
        unsafe { Dirent::retire(rcu, s) };
        src_dir.entries.shrink_if_sparse(rcu);
        let dir_moved = moved.kind == FileType::Dir;
        if let Some(v) = victim {
            self.drop_link(v, t, false);
            if v.kind == FileType::Dir {
                dst_dir.update(|a| a.nlink = a.nlink.saturating_sub(1));
            }
        }
        if dir_moved && cross {
            src_dir.update(|a| a.nlink = a.nlink.saturating_sub(1));
            dst_dir.update(gain_subdir_link);
        }
        src_dir.touch(t, true);
        dst_dir.touch(t, true);
        moved.touch(t, false);
        Ok(true)
    }
}

impl FileSystem for MemFs {
    fn root(&self) -> Ino {
        ROOT_INO
    }

    fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        let g = self.rcu().read_lock();
        let dir = self.dir(&g, parent)?;
        let e = Self::find(&g, dir, name, name_key(name)).ok_or_else(|| err(ENOENT))?;
        let i = e.inode();
        // Dead: the name went with its inode's last link after the find
        // (the lookup comes after the unlink).
        if !i.lookups_add_live() {
            return fail(ENOENT);
        }
        Ok(i.attr_with(&g))
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        let g = self.rcu().read_lock();
        if let Ok(i) = self.get(&g, ino) {
            i.lookups_sub(nlookup);
            i.drop_data_if_orphaned();
            self.table.release_if_unused(i, self.rcu());
        }
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        let g = self.rcu().read_lock();
        Ok(self.get(&g, ino)?.attr_with(&g))
    }

    fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let g = self.rcu().read_lock();
        let i = self.get(&g, ino)?;
        let t = now();
        if let Some(size) = set.size {
            if i.kind != FileType::File {
                return Err(Self::not_a_file(i));
            }
            // Truncating a file with no data to 0 makes none.
            match (i.data_if_any(), size) {
                (None, 0) => {}
                (Some(pc), _) => pc.set_len(size)?,
                (None, _) => i.data_or_init(|| self.new_page_cache()).set_len(size)?,
            }
        }
        i.update(|a| {
            if set.size.is_some() {
                a.mtime = t;
            }
            if let Some(perm) = set.perm {
                a.perm = perm & 0o7777;
            }
            if let Some(uid) = set.uid {
                a.uid = uid;
            }
            if let Some(gid) = set.gid {
                a.gid = gid;
            }
            if let Some(x) = set.atime {
                a.atime = x.at(t);
            }
            if let Some(m) = set.mtime {
                a.mtime = m.at(t);
            }
            a.ctime = t;
        });
        Ok(i.attr_with(&g))
    }

    fn create(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        self.add_entry(
            parent,
            name,
            || self.alloc_node(&NewNode::File, perm, owner, Keeper::Lookup),
            |i| self.unalloc(i, Keeper::Lookup),
        )
    }

    fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        self.add_entry(
            parent,
            name,
            || self.alloc_node(&NewNode::Dir, perm, owner, Keeper::Lookup),
            |i| self.unalloc(i, Keeper::Lookup),
        )
    }

    fn mknod(&self, parent: Ino, name: &[u8], kind: FileType, perm: u32, rdev: u64, owner: Owner) -> Result<Attr> {
        if matches!(kind, FileType::Dir | FileType::Symlink) {
            return fail(EINVAL);
        }
        self.add_entry(
            parent,
            name,
            || self.alloc_node(&NewNode::Special(kind, rdev), perm, owner, Keeper::Lookup),
            |i| self.unalloc(i, Keeper::Lookup),
        )
    }

    fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr> {
        self.add_entry(
            parent,
            name,
            || self.alloc_node(&NewNode::Symlink(target), 0, owner, Keeper::Lookup),
            |i| self.unalloc(i, Keeper::Lookup),
        )
    }

    fn link(&self, ino: Ino, parent: Ino, name: &[u8]) -> Result<Attr> {
        let rcu = self.rcu();
        let g = rcu.read_lock();
        let dir = self.dir(&g, parent)?;
        let i = self.get(&g, ino)?;
        if i.kind == FileType::Dir {
            return fail(EPERM);
        }
        let key = name_key(name);
        if Self::find(&g, dir, name, key).is_some() {
            return fail(EEXIST);
        }
        let t = now();
        // A link count that reached 0 stays there (the inode is on its way
        // out): no new name for it.
        let (alive, _) = i.update(|a| {
            if a.nlink == 0 {
                return false;
            }
            a.nlink += 1;
            a.ctime = t;
            true
        });
        if !alive {
            return fail(ENOENT);
        }
        i.lookups_add(1);
        if let Err(e) = self.insert_entry(dir, key, i, name) {
            i.lookups_sub(1);
            self.drop_link(i, t, false);
            return Err(e);
        }
        dir.touch(t, true);
        Ok(i.attr_with(&g))
    }

    fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.unlink_entry(parent, name)
    }

    fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.rmdir_entry(parent, name)
    }

    fn rename(&self, parent: Ino, name: &[u8], new_parent: Ino, new_name: &[u8], flags: RenameFlags) -> Result<()> {
        self.rename_entry(parent, name, new_parent, new_name, flags)
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let g = self.rcu().read_lock();
        match self.get(&g, ino)?.link() {
            Some(t) => Ok(t.to_vec()),
            None => fail(EINVAL),
        }
    }

    fn readdir(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>> {
        self.list(ino, offset, |e, _, _| e)
    }

    fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        let g = self.rcu().read_lock();
        let x = self.get(&g, ino)?.xattrs(&g);
        match x.map(|x| (x, x.find(name))) {
            Some((x, Ok(k))) => Ok(x.0[k].1.to_vec()),
            _ => fail(ENODATA),
        }
    }

    fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        self.change_xattr(ino, name, Some((value, how)))
    }

    fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let g = self.rcu().read_lock();
        let x = self.get(&g, ino)?.xattrs(&g);
        Ok(x.map_or_else(Vec::new, |x| x.0.iter().map(|(n, _)| n.to_vec()).collect()))
    }

    fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.change_xattr(ino, name, None)
    }

    fn readdir_plus(&self, ino: Ino, offset: u64) -> Result<Vec<(DirEntry, Option<Attr>)>> {
        self.list(ino, offset, |e, i, g| (e, Some(i.attr_with(g))))
    }

    fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let g = self.rcu().read_lock();
        let i = self.get(&g, ino)?;
        if i.kind != FileType::File {
            return Err(Self::not_a_file(i));
        }
        // Counted as an open file: an orphan's data is freed at once once
        // nothing counted has it (`Inode::drop_data_unless_open`). A file
        // never written has no pages to protect, and its read (the VFS's,
        // of an empty file it has open) writes nothing shared.
        let n = match i.data_if_any() {
            None => 0,
            Some(pc) => i.read_unopened(|| pc.read(offset, buf)).unwrap_or(0),
        };
        let t = now();
        if self.atime_due(i, &g, t) {
            i.touch_atime(t);
        }
        Ok(n)
    }

    fn write(&self, ino: Ino, pos: WritePos, data: &[u8]) -> Result<u64> {
        let g = self.rcu().read_lock();
        let i = self.get(&g, ino)?;
        if i.kind != FileType::File {
            return Err(Self::not_a_file(i));
        }
        let pc = i.data_or_init(|| self.new_page_cache());
        let at = pc.write(
            match pos {
                WritePos::At(o) => Some(o),
                WritePos::Append => None,
            },
            data,
        )?;
        if !data.is_empty() {
            i.touch(now(), true);
        }
        Ok(at)
    }

    fn fallocate(&self, ino: Ino, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        let g = self.rcu().read_lock();
        let i = self.get(&g, ino)?;
        if i.kind != FileType::File {
            return Err(Self::not_a_file(i));
        }
        let pc = i.data_or_init(|| self.new_page_cache());
        let size = pc.size();
        pc.allocate(offset, len, keep_size)?;
        if pc.size() != size {
            i.touch(now(), true);
        }
        Ok(())
    }

    fn note_access(&self, ino: Ino) {
        let g = self.rcu().read_lock();
        if let Ok(i) = self.get(&g, ino) {
            i.touch_atime(now());
        }
    }

    fn note_modify(&self, ino: Ino) {
        let g = self.rcu().read_lock();
        if let Ok(i) = self.get(&g, ino) {
            i.touch(now(), true);
        }
    }

    fn page_cache(&self, ino: Ino) -> Option<Arc<PageCache>> {
        let g = self.rcu().read_lock();
        let i = self.get(&g, ino).ok()?;
        if i.kind != FileType::File {
            return None;
        }
        i.data_arc_unless_gone(|| self.new_page_cache())
    }

    fn statfs(&self) -> Result<StatFs> {
        let used = self.used_bytes().div_ceil(BLOCK);
        let blocks = self.opts.max_bytes / BLOCK;
        let files = self.opts.max_inodes;
        let ffree = files.saturating_sub(self.live_inodes());
        Ok(StatFs {
            bsize: BLOCK as u32,
            blocks,
            bfree: blocks.saturating_sub(used),
            bavail: blocks.saturating_sub(used),
            files,
            ffree,
            namelen: 255,
        })
    }

    fn as_memfs(&self) -> Option<&MemFs> {
        Some(self)
    }
}

impl Drop for MemFs {
    fn drop(&mut self) {
        // Nothing refers to memfs any more: no superblock (it holds an
        // `Arc` of it), no caller. Every name and inode goes at once.
        let rcu = self.domain().clone();
        // SAFETY: as above; a bound VFS is gone, and with it its readers.
        unsafe {
            self.table.drop_owned(|i| {
                let g = rcu.read_lock();
                let mut names: Vec<*const Dirent> = Vec::new();
                i.entries.for_each_raw(&g, |e| names.push(e));
                drop(g);
                for e in names {
                    Dirent::free(e as *mut ());
                }
            })
        };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Files made and removed through memfs's calls by number: each is
    /// found by its number while it lives and not after, and the table
    /// keeps a leaf only for a chunk of numbers with an inode in it (the
    /// root's) or still being handed out (the third): the two chunks
    /// filled and emptied leave with their last inode.
    #[test]
    fn an_emptied_chunk_of_inode_numbers_leaves_the_table() {
        let fs = MemFs::default();
        let o = Owner { uid: 0, gid: 0 };
        let n = 2 * INO_CHUNK + INO_CHUNK / 2;
        let made: Vec<Ino> =
            (0..n).map(|i| fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, o).unwrap().ino).collect();
        let leaves = || fs.table.leaves(&fs.rcu().read_lock());
        assert_eq!(leaves(), 4, "the root's chunk and three of files");
        for (i, &ino) in made.iter().enumerate() {
            assert_eq!(fs.getattr(ino).unwrap().ino, ino);
            fs.forget(ino, 1);
            fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
            assert_eq!(fs.getattr(ino).unwrap_err().raw_os_error(), Some(ENOENT), "a freed inode answered");
        }
        assert_eq!(leaves(), 2, "an emptied chunk kept its leaf");
        assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2);
    }
}
