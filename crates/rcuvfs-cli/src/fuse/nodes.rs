//! The server's state: the node table (a FUSE node id is an inode number,
//! the root's swapped with FUSE's 1, each with the kernel's lookup count),
//! the open-file table, the backing files of the kernel's passthrough, and
//! the notifications that keep the kernel's caches coherent.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use dashmap::DashMap;
use fuser::{BackingId, Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, ReplyEntry, Request};
use rcuvfs::{Cred, Entry, File, FileType, Metadata, OpenOptions, Vfs};

use super::ops::{errno, kind};

/// One node the kernel knows: a handle and the kernel's lookup count.
struct KernelNode {
    pub(super) entry: Entry,
    pub(super) nlookup: u64,
}

/// Tells the kernel of changes a backend reports, so that it drops the
/// names and attributes it cached (FUSE's `notify_inval_entry` and
/// `notify_inval_inode`). Called from the backend's thread, never from a
/// request: the kernel may wait for the directory's lock, which a request
/// in progress may hold until it is answered.
#[derive(Default)]
pub(super) struct KernelNotify {
    pub(super) notifier: OnceLock<fuser::Notifier>,
    /// Over io_uring: `/dev/fuse` itself, written directly (fuser's
    /// notifier would write to the bridge, and the kernel acts only once
    /// the pump passes it on: a caller could see stale attributes after
    /// the request that changed them was answered).
    pub(super) device: OnceLock<Arc<std::os::fd::OwnedFd>>,
    /// The library's root inode number (FUSE's is 1).
    pub(super) root_ino: OnceLock<u64>,
}

/// `FUSE_NOTIFY_INVAL_INODE` and `FUSE_NOTIFY_INVAL_ENTRY`.
const NOTIFY_INVAL_INODE: i32 = 2;
const NOTIFY_INVAL_ENTRY: i32 = 3;

impl KernelNotify {
    pub(super) fn node(&self, ino: u64) -> INodeNo {
        INodeNo(self.root_ino.get().map_or(ino, |&r| swap_root(r, ino)))
    }

    /// Drops the kernel's cached attributes of FUSE node `node`, and only
    /// them (offset -1: no page-cache invalidation, so no inode lock in the
    /// kernel, and it may be sent from within a request on that node).
    pub(super) fn attrs_changed(&self, node: INodeNo) {
        self.inval_inode(node, -1, 0);
    }

    fn inval_inode(&self, node: INodeNo, off: i64, len: i64) {
        if let Some(d) = self.device.get() {
            let mut b = Vec::with_capacity(24);
            b.extend_from_slice(&node.0.to_le_bytes());
            b.extend_from_slice(&off.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
            notify_device(d, NOTIFY_INVAL_INODE, &b);
        } else if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(node, off, len);
        }
    }

    fn inval_entry(&self, parent: INodeNo, name: &[u8]) {
        if let Some(d) = self.device.get() {
            let mut b = Vec::with_capacity(16 + name.len() + 1);
            b.extend_from_slice(&parent.0.to_le_bytes());
            b.extend_from_slice(&(name.len() as u32).to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(name);
            b.push(0);
            notify_device(d, NOTIFY_INVAL_ENTRY, &b);
        } else if let Some(n) = self.notifier.get() {
            let _ = n.inval_entry(parent, OsStr::from_bytes(name));
        }
    }
}

/// Writes a notification (`code`, its body) to `/dev/fuse`. Errors are
/// ignored, as fuser's: ENOENT means the kernel does not know the node.
fn notify_device(d: &std::os::fd::OwnedFd, code: i32, body: &[u8]) {
    use std::os::fd::AsRawFd;
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(&((16 + body.len()) as u32).to_le_bytes());
    h[4..8].copy_from_slice(&code.to_le_bytes());
    let _ = super::uring::writev(d.as_raw_fd(), &[&h, body]);
}

/// A library inode number as a FUSE node id and back: the root's number
/// and FUSE's fixed 1 trade places.
fn swap_root(root_ino: u64, ino: u64) -> u64 {
    if ino == root_ino {
        1
    } else if ino == 1 {
        root_ino
    } else {
        ino
    }
}

impl rcuvfs::fs::Notify for KernelNotify {
    // Errors are ignored: ENOENT means the kernel does not know the node.
    fn entry_changed(&self, parent: u64, name: &[u8]) {
        self.inval_entry(self.node(parent), name);
    }

    fn attr_changed(&self, parent: u64, name: &[u8]) {
        // The kernel looks the name up again, with fresh attributes.
        self.entry_changed(parent, name);
    }

    fn inode_changed(&self, ino: u64) {
        // Attributes and all cached data.
        self.inval_inode(self.node(ino), 0, 0);
    }

    fn all_changed(&self) {
        // The kernel has no call for this: its timeouts bound it.
    }

    fn set_revalidate(&self, _on: bool) {}
}

/// How the kernel may cache file data.
pub(super) struct DataCache {
    /// `FOPEN_KEEP_CACHE` on every open.
    pub(super) keep: bool,
    /// `FUSE_WRITEBACK_CACHE`.
    pub(super) writeback: bool,
    /// The kernel's FUSE passthrough for host files (asked for; turned off
    /// at init if the kernel does not offer it).
    pub(super) passthrough: std::sync::atomic::AtomicBool,
    /// `FUSE_EXPORT_SUPPORT`: the kernel may hand out file handles
    /// (`name_to_handle_at`, NFS) naming a node by its number, and look it
    /// up by number again (a lookup of "." in it) after forgetting it. Only
    /// where a number is never given to another object: memfs.
    pub(super) export: bool,
}

impl DataCache {
    /// Whether open files use the kernel's FUSE passthrough (cleared at
    /// init if the kernel has none).
    pub(super) fn passthrough(&self) -> bool {
        self.passthrough.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The server as fuser runs it: shared with the io_uring queues' threads
/// (`uring`), which answer some requests themselves.
#[derive(Clone)]
pub(super) struct Mounted(pub(super) Arc<Server>);

impl std::ops::Deref for Mounted {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.0
    }
}

pub(super) struct Server {
    pub(super) vfs: Vfs,
    pub(super) data: DataCache,
    /// Each node's backing file while some open file uses it: the kernel
    /// takes one backing file per inode for all its passthrough opens.
    pub(super) backing: DashMap<u64, Weak<BackingId>>,
    /// The library's root inode number (swapped with FUSE's 1).
    pub(super) root_ino: u64,
    pub(super) ttl: Duration,
    nodes: DashMap<u64, KernelNode>,
    pub(super) files: DashMap<u64, Arc<OpenFile>>,
    pub(super) next_fh: AtomicU64,
    /// The kernel's notifications (also the library's observer).
    pub(super) kernel: Arc<KernelNotify>,
}

pub(super) struct OpenFile {
    pub(super) file: File,
    pub(super) append: bool,
    /// The kernel does this file's I/O on the node's backing file, which
    /// stays registered while some open file holds it.
    pub(super) backing: Option<Arc<BackingId>>,
}

/// The caller's supplementary groups, from `/proc/PID/status`.
pub(super) fn groups(pid: u32) -> Vec<u32> {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    s.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

impl Server {
    /// Runs a write or fallocate on `f`, which the library follows by
    /// removing set-ID bits when the writer is not root
    /// (FUSE_HANDLE_KILLPRIV); if it did, the kernel's cached mode is
    /// dropped, since a WRITE's answer carries no attributes.
    pub(super) fn removing_privs(
        &self,
        node: INodeNo,
        f: &OpenFile,
        op: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let set_id = |f: &OpenFile| f.file.metadata().map_or(0, |m| m.mode() & 0o6000);
        let before = set_id(f);
        op()?;
        if before != 0 && set_id(f) != before {
            self.kernel.attrs_changed(node);
        }
        Ok(())
    }

    pub(super) fn new(vfs: Vfs, ttl: Duration, data: DataCache, kernel: Arc<KernelNotify>) -> Server {
        let root = vfs.root_entry();
        let root_ino = root.ino();
        let nodes = DashMap::new();
        // The root is never forgotten.
        nodes.insert(1, KernelNode { entry: root, nlookup: 1 });
        Server {
            kernel,
            vfs,
            data,
            backing: DashMap::new(),
            root_ino,
            ttl,
            nodes,
            files: DashMap::new(),
            next_fh: AtomicU64::new(1),
        }
    }

    /// FUSE node id <-> library inode number.
    pub(super) fn node_id(&self, ino: u64) -> u64 {
        swap_root(self.root_ino, ino)
    }

    /// The view a request runs in: the caller's credentials.
    pub(super) fn view(&self, req: &Request) -> Vfs {
        self.view_of(req.uid(), req.gid(), req.pid())
    }

    /// The view of a caller named by a request's header.
    pub(super) fn view_of(&self, uid: u32, gid: u32, pid: u32) -> Vfs {
        let groups = if uid == 0 { Vec::new() } else { groups(pid) };
        self.vfs.with_cred(Cred::new(uid, gid, &groups))
    }

    /// A LOOKUP: `name` in `parent`, counted as the kernel's reference.
    pub(super) fn lookup_name(&self, v: &Vfs, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        if name.as_bytes() == b"." {
            self.lookup_self(parent)
        } else {
            self.entry(parent).and_then(|p| self.lookup_entry(v, &p, name))
        }
    }

    /// A GETATTR of `ino`, through the open file `fh` where given.
    pub(super) fn getattr_of(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<FileAttr, Errno> {
        let m = match fh.and_then(|fh| self.file(fh).ok()) {
            Some(f) if f.backing.is_none() => f.file.metadata(),
            // The kernel writes a passthrough file itself: ask the host.
            _ => {
                let e = self.entry(ino)?;
                if self.data.passthrough() && e.file_type() == FileType::File {
                    e.refresh()
                } else {
                    e.metadata()
                }
            }
        };
        m.map(|m| self.attr(&m)).map_err(errno)
    }

    pub(super) fn entry(&self, node: INodeNo) -> Result<Entry, Errno> {
        self.nodes.get(&node.0).map(|n| n.entry.clone()).ok_or(Errno::ESTALE)
    }

    /// Drops `nlookup` of the kernel's lookups of `node`; the node's
    /// handle goes at zero (the root's never: the kernel holds it).
    pub(super) fn forget_node(&self, node: INodeNo, nlookup: u64) {
        if node.0 == 1 {
            return;
        }
        // The entry handle is dropped outside the shard's lock.
        let gone = self.nodes.remove_if_mut(&node.0, |_, n| {
            n.nlookup = n.nlookup.saturating_sub(nlookup);
            n.nlookup == 0
        });
        drop(gone);
    }

    pub(super) fn file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        self.files.get(&fh.0).map(|f| f.clone()).ok_or(Errno::EBADF)
    }

    pub(super) fn attr(&self, m: &Metadata) -> FileAttr {
        let a = m.attr();
        FileAttr {
            ino: INodeNo(self.node_id(a.ino)),
            size: a.size,
            blocks: a.blocks,
            atime: a.atime.to_system_time(),
            mtime: a.mtime.to_system_time(),
            ctime: a.ctime.to_system_time(),
            crtime: a.ctime.to_system_time(),
            kind: kind(a.kind),
            perm: (a.perm & 0o7777) as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Counts one kernel lookup of `e` and returns its attributes.
    pub(super) fn remember(&self, e: Entry) -> Result<FileAttr, Errno> {
        let attr = self.attr(&e.metadata().map_err(errno)?);
        let spare = match self.nodes.entry(attr.ino.0) {
            dashmap::mapref::entry::Entry::Occupied(mut o) => {
                o.get_mut().nlookup += 1;
                Some(e)
            }
            dashmap::mapref::entry::Entry::Vacant(v) => {
                v.insert(KernelNode { entry: e, nlookup: 1 });
                None
            }
        };
        // Outside the shard's lock: dropping a handle may release the last
        // reference to its dentry, and with it the filesystem's inode.
        drop(spare);
        Ok(attr)
    }

    /// The node `node` by number, for a lookup of "." in it: the kernel
    /// asks so when it decodes a file handle of a node it has forgotten
    /// (export support). Found in the node table, or else through a name
    /// the library still caches for that number.
    pub(super) fn lookup_self(&self, node: INodeNo) -> Result<FileAttr, Errno> {
        let e = match self.entry(node) {
            Ok(e) => e,
            Err(_) if self.data.export => self.vfs.entry_by_ino(self.node_id(node.0)).map_err(errno)?,
            Err(e) => return Err(e),
        };
        self.remember(e)
    }

    /// Looks `name` up in `parent` and counts the kernel's new reference.
    pub(super) fn lookup_entry(&self, v: &Vfs, parent: &Entry, name: &OsStr) -> Result<FileAttr, Errno> {
        let e = v.lookup_at(parent, name).map_err(errno)?;
        self.remember(e)
    }

    pub(super) fn reply_entry(&self, reply: ReplyEntry, r: Result<FileAttr, Errno>) {
        match r {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// How the kernel treats an open file: no FLUSH request at each
    /// close (ours does nothing: a round trip saved per close), and on
    /// memfs its cached data kept across opens.
    pub(super) fn fopen_flags(&self) -> FopenFlags {
        let mut f = FopenFlags::FOPEN_NOFLUSH;
        if self.data.keep {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        f
    }

    /// An OPEN of `ino` by the caller `v`: its handle, and its backing
    /// file where the kernel does its I/O (registered with `register`).
    pub(super) fn open_node(
        &self,
        v: &Vfs,
        ino: INodeNo,
        flags: i32,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> io::Result<BackingId>,
    ) -> Result<(FileHandle, Option<Arc<BackingId>>), Errno> {
        let e = self.entry(ino)?;
        let f = v.open_entry(&e, &OpenOptions::from_flags(flags)).map_err(|err| {
            // The node lost its last name and its data after the kernel
            // looked it up for this open (a large file's go at once): a
            // rename over the name, or an unlink, in between. ESTALE
            // makes the kernel walk again with the name revalidated
            // (`do_filp_open`'s LOOKUP_REVAL retry), finding the file
            // that has the name now, or none (ENOENT then).
            if err.raw_os_error() == Some(libc::ENOENT) && e.metadata().is_ok_and(|m| m.nlink() == 0) {
                Errno::ESTALE
            } else {
                errno(err)
            }
        })?;
        let backing = self.backing(&e, register);
        Ok((self.add_open(f, &e, flags, backing.clone())?, backing))
    }

    /// A CREATE of `name` in `parent` (opened with `flags`, made with
    /// `mode`): its attributes (counted as the kernel's lookup), handle and
    /// backing file.
    pub(super) fn create_node(
        &self,
        v: &Vfs,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> io::Result<BackingId>,
    ) -> Result<(FileAttr, FileHandle, Option<Arc<BackingId>>), Errno> {
        let p = self.entry(parent)?;
        let mut o = OpenOptions::from_flags(flags | libc::O_CREAT);
        o.mode(mode & 0o7777);
        let f = v.open_at(&p, name, &o).map_err(errno)?;
        let e = v.lookup_at(&p, name).map_err(errno)?;
        if e.ino() != f.ino() {
            // Renamed over between the create and the lookup: the name
            // is another file now, which the kernel would take this
            // handle for.
            return Err(Errno::ESTALE);
        }
        let backing = self.backing(&e, register);
        let fh = self.add_open(f, &e, flags, backing.clone())?;
        match self.remember(e) {
            Ok(attr) => Ok((attr, fh, backing)),
            Err(err) => {
                drop(self.files.remove(&fh.0));
                Err(err)
            }
        }
    }

    /// An OPENDIR of `ino`: the kernel's flags for it. A directory needs
    /// no state: a listing reads from the node's handle by cookie. The read
    /// permission is checked here and at each listing.
    pub(super) fn open_dir(&self, v: &Vfs, ino: INodeNo) -> Result<FopenFlags, Errno> {
        let e = self.entry(ino)?;
        if !e.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        v.access(&e, libc::R_OK as u32).map_err(errno)?;
        // memfs: the kernel may cache a directory's listing and keep it
        // across opens (every change to it comes through the mount, and the
        // kernel drops the cache when it changes).
        Ok(if self.data.keep {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        })
    }

    /// A READDIR of `ino` from the kernel's `offset`: `add(node, next
    /// offset, kind, name)` for each entry until it answers true (full).
    /// "." and ".." take offsets 1 and 2; the filesystem's cookies (1 and
    /// up) are shifted by 2.
    pub(super) fn list(
        &self,
        v: &Vfs,
        ino: INodeNo,
        offset: u64,
        mut add: impl FnMut(INodeNo, u64, fuser::FileType, &OsStr) -> bool,
    ) -> Result<(), Errno> {
        let e = self.entry(ino)?;
        if offset < 1 && add(ino, 1, fuser::FileType::Directory, OsStr::new(".")) {
            return Ok(());
        }
        if offset < 2 {
            let up = v.metadata_at(&e, "..", false).map_err(errno)?;
            if add(INodeNo(self.node_id(up.ino())), 2, fuser::FileType::Directory, OsStr::new("..")) {
                return Ok(());
            }
        }
        for d in v.read_dir_at(&e, offset.saturating_sub(2)).map_err(errno)? {
            let node = INodeNo(self.node_id(d.ino));
            if add(node, d.offset + 2, kind(d.kind), OsStr::from_bytes(&d.name)) {
                break;
            }
        }
        Ok(())
    }

    /// A READDIRPLUS: as [`list`](Self::list), with each entry's
    /// attributes; `add(next offset, name, attributes)`. Every entry sent
    /// but "." and ".." counts as one of the kernel's lookups.
    pub(super) fn list_plus(
        &self,
        v: &Vfs,
        ino: INodeNo,
        offset: u64,
        mut add: impl FnMut(u64, &OsStr, &FileAttr) -> bool,
    ) -> Result<(), Errno> {
        let e = self.entry(ino)?;
        if offset < 1 {
            let a = self.attr(&e.metadata().map_err(errno)?);
            if add(1, OsStr::new("."), &a) {
                return Ok(());
            }
        }
        if offset < 2 {
            let a = self.attr(&v.metadata_at(&e, "..", false).map_err(errno)?);
            if add(2, OsStr::new(".."), &a) {
                return Ok(());
            }
        }
        for d in v.read_dir_plus(&e, offset.saturating_sub(2)).map_err(errno)? {
            let a = self.attr(&d.metadata);
            if add(d.entry.offset + 2, OsStr::from_bytes(&d.entry.name), &a) {
                break; // not sent: not counted
            }
            self.remember(d.child)?;
        }
        Ok(())
    }

    /// A MKDIR: the new directory's attributes, counted as a lookup.
    pub(super) fn make_dir(&self, v: &Vfs, parent: INodeNo, name: &OsStr, mode: u32) -> Result<FileAttr, Errno> {
        let p = self.entry(parent)?;
        v.create_dir_at(&p, name, mode & 0o7777).map_err(errno)?;
        self.lookup_entry(v, &p, name)
    }

    /// An UNLINK, or an RMDIR (`dir`).
    pub(super) fn remove_name(&self, v: &Vfs, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let p = self.entry(parent)?;
        if dir { v.remove_dir_at(&p, name) } else { v.remove_file_at(&p, name) }.map_err(errno)
    }

    /// A SETATTR of `ino` (through the open file `fh` where given): the
    /// attributes after it.
    pub(super) fn set_attr(
        &self,
        v: &Vfs,
        ino: INodeNo,
        mut set: rcuvfs::fs::SetAttr,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        let e = self.entry(ino)?;
        // ftruncate: the open checked the permission; the file mode may
        // have changed since.
        if let (Some(size), Some(fh)) = (set.size, fh) {
            let f = self.file(fh)?;
            f.file.set_len(size).map_err(errno)?;
            set.size = None;
        }
        let m = if set == rcuvfs::fs::SetAttr::default() { e.metadata() } else { v.set_attr(&e, &set) };
        m.map(|m| self.attr(&m)).map_err(errno)
    }

    /// A RENAME (or RENAME2, with `flags`) of `name` in `parent` to
    /// `newname` in `newparent`.
    pub(super) fn rename_names(
        &self,
        v: &Vfs,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: u32,
    ) -> Result<(), Errno> {
        let (p, np) = (self.entry(parent)?, self.entry(newparent)?);
        let flags = rcuvfs::RenameFlags::from_bits(flags).map_err(errno)?;
        v.rename_at(&p, name, &np, newname, flags).map_err(errno)
    }

    /// A GETXATTR: the value, whole (the caller answers the size asked).
    pub(super) fn get_xattr(&self, v: &Vfs, ino: INodeNo, name: &OsStr) -> Result<Vec<u8>, Errno> {
        let e = self.entry(ino)?;
        v.get_xattr_entry(&e, name).map_err(errno)
    }

    /// An ACCESS check of `mask` on `ino`.
    pub(super) fn check_access(&self, v: &Vfs, ino: INodeNo, mask: u32) -> Result<(), Errno> {
        let e = self.entry(ino)?;
        v.access(&e, mask).map_err(errno)
    }

    /// A READ through `fh` at `offset` into `buf`: the bytes read.
    pub(super) fn read_file(&self, fh: FileHandle, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        self.file(fh)?.file.read_at(buf, offset).map_err(errno)
    }

    /// A WRITE of `data` through `fh` (of node `ino`) at `offset`.
    pub(super) fn write_file(&self, ino: INodeNo, fh: FileHandle, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let f = self.file(fh)?;
        self.removing_privs(ino, &f, || {
            if f.append {
                f.file.append_at_end(data).map(drop)
            } else {
                f.file.write_at(data, offset).map(drop)
            }
        })
        .map_err(errno)?;
        Ok(data.len() as u32)
    }

    /// A RELEASE of `fh`.
    pub(super) fn release_file(&self, fh: FileHandle) {
        let ino = self.files.remove(&fh.0).map(|(_, f)| f.file.ino());
        // The node's backing file goes with its last passthrough open.
        if let Some(ino) = ino {
            self.backing.remove_if(&ino, |_, w| w.strong_count() == 0);
        }
    }

    /// Records a file the caller opened (its permission checked with its
    /// flags). With the writeback cache the kernel reads through a
    /// write-only handle (to fill a page it writes part of) and places
    /// appends itself, so a write-only handle is reopened read-write by the
    /// server, and none keeps O_APPEND, as libfuse's passthrough_hp does.
    pub(super) fn add_open(
        &self,
        file: File,
        e: &Entry,
        flags: i32,
        backing: Option<Arc<BackingId>>,
    ) -> Result<FileHandle, Errno> {
        if !self.data.writeback {
            return Ok(self.add_file(file, flags & libc::O_APPEND != 0, backing));
        }
        // Only a write-only handle is upgraded: the kernel writes back
        // through writable handles only, and a read-only open must keep
        // working where the file may not be opened for writing.
        let rw = if flags & libc::O_ACCMODE == libc::O_WRONLY {
            self.vfs.open_entry(e, OpenOptions::new().read(true).write(true)).map_err(errno)?
        } else {
            file
        };
        Ok(self.add_file(rw, false, backing))
    }

    pub(super) fn add_file(&self, file: File, append: bool, backing: Option<Arc<BackingId>>) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.insert(fh, Arc::new(OpenFile { file, append, backing }));
        FileHandle(fh)
    }

    /// The backing file for a passthrough open of `e`, registered with
    /// `register` (the reply's `openbacking`) if no open file holds one:
    /// the host file, read-write where it may be. `None`: the I/O goes
    /// through the server (no passthrough, not a host file, or the kernel
    /// refused it).
    pub(super) fn backing(
        &self,
        e: &Entry,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.data.passthrough() || e.file_type() != FileType::File {
            return None;
        }
        // Under the shard's lock: two opens of one inode must share it.
        let mut slot = self.backing.entry(e.ino()).or_default();
        if let Some(b) = slot.upgrade() {
            return Some(b);
        }
        let fd = match e.open_host_file(true)? {
            Ok(fd) => fd,
            Err(_) => e.open_host_file(false)?.ok()?,
        };
        let b = Arc::new(register(&fd).ok()?);
        *slot = Arc::downgrade(&b);
        Some(b)
    }
}
