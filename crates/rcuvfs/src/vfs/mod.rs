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
//! | `VfsState::global`        | the whole operation, in the `global` mode only          |
//! | `Dcache::rename_mutex`  | a rename between two directories (`s_vfs_rename_mutex`), and a mount: the tree's shape cannot change while ancestry checks (`Dcache::is_ancestor`) run |
//! | name locks (`Dcache::names`) | one name in one directory while it is created, removed, renamed, or looked up in the filesystem; a mountpoint's name while a mount is attached on it (`lock_mount`) |
//! | `Namespace::lock`       | the mount tree (see `mount`)                            |
//!
//! Order: `global`, then `rename_mutex`, then name locks (two in stripe
//! order), then the namespace lock, then the dcache's own locks (see
//! `dcache`). The dcache's superblock list comes before `rename_mutex`
//! (a notification holds it while it waits for a name lock), so a mount
//! makes its superblock before it takes any of these. No lock covers a
//! whole directory: creates, removes and renames of different names in one
//! directory run in parallel.
//!
//! # Layout
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`Vfs`] (a view: credentials, working directory, umask), the state its views share, and the calls on the whole tree (stats, `drop_caches`, `synchronize`) |
//! | `builder.rs` | [`VfsBuilder`] |
//! | `types.rs` | [`Metadata`], [`Permissions`], [`Stats`] |
//! | `handle.rs` | [`Entry`] and the lookups that give one |
//! | `file.rs` | [`File`], [`OpenOptions`](file::OpenOptions) |
//! | `walk.rs` | how an operation begins: its start, the walk of an update to its last name, found and locked, and the retry after ESTALE |
//! | `attr.rs` | stat (in RCU-walk), chmod, chown, utimens, truncate; readlink |
//! | `create.rs`, `remove.rs`, `rename.rs` | mkdir, mknod, symlink, link; unlink, rmdir; rename |
//! | `open.rs` | open, whole-file reads and writes, the atime update |
//! | `dir.rs` | listings ([`ReadDir`]), `DirEntry::metadata`, tree walks |
//! | `xattr.rs` | extended attributes |
//! | `mounts.rs` | mount, bind mounts, unmount |
//! | `notify.rs` | the [`Notify`] a filesystem reports changes through |

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cred::Cred;
use crate::dcache::{Dcache, LiveCounters};
use crate::error::{fail, Result, ENOTDIR};
use crate::file::File;
use crate::fs::memfs::AtimePolicy;
use crate::fs::{FileSystem, Ino, Notify, StatFs};
use crate::modes::RefMode;
use crate::sync::percpu_ref::PercpuRef;
use crate::sync::{Mutex, MutexGuard};

mod attr;
mod builder;
mod create;
mod dir;
pub mod file;
mod handle;
mod mounts;
mod notify;
mod open;
mod remove;
mod rename;
mod types;
mod walk;
mod xattr;

pub use builder::VfsBuilder;
pub use dir::{DirEntry, DirEntryPlus, ReadDir, TreeWalk, WalkEntry};
pub use handle::Entry;
use notify::install_notify;
pub(crate) use open::touch_atime;
pub use types::{Metadata, Permissions, Stats};
use walk::{lock_name, Begun, DirPin, Named};

/// What every view ([`Vfs`]) and handle of one tree shares: the dentry
/// cache (with its mounts and superblocks), the mode, the atime policy, the
/// global lock of the `global` mode, and the count of live handles.
pub(crate) struct VfsState {
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

impl VfsState {
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
/// ([`StateRef`]), so that an open or a lookup handle stores nothing that
/// another thread's also stores (an `Arc` clone per open was one shared
/// line for every create in the process). When the last view goes, the
/// handle count is killed (switched to one counter): the handles left keep
/// the state alive, and the last of them frees it.
struct Views(Arc<VfsState>);

impl std::ops::Deref for Views {
    type Target = Arc<VfsState>;
    fn deref(&self) -> &Arc<VfsState> {
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
pub(crate) struct StateRef(std::ptr::NonNull<VfsState>);

// SAFETY: `VfsState` is Send + Sync; the reference may be dropped anywhere.
unsafe impl Send for StateRef {}
// SAFETY: as above.
unsafe impl Sync for StateRef {}

impl StateRef {
    fn new(state: &Arc<VfsState>) -> StateRef {
        state.handles.get(&state.dc.rcu);
        // From `Arc::as_ptr`, not `&**state`: the last handle gives the
        // strong reference back through this pointer, and a pointer taken
        // from a reference to the state may not reach the `Arc`'s counts
        // (as Miri found for the page cache's `Arc`, `Inode::data_arc`).
        StateRef(std::ptr::NonNull::new(Arc::as_ptr(state) as *mut VfsState).expect("an Arc is never null"))
    }
}

impl std::ops::Deref for StateRef {
    type Target = VfsState;
    fn deref(&self) -> &VfsState {
        // SAFETY: a counted handle keeps the state alive (see `Views`).
        unsafe { self.0.as_ref() }
    }
}

impl Clone for StateRef {
    fn clone(&self) -> StateRef {
        self.handles.get(&self.dc.rcu);
        StateRef(self.0)
    }
}

impl Drop for StateRef {
    fn drop(&mut self) {
        if self.handles.put(&self.dc.rcu) {
            // SAFETY: the last handle after the last view: the handles'
            // strong reference (see `Views`), dropped once.
            unsafe { Arc::decrement_strong_count(self.0.as_ptr() as *const VfsState) };
        }
    }
}

/// A view of a virtual filesystem: shared state, plus this view's
/// credentials, working directory and umask. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Vfs {
    state: Arc<Views>,
    cred: Arc<Cred>,
    cwd: Option<Entry>,
    umask: u32,
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

impl Vfs {
    /// A `Vfs` over a fresh in-memory filesystem, seen as root, in the
    /// default mode.
    pub fn new() -> Vfs {
        Vfs::builder().build().expect("a fresh memfs has a root")
    }

    /// The same filesystem seen with other credentials (and the same
    /// working directory and umask).
    pub fn with_cred(&self, cred: Cred) -> Vfs {
        Vfs { state: self.state.clone(), cred: Arc::new(cred), cwd: self.cwd.clone(), umask: self.umask }
    }

    pub fn cred(&self) -> &Cred {
        &self.cred
    }

    pub fn mode(&self) -> RefMode {
        self.state.mode
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
        self.state.dc.may_exec(&self.cred, e.dentry())?;
        self.cwd = Some(e);
        Ok(())
    }

    /// The filesystem under this Vfs.
    pub fn filesystem(&self) -> &Arc<dyn FileSystem> {
        &self.state.dc.root_sb().fs
    }

    pub fn stats(&self) -> Stats {
        let c = &self.state.dc.counters;
        Stats {
            dentries: c.dentries(),
            negative_dentries: c.negative_dentries(),
            absent_names: c.absent_names(),
            inodes: c.inodes(),
            mounts: c.mounts(),
        }
    }

    /// The paths of the cached names of the object at `path` (its aliases:
    /// every hard link the dcache holds, found from the inode, seed 003's
    /// figure 5), sorted. Names not cached are not listed.
    pub fn aliases(&self, path: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
        let e = self.entry_nofollow(path)?;
        Ok(self.state.dc.alias_paths(e.inode()).into_iter().map(|p| PathBuf::from(OsString::from_vec(p))).collect())
    }

    /// Calls `f` with the number of every in-core inode, from the
    /// superblock's inode list (what unmount eviction and sync walk).
    pub fn for_each_inode(&self, f: impl FnMut(Ino)) {
        self.state.dc.root_sb().itable.for_each_ino(f);
    }

    /// The counters, readable after the `Vfs` and all its handles are gone:
    /// teardown brings them to zero.
    pub fn live_counters(&self) -> Arc<LiveCounters> {
        self.state.dc.counters.clone()
    }

    /// Drops every unused dentry (like `echo 2 > drop_caches`), then waits
    /// out a grace period so their memory is freed. The filesystem keeps its
    /// truth; later lookups find it again.
    pub fn drop_caches(&self) {
        let _g = self.state.global();
        self.state.dc.shrink_all();
        self.state.dc.rcu.synchronize();
    }

    /// Checks the dentry cache's structural invariants (the LRU holds only
    /// live, cached dentries; lists and hash chains are well linked; the
    /// counters agree with the tree), briefly stopping updates. `Err` names
    /// the first violation: a bug in rcuvfs, worth a report. For tests and
    /// debugging; nothing calls it on its own.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.state.dc.check_invariants()
    }

    /// Waits for a grace period: memory that lookups might still have been
    /// reading when it was released (dentries, inodes and their page caches)
    /// is freed by the time this returns.
    pub fn synchronize(&self) {
        self.state.dc.rcu.synchronize();
    }

    /// `statfs`.
    pub fn statfs(&self) -> Result<StatFs> {
        self.state.fs().statfs()
    }

    pub(crate) fn dc(&self) -> &Dcache {
        &self.state.dc
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
    use crate::error::{errno_of, EEXIST, ENOTEMPTY};
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
