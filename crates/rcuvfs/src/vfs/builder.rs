//! [`VfsBuilder`]: a [`Vfs`] with limits, options and a filesystem.

use std::sync::Arc;

use super::{install_notify, Vfs, VfsState, Views};
use crate::cred::Cred;
use crate::dcache::{Dcache, DcacheOptions};
use crate::error::Result;
use crate::filemap::CacheMode;
use crate::fs::memfs::{AtimePolicy, MemFs, MemFsOptions};
use crate::fs::{FileSystem, Notify};
use crate::modes::{Layout, RefMode};
use crate::sync::list_batch::ListMode;
use crate::sync::percpu_ref::PercpuRef;
use crate::sync::Mutex;

/// Builds a [`Vfs`] with limits and options.
#[derive(Clone)]
pub struct VfsBuilder {
    fs: Option<Arc<dyn FileSystem>>,
    memfs: MemFsOptions,
    umask: u32,
    mode: RefMode,
    layout: Layout,
    inode_list: ListMode,
    buckets: usize,
    dcache_target: usize,
    negative_dentries: Option<usize>,
    complete_dirs: bool,
    observer: Option<Arc<dyn Notify>>,
}

impl VfsBuilder {
    /// Also tells `observer` of every change a filesystem reports through
    /// [`Notify`], after the cache has acted on it: for a server that keeps
    /// caches of its own above the VFS (the FUSE mount tells the kernel to
    /// drop its cached names and attributes). It is called from the
    /// filesystem's thread, with none of the VFS's locks held.
    pub fn observer(mut self, observer: Arc<dyn Notify>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// memfs: bytes of data before ENOSPC.
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.memfs.max_bytes = bytes;
        self
    }

    /// memfs: inodes (the root included) before ENOSPC.
    pub fn max_inodes(mut self, inodes: u64) -> Self {
        self.memfs.max_inodes = inodes;
        self
    }

    /// When reads update atime (relatime by default).
    pub fn atime(mut self, policy: AtimePolicy) -> Self {
        self.memfs.atime = policy;
        self
    }

    /// memfs: how the page cache that holds file data is locked (seed
    /// 001; see [`CacheMode`]); `lockless` by default.
    pub fn page_cache(mut self, mode: CacheMode) -> Self {
        self.memfs.cache = mode;
        self
    }

    /// The umask of the root view (0o022 by default).
    pub fn umask(mut self, umask: u32) -> Self {
        self.umask = umask & 0o777;
        self
    }

    /// How lookups take references (see [`RefMode`]); `norefs` by default.
    pub fn mode(mut self, mode: RefMode) -> Self {
        self.mode = mode;
        self
    }

    /// Where dentries keep their reference count (see [`Layout`]); `split`
    /// by default.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// How the superblock's inode list is locked (seed 004; see
    /// [`ListMode`]); `percpu` by default.
    pub fn inode_list(mut self, mode: ListMode) -> Self {
        self.inode_list = mode;
        self
    }

    /// The dentries the cache holds itself to (1,048,576 by default): past
    /// it, the allocating thread prunes unused dentries, least recently used
    /// first, with a second chance for referenced ones. Evicted names are
    /// found again through the filesystem.
    pub fn dcache_target(mut self, dentries: usize) -> Self {
        self.dcache_target = dentries;
        self
    }

    /// The cached misses the cache keeps at most, negative dentries and
    /// names in directories' sets of absent names together: a quarter of
    /// the dcache target by default. Past it, names from the oldest
    /// directory's set go first, a batch at a time, then negative dentries
    /// by the LRU; the directories holding a set are kept to an eighth of
    /// it (and 64).
    pub fn negative_dentries(mut self, n: usize) -> Self {
        self.negative_dentries = Some(n);
        self
    }

    /// Whether a directory whose every name is cached answers a miss by
    /// itself (on by default): a memfs bound to this Vfs changes only
    /// through it, so the empty root and each directory a mkdir makes
    /// start complete, and a lookup of a name they lack is ENOENT without
    /// a call to memfs and without a negative dentry; the directory stops
    /// being complete once the shrinker, `drop_caches` or an invalidation
    /// drops one of its names. In a directory that is not complete, the
    /// RCU walk then asks the bound memfs's own index for a name the
    /// dcache lacks: a miss is ENOENT and a stat reads memfs's inode, with
    /// no dentry made, no lock and no reference (a handle or an open still
    /// makes the dentry). Off: every miss and every name not cached asks
    /// the filesystem through the VFS and leaves a dentry, a negative one
    /// for a miss, as before (the lab's comparison). No effect on other
    /// filesystems.
    pub fn complete_dirs(mut self, on: bool) -> Self {
        self.complete_dirs = on;
        self
    }

    /// Accepted and ignored: there is no global dentry hash any more (each
    /// directory's children are in an index that grows and shrinks with
    /// them). Kept so that callers from before still build.
    pub fn hash_buckets(mut self, n: usize) -> Self {
        self.buckets = n;
        self
    }

    /// Serves `fs` instead of a fresh memfs.
    pub fn filesystem(mut self, fs: Arc<dyn FileSystem>) -> Self {
        self.fs = Some(fs);
        self
    }

    pub fn build(self) -> Result<Vfs> {
        let fs =
            self.fs.unwrap_or_else(|| Arc::new(MemFs::new(MemFsOptions { inode_list: self.inode_list, ..self.memfs })));
        // A filesystem that can hold only so many inodes caps the target.
        let dcache_target = fs.inode_budget().map_or(self.dcache_target, |b| self.dcache_target.min(b.max(16)));
        let dc = Dcache::new(
            fs.clone(),
            DcacheOptions {
                packed: self.layout == Layout::Packed,
                lock_only: self.mode.locks_every_reference(),
                inode_list: self.inode_list,
                target: dcache_target,
                negative_target: self.negative_dentries.unwrap_or(dcache_target / 4),
                complete_dirs: self.complete_dirs,
                bare_leaves: self.mode.leaves_bare(),
            },
        )?;
        let state = VfsState {
            dc,
            handles: PercpuRef::new(),
            mode: self.mode,
            atime: self.memfs.atime,
            global: Mutex::new(()),
            observer: self.observer,
        };
        let state = Arc::new(state);
        crate::sync::reclaim::register(&state.dc.rcu);
        // The handles' strong reference (see `Views`).
        // SAFETY: `state` is a live Arc.
        unsafe { Arc::increment_strong_count(Arc::as_ptr(&state)) };
        install_notify(&state, &fs);
        Ok(Vfs { state: Arc::new(Views(state)), cred: Arc::new(Cred::root()), cwd: None, umask: self.umask })
    }
}

impl Vfs {
    pub fn builder() -> VfsBuilder {
        VfsBuilder {
            fs: None,
            memfs: MemFsOptions::default(),
            umask: 0o022,
            mode: RefMode::default(),
            layout: Layout::default(),
            inode_list: ListMode::default(),
            buckets: 1 << 16,
            dcache_target: 1 << 20,
            negative_dentries: None,
            complete_dirs: true,
            observer: None,
        }
    }
}
