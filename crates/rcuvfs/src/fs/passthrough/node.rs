//! The nodes: one per object the VFS has looked up (its `O_PATH`
//! descriptor, data descriptor, watch and listing), the table that finds
//! them by inode number, host key and watch, and the operations on them
//! that the filesystem's calls share.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Instant;

use inotify::Watches;

use super::fds::{FdCache, PathFd};
use super::{PassthroughOptions, PassthroughStats};
use crate::error::{err, fail, Result, EINVAL, ENOTDIR};
use crate::fs::{Attr, DirEntry, FileType, Ino, Notify, Owner, Timespec};

pub(super) struct Node {
    pub(super) ino: Ino,
    /// (st_dev, st_ino) on the host.
    pub(super) key: (u64, u64),
    pub(super) kind: FileType,
    /// An `O_PATH | O_NOFOLLOW` descriptor, or a handle that opens one
    /// (see `fds`).
    pub(super) fd: PathFd,
    /// This node, for the descriptor cache's queue.
    pub(super) me: Weak<Node>,
    /// In the descriptor cache's queue (set when queued, cleared when
    /// evicted).
    pub(super) queued: AtomicBool,
    /// Unlinked through this filesystem while held: its descriptors stay.
    pub(super) pinned: AtomicBool,
    /// Lookup references (changed under `Inner::nodes`).
    pub(super) nlookup: AtomicU64,
    /// A descriptor for data I/O, opened at first use, and whether it
    /// can write.
    pub(super) data: Mutex<Option<(Arc<OwnedFd>, bool)>>,
    /// The inotify watch on this directory, if any.
    pub(super) wd: Mutex<Option<inotify::WatchDescriptor>>,
    /// A directory's whole listing, while it is complete.
    pub(super) listing: Mutex<Option<Arc<Vec<DirEntry>>>>,
    /// Bumped by every event in this directory: a listing read across an
    /// event is not complete.
    pub(super) generation: AtomicU64,
    /// TTL bookkeeping: when the name that led here was last checked, and
    /// the attributes seen then.
    pub(super) checked: Mutex<(Instant, Attr)>,
}

impl Node {
    /// A node with one lookup reference, for the object `attr` describes.
    pub(super) fn new(key: (u64, u64), fd: OwnedFd, attr: Attr, cache: &FdCache) -> Arc<Node> {
        let fd = PathFd::new(fd, cache);
        let node = Arc::new_cyclic(|me| Node {
            ino: attr.ino,
            key,
            kind: attr.kind,
            fd,
            me: me.clone(),
            queued: AtomicBool::new(false),
            pinned: AtomicBool::new(false),
            nlookup: AtomicU64::new(1),
            data: Mutex::new(None),
            wd: Mutex::new(None),
            listing: Mutex::new(None),
            generation: AtomicU64::new(0),
            checked: Mutex::new((Instant::now(), attr)),
        });
        // Queued by the caller, once it has released `nodes` (see `fds`).
        node
    }
}

pub(super) struct Nodes {
    pub(super) by_ino: HashMap<Ino, Arc<Node>>,
    pub(super) by_key: HashMap<(u64, u64), Ino>,
    pub(super) by_wd: HashMap<i32, Ino>,
    pub(super) next_private: Ino,
}

pub(super) struct Inner {
    pub(super) root_ino: Ino,
    pub(super) root_dev: u64,
    pub(super) opts: PassthroughOptions,
    /// Read by every operation to find its node; written by lookups that
    /// make a node, by forgets, and by watch bookkeeping.
    pub(super) nodes: RwLock<Nodes>,
    pub(super) watches: Option<Mutex<Watches>>,
    /// Some directory is not watched: cached names must be revalidated.
    pub(super) unwatched: AtomicBool,
    pub(super) notify: OnceLock<Arc<dyn Notify>>,
    pub(super) stats: Arc<PassthroughStats>,
    /// The nodes' descriptors.
    pub(super) fds: FdCache,
}

pub(super) fn cstr(name: &[u8]) -> Result<CString> {
    CString::new(name).map_err(|_| err(EINVAL))
}

pub(super) fn check(r: libc::c_int) -> Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(super) fn proc_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL")
}

/// Reads a variable-sized answer (`getxattr`, `listxattr`): asks the
/// size, then reads, again if it grew in between (ERANGE).
pub(super) fn sized_read(mut call: impl FnMut(*mut u8, usize) -> libc::ssize_t) -> Result<Vec<u8>> {
    loop {
        let n = call(std::ptr::null_mut(), 0);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; n as usize];
        let m = call(buf.as_mut_ptr(), buf.len());
        if m >= 0 {
            buf.truncate(m as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
    }
}

pub(super) fn kind_of(mode: u32) -> FileType {
    FileType::from_mode(mode).unwrap_or(FileType::File)
}

pub(super) fn stat_fd(fd: RawFd, name: Option<&CStr>) -> Result<libc::stat> {
    // SAFETY: an all-zero stat is valid; the pointers are valid for the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let (path, flags) = match name {
        Some(n) => (n.as_ptr(), libc::AT_SYMLINK_NOFOLLOW),
        None => (c"".as_ptr(), libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW),
    };
    // SAFETY: valid descriptor, NUL-terminated path, valid out pointer.
    check(unsafe { libc::fstatat(fd, path, &mut st, flags) })?;
    Ok(st)
}

pub(super) fn ts(sec: i64, nsec: i64) -> Timespec {
    Timespec { sec, nsec: nsec as u32 }
}

impl Inner {
    pub(super) fn ino_for(&self, nodes: &mut Nodes, key: (u64, u64)) -> Ino {
        if let Some(&i) = nodes.by_key.get(&key) {
            return i;
        }
        // The host's own number, unless a node the VFS still holds has it:
        // a deleted object whose number the host gave to this one. Even one
        // with this very key: `by_key` no longer names it, so a newer object
        // took the key from it (`lookup_node`), and that one's node was
        // forgotten since. (Taking the number then put two objects under
        // one in-core inode: xfstests generic/011 and 013 listed a symlink
        // as the directory that had had its number.)
        let own = key.1 & !(1 << 63);
        if key.0 == self.root_dev && !nodes.by_ino.contains_key(&own) {
            return own;
        }
        nodes.next_private += 1;
        nodes.next_private
    }

    pub(super) fn attr(&self, ino: Ino, st: &libc::stat) -> Attr {
        Attr {
            ino,
            kind: kind_of(st.st_mode),
            perm: st.st_mode & 0o7777,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            atime: ts(st.st_atime, st.st_atime_nsec),
            mtime: ts(st.st_mtime, st.st_mtime_nsec),
            ctime: ts(st.st_ctime, st.st_ctime_nsec),
            rdev: st.st_rdev,
        }
    }

    pub(super) fn node(&self, ino: Ino) -> Result<Arc<Node>> {
        self.nodes.read().unwrap().by_ino.get(&ino).cloned().ok_or_else(|| err(libc::ESTALE))
    }

    pub(super) fn dir(&self, ino: Ino) -> Result<Arc<Node>> {
        let n = self.node(ino)?;
        if n.kind != FileType::Dir {
            return fail(ENOTDIR);
        }
        Ok(n)
    }

    /// Opens `name` under `parent` as a node (or finds the node it already
    /// is) and counts one lookup reference.
    pub(super) fn lookup_node(&self, parent: &Node, name: &[u8]) -> Result<Attr> {
        let c = cstr(name)?;
        // SAFETY: valid descriptor and NUL-terminated name.
        let pfd = self.fds.path_fd(parent)?;
        let fd = check(unsafe {
            libc::openat(pfd.as_raw_fd(), c.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        })?;
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = stat_fd(fd.as_raw_fd(), None)?;
        let key = (st.st_dev, st.st_ino);
        let mut nodes = self.nodes.write().unwrap();
        let mut reused = false;
        if let Some(&ino) = nodes.by_key.get(&key) {
            let n = nodes.by_ino[&ino].clone();
            if n.kind == kind_of(st.st_mode) && self.fds.same_object(&n, &fd) {
                n.nlookup.fetch_add(1, Ordering::Relaxed);
                drop(nodes);
                let a = self.attr(ino, &st);
                *n.checked.lock().unwrap() = (Instant::now(), a.clone());
                return Ok(a);
            }
            // The host reused the number for another object (the node's
            // was deleted while the node held only its handle). The new
            // object gets a node and an inode number of its own: under the
            // old number the VFS knows the old object, its type included
            // (xfstests generic/011 showed a new directory as the symlink
            // that had had its number).
            reused = true;
        }
        let ino = if reused {
            nodes.next_private += 1;
            nodes.next_private
        } else {
            self.ino_for(&mut nodes, key)
        };
        let a = self.attr(ino, &st);
        let node = Node::new(key, fd, a.clone(), &self.fds);
        nodes.by_key.insert(key, ino);
        nodes.by_ino.insert(ino, node.clone());
        let first_unwatched = node.kind == FileType::Dir && !self.watch(&mut nodes, &node);
        drop(nodes);
        if node.fd.evictable() {
            self.fds.opened(&node);
        }
        if first_unwatched {
            // After `nodes` is released: see the lock table.
            if let Some(n) = self.notify.get() {
                n.set_revalidate(true);
            }
        }
        Ok(a)
    }

    /// A descriptor for data I/O on `node`, writable if asked.
    pub(super) fn data_fd(&self, node: &Node, write: bool) -> Result<Arc<OwnedFd>> {
        if let Some((fd, w)) = &*node.data.lock().unwrap() {
            if *w || !write {
                return Ok(fd.clone());
            }
        }
        // The path descriptor first, with no node lock held: opening it
        // may evict other nodes' descriptors, under their locks.
        let path = self.fds.path_fd(node)?;
        let p = proc_path(path.as_raw_fd());
        let open = |flags| {
            // SAFETY: NUL-terminated path.
            check(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC) })
        };
        let (fd, w) = match open(libc::O_RDWR) {
            Ok(fd) => (fd, true),
            Err(e) if write => return Err(e),
            Err(_) => (open(libc::O_RDONLY)?, false),
        };
        // SAFETY: just opened, owned here.
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        *node.data.lock().unwrap() = Some((fd.clone(), w));
        self.fds.opened(node);
        Ok(fd)
    }

    /// The file `name` in `dir` is about to lose a link: if the VFS holds
    /// its node, its descriptor stays open for the node's life (the file
    /// may be open, and a handle to an unlinked inode may not open again).
    /// Returns the node pinned, for [`settle_pin`](Self::settle_pin).
    pub(super) fn pin_victim(&self, dir: &Node, name: &CStr) -> Result<Option<Arc<Node>>> {
        let Ok(st) = stat_fd(self.fds.path_fd(dir)?.as_raw_fd(), Some(name)) else { return Ok(None) };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(None);
        }
        let node = {
            let nodes = self.nodes.read().unwrap();
            nodes.by_key.get(&(st.st_dev, st.st_ino)).and_then(|i| nodes.by_ino.get(i).cloned())
        };
        match node {
            Some(n) if n.fd.evictable() && !n.pinned.load(Ordering::Relaxed) => {
                self.fds.pin(&n)?;
                Ok(Some(n))
            }
            _ => Ok(None),
        }
    }

    /// After the unlink or rename that `pin_victim` prepared: the pin
    /// stays only if the object lost its last link.
    pub(super) fn settle_pin(&self, pinned: Option<Arc<Node>>, failed: bool) {
        let Some(n) = pinned else { return };
        let linked = failed
            || self
                .fds
                .path_fd(&n)
                .ok()
                .and_then(|fd| stat_fd(fd.as_raw_fd(), None).ok())
                .is_none_or(|st| st.st_nlink > 0);
        if linked {
            self.fds.unpin(&n);
        }
    }

    pub(super) fn getattr_node(&self, n: &Node) -> Result<Attr> {
        Ok(self.attr(n.ino, &stat_fd(self.fds.path_fd(n)?.as_raw_fd(), None)?))
    }

    /// Applies the owner to a name just created (we run as root; the VFS
    /// decided who owns it).
    pub(super) fn chown_new(&self, parent: &Node, name: &CStr, owner: Owner) -> Result<()> {
        // SAFETY: valid descriptor and NUL-terminated name.
        check(unsafe {
            libc::fchownat(
                self.fds.path_fd(parent)?.as_raw_fd(),
                name.as_ptr(),
                owner.uid,
                owner.gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
        .map(drop)
    }

    /// Reads the whole listing of `dir` with `getdents64`, starting after
    /// host cookie `offset`.
    pub(super) fn getdents(&self, dir: &Node, offset: u64) -> Result<Vec<DirEntry>> {
        // SAFETY: valid descriptor; "." is NUL-terminated.
        let fd = check(unsafe {
            libc::openat(
                self.fds.path_fd(dir)?.as_raw_fd(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: just opened, owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if offset != 0 {
            // SAFETY: valid descriptor.
            if unsafe { libc::lseek(fd.as_raw_fd(), offset as libc::off_t, libc::SEEK_SET) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            self.stats.getdents.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the buffer is valid for its length.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, fd.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n == 0 {
                break;
            }
            let mut pos = 0usize;
            while pos < n as usize {
                // linux_dirent64: d_ino u64, d_off i64, d_reclen u16,
                // d_type u8, d_name (NUL-terminated).
                let rec = &buf[pos..];
                let d_ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap());
                let d_off = i64::from_ne_bytes(rec[8..16].try_into().unwrap());
                let reclen = u16::from_ne_bytes(rec[16..18].try_into().unwrap()) as usize;
                let d_type = rec[18];
                let name = &rec[19..reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                pos += reclen;
                if name == b"." || name == b".." {
                    continue;
                }
                let kind = match d_type {
                    libc::DT_DIR => FileType::Dir,
                    libc::DT_REG => FileType::File,
                    libc::DT_LNK => FileType::Symlink,
                    libc::DT_FIFO => FileType::Fifo,
                    libc::DT_SOCK => FileType::Socket,
                    libc::DT_CHR => FileType::CharDevice,
                    libc::DT_BLK => FileType::BlockDevice,
                    _ => {
                        let c = cstr(name)?;
                        kind_of(stat_fd(fd.as_raw_fd(), Some(&c))?.st_mode)
                    }
                };
                out.push(DirEntry { ino: d_ino & !(1 << 63), name: name.to_vec(), kind, offset: d_off as u64 });
            }
        }
        Ok(out)
    }
}
