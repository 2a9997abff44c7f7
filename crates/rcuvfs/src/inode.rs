//! In-core inodes: the VFS's cached copy of a filesystem inode's attributes,
//! readable with no lock and no store.
//!
//! # Locks
//!
//! | lock / protocol        | protects                                          |
//! |------------------------|---------------------------------------------------|
//! | `Inode::attrs` (seqlock) | every attribute field; writers hold its lock    |
//! | `InodeTable::map`      | the ino -> inode map and the 0 <-> 1 transitions of `refs` |
//! | `InodeTable::list`'s locks | the superblock's inode list (one lock, or one per shard; see `sync::list_batch`) |
//!
//! Order: the dcache's locks (see `dcache`), then `InodeTable::map`, then
//! `attrs`' lock. (Namespace changes are serialized per name by the
//! dcache's name locks; no lock covers a whole directory.)
//! The list's locks are leaves, taken with no other inode lock held. A
//! filesystem's own locks come after all of these: `iget` asks the
//! filesystem for a new inode's symlink target and page cache under `map`,
//! and the last `iput` calls `forget` holding none.
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
//! `refs` counts dentries that point here and open files. The last `iput`
//! removes the inode from the table, returns the filesystem's lookup count
//! (`FileSystem::forget`) and frees the inode through `call_rcu`, because an
//! RCU walker may still be reading it.

use crate::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::dcache::LiveCounters;
use crate::filemap::PageCache;
use crate::fs::{Attr, FileSystem, FileType, Ino, Timespec};
use crate::sync::list_batch::{InodeList, ListMode, Node};
use crate::sync::{Mutex, Rcu, SeqLock};

struct Times {
    sec: AtomicI64,
    nsec: AtomicU32,
}

impl Times {
    fn new(t: Timespec) -> Times {
        Times { sec: AtomicI64::new(t.sec), nsec: AtomicU32::new(t.nsec) }
    }
    fn load(&self) -> Timespec {
        Timespec { sec: self.sec.load(Ordering::Relaxed), nsec: self.nsec.load(Ordering::Relaxed) }
    }
    fn store(&self, t: Timespec) {
        self.sec.store(t.sec, Ordering::Relaxed);
        self.nsec.store(t.nsec, Ordering::Relaxed);
    }
}

/// An in-core inode.
pub(crate) struct Inode {
    pub ino: Ino,
    pub kind: FileType,
    // Read under `attrs`' sequence count with relaxed loads; written in its
    // write sections with relaxed stores (the seqlock's fences order them).
    attrs: SeqLock,
    perm: AtomicU32,
    nlink: AtomicU32,
    uid: AtomicU32,
    gid: AtomicU32,
    size: AtomicU64,
    blocks: AtomicU64,
    rdev: AtomicU64,
    atime: Times,
    mtime: Times,
    ctime: Times,
    /// A symlink's target, read once: targets never change.
    pub link: OnceLock<Box<[u8]>>,
    /// The cached dentries that name this inode (Linux `i_dentry`, seed 003's
    /// figure 5): hard links are aliases. A leaf lock.
    pub aliases: Mutex<Vec<usize>>,
    /// A regular file's page cache, when its filesystem keeps one: the
    /// file's size and blocks are read from it.
    pub data: OnceLock<Arc<PageCache>>,
    refs: AtomicUsize,
    nlookup: AtomicU64,
    /// Membership of the superblock's inode list.
    sb: Node,
    /// The superblock this inode belongs to; it outlives its inodes.
    owner: *const Super,
}

// SAFETY: `owner` points at a superblock that outlives the inode (teardown
// frees inodes first); everything else is Send + Sync.
unsafe impl Send for Inode {}
// SAFETY: as above.
unsafe impl Sync for Inode {}

impl Inode {
    fn new(a: &Attr, owner: *const Super) -> Inode {
        Inode {
            owner,
            ino: a.ino,
            kind: a.kind,
            attrs: SeqLock::new(),
            perm: AtomicU32::new(a.perm),
            nlink: AtomicU32::new(a.nlink),
            uid: AtomicU32::new(a.uid),
            gid: AtomicU32::new(a.gid),
            size: AtomicU64::new(a.size),
            blocks: AtomicU64::new(a.blocks),
            rdev: AtomicU64::new(a.rdev),
            atime: Times::new(a.atime),
            mtime: Times::new(a.mtime),
            ctime: Times::new(a.ctime),
            link: OnceLock::new(),
            data: OnceLock::new(),
            aliases: Mutex::new(Vec::new()),
            refs: AtomicUsize::new(0),
            nlookup: AtomicU64::new(0),
            sb: Node::new(a.ino),
        }
    }

    /// The attributes, as one consistent snapshot. Writes nothing shared
    /// (unless a writer stays in progress past the bounded retries, when it
    /// takes the lock).
    #[inline]
    pub fn attr(&self) -> Attr {
        let mut a = self.cached_attr();
        if let Some(pc) = self.data.get() {
            a.size = pc.size();
            a.blocks = pc.pages() * 8;
        }
        a
    }

    fn cached_attr(&self) -> Attr {
        self.attrs.read(|| Attr {
            ino: self.ino,
            kind: self.kind,
            perm: self.perm.load(Ordering::Relaxed),
            nlink: self.nlink.load(Ordering::Relaxed),
            uid: self.uid.load(Ordering::Relaxed),
            gid: self.gid.load(Ordering::Relaxed),
            size: self.size.load(Ordering::Relaxed),
            blocks: self.blocks.load(Ordering::Relaxed),
            atime: self.atime.load(),
            mtime: self.mtime.load(),
            ctime: self.ctime.load(),
            rdev: self.rdev.load(Ordering::Relaxed),
        })
    }

    /// Replaces the cached attributes with `a` (from the filesystem).
    pub fn set_attr(&self, a: &Attr) {
        debug_assert_eq!(a.ino, self.ino);
        let _w = self.attrs.write();
        self.perm.store(a.perm, Ordering::Relaxed);
        self.nlink.store(a.nlink, Ordering::Relaxed);
        self.uid.store(a.uid, Ordering::Relaxed);
        self.gid.store(a.gid, Ordering::Relaxed);
        self.size.store(a.size, Ordering::Relaxed);
        self.blocks.store(a.blocks, Ordering::Relaxed);
        self.rdev.store(a.rdev, Ordering::Relaxed);
        self.atime.store(a.atime);
        self.mtime.store(a.mtime);
        self.ctime.store(a.ctime);
    }

    /// Re-reads the attributes from the filesystem after a change.
    pub fn refresh(&self, fs: &dyn FileSystem) {
        if let Ok(a) = fs.getattr(self.ino) {
            self.set_attr(&a);
        }
    }

    /// The superblock this inode belongs to.
    #[inline]
    pub fn sb(&self) -> &Super {
        // SAFETY: a superblock outlives its inodes.
        unsafe { &*self.owner }
    }

    /// The filesystem that holds this inode's truth.
    #[inline]
    pub fn fs(&self) -> &dyn FileSystem {
        &*self.sb().fs
    }

    /// Takes a reference; the caller already holds one (directly or through
    /// a dentry it holds), so the count is not zero.
    pub fn hold(&self) {
        crate::sync::audit::shared_writes(1);
        let old = self.refs.fetch_add(1, Ordering::Relaxed);
        debug_assert!(old > 0);
    }
}

/// A superblock: one instance of a filesystem, with its in-core inodes and
/// its root dentry. Every mount of it (bind mounts included) counts in
/// `mounts`; when the last one goes, the superblock is torn down
/// (`kill_super`: its dentries, then its inodes) and freed after a grace
/// period, since an RCU walker may still read it.
pub(crate) struct Super {
    pub fs: Arc<dyn FileSystem>,
    pub itable: InodeTable,
    /// Cached names must be revalidated (`fs.revalidates()`, and then what
    /// the filesystem says through `Notify::set_revalidate`): RCU-walk gives
    /// up in such a filesystem. Read with a relaxed load, written rarely.
    pub revalidates: std::sync::atomic::AtomicBool,
    /// The root dentry, set once at creation (a `*const Dentry`).
    pub root: AtomicUsize,
    /// Mounts of this superblock; changed under the namespace lock.
    pub mounts: AtomicUsize,
}

impl Super {
    pub fn new(fs: Arc<dyn FileSystem>, list: ListMode) -> Super {
        Super {
            revalidates: std::sync::atomic::AtomicBool::new(fs.revalidates()),
            fs,
            itable: InodeTable::new(list),
            root: AtomicUsize::new(0),
            mounts: AtomicUsize::new(0),
        }
    }

    /// `iget` in this superblock's table.
    pub fn iget(&self, attr: &Attr, counted_lookup: bool, counters: &LiveCounters) -> *const Inode {
        self.itable.iget(attr, counted_lookup, self, counters)
    }
}

/// The ino -> in-core inode map of one superblock (Linux `inode_hashtable`, with
/// `iget` and `iput`).
pub(crate) struct InodeTable {
    map: Mutex<HashMap<Ino, *const Inode>>,
    /// The superblock's list of in-core inodes (`s_inodes`), in the mode
    /// chosen at build time (seed 004). Adds and deletes happen outside
    /// `map`'s lock, as Linux calls `inode_sb_list_add` outside
    /// `inode_hash_lock`, so the list's own locking is what contends.
    pub list: InodeList,
}

// SAFETY: the raw pointers are owned by the table (allocated by `iget`,
// freed through RCU by `iput`); `Inode` is Send + Sync.
unsafe impl Send for InodeTable {}
// SAFETY: as above; the map is behind a lock.
unsafe impl Sync for InodeTable {}

impl InodeTable {
    pub fn new(list: ListMode) -> InodeTable {
        InodeTable { map: Mutex::new(HashMap::new()), list: InodeList::new(list) }
    }

    /// The in-core inode for `attr` with one more reference, created (with
    /// `attr`'s attributes) if absent. `counted_lookup`: the filesystem
    /// counted a lookup reference for this call that we now owe.
    pub fn iget(&self, attr: &Attr, counted_lookup: bool, sb: &Super, counters: &LiveCounters) -> *const Inode {
        let fs = &*sb.fs;
        let mut map = self.map.lock();
        let p = match map.get(&attr.ino) {
            Some(&p) => {
                // SAFETY: pointers in the map are live: iput removes them
                // under this lock before retiring them.
                unsafe { (*p).set_attr(attr) };
                p
            }
            None => {
                let inode = Box::new(Inode::new(attr, sb));
                if attr.kind == FileType::Symlink {
                    if let Ok(t) = fs.readlink(attr.ino) {
                        let _ = inode.link.set(t.into_boxed_slice());
                    }
                }
                if attr.kind == FileType::File {
                    if let Some(pc) = fs.page_cache(attr.ino) {
                        let _ = inode.data.set(pc);
                    }
                }
                let p = Box::into_raw(inode) as *const Inode;
                map.insert(attr.ino, p);
                counters.add_inode(1);
                p
            }
        };
        // SAFETY: `p` is live (above) and we hold the map lock.
        let inode = unsafe { &*p };
        let fresh = inode.refs.fetch_add(1, Ordering::Relaxed) == 0 && !inode.sb.is_listed();
        if counted_lookup {
            inode.nlookup.fetch_add(1, Ordering::Relaxed);
        }
        drop(map);
        if fresh {
            // SAFETY: a new inode, on no list; it is deleted from the list
            // before it is freed (`iput`, `clear`). Our reference keeps it
            // alive meanwhile.
            unsafe { self.list.add(&inode.sb) };
        }
        p
    }

    /// The in-core inode `ino` with one more reference, if it is in core.
    pub fn find_hold(&self, ino: Ino) -> Option<*const Inode> {
        let map = self.map.lock();
        let p = *map.get(&ino)?;
        // SAFETY: pointers in the map are live; the lock keeps it there.
        unsafe { (*p).refs.fetch_add(1, Ordering::Relaxed) };
        Some(p)
    }

    /// Drops a reference; the last one forgets and frees the inode.
    ///
    /// # Safety
    /// `p` came from `iget` and the caller owns one of its references.
    pub unsafe fn iput(&self, p: *const Inode, rcu: &Rcu, counters: &LiveCounters) {
        // SAFETY: the caller owns a reference, so the inode is live.
        let inode = unsafe { &*p };
        crate::sync::audit::shared_writes(1);
        // Fast path: not the last reference. Release pairs with the Acquire
        // fence of whoever drops the last one.
        let mut cur = inode.refs.load(Ordering::Relaxed);
        while cur > 1 {
            match inode.refs.compare_exchange_weak(cur, cur - 1, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
        let mut map = self.map.lock();
        if inode.refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        crate::sync::atomic::fence(Ordering::Acquire);
        // Free through the pointer `iget` got from `Box::into_raw`: `p` may
        // derive from a shared reference (a File's), which may not free
        // (Stacked Borrows).
        let owned = map.remove(&inode.ino).expect("in-core inode in the table");
        drop(map);
        // SAFETY: added by the `iget` that created it; only this, the last
        // reference, deletes it.
        unsafe { self.list.del(&inode.sb) };
        counters.add_inode(-1);
        let n = inode.nlookup.load(Ordering::Relaxed);
        if n > 0 {
            inode.fs().forget(inode.ino, n);
        }
        // SAFETY: removed from the table, and no dentry or file points here
        // (refs reached zero), so only RCU readers that loaded it earlier
        // can still see it; they are waited out.
        unsafe { rcu.retire_box(owned as *mut Inode) };
    }

    /// Evicts every inode left (teardown, when nothing else can reach
    /// them): walks the superblock list, as unmount's `evict_inodes` does,
    /// and checks it against the table: an inode missing from the list, or
    /// a list entry with no inode, is a bug.
    pub fn clear(&self, counters: &LiveCounters, rcu: &Rcu) {
        let mut map = self.map.lock();
        let mut listed = 0;
        self.list.for_each(|ino| {
            assert!(map.contains_key(&ino), "inode {ino} on the superblock list but not in core");
            listed += 1;
        });
        assert_eq!(listed, map.len(), "an in-core inode is missing from the superblock list");
        for (_, p) in map.drain() {
            counters.add_inode(-1);
            // SAFETY: no dentry or file refers to it any more (the
            // superblock's last mount is gone, or the Vfs is); the node is
            // on the list (checked above); RCU walkers that crossed into the
            // superblock may still read it, hence the grace period.
            unsafe {
                self.list.del(&(*p).sb);
                rcu.retire_box(p as *mut Inode);
            }
        }
        debug_assert!(self.list.is_empty());
    }
}
