//! The public API: [`Vfs`] (path-level, named as in `std::fs`), [`Entry`]
//! handles with `*_at` operations (like the *at() syscalls, for servers such
//! as FUSE), credentials views, and metadata types.
//!
//! Every path operation is the handle-level operation relative to the view's
//! working directory. A failed call changes nothing, except
//! [`Vfs::create_dir_all`] and [`Vfs::remove_dir_all`], which, as in
//! `std::fs`, may stop partway and leave what they already did.
//!
//! # Locks taken by namespace operations
//!
//! | lock                    | held over                                              |
//! |-------------------------|--------------------------------------------------------|
//! | `Shared::global`        | the whole operation, in the `global` mode only          |
//! | `Dcache::rename_mutex`  | a rename between two directories (`s_vfs_rename_mutex`), and a mount: the tree's shape cannot change while ancestry checks (`Dcache::is_ancestor`) run |
//! | name locks (`Dcache::names`) | one name in one directory while it is created, removed, renamed, or looked up in the filesystem; a mountpoint's name while a mount is attached on it (`lock_mount`) |
//! | `Namespace::lock`       | the mount tree (see `mount`)                            |
//!
//! Order: `global`, then `rename_mutex`, then name locks (two in stripe
//! order), then the namespace lock, then the dcache's own locks (see
//! `dcache`). The dcache's superblock list comes before `rename_mutex`
//! (a notification holds it while it waits for a name lock), so a mount
//! makes its superblock before it takes any of these. No lock covers a whole directory: creates, removes and
//! renames of different names in one directory run in parallel.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cred::{Cred, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::dcache::names::NameGuard;
use crate::dcache::{name_hash, DRef, Dcache, DcacheOptions, Dentry, LiveCounters};
use crate::error::{
    errno_of, fail, Result, EACCES, EBUSY, EEXIST, EINVAL, EISDIR, ELOOP, ENOENT, ENOTDIR, ENOTEMPTY, EPERM, EXDEV,
};
use crate::file::{File, OpenOptions};
use crate::filemap::CacheMode;
use crate::fs::memfs::{AtimePolicy, MemFs, MemFsOptions};
use crate::fs::{Attr, FileSystem, FileType, Ino, Notify, Owner, RenameFlags, SetAttr, SetTime, StatFs, Timespec};
use crate::inode::Inode;
use crate::modes::{Layout, RefMode};
use crate::mount::{MntRef, Mount};
use crate::namei::{check_name, check_path, Last, Parent, RefWalk, Walk};
use crate::sync::list_batch::ListMode;
use crate::sync::percpu_ref::PercpuRef;
use crate::sync::{Mutex, MutexGuard};

/// How many times an update that answered ESTALE (a busy rename mutex or
/// name lock) is tried again. Each try first waits for what was busy, so
/// this bounds only a run of renames that keep winning the race: 4 lost
/// 1 racing test in 100 (two clients renaming directories without pause);
/// a try that still holds the rename mutex from the start would need no
/// bound (not done).
const ESTALE_RETRIES: usize = 64;

mod dir;
mod xattr;
pub use dir::{DirEntry, DirEntryPlus, ReadDir, TreeWalk, WalkEntry};

pub(crate) struct Shared {
    pub dc: Dcache,
    /// Handles ([`Entry`], [`File`]) that keep this state alive, counted
    /// per thread shard while any [`Vfs`] view is left (see [`Views`]).
    handles: PercpuRef,
    pub mode: RefMode,
    pub atime: AtimePolicy,
    global: Mutex<()>,
    /// Told of every change a filesystem reports (`VfsBuilder::observer`).
    observer: Option<Arc<dyn Notify>>,
}

impl Shared {
    /// The global lock, in the `global` mode.
    #[inline]
    fn global(&self) -> Option<MutexGuard<'_, ()>> {
        self.mode.takes_global_lock().then(|| self.global.lock())
    }

    /// The root filesystem.
    pub fn fs(&self) -> &dyn FileSystem {
        &*self.dc.root_sb().fs
    }
}

/// The base reference that the [`Vfs`] views of one tree hold on its
/// shared state. Handles count themselves apart, per thread shard
/// ([`SharedRef`]), so that an open or a lookup handle stores nothing that
/// another thread's also stores (an `Arc` clone per open was one shared
/// line for every create in the process). When the last view goes, the
/// handle count is killed (switched to one counter): the handles left keep
/// the state alive, and the last of them frees it.
struct Views(Arc<Shared>);

impl std::ops::Deref for Views {
    type Target = Arc<Shared>;
    fn deref(&self) -> &Arc<Shared> {
        &self.0
    }
}

impl Drop for Views {
    fn drop(&mut self) {
        if self.0.handles.kill(&self.0.dc.rcu) {
            // SAFETY: the handles' strong reference, taken in `build`, is
            // dropped once: here, as none is left, or by the last handle.
            unsafe { Arc::decrement_strong_count(Arc::as_ptr(&self.0)) };
        }
    }
}

/// A handle's counted reference to a tree's shared state (see [`Views`]).
pub(crate) struct SharedRef(std::ptr::NonNull<Shared>);

// SAFETY: `Shared` is Send + Sync; the reference may be dropped anywhere.
unsafe impl Send for SharedRef {}
// SAFETY: as above.
unsafe impl Sync for SharedRef {}

impl SharedRef {
    fn new(shared: &Arc<Shared>) -> SharedRef {
        shared.handles.get(&shared.dc.rcu);
        SharedRef(std::ptr::NonNull::from(&**shared))
    }
}

impl std::ops::Deref for SharedRef {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        // SAFETY: a counted handle keeps the state alive (see `Views`).
        unsafe { self.0.as_ref() }
    }
}

impl Clone for SharedRef {
    fn clone(&self) -> SharedRef {
        self.handles.get(&self.dc.rcu);
        SharedRef(self.0)
    }
}

impl Drop for SharedRef {
    fn drop(&mut self) {
        if self.handles.put(&self.dc.rcu) {
            // SAFETY: the last handle after the last view: the handles'
            // strong reference (see `Views`), dropped once.
            unsafe { Arc::decrement_strong_count(self.0.as_ptr() as *const Shared) };
        }
    }
}

/// A view of a virtual filesystem: shared state, plus this view's
/// credentials, working directory and umask. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Vfs {
    shared: Arc<Views>,
    cred: Arc<Cred>,
    cwd: Option<Entry>,
    umask: u32,
}

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

    /// The negative dentries (cached misses) the cache keeps at most:
    /// a quarter of the dcache target by default.
    pub fn negative_dentries(mut self, n: usize) -> Self {
        self.negative_dentries = Some(n);
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
                list: self.inode_list,
                target: dcache_target,
                negative_target: self.negative_dentries.unwrap_or(dcache_target / 4),
            },
        )?;
        let shared = Shared {
            dc,
            handles: PercpuRef::new(),
            mode: self.mode,
            atime: self.memfs.atime,
            global: Mutex::new(()),
            observer: self.observer,
        };
        let shared = Arc::new(shared);
        // The handles' strong reference (see `Views`).
        // SAFETY: `shared` is a live Arc.
        unsafe { Arc::increment_strong_count(Arc::as_ptr(&shared)) };
        attach(&shared, &fs);
        Ok(Vfs { shared: Arc::new(Views(shared)), cred: Arc::new(Cred::root()), cwd: None, umask: self.umask })
    }
}

/// A handle on a cached name (a dentry reference), like an `O_PATH` file
/// descriptor. It follows its name through renames; after the name is
/// removed it still refers to the (unlinked) object. Released on drop.
pub struct Entry {
    shared: SharedRef,
    /// The mount the name was found in (counted).
    mnt: *const Mount,
    d: *const Dentry,
}

// SAFETY: the dentry is reference-counted and all its shared fields are
// atomics; the reference this handle owns may be dropped from any thread.
unsafe impl Send for Entry {}
// SAFETY: as above; `&Entry` only reads.
unsafe impl Sync for Entry {}

impl Entry {
    fn from_ref(shared: &Arc<Shared>, mnt: MntRef<'_>, d: DRef<'_>) -> Entry {
        Entry { shared: SharedRef::new(shared), mnt: mnt.into_raw(), d: d.into_raw() }
    }

    fn mount(&self) -> &Mount {
        // SAFETY: this handle owns a reference.
        unsafe { &*self.mnt }
    }

    fn dentry(&self) -> &Dentry {
        // SAFETY: this handle owns a reference.
        unsafe { &*self.d }
    }

    fn inode(&self) -> &Inode {
        self.dentry().inode().expect("handles refer to positive dentries")
    }

    pub fn ino(&self) -> Ino {
        self.inode().ino
    }

    pub fn file_type(&self) -> FileType {
        self.inode().kind
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Dir
    }

    /// The attributes of the object (`fstat`), from the cache.
    pub fn metadata(&self) -> Result<Metadata> {
        Ok(Metadata(self.inode().attr()))
    }

    /// Reads the attributes again from the filesystem and returns them:
    /// for a server whose clients change a file behind the VFS (FUSE
    /// passthrough, where the kernel writes the host file itself). On
    /// memfs the cache is the truth, and this is `metadata`.
    pub fn refresh(&self) -> Result<Metadata> {
        let inode = self.inode();
        if !inode.is_owned() {
            let a = inode.fs().getattr(inode.ino)?;
            inode.set_attr(&a);
        }
        Ok(Metadata(inode.attr()))
    }

    /// A descriptor of the host file holding this file's data, read-write
    /// if `write` (see [`FileSystem::open_host_file`]); `None` where there
    /// is none. For servers only: it bypasses the VFS, which checks no
    /// permission here (check them with an open first).
    pub fn open_host_file(&self, write: bool) -> Option<Result<std::os::fd::OwnedFd>> {
        let inode = self.inode();
        inode.fs().open_host_file(inode.ino, write)
    }

    /// Releases the reference now (the same as dropping it).
    pub fn forget(self) {}

    fn check_same_vfs(&self, shared: &Arc<Shared>) -> Result<()> {
        if std::ptr::eq(&*self.shared, &**shared) {
            Ok(())
        } else {
            fail(EXDEV)
        }
    }
}

impl Clone for Entry {
    fn clone(&self) -> Entry {
        self.dentry().lockref().get();
        self.shared.dc.mntget(self.mount()).into_raw();
        Entry { shared: self.shared.clone(), mnt: self.mnt, d: self.d }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // The dentry first: the mount's reference may be the last that
        // keeps its filesystem.
        self.shared.dc.dput(self.dentry());
        self.shared.dc.mntput(self.mount());
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("ino", &self.ino()).field("kind", &self.file_type()).finish()
    }
}

/// Permission bits, as `std::fs::Permissions` (which cannot be built here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permissions(u32);

impl Permissions {
    pub fn from_mode(mode: u32) -> Permissions {
        Permissions(mode & 0o7777)
    }
    pub fn mode(&self) -> u32 {
        self.0
    }
    pub fn readonly(&self) -> bool {
        self.0 & 0o222 == 0
    }
}

/// The attributes of a file, as `std::fs::Metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata(pub Attr);

impl Metadata {
    pub fn file_type(&self) -> FileType {
        self.0.kind
    }
    pub fn is_dir(&self) -> bool {
        self.0.kind == FileType::Dir
    }
    pub fn is_file(&self) -> bool {
        self.0.kind == FileType::File
    }
    pub fn is_symlink(&self) -> bool {
        self.0.kind == FileType::Symlink
    }
    pub fn len(&self) -> u64 {
        self.0.size
    }
    pub fn is_empty(&self) -> bool {
        self.0.size == 0
    }
    pub fn permissions(&self) -> Permissions {
        Permissions(self.0.perm)
    }
    /// `st_mode`: type and permission bits.
    pub fn mode(&self) -> u32 {
        self.0.mode()
    }
    pub fn ino(&self) -> Ino {
        self.0.ino
    }
    pub fn nlink(&self) -> u32 {
        self.0.nlink
    }
    pub fn uid(&self) -> u32 {
        self.0.uid
    }
    pub fn gid(&self) -> u32 {
        self.0.gid
    }
    pub fn blocks(&self) -> u64 {
        self.0.blocks
    }
    pub fn rdev(&self) -> u64 {
        self.0.rdev
    }
    pub fn modified(&self) -> Result<std::time::SystemTime> {
        Ok(self.0.mtime.to_system_time())
    }
    pub fn accessed(&self) -> Result<std::time::SystemTime> {
        Ok(self.0.atime.to_system_time())
    }
    /// The status-change time (ctime).
    pub fn changed(&self) -> Timespec {
        self.0.ctime
    }
    pub fn attr(&self) -> &Attr {
        &self.0
    }
}

/// Live-object counts of one `Vfs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Dentries cached, negative ones included.
    pub dentries: i64,
    pub negative_dentries: i64,
    /// In-core inodes (held by dentries or open files).
    pub inodes: i64,
    /// Mounts besides the root: attached, or detached and still in use.
    pub mounts: i64,
}

fn bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

/// Where a handle-level path starts: a directory handle, or the view's
/// working directory.
#[derive(Clone, Copy)]
enum Start<'a> {
    Cwd,
    At(&'a Entry),
}

impl Default for Vfs {
    fn default() -> Self {
        Self::new()
    }
}

/// Gives `fs`, served by `shared`, its way to report outside changes.
fn attach(shared: &Arc<Shared>, fs: &Arc<dyn FileSystem>) {
    fs.attach(Arc::new(VfsNotify {
        shared: Arc::downgrade(shared),
        fs: Arc::as_ptr(fs) as *const () as usize,
        observer: shared.observer.clone(),
    }));
}

/// A filesystem's [`Notify`]: finds its superblock by the filesystem's
/// address (under the superblock list's lock, so it cannot be torn down
/// meanwhile) and acts on the cache. Does nothing once the Vfs is gone.
struct VfsNotify {
    shared: std::sync::Weak<Shared>,
    fs: usize,
    /// The builder's observer, told after the cache acted.
    observer: Option<Arc<dyn Notify>>,
}

impl VfsNotify {
    fn with(&self, f: impl FnOnce(&Dcache, &crate::inode::Super)) {
        if let Some(shared) = self.shared.upgrade() {
            shared.dc.with_super(self.fs as *const (), |sb| f(&shared.dc, sb));
        }
    }
}

impl Notify for VfsNotify {
    fn entry_changed(&self, parent: Ino, name: &[u8]) {
        self.with(|dc, sb| {
            if let Some(dir) = dc.alias_ref(sb, parent) {
                // A lookup of this name in flight holds its name lock
                // across the filesystem's answer and the dcache's record
                // of it: wait for it, then drop what it cached, which may
                // predate the change (a miss read just before a create).
                let _name = lock_name(dc, &dir, name);
                if let Some(d) = dc.d_lookup(&dir, name) {
                    dc.d_invalidate(&d);
                }
            }
        });
        if let Some(o) = &self.observer {
            o.entry_changed(parent, name);
        }
    }

    fn entry_is(&self, parent: Ino, name: &[u8], ino: Option<Ino>) {
        self.with(|dc, sb| {
            if let Some(dir) = dc.alias_ref(sb, parent) {
                // The change's own update holds the name lock until its
                // result is cached: compare with that result.
                let _name = lock_name(dc, &dir, name);
                if let Some(d) = dc.d_lookup(&dir, name) {
                    if d.inode().map(|i| i.ino) != ino {
                        dc.d_invalidate(&d);
                    }
                }
            }
        });
        // The observer (the kernel, through FUSE) is told in any case: it
        // applied the change to its own belief, which may be behind where
        // this cache's was not (a kernel rename of a name whose
        // invalidation was still waiting for the directory's lock).
        if let Some(o) = &self.observer {
            o.entry_changed(parent, name);
        }
    }

    fn attr_changed(&self, parent: Ino, name: &[u8]) {
        let mut child = None;
        self.with(|dc, sb| {
            if let Some(d) = dc.cached_child(sb, parent, name) {
                if let Some(i) = d.inode() {
                    i.refresh(&*sb.fs);
                    child = Some(i.ino);
                }
            }
        });
        if let Some(o) = &self.observer {
            o.attr_changed(parent, name);
            // The object itself too: an observer may cache by inode (the
            // kernel's attributes and pages of an open file).
            if let Some(ino) = child {
                o.inode_changed(ino);
            }
        }
    }

    fn inode_changed(&self, ino: Ino) {
        self.with(|dc, sb| dc.refresh_inode(sb, ino));
        if let Some(o) = &self.observer {
            o.inode_changed(ino);
        }
    }

    fn all_changed(&self) {
        self.with(|dc, sb| dc.invalidate_super(sb));
        if let Some(o) = &self.observer {
            o.all_changed();
        }
    }

    fn set_revalidate(&self, on: bool) {
        self.with(|_, sb| sb.revalidates.store(on, std::sync::atomic::Ordering::Relaxed));
    }
}

/// What `mount_on` attaches.
enum Mounted<'e> {
    Fresh(*const crate::inode::Super),
    Bind(&'e Entry, bool),
}

/// The name lock of `name` in `dir`.
fn lock_name<'a>(dc: &'a Dcache, dir: &Dentry, name: &[u8]) -> NameGuard<'a> {
    dc.names.lock(name_hash(dir as *const Dentry, name))
}

/// How an update holds the directory it works in.
enum DirPin<'a> {
    /// By a reference of its own (the walk pinned the directory).
    Held(DRef<'a>),
    /// Through the name's dentry, whose reference on its parent keeps the
    /// directory while the name is locked and the dentry held (see
    /// `Dcache::walk_name_rcu`): no store on the directory's dentry.
    ByChild(*const Dentry),
}

/// An update's last name, found and locked (the state `filename_create`
/// and `do_unlinkat` reach in Linux): the name's dentry, positive or
/// negative, with a reference; the name's lock; the directory; the walk.
/// Fields drop in this order: the dentry, the lock, then the directory.
struct Named<'a, 'p> {
    child: DRef<'a>,
    _lock: NameGuard<'a>,
    dir: DirPin<'a>,
    name: &'p [u8],
    /// The path ended in '/'.
    trailing: bool,
    w: RefWalk<'a>,
}

impl Named<'_, '_> {
    fn dir(&self) -> &Dentry {
        match &self.dir {
            DirPin::Held(d) => d,
            // SAFETY: `child` is a child of this directory (checked under
            // the name lock, which keeps it so) and holds a reference on
            // it; both live as long as `self`.
            DirPin::ByChild(p) => unsafe { &**p },
        }
    }
}

/// Where an update's walk ends: a name, locked, or ".", ".." or "/".
enum Begun<'a, 'p> {
    Named(Named<'a, 'p>),
    Other(Last<'p>),
}

impl Vfs {
    /// A `Vfs` over a fresh in-memory filesystem, seen as root, in the
    /// default mode.
    pub fn new() -> Vfs {
        Vfs::builder().build().expect("a fresh memfs has a root")
    }

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
            observer: None,
        }
    }

    /// The same filesystem seen with other credentials (and the same
    /// working directory and umask).
    pub fn with_cred(&self, cred: Cred) -> Vfs {
        Vfs { shared: self.shared.clone(), cred: Arc::new(cred), cwd: self.cwd.clone(), umask: self.umask }
    }

    pub fn cred(&self) -> &Cred {
        &self.cred
    }

    pub fn mode(&self) -> RefMode {
        self.shared.mode
    }

    pub fn umask(&self) -> u32 {
        self.umask
    }

    pub fn set_umask(&mut self, umask: u32) {
        self.umask = umask & 0o777;
    }

    /// Changes this view's working directory (`chdir`).
    pub fn set_current_dir(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let e = self.entry(path)?;
        if !e.is_dir() {
            return fail(ENOTDIR);
        }
        self.shared.dc.may_exec(&self.cred, e.dentry())?;
        self.cwd = Some(e);
        Ok(())
    }

    /// The filesystem under this Vfs.
    pub fn filesystem(&self) -> &Arc<dyn FileSystem> {
        &self.shared.dc.root_sb().fs
    }

    pub fn stats(&self) -> Stats {
        let c = &self.shared.dc.counters;
        Stats {
            dentries: c.dentries(),
            negative_dentries: c.negative_dentries(),
            inodes: c.inodes(),
            mounts: c.mounts(),
        }
    }

    /// The paths of the cached names of the object at `path` (its aliases:
    /// every hard link the dcache holds, found from the inode, seed 003's
    /// figure 5), sorted. Names not cached are not listed.
    pub fn aliases(&self, path: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
        let e = self.entry_nofollow(path)?;
        Ok(self.shared.dc.alias_paths(e.inode()).into_iter().map(|p| PathBuf::from(OsString::from_vec(p))).collect())
    }

    /// Calls `f` with the number of every in-core inode, from the
    /// superblock's inode list (what unmount eviction and sync walk).
    pub fn for_each_inode(&self, f: impl FnMut(Ino)) {
        self.shared.dc.root_sb().itable.for_each_ino(f);
    }

    /// The counters, readable after the `Vfs` and all its handles are gone:
    /// teardown brings them to zero.
    pub fn live_counters(&self) -> Arc<LiveCounters> {
        self.shared.dc.counters.clone()
    }

    /// Drops every unused dentry (like `echo 2 > drop_caches`), then waits
    /// out a grace period so their memory is freed. The filesystem keeps its
    /// truth; later lookups find it again.
    pub fn drop_caches(&self) {
        let _g = self.shared.global();
        self.shared.dc.shrink_all();
        self.shared.dc.rcu.synchronize();
    }

    /// Checks the dentry cache's structural invariants (the LRU holds only
    /// live, cached dentries; lists and hash chains are well linked; the
    /// counters agree with the tree), briefly stopping updates. `Err` names
    /// the first violation: a bug in rcuvfs, worth a report. For tests and
    /// debugging; nothing calls it on its own.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.shared.dc.check_invariants()
    }

    /// Waits for a grace period: memory that lookups might still have been
    /// reading when it was released (dentries, inodes and their page caches)
    /// is freed by the time this returns.
    pub fn synchronize(&self) {
        self.shared.dc.rcu.synchronize();
    }

    /// `statfs`.
    pub fn statfs(&self) -> Result<StatFs> {
        self.shared.fs().statfs()
    }

    fn dc(&self) -> &Dcache {
        &self.shared.dc
    }

    /// The place a walk starts from (not counted).
    fn start_place<'a>(&'a self, start: Start<'a>) -> Result<(&'a Mount, &'a Dentry)> {
        match start {
            Start::Cwd => Ok(match &self.cwd {
                Some(e) => (e.mount(), e.dentry()),
                None => (self.dc().ns.root(), self.dc().root()),
            }),
            Start::At(e) => {
                e.check_same_vfs(&self.shared)?;
                Ok((e.mount(), e.dentry()))
            }
        }
    }

    /// A REF-walk of `path` from `start`: the walk, holding its mount, and
    /// a counted reference on its first dentry (the root for an absolute
    /// path, else the start directory).
    fn begin<'a>(&'a self, start: Start<'a>, path: &[u8]) -> Result<(RefWalk<'a>, DRef<'a>)> {
        let dc = self.dc();
        if path.first() == Some(&b'/') {
            return Ok((RefWalk::new(&self.cred, dc.root_mnt()), dc.root_ref()));
        }
        let (m, d) = self.start_place(start)?;
        Ok((RefWalk::new(&self.cred, dc.mntget(m)), dc.dget(d)))
    }

    /// The parent walk of an update: RCU-walk, pinning only the directory
    /// it ends in (in the modes that walk in RCU), else REF-walk.
    /// The walk of an update (create, unlink, rmdir, link, open with
    /// `O_CREAT`) to its last name, locked: in RCU-walk with a reference
    /// on the name's dentry alone where it is cached (`walk_name_rcu`),
    /// else to the directory, pinned, then the name's lookup under its
    /// lock.
    fn begin_named<'a, 'p>(&'a self, start: Start<'a>, path: &'p [u8]) -> Result<Begun<'a, 'p>> {
        let dc = self.dc();
        if self.shared.mode.tries_rcu_walk() {
            let (m, d) = self.start_place(start)?;
            match dc.walk_name_rcu(&self.cred, m, d, path) {
                Some(Err(e)) => return Err(e),
                Some(Ok((w, dir, child, cseq, name, trailing))) => {
                    let lock = dc.names.lock(name_hash(dir, name));
                    // Still the dentry the walk found under `dir` (name,
                    // parent and inode unchanged): then `dir` is pinned.
                    if !child.seq.read_retry(cseq) {
                        let dir = DirPin::ByChild(dir);
                        return Ok(Begun::Named(Named { child, _lock: lock, dir, name, trailing, w }));
                    }
                }
                None => {}
            }
        }
        let (w, p) = self.begin_parent(start, path)?;
        self.lock_last(w, p)
    }

    /// Locks the last name of a walk that pinned its directory, and looks
    /// it up.
    fn lock_last<'a, 'p>(&'a self, w: RefWalk<'a>, p: Parent<'a, 'p>) -> Result<Begun<'a, 'p>> {
        let dc = self.dc();
        let Last::Normal(name) = p.last else {
            return Ok(Begun::Other(p.last));
        };
        let lock = lock_name(dc, &p.dir, name);
        let child = dc.lookup_locked(&p.dir, name, None)?;
        Ok(Begun::Named(Named { child, _lock: lock, dir: DirPin::Held(p.dir), name, trailing: p.trailing, w }))
    }

    fn begin_parent<'a, 'p>(&'a self, start: Start<'a>, path: &'p [u8]) -> Result<(RefWalk<'a>, Parent<'a, 'p>)> {
        let dc = self.dc();
        if self.shared.mode.tries_rcu_walk() {
            let (m, d) = self.start_place(start)?;
            if let Some(r) = dc.walk_parent_rcu(&self.cred, m, d, path) {
                return r;
            }
        }
        let (mut w, s) = self.begin(start, path)?;
        let p = dc.walk_parent(&mut w, s, path)?;
        Ok((w, p))
    }

    /// A walk to a positive dentry that the caller keeps: RCU-walk, pinning
    /// only what it finds (in the modes that walk in RCU), else REF-walk.
    fn begin_walk<'a>(&'a self, start: Start<'a>, path: &[u8], follow: bool) -> Result<(RefWalk<'a>, DRef<'a>)> {
        let dc = self.dc();
        if self.shared.mode.tries_rcu_walk() {
            let (m, d) = self.start_place(start)?;
            if let Some(r) = dc.walk_rcu_pinned(&self.cred, m, d, path, follow) {
                return r;
            }
        }
        let (mut w, s) = self.begin(start, path)?;
        let d = dc.walk(&mut w, s, path, follow)?;
        Ok((w, d))
    }

    fn entry_from(&self, start: Start, path: &[u8], follow: bool) -> Result<Entry> {
        check_path(path)?;
        let _g = self.shared.global();
        let (w, d) = self.begin_walk(start, path, follow)?;
        Ok(Entry::from_ref(&self.shared, self.dc().mntget(w.mnt()), d))
    }

    // ---- handles ----

    /// The root directory's handle.
    pub fn root_entry(&self) -> Entry {
        Entry::from_ref(&self.shared, self.dc().root_mnt(), self.dc().root_ref())
    }

    /// A handle on `path`, following a final symlink.
    pub fn entry(&self, path: impl AsRef<Path>) -> Result<Entry> {
        self.entry_from(Start::Cwd, bytes(path.as_ref()), true)
    }

    /// A handle on `path` itself, not following a final symlink.
    pub fn entry_nofollow(&self, path: impl AsRef<Path>) -> Result<Entry> {
        self.entry_from(Start::Cwd, bytes(path.as_ref()), false)
    }

    /// A handle on `path` relative to directory `dir`.
    pub fn entry_at(&self, dir: &Entry, path: impl AsRef<Path>, follow: bool) -> Result<Entry> {
        self.entry_from(Start::At(dir), bytes(path.as_ref()), follow)
    }

    /// Looks up one name in directory `dir` (FUSE's lookup): no symlink is
    /// followed; "." and ".." work.
    pub fn lookup_at(&self, dir: &Entry, name: impl AsRef<OsStr>) -> Result<Entry> {
        let name = name.as_ref().as_bytes();
        if name != b"." && name != b".." {
            check_name(name)?;
        }
        self.entry_from(Start::At(dir), name, false)
    }

    // ---- attributes ----

    /// `stat`, following symlinks.
    #[inline]
    pub fn metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        self.metadata_from(Start::Cwd, bytes(path.as_ref()), true)
    }

    /// `lstat`.
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        self.metadata_from(Start::Cwd, bytes(path.as_ref()), false)
    }

    /// `fstatat`.
    pub fn metadata_at(&self, dir: &Entry, path: impl AsRef<Path>, follow: bool) -> Result<Metadata> {
        self.metadata_from(Start::At(dir), bytes(path.as_ref()), follow)
    }

    /// The stat of a path: RCU-walk and a read of the attributes under the
    /// inode's sequence count; REF-walk when that cannot finish.
    #[inline]
    fn metadata_from(&self, start: Start, path: &[u8], follow: bool) -> Result<Metadata> {
        check_path(path)?;
        let mode = self.shared.mode;
        if mode.tries_rcu_walk() {
            if let Some(r) = self.stat_rcu(start, path, follow, mode.stat_pins_final()) {
                return r.map(Metadata);
            }
        }
        let _g = self.shared.global();
        let (mut w, s) = self.begin(start, path)?;
        let d = self.dc().walk(&mut w, s, path, follow)?;
        let attr = d.inode().expect("positive").attr();
        Ok(Metadata(attr))
    }

    /// `None`: fall back to REF-walk.
    #[inline]
    fn stat_rcu(&self, start: Start, path: &[u8], follow: bool, pin: bool) -> Option<Result<Attr>> {
        let dc = self.dc();
        let (m, s) = match self.start_place(start) {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let guard = dc.rcu.read_lock();
        let sseq = s.seq.read_begin()?;
        let mut w = Walk::new(&self.cred);
        let (m, d, seq) = match dc.walk_rcu(&guard, &mut w, m, s, sseq, path, follow)? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        if pin {
            // The mount first (none for the root mount): a dentry reference
            // must not outlive its filesystem's last mount.
            let _m = dc.mnt_get_rcu(m)?;
            // `rcuwalk`: legitimize the final dentry with a reference
            // (`lockref_get_not_dead`) and drop it after the read, as
            // Linux's stat does.
            if !d.lockref().get_not_dead() {
                return None;
            }
            // SAFETY: we just took this reference.
            let r = unsafe { DRef::adopt(dc, d) };
            if d.seq.read_retry(seq) {
                return None;
            }
            return Some(Ok(r.inode()?.attr()));
        }
        let attr = d.inode()?.attr();
        if d.seq.read_retry(seq) {
            return None;
        }
        // Second chance for the LRU: a store only if the bit is clear.
        crate::dcache::mark_referenced(d);
        Some(Ok(attr))
    }

    /// Does `path` exist (following symlinks)? Errors other than ENOENT
    /// and ENOTDIR are returned.
    pub fn try_exists(&self, path: impl AsRef<Path>) -> Result<bool> {
        match self.metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if matches!(errno_of(&e), ENOENT | ENOTDIR) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `chmod`.
    pub fn set_permissions(&self, path: impl AsRef<Path>, perm: Permissions) -> Result<()> {
        let set = SetAttr { perm: Some(perm.mode()), ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// `chown` (following symlinks); `None` leaves that id unchanged.
    pub fn chown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let set = SetAttr { uid, gid, ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// `lchown`.
    pub fn lchown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let set = SetAttr { uid, gid, ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), false, &set).map(drop)
    }

    /// `utimensat`: `None` leaves a time unchanged.
    pub fn set_times(&self, path: impl AsRef<Path>, atime: Option<SetTime>, mtime: Option<SetTime>) -> Result<()> {
        let set = SetAttr { atime, mtime, ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// `truncate`.
    pub fn truncate(&self, path: impl AsRef<Path>, size: u64) -> Result<()> {
        let set = SetAttr { size: Some(size), ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// Changes the attributes of the object behind `entry` with every POSIX
    /// check (FUSE's setattr): chmod and chown rules, utimens rules, and
    /// write permission for a size change.
    pub fn set_attr(&self, entry: &Entry, set: &SetAttr) -> Result<Metadata> {
        entry.check_same_vfs(&self.shared)?;
        let _g = self.shared.global();
        self.setattr_checked(entry.inode(), set).map(Metadata)
    }

    fn setattr_from(&self, start: Start, path: &[u8], follow: bool, set: &SetAttr) -> Result<Attr> {
        check_path(path)?;
        let _g = self.shared.global();
        let (mut w, s) = self.begin(start, path)?;
        let d = self.dc().walk(&mut w, s, path, follow)?;
        self.setattr_checked(d.inode().expect("positive"), set)
    }

    /// `notify_change` with `setattr_prepare`'s checks.
    fn setattr_checked(&self, inode: &Inode, set: &SetAttr) -> Result<Attr> {
        let fs = inode.fs();
        let cred = &*self.cred;
        let attr = inode.attr();
        let mut set = set.clone();
        if set.size.is_some() {
            if attr.kind == FileType::Dir {
                return fail(EISDIR);
            }
            if attr.kind != FileType::File {
                return fail(EINVAL);
            }
            if !cred.may(&attr, MAY_WRITE) {
                return fail(EACCES);
            }
        }
        if let Some(uid) = set.uid {
            if !cred.is_root() && (uid != attr.uid || cred.uid != attr.uid) {
                return fail(EPERM);
            }
        }
        if let Some(gid) = set.gid {
            if !cred.is_root() && (cred.uid != attr.uid || !cred.in_group(gid)) {
                return fail(EPERM);
            }
        }
        if let Some(mut perm) = set.perm {
            if !cred.owns(&attr) {
                return fail(EPERM);
            }
            let gid = set.gid.unwrap_or(attr.gid);
            if !cred.is_root() && !cred.in_group(gid) {
                perm &= !libc::S_ISGID;
            }
            set.perm = Some(perm);
        }
        match (set.atime, set.mtime) {
            (None, None) => {}
            (a, m) if a.unwrap_or(SetTime::Now) == SetTime::Now && m.unwrap_or(SetTime::Now) == SetTime::Now => {
                if !cred.owns(&attr) && !cred.may(&attr, MAY_WRITE) {
                    return fail(EACCES);
                }
            }
            _ => {
                if !cred.owns(&attr) {
                    return fail(EPERM);
                }
            }
        }
        if (set.uid.is_some() || set.gid.is_some()) && attr.kind != FileType::Dir && set.perm.is_none() {
            // chown clears set-user-id, and set-group-id when group-executable.
            let mut perm = attr.perm & !libc::S_ISUID;
            if perm & 0o010 != 0 {
                perm &= !libc::S_ISGID;
            }
            if perm != attr.perm {
                set.perm = Some(perm);
            }
        }
        let new = fs.setattr(inode.ino, &set)?;
        inode.set_attr(&new);
        Ok(new)
    }

    // ---- creating names ----

    /// The owner and permission bits of a new inode in `dir` (BSD group
    /// semantics under a set-group-id directory).
    fn new_owner(&self, dir_attr: &Attr, kind: FileType, perm: u32) -> (Owner, u32) {
        let cred = &*self.cred;
        if dir_attr.perm & libc::S_ISGID != 0 {
            let perm = if kind == FileType::Dir { perm | libc::S_ISGID } else { perm };
            (Owner { uid: cred.uid, gid: dir_attr.gid }, perm)
        } else {
            (Owner { uid: cred.uid, gid: cred.gid }, perm)
        }
    }

    /// Runs an update again, a few times, while it answers ESTALE because
    /// a lookup found a directory's dentry under another parent (moved
    /// behind the cache, by another machine or on the host) and could not
    /// move it: that needs the rename mutex and the old name's lock, which
    /// a lookup holding name locks may only try. Each time, it first waits
    /// for them (Linux's `retry_estale`). A filesystem's own ESTALE is
    /// answered at once: nothing here would make a second try different,
    /// and the first may have changed something.
    fn retry_estale<T>(&self, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        for _ in 0..ESTALE_RETRIES {
            match op() {
                Err(e) if errno_of(&e) == libc::ESTALE => match crate::namei::took_rename_busy() {
                    Some(wait) => self.dc().wait_for_move(wait),
                    None => return Err(e),
                },
                r => return r,
            }
        }
        op()
    }

    /// Write and search permission on a directory (`may_create`).
    fn may_create(&self, dir: &Dentry) -> Result<Attr> {
        let a = dir.inode().expect("positive directory").access_attr();
        if !self.cred.may(&a, MAY_WRITE | MAY_EXEC) {
            return fail(EACCES);
        }
        Ok(a)
    }

    /// Records a name the filesystem just created in `dir` for the negative
    /// dentry `d`, and refreshes the directory's cached attributes.
    fn instantiate(&self, dir: &Dentry, d: &Dentry, attr: &Attr) -> Result<()> {
        let dc = self.dc();
        let ip = dir.sb().iget(attr, true, &dc.counters)?;
        dc.d_instantiate(d, ip);
        let di = dir.inode().expect("positive directory");
        di.refresh(di.fs());
        Ok(())
    }

    /// The common path of mkdir, mknod, symlink: the name must not exist.
    fn create_node(
        &self,
        start: Start,
        path: &[u8],
        kind: FileType,
        make: impl Fn(&dyn FileSystem, Ino, &[u8], Owner, u32) -> Result<Attr>,
        perm: u32,
    ) -> Result<()> {
        self.retry_estale(|| self.create_node_once(start, path, kind, &make, perm))
    }

    fn create_node_once(
        &self,
        start: Start,
        path: &[u8],
        kind: FileType,
        make: &impl Fn(&dyn FileSystem, Ino, &[u8], Owner, u32) -> Result<Attr>,
        perm: u32,
    ) -> Result<()> {
        check_path(path)?;
        let _g = self.shared.global();
        let Begun::Named(n) = self.begin_named(start, path)? else {
            return fail(EEXIST);
        };
        if n.child.inode().is_some() {
            return fail(EEXIST);
        }
        if n.trailing && kind != FileType::Dir {
            return fail(ENOENT);
        }
        let dir = n.dir();
        let dir_attr = self.may_create(dir)?;
        let (owner, perm) = self.new_owner(&dir_attr, kind, perm);
        let attr = make(dir.sb().fs.as_ref(), dir_attr.ino, n.name, owner, perm)?;
        self.instantiate(dir, &n.child, &attr)
    }

    /// `mkdir` with mode 0o777 less the umask.
    pub fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.create_dir_mode(path, 0o777)
    }

    /// `mkdir` with `mode` (less the umask).
    pub fn create_dir_mode(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.mkdir_from(Start::Cwd, bytes(path.as_ref()), mode)
    }

    /// `mkdirat`.
    pub fn create_dir_at(&self, dir: &Entry, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.mkdir_from(Start::At(dir), bytes(path.as_ref()), mode)
    }

    fn mkdir_from(&self, start: Start, path: &[u8], mode: u32) -> Result<()> {
        let perm = mode & 0o7777 & !self.umask;
        self.create_node(
            start,
            path,
            FileType::Dir,
            |fs, dir, name, owner, perm| fs.mkdir(dir, name, perm, owner),
            perm,
        )
    }

    /// Creates `path` and every missing ancestor. May stop partway, leaving
    /// the directories it made (as `std::fs::create_dir_all`).
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        if path.as_os_str().is_empty() {
            return Ok(());
        }
        match self.create_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if errno_of(&e) == ENOENT => {}
            Err(e) => {
                return if self.metadata(path).map(|m| m.is_dir()).unwrap_or(false) { Ok(()) } else { Err(e) };
            }
        }
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => self.create_dir_all(p)?,
            _ => return fail(ENOENT),
        }
        match self.create_dir(path) {
            Ok(()) => Ok(()),
            Err(_) if self.metadata(path).map(|m| m.is_dir()).unwrap_or(false) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `mknodat` for a regular file, FIFO, socket or device (devices need
    /// root: EPERM).
    pub fn mknod_at(&self, dir: &Entry, path: impl AsRef<Path>, kind: FileType, mode: u32, rdev: u64) -> Result<()> {
        if matches!(kind, FileType::Dir | FileType::Symlink) {
            return fail(EINVAL);
        }
        if matches!(kind, FileType::CharDevice | FileType::BlockDevice) && !self.cred.is_root() {
            return fail(EPERM);
        }
        let perm = mode & 0o7777 & !self.umask;
        self.create_node(
            Start::At(dir),
            bytes(path.as_ref()),
            kind,
            |fs, d, name, owner, perm| fs.mknod(d, name, kind, perm, rdev, owner),
            perm,
        )
    }

    /// `symlink(target, link)`: creates `link` pointing at `target`.
    pub fn symlink(&self, target: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        self.symlink_from(bytes(target.as_ref()), Start::Cwd, bytes(link.as_ref()))
    }

    /// `symlinkat`.
    pub fn symlink_at(&self, target: impl AsRef<Path>, dir: &Entry, link: impl AsRef<Path>) -> Result<()> {
        self.symlink_from(bytes(target.as_ref()), Start::At(dir), bytes(link.as_ref()))
    }

    fn symlink_from(&self, target: &[u8], start: Start, link: &[u8]) -> Result<()> {
        check_path(target)?;
        self.create_node(
            start,
            link,
            FileType::Symlink,
            |fs, d, name, owner, _| fs.symlink(d, name, target, owner),
            0o777,
        )
    }

    /// `link(src, dst)`: a new name for `src` (not followed if a symlink).
    pub fn hard_link(&self, src: impl AsRef<Path>, dst: impl AsRef<Path>) -> Result<()> {
        self.link_from(Start::Cwd, bytes(src.as_ref()), Start::Cwd, bytes(dst.as_ref()))
    }

    /// `linkat`.
    pub fn hard_link_at(
        &self,
        src_dir: &Entry,
        src: impl AsRef<Path>,
        dst_dir: &Entry,
        dst: impl AsRef<Path>,
    ) -> Result<()> {
        self.link_from(Start::At(src_dir), bytes(src.as_ref()), Start::At(dst_dir), bytes(dst.as_ref()))
    }

    /// `linkat(fd, "", dir, name, AT_EMPTY_PATH)`: a new name in `dir` for
    /// the object behind `src` (FUSE's link).
    pub fn link_entry(&self, src: &Entry, dir: &Entry, name: impl AsRef<OsStr>) -> Result<()> {
        src.check_same_vfs(&self.shared)?;
        let name = name.as_ref().as_bytes();
        check_name(name)?;
        let _g = self.shared.global();
        self.link_to(src.mount(), src.dentry(), Start::At(dir), name)
    }

    fn link_from(&self, src_start: Start, src: &[u8], dst_start: Start, dst: &[u8]) -> Result<()> {
        check_path(src)?;
        check_path(dst)?;
        let _g = self.shared.global();
        let (mut w, s) = self.begin(src_start, src)?;
        let src_d = self.dc().walk(&mut w, s, src, false)?;
        self.link_to(w.mnt(), &src_d, dst_start, dst)
    }

    fn link_to(&self, src_mnt: &Mount, src_d: &Dentry, dst_start: Start, dst: &[u8]) -> Result<()> {
        self.retry_estale(|| self.link_to_once(src_mnt, src_d, dst_start, dst))
    }

    fn link_to_once(&self, src_mnt: &Mount, src_d: &Dentry, dst_start: Start, dst: &[u8]) -> Result<()> {
        let n = match self.begin_named(dst_start, dst)? {
            Begun::Named(n) if std::ptr::eq(src_mnt, n.w.mnt()) => n,
            Begun::Named(_) => return fail(EXDEV),
            Begun::Other(_) => {
                // "." or ".." or "/": the walk's mount decides EXDEV first,
                // as before.
                let (w, _) = self.begin_parent(dst_start, dst)?;
                return fail(if std::ptr::eq(src_mnt, w.mnt()) { EEXIST } else { EXDEV });
            }
        };
        if n.child.inode().is_some() {
            return fail(EEXIST);
        }
        if n.trailing {
            return fail(ENOENT);
        }
        let (name, dir) = (n.name, n.dir());
        let dir_attr = self.may_create(dir)?;
        let src_inode = src_d.inode().expect("positive");
        if src_inode.kind == FileType::Dir {
            return fail(EPERM);
        }
        if src_inode.attr().nlink == 0 {
            return fail(ENOENT); // linkat of an unlinked file (not O_TMPFILE)
        }
        let attr = src_inode.fs().link(src_inode.ino, dir_attr.ino, name)?;
        self.instantiate(dir, &n.child, &attr)
    }

    /// `faccessat` on a handle (FUSE's access): `mask` is a sum of
    /// `libc::R_OK`, `W_OK` and `X_OK` (`F_OK`, 0, checks existence only).
    pub fn access(&self, entry: &Entry, mask: u32) -> Result<()> {
        entry.check_same_vfs(&self.shared)?;
        // R_OK, W_OK and X_OK are 4, 2 and 1, as MAY_READ, MAY_WRITE, MAY_EXEC.
        if self.cred.may(&entry.inode().access_attr(), mask & 7) {
            Ok(())
        } else {
            fail(EACCES)
        }
    }

    // ---- removing names ----

    /// May this view remove the entry `victim` from `dir` (`may_delete`)?
    fn may_delete(&self, dir: &Dentry, victim: &Dentry, want_dir: bool) -> Result<()> {
        let dir_attr = dir.inode().expect("positive directory").access_attr();
        if !self.cred.may(&dir_attr, MAY_WRITE | MAY_EXEC) {
            return fail(EACCES);
        }
        let victim_attr = victim.inode().expect("positive").access_attr();
        if self.cred.sticky_blocks(&dir_attr, &victim_attr) {
            return fail(EPERM);
        }
        match (want_dir, victim_attr.kind == FileType::Dir) {
            (true, false) => fail(ENOTDIR),
            (false, true) => fail(EISDIR),
            _ => Ok(()),
        }
    }

    /// `unlink`.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> Result<()> {
        self.unlink_from(Start::Cwd, bytes(path.as_ref()))
    }

    /// `unlinkat(dir, path, 0)`.
    pub fn remove_file_at(&self, dir: &Entry, path: impl AsRef<Path>) -> Result<()> {
        self.unlink_from(Start::At(dir), bytes(path.as_ref()))
    }

    fn unlink_from(&self, start: Start, path: &[u8]) -> Result<()> {
        self.retry_estale(|| self.unlink_from_once(start, path))
    }

    fn unlink_from_once(&self, start: Start, path: &[u8]) -> Result<()> {
        check_path(path)?;
        let _g = self.shared.global();
        let dc = self.dc();
        let Begun::Named(n) = self.begin_named(start, path)? else {
            return fail(EISDIR);
        };
        let (dir, victim) = (n.dir(), &n.child);
        let dir_inode = dir.inode().expect("positive directory");
        let Some(vi) = victim.inode() else {
            return fail(ENOENT);
        };
        if n.trailing {
            return fail(if vi.kind == FileType::Dir { EISDIR } else { ENOTDIR });
        }
        self.may_delete(dir, victim, false)?;
        let fs = dir_inode.fs();
        fs.unlink(dir_inode.ino, n.name)?;
        vi.refresh(fs);
        dir_inode.refresh(fs);
        dc.d_delete(victim);
        Ok(())
    }

    /// `rmdir`.
    pub fn remove_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.rmdir_from(Start::Cwd, bytes(path.as_ref()))
    }

    /// `unlinkat(dir, path, AT_REMOVEDIR)`.
    pub fn remove_dir_at(&self, dir: &Entry, path: impl AsRef<Path>) -> Result<()> {
        self.rmdir_from(Start::At(dir), bytes(path.as_ref()))
    }

    fn rmdir_from(&self, start: Start, path: &[u8]) -> Result<()> {
        self.retry_estale(|| self.rmdir_from_once(start, path))
    }

    fn rmdir_from_once(&self, start: Start, path: &[u8]) -> Result<()> {
        check_path(path)?;
        let _g = self.shared.global();
        let dc = self.dc();
        // The victim's name is locked: nothing is mounted on it meanwhile
        // (`mount_on` takes it too). Names created in the victim meanwhile
        // are the filesystem's to refuse: its rmdir checks emptiness and
        // marks the directory removed in one step.
        let n = match self.begin_named(start, path)? {
            Begun::Named(n) => n,
            Begun::Other(Last::Dot) => return fail(EINVAL),
            Begun::Other(Last::DotDot) => return fail(ENOTEMPTY),
            Begun::Other(_) => return fail(EBUSY),
        };
        let (name, dir, victim) = (n.name, n.dir(), &n.child);
        let dir_inode = dir.inode().expect("positive directory");
        let Some(vi) = victim.inode() else {
            return fail(ENOENT);
        };
        self.may_delete(dir, victim, true)?;
        if victim.is_root() || victim.is_mountpoint() {
            return fail(EBUSY);
        }
        let fs = dir_inode.fs();
        fs.rmdir(dir_inode.ino, name)?;
        vi.refresh(fs);
        dir_inode.refresh(fs);
        // Its cached misses go with it (`shrink_dcache_parent`).
        dc.shrink_tree(victim);
        dc.d_delete(victim);
        Ok(())
    }

    /// Removes `path` and everything under it; does not follow symlinks.
    /// May stop partway, leaving what it did not yet remove (as
    /// `std::fs::remove_dir_all`).
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let m = self.symlink_metadata(path)?;
        if !m.is_dir() {
            return fail(ENOTDIR);
        }
        let dir = self.entry_nofollow(path)?;
        self.remove_tree_at(&dir)?;
        drop(dir);
        self.remove_dir(path)
    }

    fn remove_tree_at(&self, dir: &Entry) -> Result<()> {
        for e in self.read_dir_of(dir)? {
            let e = e?;
            let name = OsStr::from_bytes(e.name_bytes());
            if e.file_type()? == FileType::Dir {
                let sub = self.lookup_at(dir, name)?;
                self.remove_tree_at(&sub)?;
                drop(sub);
                self.remove_dir_at(dir, name)?;
            } else {
                self.remove_file_at(dir, name)?;
            }
        }
        Ok(())
    }

    // ---- mounts ----

    /// Mounts `fs` on the directory `path` (`mount(2)` of a new filesystem
    /// instance; for a fresh in-memory one, pass
    /// `Arc::new(MemFs::new(MemFsOptions::default()))`). The directory's
    /// own content is hidden until the unmount. Needs root (`EPERM`); a
    /// filesystem instance already mounted (or serving the root) is
    /// `EBUSY`: bind-mount it instead.
    pub fn mount(&self, path: impl AsRef<Path>, fs: Arc<dyn FileSystem>) -> Result<()> {
        // One superblock per filesystem instance: a second one over the
        // same instance would cache it twice, incoherently. `bind_mount`
        // shows a mounted filesystem at a second place.
        if self.dc().with_super(Arc::as_ptr(&fs) as *const (), |_| ()).is_some() {
            return fail(EBUSY);
        }
        if !self.cred.is_root() {
            return fail(EPERM);
        }
        // The superblock first, holding no lock: making one takes the
        // superblock list, which comes before the rename mutex and the name
        // locks `mount_on` takes (a notification holds the list while it
        // waits for a name lock).
        let sb = self.dc().new_super(fs.clone())?;
        if let Err(e) = self.mount_on(path.as_ref(), |_, _, _| Ok(Mounted::Fresh(sb))) {
            self.dc().kill_super(sb);
            return Err(e);
        }
        if let Some(b) = fs.inode_budget() {
            self.dc().cap_target(b);
        }
        attach(&self.shared, &fs);
        Ok(())
    }

    /// Bind-mounts the directory `source` on the directory `target`: the
    /// same files, seen at a second place (`mount --bind`). Mounts under
    /// `source` are not carried along.
    pub fn bind_mount(&self, source: impl AsRef<Path>, target: impl AsRef<Path>) -> Result<()> {
        self.bind_from(source.as_ref(), target.as_ref(), false)
    }

    /// Like [`bind_mount`](Self::bind_mount), carrying along every mount
    /// under `source` (`mount --rbind`, `copy_tree`).
    pub fn rbind_mount(&self, source: impl AsRef<Path>, target: impl AsRef<Path>) -> Result<()> {
        self.bind_from(source.as_ref(), target.as_ref(), true)
    }

    fn bind_from(&self, source: &Path, target: &Path, recursive: bool) -> Result<()> {
        let src = self.entry(source)?;
        if !src.is_dir() {
            return fail(ENOTDIR);
        }
        self.mount_on(target, |_, _, _| Ok(Mounted::Bind(&src, recursive)))
    }

    /// The common part of mounting: root only; the target is a directory
    /// that is still linked, held locked while the mount is attached so
    /// that an rmdir cannot slip in between (`lock_mount`).
    fn mount_on<'e>(
        &self,
        target: &Path,
        what: impl FnOnce(&Dcache, &Mount, &Dentry) -> Result<Mounted<'e>>,
    ) -> Result<()> {
        if !self.cred.is_root() {
            return fail(EPERM);
        }
        let path = bytes(target);
        check_path(path)?;
        let _g = self.shared.global();
        let dc = self.dc();
        let (mut w, s) = self.begin(Start::Cwd, path)?;
        let d = dc.walk(&mut w, s, path, true)?;
        if !d.is_dir() {
            return fail(ENOTDIR);
        }
        // The rename mutex before the name lock (the lock order): a
        // recursive bind asks which mounts lie under its source
        // (`is_ancestor`), which needs the tree's shape to hold still.
        let _rm = dc.rename_mutex.lock();
        // The mountpoint's name, so that an rmdir cannot slip in between
        // (`lock_mount`). A same-directory rename may still move it before
        // we hold it: look again after locking.
        let _l = loop {
            if d.is_root() {
                break None;
            }
            let h = dc.name_hash_of(&d);
            let l = dc.names.lock(h);
            if dc.name_hash_of(&d) == h {
                break Some(l);
            }
        };
        if !d.is_hashed() && !d.is_root() {
            return fail(ENOENT); // removed since the walk
        }
        match what(dc, w.mnt(), &d)? {
            Mounted::Fresh(sb) => dc.do_mount(w.mnt(), &d, sb),
            Mounted::Bind(src, recursive) => {
                src.check_same_vfs(&self.shared)?;
                dc.do_bind(src.mount(), src.dentry(), w.mnt(), &d, recursive)
            }
        }
        Ok(())
    }

    /// Unmounts the filesystem mounted at `path`: `EBUSY` while a handle,
    /// an open file, a working directory or another mount uses it; `EINVAL`
    /// if `path` is not a mount's root. Needs root (`EPERM`).
    pub fn unmount(&self, path: impl AsRef<Path>) -> Result<()> {
        self.umount_from(bytes(path.as_ref()), false)
    }

    /// Detaches the mount at `path` and every mount under it at once
    /// (`umount -l`, `MNT_DETACH`): new walks no longer see them; each is
    /// freed, with its filesystem, when its last user lets go.
    pub fn unmount_lazy(&self, path: impl AsRef<Path>) -> Result<()> {
        self.umount_from(bytes(path.as_ref()), true)
    }

    fn umount_from(&self, path: &[u8], lazy: bool) -> Result<()> {
        if !self.cred.is_root() {
            return fail(EPERM);
        }
        check_path(path)?;
        let _g = self.shared.global();
        let dc = self.dc();
        let (mut w, s) = self.begin(Start::Cwd, path)?;
        let d = dc.walk(&mut w, s, path, true)?;
        if !std::ptr::eq(&*d, w.mnt().root()) {
            return fail(EINVAL);
        }
        let m = dc.mntget(w.mnt());
        // Only `m` may remain: the dentry, then the walk's mounts go first.
        drop(d);
        drop(w);
        dc.do_umount(m, lazy)
    }

    // ---- rename ----

    /// `rename(from, to)`.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        self.rename_from(Start::Cwd, bytes(from.as_ref()), Start::Cwd, bytes(to.as_ref()), RenameFlags::NONE)
    }

    /// `renameat2(from, to, flags)` relative to the working directory.
    pub fn rename_with(&self, from: impl AsRef<Path>, to: impl AsRef<Path>, flags: RenameFlags) -> Result<()> {
        self.rename_from(Start::Cwd, bytes(from.as_ref()), Start::Cwd, bytes(to.as_ref()), flags)
    }

    /// `renameat2`.
    pub fn rename_at(
        &self,
        from_dir: &Entry,
        from: impl AsRef<Path>,
        to_dir: &Entry,
        to: impl AsRef<Path>,
        flags: RenameFlags,
    ) -> Result<()> {
        self.rename_from(Start::At(from_dir), bytes(from.as_ref()), Start::At(to_dir), bytes(to.as_ref()), flags)
    }

    fn rename_from(&self, s1: Start, from: &[u8], s2: Start, to: &[u8], flags: RenameFlags) -> Result<()> {
        self.retry_estale(|| self.rename_once(s1, from, s2, to, flags))
    }

    fn rename_once(&self, s1: Start, from: &[u8], s2: Start, to: &[u8], flags: RenameFlags) -> Result<()> {
        if flags.noreplace && flags.exchange {
            return fail(EINVAL);
        }
        check_path(from)?;
        check_path(to)?;
        let _g = self.shared.global();
        let dc = self.dc();
        let (w1, op) = self.begin_parent(s1, from)?;
        let (w2, np) = self.begin_parent(s2, to)?;
        if !std::ptr::eq(w1.mnt(), w2.mnt()) {
            return fail(EXDEV);
        }
        let Last::Normal(old_name) = op.last else {
            return fail(EBUSY);
        };
        let Last::Normal(new_name) = np.last else {
            return fail(if flags.noreplace { EEXIST } else { EBUSY });
        };
        let cross = !std::ptr::eq(op.dir.ptr(), np.dir.ptr());
        let _rm = cross.then(|| dc.rename_mutex.lock());
        let _locks = dc.names.lock2(name_hash(op.dir.ptr(), old_name), name_hash(np.dir.ptr(), new_name));
        let src = dc.lookup_locked(&op.dir, old_name, _rm.as_ref())?;
        let Some(si) = src.inode() else {
            return fail(ENOENT);
        };
        let dst = dc.lookup_locked(&np.dir, new_name, _rm.as_ref())?;
        let di = dst.inode();
        if flags.exchange && di.is_none() {
            return fail(ENOENT);
        }
        if flags.noreplace && di.is_some() {
            return fail(EEXIST);
        }
        let src_dir = si.kind == FileType::Dir;
        let dst_dir = di.is_some_and(|i| i.kind == FileType::Dir);
        if flags.exchange && !dst_dir && np.trailing {
            return fail(ENOTDIR);
        }
        if !src_dir && (op.trailing || (np.trailing && !flags.exchange)) {
            return fail(ENOTDIR);
        }
        if dc.is_ancestor(&src, &np.dir) {
            return fail(EINVAL);
        }
        if di.is_some() && dc.is_ancestor(&dst, &op.dir) {
            return fail(if flags.exchange { EINVAL } else { ENOTEMPTY });
        }
        if di.is_some_and(|i| std::ptr::eq(i, si)) {
            return Ok(());
        }
        self.may_delete(&op.dir, &src, src_dir)?;
        if di.is_some() {
            self.may_delete(&np.dir, &dst, if flags.exchange { dst_dir } else { src_dir })?;
        } else {
            self.may_create(&np.dir)?;
        }
        if cross {
            // Moving a directory rewrites its "..": write permission on it.
            let moved = [(Some(si), src_dir), (di, flags.exchange && dst_dir)];
            for (i, is_dir) in moved {
                if let (Some(i), true) = (i, is_dir) {
                    if !self.cred.may(&i.access_attr(), MAY_WRITE) {
                        return fail(EACCES);
                    }
                }
            }
        }
        if src.is_root() || dst.is_root() || src.is_mountpoint() || dst.is_mountpoint() {
            return fail(EBUSY);
        }
        let fs = op.dir.sb().fs.as_ref();
        let (odi, ndi) = (op.dir.inode().expect("dir"), np.dir.inode().expect("dir"));
        fs.rename(odi.ino, old_name, ndi.ino, new_name, flags)?;
        for i in [Some(odi), Some(ndi), Some(si), di].into_iter().flatten() {
            i.refresh(fs);
        }
        dc.d_move(&src, &np.dir, new_name, &dst, flags.exchange);
        Ok(())
    }

    // ---- reading names ----

    /// `readlink`.
    pub fn read_link(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        self.read_link_from(Start::Cwd, bytes(path.as_ref()))
    }

    /// `readlinkat`.
    pub fn read_link_at(&self, dir: &Entry, path: impl AsRef<Path>) -> Result<PathBuf> {
        self.read_link_from(Start::At(dir), bytes(path.as_ref()))
    }

    fn read_link_from(&self, start: Start, path: &[u8]) -> Result<PathBuf> {
        check_path(path)?;
        let _g = self.shared.global();
        let (mut w, s) = self.begin(start, path)?;
        let d = self.dc().walk(&mut w, s, path, false)?;
        let inode = d.inode().expect("positive");
        if inode.kind != FileType::Symlink {
            return fail(EINVAL);
        }
        let t = match inode.link() {
            Some(t) => t.to_vec(),
            None => inode.fs().readlink(inode.ino)?,
        };
        Ok(PathBuf::from(OsString::from_vec(t)))
    }

    /// `readlinkat(fd, "")` on a symlink handle (FUSE's readlink).
    pub fn read_link_entry(&self, entry: &Entry) -> Result<PathBuf> {
        entry.check_same_vfs(&self.shared)?;
        let inode = entry.inode();
        if inode.kind != FileType::Symlink {
            return fail(EINVAL);
        }
        let t = match inode.link() {
            Some(t) => t.to_vec(),
            None => inode.fs().readlink(inode.ino)?,
        };
        Ok(PathBuf::from(OsString::from_vec(t)))
    }

    /// Lists directory `dir` from cookie `offset` (FUSE's readdir).
    pub fn read_dir_at(&self, dir: &Entry, offset: u64) -> Result<Vec<crate::fs::DirEntry>> {
        dir.check_same_vfs(&self.shared)?;
        self.check_listable(dir.inode())?;
        self.readdir_batch_with(dir.inode(), |fs| fs.readdir(dir.inode().ino, offset))
    }

    /// May this view list `inode` (`opendir`'s checks)?
    fn check_listable(&self, inode: &Inode) -> Result<()> {
        if inode.kind != FileType::Dir {
            return fail(ENOTDIR);
        }
        if !self.cred.may(&inode.access_attr(), MAY_READ) {
            return fail(EACCES);
        }
        Ok(())
    }

    /// The entries after `offset` of a directory already checked, with
    /// the attributes the filesystem lists (`getdents`; it updates the
    /// directory's atime). The attributes are kept only where this view
    /// may look the names up (search permission, as `fstatat` needs).
    fn readdir_batch_plus(&self, inode: &Inode, offset: u64) -> Result<Vec<(crate::fs::DirEntry, Option<Attr>)>> {
        let mut out = self.readdir_batch_with(inode, |fs| fs.readdir_plus(inode.ino, offset))?;
        if out.iter().any(|(_, a)| a.is_some()) && !self.cred.may(&inode.access_attr(), MAY_EXEC) {
            out.iter_mut().for_each(|(_, a)| *a = None);
        }
        Ok(out)
    }

    /// One `getdents` of a directory already checked, by `read`: in the
    /// `global` mode under the global lock; it updates the atime.
    fn readdir_batch_with<T>(&self, inode: &Inode, read: impl FnOnce(&dyn FileSystem) -> Result<T>) -> Result<T> {
        let _g = self.shared.global();
        let out = read(inode.fs())?;
        touch_atime(&self.shared, inode);
        Ok(out)
    }

    // ---- files ----

    /// Opens `path` with `opts` (`open(2)`).
    pub fn open(&self, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File> {
        self.open_from(Start::Cwd, bytes(path.as_ref()), opts)
    }

    /// `openat`.
    pub fn open_at(&self, dir: &Entry, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File> {
        self.open_from(Start::At(dir), bytes(path.as_ref()), opts)
    }

    /// Opens the object behind `entry` (FUSE's open): the permission checks
    /// of `open`, without a path.
    pub fn open_entry(&self, entry: &Entry, opts: &OpenOptions) -> Result<File> {
        entry.check_same_vfs(&self.shared)?;
        opts.validate()?;
        let _g = self.shared.global();
        self.finish_open(entry.mount(), entry.inode(), opts, false)
    }

    fn open_from(&self, start: Start, path: &[u8], opts: &OpenOptions) -> Result<File> {
        self.retry_estale(|| self.open_once(start, path, opts))
    }

    fn open_once(&self, start: Start, path: &[u8], opts: &OpenOptions) -> Result<File> {
        opts.validate()?;
        check_path(path)?;
        let _g = self.shared.global();
        let (w, d, created) = if opts.create_any() {
            self.open_create(self.begin_named(start, path)?, opts)?
        } else {
            let (w, d) = self.begin_walk(start, path, !opts.nofollow)?;
            (w, d, false)
        };
        self.finish_open(w.mnt(), d.inode().expect("positive"), opts, created)
    }

    /// Finds or creates the file to open (`path_openat`'s walk).
    fn open_walk<'a>(
        &'a self,
        mut w: RefWalk<'a>,
        start: DRef<'a>,
        path: &[u8],
        opts: &OpenOptions,
    ) -> Result<(RefWalk<'a>, DRef<'a>, bool)> {
        let dc = self.dc();
        if !opts.create_any() {
            let d = dc.walk(&mut w, start, path, !opts.nofollow)?;
            return Ok((w, d, false));
        }
        let p = dc.walk_parent(&mut w, start, path)?;
        self.open_create(self.lock_last(w, p)?, opts)
    }

    /// The last component of an `O_CREAT` open: finds or creates it.
    /// Returns the walk (its mount), the file and whether it was created.
    fn open_create<'a>(&'a self, b: Begun<'a, '_>, opts: &OpenOptions) -> Result<(RefWalk<'a>, DRef<'a>, bool)> {
        let dc = self.dc();
        let Begun::Named(n) = b else {
            return fail(EISDIR);
        };
        if n.trailing {
            return fail(EISDIR);
        }
        if let Some(ei) = n.child.inode() {
            if opts.create_new {
                return fail(EEXIST);
            }
            if ei.kind == FileType::Symlink {
                if opts.nofollow {
                    return fail(ELOOP);
                }
                let Named { child, _lock, dir, mut w, .. } = n;
                let target = dc.link_target(&mut w, &child)?;
                // The walk goes on from the directory: a reference of its
                // own now (the link's keeps it until then).
                let dir = match dir {
                    DirPin::Held(d) => d,
                    DirPin::ByChild(p) => {
                        // SAFETY: pinned by `child` under the name lock,
                        // both still held.
                        let d = unsafe { &*p };
                        d.lockref().get();
                        // SAFETY: the reference just taken.
                        unsafe { DRef::adopt(dc, d) }
                    }
                };
                drop(child);
                drop(_lock);
                return self.open_walk(w, dir, &target, opts);
            }
            let Named { child, w, .. } = n;
            return Ok((w, child, false));
        }
        let dir = n.dir();
        let dir_inode = dir.inode().expect("positive directory");
        let dir_attr = self.may_create(dir)?;
        let perm = opts.mode & 0o7777 & !self.umask;
        let (owner, perm) = self.new_owner(&dir_attr, FileType::File, perm);
        let attr = dir_inode.fs().create(dir_attr.ino, n.name, perm, owner)?;
        self.instantiate(dir, &n.child, &attr)?;
        let Named { child, w, .. } = n;
        Ok((w, child, true))
    }

    fn finish_open(&self, mnt: &Mount, inode: &Inode, opts: &OpenOptions, created: bool) -> Result<File> {
        let attr = inode.attr();
        if attr.kind == FileType::Symlink {
            return fail(ELOOP); // only reachable with nofollow
        }
        let writes = opts.writes();
        if attr.kind == FileType::Dir && (writes || opts.truncate) {
            return fail(EISDIR);
        }
        if !created {
            let mut mask = 0;
            if opts.read {
                mask |= MAY_READ;
            }
            if writes || opts.truncate {
                mask |= MAY_WRITE;
            }
            if !self.cred.may(&attr, mask) {
                return fail(EACCES);
            }
        }
        if opts.truncate && attr.kind == FileType::File && !created {
            let a = inode.fs().setattr(attr.ino, &SetAttr { size: Some(0), ..SetAttr::default() })?;
            inode.set_attr(&a);
        }
        inode.hold();
        let mnt = self.dc().mntget(mnt).into_raw();
        Ok(File::new(SharedRef::new(&self.shared), mnt, inode, opts))
    }

    /// Reads a whole file.
    pub fn read(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let mut f = self.open(path, OpenOptions::new().read(true))?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Reads a whole file as UTF-8.
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> Result<String> {
        String::from_utf8(self.read(path)?).map_err(|_| crate::error::err(EINVAL))
    }

    /// Writes a whole file, creating or truncating it.
    pub fn write(&self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> Result<()> {
        let mut f = self.open(path, OpenOptions::new().write(true).create(true).truncate(true))?;
        f.write_all(contents.as_ref())
    }
}

/// After a read: if the atime policy says atime is due, update it (through
/// the filesystem for page-cache reads, which bypass it; the filesystem's
/// own `read` updated it otherwise) and refresh the cached attributes. A
/// read of a hot file under relatime stores nothing.
pub(crate) fn touch_atime(shared: &Shared, inode: &Inode) {
    let due = match shared.atime {
        AtimePolicy::Noatime => false,
        AtimePolicy::Strict => true,
        AtimePolicy::Relatime => {
            let a = inode.attr();
            let now = crate::time::now();
            // As Linux's `atime_needs_update`: never when atime is already
            // now (else every read in the clock tick of a write would write).
            a.atime != now && (a.atime <= a.mtime || a.atime <= a.ctime || now.sec - a.atime.sec >= 24 * 3600)
        }
    };
    if due {
        // A page cache's reads never reach the filesystem, so it is told;
        // so is a filesystem whose inodes the VFS copies (a passthrough's
        // host sets atime itself and ignores it; a remote one, such as
        // etcd, records it, else every read would find atime due again).
        if inode.data_if_any().is_some() || !inode.is_owned() {
            inode.fs().note_access(inode.ino);
        }
        inode.refresh(inode.fs());
    }
}

// `Vfs` is shared between threads by design.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Vfs>();
    assert_send_sync::<Entry>();
    assert_send_sync::<File>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::passthrough::{Passthrough, PassthroughOptions};
    use std::time::Duration;

    /// A directory moved behind the cache (on the host, its old name
    /// trusted for an hour) is found under its new name while another
    /// thread holds the rename mutex: the lookup that must move its dentry
    /// waits for the rename instead of answering ESTALE, in a walk (a
    /// stat) and in an update's own lookup (an rmdir, a mkdir).
    #[test]
    #[cfg_attr(miri, ignore = "host directory calls")]
    fn a_lookup_that_moves_a_directory_waits_out_a_rename() {
        let host = std::env::temp_dir().join(format!("rcuvfs-vfs-moved-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&host);
        std::fs::create_dir_all(host.join("x/d")).unwrap();
        std::fs::create_dir(host.join("y")).unwrap();
        std::fs::write(host.join("x/d/f"), b"kept").unwrap();
        let opts = PassthroughOptions { watch: false, ttl: Duration::from_secs(3600), ..Default::default() };
        let vfs = Vfs::builder().filesystem(Arc::new(Passthrough::new(&host, opts).unwrap())).build().unwrap();
        type Op = fn(&Vfs) -> Result<()>;
        let ops: [(&str, Op); 3] = [
            ("a stat through it", |v| v.metadata("/y/d/f").map(|_| ())),
            ("a mkdir over it", |v| match v.create_dir("/y/d") {
                Err(e) if errno_of(&e) == EEXIST => Ok(()),
                r => r,
            }),
            ("an rmdir of it", |v| match v.remove_dir("/y/d") {
                Err(e) if errno_of(&e) == ENOTEMPTY => Ok(()),
                r => r,
            }),
        ];
        for (what, op) in ops {
            vfs.metadata("/x/d").unwrap();
            std::fs::rename(host.join("x/d"), host.join("y/d")).unwrap();
            let held = vfs.dc().rename_mutex.lock();
            std::thread::scope(|s| {
                let t = s.spawn(|| op(&vfs));
                std::thread::sleep(Duration::from_millis(100));
                drop(held);
                t.join().unwrap().unwrap_or_else(|e| panic!("{what}: {e}"));
            });
            // Back where it was (on the host too), its old name cached.
            vfs.rename("/y/d", "/x/d").unwrap();
            assert_eq!(std::fs::read(host.join("x/d/f")).unwrap(), b"kept");
        }
        drop(vfs);
        std::fs::remove_dir_all(&host).unwrap();
    }

    /// Moving a directory's dentry from its old name needs that name's lock
    /// (a rename of the old name in progress moves the same dentry: the
    /// two moves raced, one panicked in its write section, and lookups of
    /// the name spun for good). A lookup that finds the old name locked
    /// waits for it.
    #[test]
    #[cfg_attr(miri, ignore = "host directory calls")]
    fn a_lookup_waits_for_the_old_name_of_the_directory_it_moves() {
        let host = std::env::temp_dir().join(format!("rcuvfs-vfs-oldname-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&host);
        std::fs::create_dir_all(host.join("x/d")).unwrap();
        std::fs::create_dir(host.join("y")).unwrap();
        std::fs::write(host.join("x/d/f"), b"kept").unwrap();
        let opts = PassthroughOptions { watch: false, ttl: Duration::from_secs(3600), ..Default::default() };
        let vfs = Vfs::builder().filesystem(Arc::new(Passthrough::new(&host, opts).unwrap())).build().unwrap();
        vfs.metadata("/x/d").unwrap();
        std::fs::rename(host.join("x/d"), host.join("y/d")).unwrap();
        let dc = vfs.dc();
        let x = dc.d_lookup(dc.root(), b"x").unwrap();
        let held = lock_name(dc, &x, b"d");
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let r = vfs.metadata("/y/d/f").map(|m| m.len());
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                r
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(!done.load(std::sync::atomic::Ordering::SeqCst), "moved the dentry without its old name's lock");
            drop(held);
            assert_eq!(t.join().unwrap().unwrap(), 4);
        });
        drop(x);
        drop(vfs);
        std::fs::remove_dir_all(&host).unwrap();
    }
}
