//! `rcuvfs mount`: serves a [`Vfs`] over FUSE (the fuser crate: its pure
//! Rust mount, several worker threads, each with its own cloned
//! `/dev/fuse` descriptor).
//!
//! The server sits on the library's handle level, as the kernel sits on its
//! own dcache:
//! - a FUSE node id is an inode number (the root's is swapped with FUSE's
//!   fixed 1), and the node table holds one [`Entry`] per node with the
//!   kernel's lookup count: every reply that creates a kernel dentry (lookup,
//!   create, mkdir, mknod, symlink, link, each readdirplus entry) counts
//!   one, and `forget` drops them; the entry handle goes at zero;
//! - an open file is a [`File`] in the handle table; directories need none;
//! - every request runs in a view with the caller's uid, gid and
//!   supplementary groups (read from `/proc/PID/status`, as libfuse's
//!   `fuse_req_getgroups` does) and umask 0, since the kernel has applied
//!   the caller's umask already; the library does every permission check
//!   (no `default_permissions`);
//! - entry and attribute timeouts are 1 s (`--cache-ttl`), or 0 with
//!   `--no-kernel-cache`, when every lookup reaches rcuvfs's own dcache; a
//!   passthrough backend's watcher drops changed names and attributes from
//!   the kernel's caches at once (`KernelNotify`);
//! - a passthrough backend's open files use the kernel's FUSE passthrough
//!   where it is offered: the kernel reads and writes the host file itself
//!   (one backing file per inode, registered while an open file uses it),
//!   and a regular file's attributes are read from the host at each
//!   getattr, since the kernel's writes bypass rcuvfs;
//! - extended attributes are the library's (`user.`, `trusted.`,
//!   `security.`; `system.` answers EOPNOTSUPP: no POSIX ACLs).
//!
//! The node and handle tables are sharded maps, so requests on different
//! nodes do not meet on one lock.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use dashmap::DashMap;
use fuser::{
    AccessFlags, BackingId, Config, Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL,
    TimeOrNow, WriteFlags,
};
use rcuvfs::fs::{SetAttr, SetTime, Timespec};
use rcuvfs::{Cred, Entry, File, FileType, Metadata, OpenOptions, RenameFlags, Vfs, XattrSet};

#[derive(clap::Args)]
pub struct MountArgs {
    /// Where to mount: an existing directory.
    mountpoint: PathBuf,
    /// Worker threads reading requests, each on its own cloned /dev/fuse
    /// descriptor (at most one per core for memfs, whose requests never
    /// block: more would only add context switches).
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// memfs: bytes of file data before ENOSPC.
    #[arg(long)]
    size: Option<u64>,
    /// memfs: inodes before ENOSPC.
    #[arg(long)]
    inodes: Option<u64>,
    /// Entry and attribute timeouts of 0, so that every lookup and stat
    /// reaches rcuvfs instead of the kernel's dcache.
    #[arg(long)]
    no_kernel_cache: bool,
    /// Entry and attribute timeouts, in seconds: how long the kernel trusts
    /// what it cached. A passthrough backend's watcher drops what changes
    /// on the host from the kernel's caches at once, whatever the timeout.
    #[arg(long, default_value_t = 1.0)]
    cache_ttl: f64,
    /// The mount's readahead, in KiB (its bdi's `read_ahead_kb`; 0 leaves
    /// the kernel's 128). The kernel proposes no more than 128 KiB at
    /// init, so sequential reads would arrive in 128 KiB requests; 1024
    /// makes them as large as a request may be (measured: 1.9-2.3 GB/s at
    /// 128, 2.9-3.4 GB/s at 1024, reading 1 GiB from memfs).
    #[arg(long, default_value_t = 1024)]
    read_ahead_kb: u32,
    /// What to serve: `memfs` (an empty in-memory filesystem),
    /// `passthrough:DIR` (a host directory, kept coherent with changes
    /// made there directly), or `etcd:HOST:PORT[,HOST:PORT...][/PREFIX]`
    /// (a tree in an etcd cluster, shared with every other client of it;
    /// PREFIX defaults to `rcuvfs`).
    #[arg(long, default_value = "memfs")]
    backend: String,
    /// The kernel's writeback cache: writes land in the kernel's page
    /// cache and reach rcuvfs in large batches (at fsync, close or under
    /// memory pressure), as on a local filesystem. Off by default: with it
    /// a write's errors (ENOSPC) show at fsync or close, not at write.
    #[arg(long)]
    writeback_cache: bool,
    /// passthrough: leave file reads and writes to the server instead of
    /// the kernel's FUSE passthrough (by default, where the kernel offers
    /// it, an open file's I/O goes straight to the host file).
    #[arg(long)]
    no_kernel_passthrough: bool,
    /// Dentries the cache holds itself to before the shrinker prunes
    /// (default: the library's, 1,048,576, or less for a backend with an
    /// inode budget).
    #[arg(long)]
    dcache_target: Option<usize>,
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 16)
}

/// Mounts and serves until unmounted (`umount`, `fusermount3 -u`) or until
/// SIGINT or SIGTERM, which unmount first.
pub fn run(args: MountArgs) -> io::Result<()> {
    // SIGINT and SIGTERM are blocked in every thread (blocked first, so
    // that every thread started later inherits the mask: the workers, the
    // passthrough's watcher) and taken by one thread with sigwait, which
    // unmounts; the session then ends as it does on an external umount.
    let signals = block_signals();
    match std::fs::metadata(&args.mountpoint) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(io::Error::other(format!("mountpoint {}: not a directory", args.mountpoint.display()))),
        Err(e) => return Err(io::Error::other(format!("mountpoint {}: {e}", args.mountpoint.display()))),
    }
    let mut b = Vfs::builder().umask(0);
    let what = if args.backend == "memfs" {
        "memfs".to_string()
    } else if let Some(dir) = args.backend.strip_prefix("passthrough:") {
        let (d, m) = (std::fs::canonicalize(dir)?, std::fs::canonicalize(&args.mountpoint)?);
        if m.starts_with(&d) {
            return Err(io::Error::other(format!(
                "mountpoint {} is inside the served directory {}",
                m.display(),
                d.display()
            )));
        }
        let pt = rcuvfs::fs::passthrough::Passthrough::new(&d, Default::default())
            .map_err(|e| io::Error::new(e.kind(), format!("backend {}: {e}", d.display())))?;
        b = b.filesystem(std::sync::Arc::new(pt));
        format!("{} (passthrough)", d.display())
    } else if let Some(spec) = args.backend.strip_prefix("etcd:") {
        let o = rcuvfs::fs::etcd::EtcdOptions::parse(spec)?;
        let what = format!("etcd {} under {}", o.endpoints.join(","), o.prefix);
        let fs =
            rcuvfs::fs::etcd::Etcd::connect(o).map_err(|e| io::Error::new(e.kind(), format!("backend {spec}: {e}")))?;
        b = b.filesystem(std::sync::Arc::new(fs));
        what
    } else {
        return Err(io::Error::other(format!(
            "unknown backend {:?} (memfs, passthrough:DIR, etcd:ENDPOINTS[/PREFIX])",
            args.backend
        )));
    };
    if let Some(n) = args.size {
        b = b.max_bytes(n);
    }
    if let Some(n) = args.inodes {
        b = b.max_inodes(n);
    }
    if let Some(n) = args.dcache_target {
        b = b.dcache_target(n);
    }
    // Changes a backend reports (the passthrough's watcher) go to the
    // kernel too, so that its caches do not wait out their timeouts.
    let kernel = Arc::new(KernelNotify::default());
    b = b.observer(kernel.clone());
    let vfs = b.build()?;
    let _ = kernel.root_ino.set(vfs.root_entry().ino());
    let ttl = if args.no_kernel_cache {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(args.cache_ttl)
            .map_err(|e| io::Error::other(format!("--cache-ttl {}: {e}", args.cache_ttl)))?
    };
    // memfs changes only through this mount, so the kernel's cached data
    // of a file stays true across opens (keep_cache); a passthrough file
    // may change on the host, so its data is read again at each open.
    let data = DataCache {
        keep: args.backend == "memfs",
        writeback: args.writeback_cache,
        // Host files only; the kernel refuses it with the writeback cache.
        passthrough: args.backend.starts_with("passthrough:") && !args.no_kernel_passthrough && !args.writeback_cache,
    };
    let server = Server::new(vfs, ttl, data);

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("rcuvfs".into()),
        MountOption::Subtype("rcuvfs".into()),
        MountOption::RW,
        MountOption::Dev,
        MountOption::Suid,
    ];
    config.acl = SessionACL::All; // allow_other: other users reach the mount
                                  // memfs never blocks inside a request, so a worker beyond the cores
                                  // only adds a context switch per request (measured: 2 clients got
                                  // 11-14k stats/s from 8 workers, 28-30k from 2, on 2 cores). The
                                  // passthrough blocks on the host's I/O, where more workers overlap it.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = if args.backend == "memfs" { args.threads.clamp(1, cores.max(2)) } else { args.threads.max(1) };
    config.n_threads = Some(workers);
    config.clone_fd = true;

    let mut session = fuser::Session::new(server, &args.mountpoint, &config)
        .map_err(|e| io::Error::new(e.kind(), format!("mount on {}: {e}", args.mountpoint.display())))?;
    let _ = kernel.notifier.set(session.notifier());
    if args.read_ahead_kb > 0 {
        if let Err(e) = set_read_ahead(&args.mountpoint, args.read_ahead_kb) {
            eprintln!("rcuvfs: readahead left as the kernel set it: {e}");
        }
    }
    let mut unmounter = session.unmount_callable();
    let mountpoint = args.mountpoint.clone();
    std::thread::spawn(move || {
        let sig = wait_signal(&signals);
        eprintln!("rcuvfs: signal {sig}: unmounting {}", mountpoint.display());
        if let Err(e) = unmounter.unmount() {
            eprintln!("rcuvfs: unmount: {e}");
            std::process::exit(1);
        }
    });
    eprintln!("rcuvfs: serving {what} on {} ({workers} threads)", args.mountpoint.display());
    session.run()?;
    eprintln!("rcuvfs: unmounted");
    Ok(())
}

/// Sets the mount's readahead (`/sys/class/bdi/MAJ:MIN/read_ahead_kb` of
/// the device the mount got). The device is read from
/// `/proc/self/mountinfo`, not by a stat of the mountpoint, which would
/// wait for this server to answer before it serves.
fn set_read_ahead(mountpoint: &Path, kb: u32) -> io::Result<()> {
    let mnt = std::fs::canonicalize(mountpoint.parent().unwrap_or(Path::new("/")))?
        .join(mountpoint.file_name().unwrap_or_default());
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    // Fields: id, parent, MAJ:MIN, root, mount point, ...; the last match
    // is the newest mount on that point.
    let dev = info
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = l.split(" - ").nth(1).unwrap_or("");
            (f.len() > 4 && Path::new(f[4]) == mnt && fstype.starts_with("fuse")).then(|| f[2].to_string())
        })
        .ok_or_else(|| io::Error::other(format!("{} is not in /proc/self/mountinfo", mnt.display())))?;
    std::fs::write(format!("/sys/class/bdi/{dev}/read_ahead_kb"), kb.to_string())
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: plain libc calls on a local, initialized signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: `set` is initialized; `sig` is a valid out pointer.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}

/// One node the kernel knows: a handle and the kernel's lookup count.
struct Node {
    entry: Entry,
    nlookup: u64,
}

/// Tells the kernel of changes a backend reports, so that it drops the
/// names and attributes it cached (FUSE's `notify_inval_entry` and
/// `notify_inval_inode`). Called from the backend's thread, never from a
/// request: the kernel may wait for the directory's lock, which a request
/// in progress may hold until it is answered.
#[derive(Default)]
struct KernelNotify {
    notifier: OnceLock<fuser::Notifier>,
    /// The library's root inode number (FUSE's is 1).
    root_ino: OnceLock<u64>,
}

impl KernelNotify {
    fn node(&self, ino: u64) -> INodeNo {
        INodeNo(self.root_ino.get().map_or(ino, |&r| swap_root(r, ino)))
    }
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
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_entry(self.node(parent), OsStr::from_bytes(name));
        }
    }

    fn attr_changed(&self, parent: u64, name: &[u8]) {
        // The kernel looks the name up again, with fresh attributes.
        self.entry_changed(parent, name);
    }

    fn inode_changed(&self, ino: u64) {
        if let Some(n) = self.notifier.get() {
            // Attributes and all cached data.
            let _ = n.inval_inode(self.node(ino), 0, 0);
        }
    }

    fn all_changed(&self) {
        // The kernel has no call for this: its timeouts bound it.
    }

    fn set_revalidate(&self, _on: bool) {}
}

/// How the kernel may cache file data.
#[derive(Clone, Copy)]
struct DataCache {
    /// `FOPEN_KEEP_CACHE` on every open.
    keep: bool,
    /// `FUSE_WRITEBACK_CACHE`.
    writeback: bool,
    /// The kernel's FUSE passthrough for host files (asked for; turned off
    /// at init if the kernel does not offer it).
    passthrough: bool,
}

struct Server {
    vfs: Vfs,
    data: DataCache,
    /// Each node's backing file while some open file uses it: the kernel
    /// takes one backing file per inode for all its passthrough opens.
    backing: DashMap<u64, Weak<BackingId>>,
    /// The library's root inode number (swapped with FUSE's 1).
    root_ino: u64,
    ttl: Duration,
    nodes: DashMap<u64, Node>,
    files: DashMap<u64, Arc<OpenFile>>,
    next_fh: AtomicU64,
}

struct OpenFile {
    file: File,
    append: bool,
    /// The kernel does this file's I/O on the node's backing file, which
    /// stays registered while some open file holds it.
    backing: Option<Arc<BackingId>>,
}

fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind(t: FileType) -> fuser::FileType {
    match t {
        FileType::File => fuser::FileType::RegularFile,
        FileType::Dir => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(Timespec::from_system_time(t)),
    }
}

/// The caller's supplementary groups, from `/proc/PID/status`.
fn groups(pid: u32) -> Vec<u32> {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    s.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

impl Server {
    fn new(vfs: Vfs, ttl: Duration, data: DataCache) -> Server {
        let root = vfs.root_entry();
        let root_ino = root.ino();
        let nodes = DashMap::new();
        // The root is never forgotten.
        nodes.insert(1, Node { entry: root, nlookup: 1 });
        Server {
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
    fn node_id(&self, ino: u64) -> u64 {
        swap_root(self.root_ino, ino)
    }

    /// The view a request runs in: the caller's credentials.
    fn view(&self, req: &Request) -> Vfs {
        let (uid, gid) = (req.uid(), req.gid());
        let groups = if uid == 0 { Vec::new() } else { groups(req.pid()) };
        self.vfs.with_cred(Cred::new(uid, gid, &groups))
    }

    fn entry(&self, node: INodeNo) -> Result<Entry, Errno> {
        self.nodes.get(&node.0).map(|n| n.entry.clone()).ok_or(Errno::ESTALE)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        self.files.get(&fh.0).map(|f| f.clone()).ok_or(Errno::EBADF)
    }

    fn attr(&self, m: &Metadata) -> FileAttr {
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
    fn remember(&self, e: Entry) -> Result<FileAttr, Errno> {
        let attr = self.attr(&e.metadata().map_err(errno)?);
        let spare = match self.nodes.entry(attr.ino.0) {
            dashmap::mapref::entry::Entry::Occupied(mut o) => {
                o.get_mut().nlookup += 1;
                Some(e)
            }
            dashmap::mapref::entry::Entry::Vacant(v) => {
                v.insert(Node { entry: e, nlookup: 1 });
                None
            }
        };
        // Outside the shard's lock: dropping a handle may release the last
        // reference to its dentry, and with it the filesystem's inode.
        drop(spare);
        Ok(attr)
    }

    /// Looks `name` up in `parent` and counts the kernel's new reference.
    fn lookup_entry(&self, v: &Vfs, parent: &Entry, name: &OsStr) -> Result<FileAttr, Errno> {
        let e = v.lookup_at(parent, name).map_err(errno)?;
        self.remember(e)
    }

    fn reply_entry(&self, reply: ReplyEntry, r: Result<FileAttr, Errno>) {
        match r {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// How the kernel treats an open file: no FLUSH request at each
    /// close (ours does nothing: a round trip saved per close), and on
    /// memfs its cached data kept across opens.
    fn fopen_flags(&self) -> FopenFlags {
        let mut f = FopenFlags::FOPEN_NOFLUSH;
        if self.data.keep {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        f
    }

    /// Records a file the caller opened (its permission checked with its
    /// flags). With the writeback cache the kernel reads through a
    /// write-only handle (to fill a page it writes part of) and places
    /// appends itself, so a write-only handle is reopened read-write by the
    /// server, and none keeps O_APPEND, as libfuse's passthrough_hp does.
    fn add_open(
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

    fn add_file(&self, file: File, append: bool, backing: Option<Arc<BackingId>>) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.insert(fh, Arc::new(OpenFile { file, append, backing }));
        FileHandle(fh)
    }

    /// The backing file for a passthrough open of `e`, registered with
    /// `register` (the reply's `openbacking`) if no open file holds one:
    /// the host file, read-write where it may be. `None`: the I/O goes
    /// through the server (no passthrough, not a host file, or the kernel
    /// refused it).
    fn backing(
        &self,
        e: &Entry,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.data.passthrough || e.file_type() != FileType::File {
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

/// A variable-sized answer as FUSE asks it: size 0 asks the length; a
/// buffer too small is ERANGE.
fn reply_sized(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

fn done(reply: ReplyEmpty, r: io::Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

impl fuser::Filesystem for Server {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // readdirplus fills the kernel's dcache while listing; the kernel
        // decides per directory (READDIRPLUS_AUTO). Both are optional.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // Lookups and listings of one directory in parallel (the kernel
        // otherwise serializes them on the directory's inode lock).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Requests as large as the kernel allows: fuser asks 16 MiB writes
        // (the kernel clamps to its max_pages limit), and readahead as
        // large as the kernel proposes.
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            let _ = config.set_max_readahead(max);
        }
        if self.data.passthrough {
            let ok =
                config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() && config.set_max_stack_depth(1).is_ok();
            if !ok {
                eprintln!("rcuvfs: the kernel has no FUSE passthrough: file I/O goes through the server");
                self.data.passthrough = false;
            }
        }
        if self.data.writeback {
            config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .map_err(|_| io::Error::other("the kernel has no FUSE writeback cache"))?;
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.entry(parent).and_then(|p| self.lookup_entry(&self.view(req), &p, name));
        self.reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        // The entry handle is dropped outside the shard's lock.
        let gone = self.nodes.remove_if_mut(&ino.0, |_, n| {
            n.nlookup = n.nlookup.saturating_sub(nlookup);
            n.nlookup == 0
        });
        drop(gone);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let m = match fh.and_then(|fh| self.file(fh).ok()) {
            Some(f) if f.backing.is_none() => f.file.metadata(),
            // The kernel writes a passthrough file itself: ask the host.
            _ => match self.entry(ino) {
                Ok(e) if self.data.passthrough && e.file_type() == FileType::File => e.refresh(),
                Ok(e) => e.metadata(),
                Err(e) => return reply.error(e),
            },
        };
        match m {
            Ok(m) => reply.attr(&self.ttl, &self.attr(&m)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = (|| {
            let e = self.entry(ino)?;
            let v = self.view(req);
            let mut set = SetAttr {
                perm: mode.map(|m| m & 0o7777),
                uid,
                gid,
                size,
                atime: atime.map(set_time),
                mtime: mtime.map(set_time),
            };
            // ftruncate: the open checked the permission; the file mode
            // may have changed since.
            if let (Some(size), Some(fh)) = (size, fh) {
                let f = self.file(fh)?;
                f.file.set_len(size).map_err(errno)?;
                set.size = None;
            }
            let m = if set == SetAttr::default() { e.metadata() } else { v.set_attr(&e, &set) };
            m.map_err(errno)
        })();
        match r {
            Ok(m) => reply.attr(&self.ttl, &self.attr(&m)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.entry(ino).and_then(|e| self.vfs.read_link_entry(&e).map_err(errno)) {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let p = self.entry(parent)?;
            let v = self.view(req);
            let kind = FileType::from_mode(mode).ok_or(Errno::EINVAL)?;
            v.mknod_at(&p, name, kind, mode & 0o7777, u64::from(rdev)).map_err(errno)?;
            self.lookup_entry(&v, &p, name)
        })();
        self.reply_entry(reply, r);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let r = (|| {
            let p = self.entry(parent)?;
            let v = self.view(req);
            v.create_dir_at(&p, name, mode & 0o7777).map_err(errno)?;
            self.lookup_entry(&v, &p, name)
        })();
        self.reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.entry(parent) {
            Ok(p) => done(reply, self.view(req).remove_file_at(&p, name)),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.entry(parent) {
            Ok(p) => done(reply, self.view(req).remove_dir_at(&p, name)),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = (|| {
            let p = self.entry(parent)?;
            let v = self.view(req);
            v.symlink_at(target, &p, link_name).map_err(errno)?;
            self.lookup_entry(&v, &p, link_name)
        })();
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let (p, np) = (self.entry(parent)?, self.entry(newparent)?);
            let flags = RenameFlags::from_bits(flags.bits()).map_err(errno)?;
            self.view(req).rename_at(&p, name, &np, newname, flags).map_err(errno)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let (e, np) = (self.entry(ino)?, self.entry(newparent)?);
            let v = self.view(req);
            v.link_entry(&e, &np, newname).map_err(errno)?;
            self.lookup_entry(&v, &np, newname)
        })();
        self.reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let e = self.entry(ino)?;
            let f = self.view(req).open_entry(&e, &OpenOptions::from_flags(flags.0)).map_err(errno)?;
            let backing = self.backing(&e, |fd| reply.open_backing(fd));
            Ok((self.add_open(f, &e, flags.0, backing.clone())?, backing))
        })();
        match r {
            Ok((fh, Some(b))) => reply.opened_passthrough(fh, self.fopen_flags(), &b),
            Ok((fh, None)) => reply.opened(fh, self.fopen_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let p = self.entry(parent)?;
            let v = self.view(req);
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
            let backing = self.backing(&e, |fd| reply.open_backing(fd));
            let fh = self.add_open(f, &e, flags, backing.clone())?;
            match self.remember(e) {
                Ok(attr) => Ok((attr, fh, backing)),
                Err(err) => {
                    drop(self.files.remove(&fh.0));
                    Err(err)
                }
            }
        })();
        match r {
            Ok((attr, fh, Some(b))) => {
                reply.created_passthrough(&self.ttl, &attr, Generation(0), fh, self.fopen_flags(), &b)
            }
            Ok((attr, fh, None)) => reply.created(&self.ttl, &attr, Generation(0), fh, self.fopen_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        thread_local! {
            /// Each worker's read buffer, kept between requests: a fresh
            /// megabyte per read cost its zeroing (and its page faults).
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let f = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        BUF.with_borrow_mut(|buf| {
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            match f.file.read_at(&mut buf[..size as usize], offset) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = (|| {
            let f = self.file(fh)?;
            if f.append {
                f.file.append_at_end(data).map_err(errno)?;
            } else {
                f.file.write_at(data, offset).map_err(errno)?;
            }
            Ok(data.len() as u32)
        })();
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let ino = self.files.remove(&fh.0).map(|(_, f)| f.file.ino());
        // The node's backing file goes with its last passthrough open.
        if let Some(ino) = ino {
            self.backing.remove_if(&ino, |_, w| w.strong_count() == 0);
        }
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.file(fh) {
            Ok(f) => done(reply, f.file.sync_all()),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // A directory needs no state: readdir lists from the node's handle
        // by cookie. The read permission is checked here and on each read.
        let r = self.entry(ino).and_then(|e| {
            if !e.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            self.view(req).access(&e, libc::R_OK as u32).map_err(errno)
        });
        match r {
            // memfs: the kernel may cache a directory's listing and keep
            // it across opens (every change to it comes through the mount,
            // and the kernel drops the cache when it changes).
            Ok(()) if self.data.keep => {
                reply.opened(FileHandle(0), FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE)
            }
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let r = (|| {
            let e = self.entry(ino)?;
            let v = self.view(req);
            // "." and ".." take offsets 1 and 2; the filesystem's cookies
            // (1 and up) are shifted by 2.
            if offset < 1 && reply.add(ino, 1, fuser::FileType::Directory, ".") {
                return Ok(());
            }
            if offset < 2 {
                let up = v.metadata_at(&e, "..", false).map_err(errno)?;
                if reply.add(INodeNo(self.node_id(up.ino())), 2, fuser::FileType::Directory, "..") {
                    return Ok(());
                }
            }
            for d in v.read_dir_at(&e, offset.saturating_sub(2)).map_err(errno)? {
                let node = INodeNo(self.node_id(d.ino));
                if reply.add(node, d.offset + 2, kind(d.kind), OsStr::from_bytes(&d.name)) {
                    break;
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let r = (|| {
            let e = self.entry(ino)?;
            let v = self.view(req);
            // The kernel counts no lookup for "." and "..".
            if offset < 1 {
                let a = self.attr(&e.metadata().map_err(errno)?);
                if reply.add(ino, 1, ".", &self.ttl, &a, Generation(0)) {
                    return Ok(());
                }
            }
            if offset < 2 {
                let a = self.attr(&v.metadata_at(&e, "..", false).map_err(errno)?);
                if reply.add(a.ino, 2, "..", &self.ttl, &a, Generation(0)) {
                    return Ok(());
                }
            }
            for d in v.read_dir_plus(&e, offset.saturating_sub(2)).map_err(errno)? {
                let a = self.attr(&d.metadata);
                let name = OsStr::from_bytes(&d.entry.name);
                if reply.add(a.ino, d.entry.offset + 2, name, &self.ttl, &a, Generation(0)) {
                    break; // not sent: not counted
                }
                self.remember(d.child)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.vfs.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let e = self.entry(ino)?;
            let how = XattrSet::from_bits(flags).map_err(errno)?;
            self.view(req).set_xattr_entry(&e, name, value, how).map_err(errno)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.entry(ino).and_then(|e| self.view(req).get_xattr_entry(&e, name).map_err(errno)) {
            Ok(v) => reply_sized(reply, size, &v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.entry(ino).and_then(|e| self.view(req).list_xattr_entry(&e).map_err(errno)) {
            Ok(names) => {
                let mut list = Vec::new();
                for n in names {
                    list.extend_from_slice(n.as_bytes());
                    list.push(0);
                }
                reply_sized(reply, size, &list)
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.entry(ino) {
            Ok(e) => done(reply, self.view(req).remove_xattr_entry(&e, name)),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.entry(ino) {
            Ok(e) => done(reply, self.view(req).access(&e, mask.bits() as u32)),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // posix_fallocate (mode 0) extends the size; memfs stores holes as
        // nothing, so no space is reserved. Other modes are not supported.
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let r = (|| {
            let f = self.file(fh)?;
            let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
            if end > f.file.metadata().map_err(errno)?.len() {
                f.file.set_len(end).map_err(errno)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
