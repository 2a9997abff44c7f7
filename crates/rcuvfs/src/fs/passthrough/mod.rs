//! The passthrough filesystem: a host directory, read-write, under the
//! dcache, kept coherent with changes that other programs make.
//!
//! # Mapping
//!
//! Each object the VFS has looked up is a node holding an `O_PATH`
//! descriptor (reopened from a file handle once evicted: see `fds`, which
//! bounds how many are open); every operation is the matching *at() call on a node's
//! descriptor (`openat`, `fstatat`, `mkdirat`, `mknodat`, `symlinkat`,
//! `linkat`, `unlinkat`, `renameat2`, `readlinkat`, `fchownat`, `getdents64`;
//! `chmod`, `truncate`, `utimensat`, extended attributes and data I/O go
//! through `/proc/self/fd/N`, as virtiofsd does, since an `O_PATH`
//! descriptor cannot carry them). That path is a magic link: followed, it
//! lands on the object the descriptor holds and goes no further, so a
//! symlink's own extended attributes are served too (`trusted.` and
//! `security.`; the host refuses `user.` on a symlink, as Linux does
//! everywhere). File data goes through `pread` and `pwrite` on a
//! descriptor opened once per node, deliberately not through rcuvfs's page
//! cache: the host kernel's page cache already holds the data, and a second
//! copy in this process could not be kept coherent with other programs
//! (a write through a shared mapping raises no inotify event, and a write
//! by another process is reported only after the fact), so reads would go
//! stale. With `pread`, a read always returns what the host file holds.
//!
//! An inode number is the host's `st_ino` for objects on the root's device;
//! objects on other devices (mounts inside the tree) get numbers from a
//! private range (top bit set). Lookup counts follow the FUSE model: the
//! last `forget` closes the node's descriptors and drops its watch.
//!
//! # Nothing escapes the root (`RESOLVE_IN_ROOT`)
//!
//! The VFS walks one component at a time and hands the filesystem single
//! names only (no '/', never "." or ".."): each becomes one `openat` with
//! `O_NOFOLLOW` on the parent's descriptor. ".." is resolved by the VFS's
//! own tree and stays at the root there; a symlink's target is read, never
//! followed by the host, and the VFS walks an absolute target from its own
//! root, which is this directory. A directory that another program moves
//! out of the tree while the VFS holds it (a handle, an open file, a working
//! directory) stays reachable through that holder, as an open directory
//! descriptor does on the host; new walks no longer find it.
//!
//! # Coherence: the guarantee
//!
//! With watches (the default), every directory the VFS has looked up is
//! watched with inotify. A thread reads the events and tells the VFS
//! through [`Notify`]: a name created, removed or moved in the directory
//! drops the cached dentry for it (a negative one included), and a changed
//! object's cached attributes are read again. A change made by another
//! program is therefore seen by every lookup that starts after the watcher
//! has read its event; the delay is that of inotify and one thread's
//! wake-up (microseconds to milliseconds), not bounded by a deadline.
//! File data is never cached: a read always sees what the host file holds.
//! A directory whose whole listing was read with no event in between is
//! marked complete: its readdir needs no `getdents`, and a lookup of a name
//! not in it answers ENOENT with no syscall; any event in it clears the
//! mark. Lost events (the queue overflowed) drop every cached name.
//!
//! Where a watch cannot be had (the watch limit is exhausted, or watches
//! are turned off, or a filesystem inotify cannot see, such as a network
//! one), the TTL takes over: a cached name under an unwatched directory is
//! checked with one `fstatat` once its TTL has run out, and dropped if it
//! names another object or its attributes changed. Then lookups take the
//! REF-walk path, since every cached name must be asked about.
//!
//! # Locks
//!
//! | lock             | protects                                                  |
//! |------------------|-----------------------------------------------------------|
//! | `Inner::nodes`   | the node tables (`by_ino`, `by_key`, `by_wd`, private inode numbers) and each node's lookup count reaching zero |
//! | `Inner::watches` | the inotify watch set                                     |
//! | `Node::wd`       | the node's watch descriptor                               |
//! | `Node::fd` (its `state`) | the node's path descriptor and handle; `pinned` is set under it |
//! | `Node::data`     | the node's cached data descriptor                         |
//! | `Node::listing`  | the node's complete listing                               |
//! | `Node::checked`  | the node's TTL bookkeeping                                |
//! | `FdCache::queue` | the nodes holding cached descriptors, oldest first        |
//!
//! Order: `nodes`, then `watches` or `wd` (never both at once), or a
//! node's `fd` state, then its `data`; `queue` is taken holding no node's
//! lock, and released before an eviction takes the evicted node's
//! (see `fds`); `listing` and `checked` are leaves, taken alone or under
//! `nodes`.
//!
//! Calls into the VFS ([`Notify`]) are made holding none of these, as the
//! `Notify` contract requires: a notification takes the VFS's locks, and
//! under them the VFS may call back in here (a dropped dentry releases its
//! inode, whose `forget` takes `nodes`). Holding `nodes` across one would
//! close a cycle with the watcher thread.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use inotify::Inotify;

mod fds;
mod node;
mod watch;

use fds::FdCache;
use node::{check, cstr, proc_path, sized_read, stat_fd, Inner, Node, Nodes};
use watch::watcher;

use super::WritePos;
use super::{Attr, DirEntry, FileSystem, FileType, Ino, Notify, Owner, RenameFlags, SetAttr, SetTime, StatFs};
use crate::error::{err, fail, Result, EBADF, EINVAL, ENOENT};

/// How a [`Passthrough`] keeps up with changes made outside.
#[derive(Clone, Debug)]
pub struct PassthroughOptions {
    /// Watch looked-up directories with inotify (the default).
    pub watch: bool,
    /// How long a cached name or attribute under an unwatched directory is
    /// trusted before it is checked again.
    pub ttl: Duration,
    /// Nodes that may hold open descriptors at once, where nodes hold file
    /// handles (see the `fds` module); `None`: a quarter of the descriptor
    /// limit, at most 65,536.
    pub descriptor_cache: Option<usize>,
}

impl Default for PassthroughOptions {
    fn default() -> Self {
        PassthroughOptions { watch: true, ttl: Duration::from_secs(1), descriptor_cache: None }
    }
}

/// Counters for the lab and for tests.
#[derive(Debug, Default)]
pub struct PassthroughStats {
    /// Lookups that reached the host (dcache misses).
    pub lookups: AtomicU64,
    /// `getdents64` calls.
    pub getdents: AtomicU64,
    /// Readdirs answered from a complete directory's listing.
    pub cached_readdirs: AtomicU64,
    /// Lookups answered ENOENT from a complete directory's listing.
    pub cached_misses: AtomicU64,
    /// inotify events handled.
    pub events: AtomicU64,
}

/// A host directory served through [`FileSystem`].
pub struct Passthrough {
    inner: Arc<Inner>,
}

/// The process's soft descriptor limit, if it has one.
fn fd_limit() -> Option<usize> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(rl.rlim_cur as usize)
}

/// Nodes that may hold cached descriptors at once (two each at most): a
/// quarter of the limit after room for the process's own, and no more than
/// 65,536 (reopening costs one `open_by_handle_at`).
fn fd_budget() -> usize {
    fd_limit().map_or(65536, |l| (l.saturating_sub(1024) / 4).min(65536))
}

/// Every in-core inode holds a descriptor: raise the process's descriptor
/// limit as far as allowed (the hard limit, and for root up to
/// `fs.nr_open`), once.
fn raise_fd_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: valid out pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
            return;
        }
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<libc::rlim_t>().ok())
            .unwrap_or(rl.rlim_max);
        let want = libc::rlimit { rlim_cur: nr_open.max(rl.rlim_max), rlim_max: nr_open.max(rl.rlim_max) };
        // SAFETY: valid pointers; failure (not root) leaves the limit alone.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
            let soft = libc::rlimit { rlim_cur: rl.rlim_max, rlim_max: rl.rlim_max };
            // SAFETY: as above.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) };
        }
    });
}

impl Passthrough {
    /// Serves the host directory `dir`. Raises the descriptor limit as far
    /// as it may; in-core inodes hold file handles and a bounded cache of
    /// descriptors (or, where handles do not work, a descriptor each: the
    /// VFS then keeps its dcache under the limit, see `inode_budget`).
    pub fn new(dir: impl AsRef<Path>, opts: PassthroughOptions) -> Result<Passthrough> {
        raise_fd_limit();
        let c = CString::new(dir.as_ref().as_os_str().as_bytes()).map_err(|_| err(EINVAL))?;
        // SAFETY: NUL-terminated path.
        let fd = check(unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
        // SAFETY: just opened, owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = stat_fd(fd.as_raw_fd(), None)?;
        let root_ino = st.st_ino & !(1 << 63);
        let (inotify, watches) = if opts.watch {
            match Inotify::init() {
                Ok(i) => {
                    let w = i.watches();
                    (Some(i), Some(Mutex::new(w)))
                }
                Err(_) => (None, None),
            }
        } else {
            (None, None)
        };
        let budget = opts.descriptor_cache.unwrap_or_else(fd_budget);
        let inner = Arc::new(Inner {
            root_ino,
            root_dev: st.st_dev,
            unwatched: AtomicBool::new(false),
            opts,
            nodes: RwLock::new(Nodes {
                by_ino: HashMap::new(),
                by_key: HashMap::new(),
                by_wd: HashMap::new(),
                next_private: 1 << 63,
            }),
            watches,
            notify: OnceLock::new(),
            stats: Arc::new(PassthroughStats::default()),
            fds: FdCache::new(fd.as_raw_fd(), budget),
        });
        let a = inner.attr(root_ino, &st);
        let root = Node::new((st.st_dev, st.st_ino), fd, a, &inner.fds);
        {
            let mut nodes = inner.nodes.write().unwrap();
            nodes.by_key.insert(root.key, root_ino);
            nodes.by_ino.insert(root_ino, root.clone());
            // Not attached yet: `attach` reads `unwatched` itself.
            inner.watch(&mut nodes, &root);
        }
        if let Some(i) = inotify {
            let weak = Arc::downgrade(&inner);
            std::thread::Builder::new()
                .name("rcuvfs-inotify".into())
                .spawn(move || watcher(i, weak))
                .map_err(|e| io::Error::new(e.kind(), format!("watcher thread: {e}")))?;
        }
        Ok(Passthrough { inner })
    }

    /// Whether nodes hold file handles (descriptors then are a bounded
    /// cache), the nodes holding cached descriptors now, their bound, and
    /// the descriptors reopened from handles so far.
    pub fn descriptors(&self) -> (bool, usize, usize, usize) {
        let f = &self.inner.fds;
        (f.handles(), f.queued(), f.budget, f.reopened.load(Ordering::Relaxed))
    }

    /// The counters of this filesystem (they outlive it).
    pub fn stats(&self) -> Arc<PassthroughStats> {
        self.inner.stats.clone()
    }
}

impl FileSystem for Passthrough {
    fn root(&self) -> Ino {
        self.inner.root_ino
    }

    fn attach(&self, notify: Arc<dyn Notify>) {
        if self.inner.unwatched.load(Ordering::Relaxed) {
            notify.set_revalidate(true);
        }
        let _ = self.inner.notify.set(notify);
    }

    fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        let inner = &*self.inner;
        let p = inner.dir(parent)?;
        if let Some(l) = &*p.listing.lock().unwrap() {
            if !l.iter().any(|e| e.name == name) {
                inner.stats.cached_misses.fetch_add(1, Ordering::Relaxed);
                return fail(ENOENT);
            }
        }
        inner.stats.lookups.fetch_add(1, Ordering::Relaxed);
        inner.lookup_node(&p, name)
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        let inner = &*self.inner;
        let mut nodes = inner.nodes.write().unwrap();
        let Some(n) = nodes.by_ino.get(&ino).cloned() else { return };
        if n.nlookup.fetch_sub(nlookup, Ordering::Relaxed) > nlookup || ino == inner.root_ino {
            return;
        }
        nodes.by_ino.remove(&ino);
        // (A node whose number the host reused is no longer the key's.)
        if nodes.by_key.get(&n.key) == Some(&ino) {
            nodes.by_key.remove(&n.key);
        }
        let wd = n.wd.lock().unwrap().take();
        if let Some(wd) = wd {
            nodes.by_wd.remove(&wd.get_watch_descriptor_id());
            if let Some(w) = &inner.watches {
                let _ = w.lock().unwrap().remove(wd);
            }
        }
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        let inner = &*self.inner;
        inner.getattr_node(&*inner.node(ino)?)
    }

    fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let inner = &*self.inner;
        let n = inner.node(ino)?;
        let path = inner.fds.path_fd(&n)?;
        let fd = path.as_raw_fd();
        let p = proc_path(fd);
        if set.uid.is_some() || set.gid.is_some() {
            let (u, g) = (set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX));
            // SAFETY: valid descriptor; empty path with AT_EMPTY_PATH.
            check(unsafe { libc::fchownat(fd, c"".as_ptr(), u, g, libc::AT_EMPTY_PATH) })?;
        }
        if let Some(perm) = set.perm {
            if n.kind == FileType::Symlink {
                return fail(libc::EOPNOTSUPP);
            }
            // SAFETY: NUL-terminated path.
            check(unsafe { libc::chmod(p.as_ptr(), perm as libc::mode_t) })?;
        }
        if let Some(size) = set.size {
            if n.kind != FileType::File {
                return fail(EINVAL);
            }
            // SAFETY: NUL-terminated path.
            check(unsafe { libc::truncate(p.as_ptr(), size as libc::off_t) })?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let t = |x: Option<SetTime>| match x {
                None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
                Some(SetTime::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
                Some(SetTime::At(t)) => libc::timespec { tv_sec: t.sec, tv_nsec: i64::from(t.nsec) },
            };
            let times = [t(set.atime), t(set.mtime)];
            if n.kind == FileType::Symlink {
                // SAFETY: valid descriptor, empty path, two timespecs.
                check(unsafe { libc::utimensat(fd, c"".as_ptr(), times.as_ptr(), libc::AT_EMPTY_PATH) })?;
            } else {
                // SAFETY: NUL-terminated path, two timespecs.
                check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0) })?;
            }
        }
        inner.getattr_node(&n)
    }

    fn create(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        let inner = &*self.inner;
        let p = inner.dir(parent)?;
        let c = cstr(name)?;
        // SAFETY: valid descriptor, NUL-terminated name.
        let fd = check(unsafe {
            libc::openat(
                inner.fds.path_fd(&p)?.as_raw_fd(),
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                perm as libc::c_uint,
            )
        })?;
        // SAFETY: just opened, owned here (closed at the end).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        inner.touched(&p);
        inner.chown_new(&p, &c, owner)?;
        // The create applied this process's umask, and the chown cleared
        // set-user-ID and set-group-ID: set the bits asked for (the caller's
        // umask is already out of `perm`). xfstests generic/633 found
        // 02010 created as 010.
        // SAFETY: valid descriptor.
        check(unsafe { libc::fchmod(fd.as_raw_fd(), perm as libc::mode_t) })?;
        drop(fd);
        inner.lookup_node(&p, name)
    }

    fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        let inner = &*self.inner;
        let p = inner.dir(parent)?;
        let c = cstr(name)?;
        // SAFETY: valid descriptor, NUL-terminated name.
        check(unsafe { libc::mkdirat(inner.fds.path_fd(&p)?.as_raw_fd(), c.as_ptr(), perm as libc::mode_t) })?;
        inner.touched(&p);
        inner.chown_new(&p, &c, owner)?;
        // mkdir applies the process umask: set the bits asked for.
        // SAFETY: valid descriptor, NUL-terminated name.
        check(unsafe { libc::fchmodat(inner.fds.path_fd(&p)?.as_raw_fd(), c.as_ptr(), perm as libc::mode_t, 0) })?;
        inner.lookup_node(&p, name)
    }

    fn mknod(&self, parent: Ino, name: &[u8], kind: FileType, perm: u32, rdev: u64, owner: Owner) -> Result<Attr> {
        let inner = &*self.inner;
        let p = inner.dir(parent)?;
        let c = cstr(name)?;
        let mode = kind.mode_bits() | perm;
        // SAFETY: valid descriptor, NUL-terminated name.
        check(unsafe {
            libc::mknodat(inner.fds.path_fd(&p)?.as_raw_fd(), c.as_ptr(), mode as libc::mode_t, rdev as libc::dev_t)
        })?;
        inner.touched(&p);
        inner.chown_new(&p, &c, owner)?;
        // SAFETY: as above.
        check(unsafe { libc::fchmodat(inner.fds.path_fd(&p)?.as_raw_fd(), c.as_ptr(), perm as libc::mode_t, 0) })?;
        inner.lookup_node(&p, name)
    }

    fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr> {
        let inner = &*self.inner;
        let p = inner.dir(parent)?;
        let (c, t) = (cstr(name)?, cstr(target)?);
        // SAFETY: valid descriptor, NUL-terminated strings.
        check(unsafe { libc::symlinkat(t.as_ptr(), inner.fds.path_fd(&p)?.as_raw_fd(), c.as_ptr()) })?;
        inner.touched(&p);
        inner.chown_new(&p, &c, owner)?;
        inner.lookup_node(&p, name)
    }

    fn link(&self, ino: Ino, parent: Ino, name: &[u8]) -> Result<Attr> {
        let inner = &*self.inner;
        let (n, p) = (inner.node(ino)?, inner.dir(parent)?);
        if n.kind == FileType::Dir {
            return fail(libc::EPERM);
        }
        let c = cstr(name)?;
        let src_fd = inner.fds.path_fd(&n)?;
        let src = proc_path(src_fd.as_raw_fd());
        // SAFETY: NUL-terminated strings, valid descriptor.
        check(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                src.as_ptr(),
                inner.fds.path_fd(&p)?.as_raw_fd(),
                c.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        })?;
        inner.touched(&p);
        inner.lookup_node(&p, name)
    }

    fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let inner = &*self.inner;
        let p = inner.dir(parent)?;
        let c = cstr(name)?;
        let pfd = inner.fds.path_fd(&p)?;
        let pinned = inner.pin_victim(&p, &c)?;
        // SAFETY: valid descriptor, NUL-terminated name.
        let r = check(unsafe { libc::unlinkat(pfd.as_raw_fd(), c.as_ptr(), 0) });
        inner.settle_pin(pinned, r.is_err());
        r?;
        inner.touched(&p);
        Ok(())
    }

    fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let inner = &*self.inner;
        let p = inner.dir(parent)?;
        let c = cstr(name)?;
        // SAFETY: valid descriptor, NUL-terminated name.
        check(unsafe { libc::unlinkat(inner.fds.path_fd(&p)?.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) })?;
        inner.touched(&p);
        Ok(())
    }

    fn rename(&self, parent: Ino, name: &[u8], new_parent: Ino, new_name: &[u8], flags: RenameFlags) -> Result<()> {
        let inner = &*self.inner;
        let (p, np) = (inner.dir(parent)?, inner.dir(new_parent)?);
        let (a, b) = (cstr(name)?, cstr(new_name)?);
        let mut f = 0;
        if flags.noreplace {
            f |= libc::RENAME_NOREPLACE;
        }
        if flags.exchange {
            f |= libc::RENAME_EXCHANGE;
        }
        let (pfd, npfd) = (inner.fds.path_fd(&p)?, inner.fds.path_fd(&np)?);
        let pinned = if flags.exchange { None } else { inner.pin_victim(&np, &b)? };
        // SAFETY: valid descriptors, NUL-terminated names.
        let r = check(unsafe { libc::renameat2(pfd.as_raw_fd(), a.as_ptr(), npfd.as_raw_fd(), b.as_ptr(), f) });
        inner.settle_pin(pinned, r.is_err());
        r?;
        inner.touched(&p);
        inner.touched(&np);
        Ok(())
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let n = self.inner.node(ino)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid descriptor, empty path, buffer valid for its length.
        let r = unsafe {
            libc::readlinkat(self.inner.fds.path_fd(&n)?.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(r as usize);
        Ok(buf)
    }

    fn open_host_file(&self, ino: Ino, write: bool) -> Option<Result<OwnedFd>> {
        let open = || {
            let n = self.inner.node(ino)?;
            if n.kind != FileType::File {
                return fail(libc::EINVAL);
            }
            let fd = self.inner.fds.path_fd(&n)?;
            let p = proc_path(fd.as_raw_fd());
            let mode = if write { libc::O_RDWR } else { libc::O_RDONLY };
            // SAFETY: NUL-terminated path.
            let fd = check(unsafe { libc::open(p.as_ptr(), mode | libc::O_CLOEXEC) })?;
            // SAFETY: just opened, owned here.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        Some(open())
    }

    fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        let n = self.inner.node(ino)?;
        let fd = self.inner.fds.path_fd(&n)?;
        let (p, name) = (proc_path(fd.as_raw_fd()), cstr(name)?);
        // SAFETY: valid C strings; a null buffer of size 0 asks the size.
        sized_read(|buf, len| unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), buf.cast(), len) })
    }

    fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], how: super::XattrSet) -> Result<()> {
        let n = self.inner.node(ino)?;
        let flags = match how {
            super::XattrSet::Either => 0,
            super::XattrSet::Create => libc::XATTR_CREATE,
            super::XattrSet::Replace => libc::XATTR_REPLACE,
        };
        let fd = self.inner.fds.path_fd(&n)?;
        let (p, name) = (proc_path(fd.as_raw_fd()), cstr(name)?);
        // SAFETY: valid C strings and a buffer valid for its length.
        check(unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), flags) })?;
        Ok(())
    }

    fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let n = self.inner.node(ino)?;
        let fd = self.inner.fds.path_fd(&n)?;
        let p = proc_path(fd.as_raw_fd());
        // SAFETY: a valid C string; a null buffer of size 0 asks the size.
        let list = sized_read(|buf, len| unsafe { libc::listxattr(p.as_ptr(), buf.cast(), len) })?;
        Ok(list.split(|&b| b == 0).filter(|n| !n.is_empty()).map(<[u8]>::to_vec).collect())
    }

    fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        let n = self.inner.node(ino)?;
        let fd = self.inner.fds.path_fd(&n)?;
        let (p, name) = (proc_path(fd.as_raw_fd()), cstr(name)?);
        // SAFETY: valid C strings.
        check(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) })?;
        Ok(())
    }

    fn readdir(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>> {
        let inner = &*self.inner;
        let d = inner.dir(ino)?;
        let cached = d.listing.lock().unwrap().clone();
        if let Some(l) = cached {
            let start = if offset == 0 { Some(0) } else { l.iter().position(|e| e.offset == offset).map(|i| i + 1) };
            if let Some(start) = start {
                inner.stats.cached_readdirs.fetch_add(1, Ordering::Relaxed);
                return Ok(l[start..].to_vec());
            }
        }
        // Relaxed, here and below: the listing's lock orders the second
        // load against `touched` (see there).
        let g = d.generation.load(Ordering::Relaxed);
        let out = inner.getdents(&d, offset)?;
        // A whole listing, read with no event in between, under a watch.
        if offset == 0 && d.wd.lock().unwrap().is_some() {
            let mut l = d.listing.lock().unwrap();
            if d.generation.load(Ordering::Relaxed) == g {
                *l = Some(Arc::new(out.clone()));
            }
        }
        Ok(out)
    }

    fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let inner = &*self.inner;
        let n = inner.node(ino)?;
        if n.kind != FileType::File {
            return fail(if n.kind == FileType::Dir { libc::EISDIR } else { EINVAL });
        }
        let fd = inner.data_fd(&n, false)?;
        // SAFETY: valid descriptor and buffer.
        let r = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }

    fn write(&self, ino: Ino, pos: WritePos, data: &[u8]) -> Result<u64> {
        let inner = &*self.inner;
        let n = inner.node(ino)?;
        if n.kind != FileType::File {
            return fail(EBADF);
        }
        let fd = inner.data_fd(&n, true)?;
        let off = match pos {
            WritePos::At(o) => o,
            // Appends between our own writers are serialized by the data
            // lock; an outside appender can interleave, as on the host.
            WritePos::Append => {
                let _l = n.data.lock().unwrap();
                let end = stat_fd(fd.as_raw_fd(), None)?.st_size as u64;
                write_all_at(fd.as_raw_fd(), data, end)?;
                return Ok(end);
            }
        };
        write_all_at(fd.as_raw_fd(), data, off)?;
        Ok(off)
    }

    fn fallocate(&self, ino: Ino, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        let inner = &*self.inner;
        let n = inner.node(ino)?;
        if n.kind != FileType::File {
            return fail(libc::ENODEV);
        }
        let fd = inner.data_fd(&n, true)?;
        let (off, len) =
            (i64::try_from(offset).map_err(|_| err(libc::EFBIG))?, i64::try_from(len).map_err(|_| err(libc::EFBIG))?);
        let mode = if keep_size { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
        // SAFETY: valid descriptor. The host allocates (or answers ENOSPC,
        // EOPNOTSUPP) and never shrinks the file.
        check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, len) }).map(drop)
    }

    fn fsync(&self, ino: Ino) -> Result<()> {
        let inner = &*self.inner;
        let n = inner.node(ino)?;
        if n.kind != FileType::File {
            return Ok(());
        }
        let fd = inner.data_fd(&n, false)?;
        // SAFETY: valid descriptor.
        check(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop)
    }

    fn statfs(&self) -> Result<StatFs> {
        let inner = &*self.inner;
        let root = inner.node(inner.root_ino)?;
        let fd = inner.fds.path_fd(&root)?;
        let p = proc_path(fd.as_raw_fd());
        // SAFETY: zeroed statvfs is valid; NUL-terminated path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        check(unsafe { libc::statvfs(p.as_ptr(), &mut s) })?;
        Ok(StatFs {
            bsize: s.f_bsize as u32,
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            namelen: s.f_namemax as u32,
        })
    }

    fn revalidate(&self, parent: Ino, name: &[u8], ino: Ino) -> Result<bool> {
        let inner = &*self.inner;
        let Ok(p) = inner.dir(parent) else { return Ok(false) };
        if p.wd.lock().unwrap().is_some() {
            return Ok(true); // watched: events invalidate it
        }
        let c = cstr(name)?;
        if ino == 0 {
            // A cached miss: still a miss? (One fstatat each time: misses
            // carry no timestamp.)
            return Ok(stat_fd(inner.fds.path_fd(&p)?.as_raw_fd(), Some(&c)).is_err());
        }
        let Ok(n) = inner.node(ino) else { return Ok(false) };
        let mut checked = n.checked.lock().unwrap();
        if checked.0.elapsed() < inner.opts.ttl {
            return Ok(true);
        }
        let Ok(st) = stat_fd(inner.fds.path_fd(&p)?.as_raw_fd(), Some(&c)) else { return Ok(false) };
        let a = inner.attr(ino, &st);
        if (st.st_dev, st.st_ino) != n.key || a != checked.1 {
            return Ok(false); // another object, or changed: look it up again
        }
        checked.0 = Instant::now();
        Ok(true)
    }

    fn revalidates(&self) -> bool {
        self.inner.unwatched.load(Ordering::Relaxed)
    }

    fn inode_budget(&self) -> Option<usize> {
        if self.inner.fds.handles() {
            // Nodes hold handles; their descriptors are a bounded cache.
            return None;
        }
        // A path descriptor per inode, a data descriptor per file read or
        // written, and room for the process's own.
        fd_limit().map(|l| l.saturating_sub(1024) / 2)
    }
}

fn write_all_at(fd: RawFd, mut data: &[u8], mut off: u64) -> Result<()> {
    while !data.is_empty() {
        // SAFETY: valid descriptor and buffer.
        let r = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), off as libc::off_t) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        data = &data[r as usize..];
        off += r as u64;
    }
    Ok(())
}
