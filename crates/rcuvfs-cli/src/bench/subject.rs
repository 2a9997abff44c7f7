//! What a workload runs on, behind one interface: [`Subject`]. A workload is
//! written once, generic over it, and runs on rcuvfs (a [`Vfs`] in some
//! mode over some backend), on the host kernel (the same calls as syscalls
//! on a scratch directory) and on the peers a user might embed instead:
//! the `vfs` crate's `MemoryFS` (one `RwLock` over a map from full path to
//! file; a listing scans the whole map), wasmer's `virtual-fs` in-memory
//! filesystem (an inode arena and per-directory child lists behind one
//! `RwLock`), and two concurrent flat maps from path to attributes, papaya
//! and dashmap (stat only: a map has no tree).
//!
//! Paths are prepared outside the timed loops ([`Subject::path`], or
//! [`Subject::path_into`] into a reused buffer where a run makes millions
//! of names), so that an operation costs what the subject's own call costs.

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rcuvfs::fs::passthrough::PassthroughStats;
use rcuvfs::{File, OpenOptions, Vfs};

/// The modes that name a subject other than a Vfs.
pub const PEERS: &[&str] = &["host", "papaya", "dashmap", "memoryfs", "virtualfs"];

/// The operations a workload may ask for; a subject says which it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Stat,
    /// create (`open(O_CREAT)`, `close`) and unlink.
    Create,
    /// also rename, whole-file writes and reads.
    Namespace,
    /// readdir, then a stat of each entry.
    List,
    /// reads and writes on open files.
    Data,
}

/// A filesystem (or a stand-in for one) that workloads run on. What a
/// subject lacks answers an error (see [`Subject::can`]).
pub trait Subject: Send + Sync + Sized + 'static {
    /// A path as this subject takes it.
    type Path: Default + Send + Sync;
    /// An open file.
    type File: Send + Sync;

    /// Whether the subject can do `op` (a flat map cannot create).
    fn can(&self, op: Op) -> bool;
    /// Lets what the calls so far deferred happen (a memory figure taken
    /// after it counts what they keep, not what they retired). Nothing by
    /// default.
    fn settle(&self) {}
    /// `p` (absolute, as in the Vfs: "/d0/f1") in the subject's form.
    fn path(&self, p: &str) -> Self::Path {
        let mut out = Self::Path::default();
        self.path_into(p, &mut out);
        out
    }
    /// As [`path`](Self::path), into a buffer it reuses.
    fn path_into(&self, p: &str, out: &mut Self::Path);

    /// Setup: makes directory `p` and its parents.
    fn mkdir_all(&self, p: &str) -> std::io::Result<()>;
    /// Setup: writes a whole file (or, for a map, records it).
    fn put(&self, p: &str, data: &[u8]) -> std::io::Result<()>;
    /// Setup: opens an existing file to read and write.
    fn open_rw(&self, _p: &str) -> std::io::Result<Self::File> {
        Err(unsupported("open"))
    }
    /// Setup: creates a file and keeps it open.
    fn create_open(&self, _p: &str) -> std::io::Result<Self::File> {
        Err(unsupported("open"))
    }

    /// `stat` (following symlinks); the result goes to `black_box`.
    fn stat(&self, p: &Self::Path) -> std::io::Result<()>;
    /// `open(O_WRONLY | O_CREAT)` and `close`.
    fn create(&self, _p: &Self::Path) -> std::io::Result<()> {
        Err(unsupported("create"))
    }
    /// `open(O_WRONLY | O_CREAT | O_TRUNC)`, a write of `data`, `close`.
    fn write_new(&self, _p: &Self::Path, _data: &[u8]) -> std::io::Result<()> {
        Err(unsupported("write"))
    }
    /// `open(O_RDONLY)`, one read into `buf`, `close`.
    fn read_some(&self, _p: &Self::Path, _buf: &mut [u8]) -> std::io::Result<usize> {
        Err(unsupported("read"))
    }
    fn unlink(&self, _p: &Self::Path) -> std::io::Result<()> {
        Err(unsupported("unlink"))
    }
    fn rename(&self, _from: &Self::Path, _to: &Self::Path) -> std::io::Result<()> {
        Err(unsupported("rename"))
    }
    /// Lists directory `dir` and stats each entry (as `find`, `ls -l`:
    /// `fstatat` on the directory where the subject has it); returns the
    /// entries seen.
    fn list_stat(&self, _dir: &Self::Path) -> std::io::Result<u64> {
        Err(unsupported("readdir"))
    }
    /// Lists directory `dir`, names only; returns the entries seen.
    fn list(&self, _dir: &Self::Path) -> std::io::Result<u64> {
        Err(unsupported("readdir"))
    }

    fn read_at(&self, _f: &Self::File, _buf: &mut [u8], _off: u64) -> std::io::Result<usize> {
        Err(unsupported("read_at"))
    }
    fn write_at(&self, _f: &Self::File, _buf: &[u8], _off: u64) -> std::io::Result<usize> {
        Err(unsupported("write_at"))
    }

    /// Passthrough: the lookups that reached the host so far.
    fn host_lookups(&self) -> Option<u64> {
        None
    }
}

fn unsupported(what: &str) -> std::io::Error {
    std::io::Error::other(format!("{what} is not supported by this subject"))
}

// -------------------------------------------------------------------- Vfs

/// rcuvfs: a [`Vfs`], with the passthrough's counters when it serves one.
pub struct VfsSubject {
    pub vfs: Vfs,
    pub stats: Option<Arc<PassthroughStats>>,
}

impl Subject for VfsSubject {
    type Path = String;
    type File = File;

    /// A grace period (the retired objects are freed), then mimalloc's
    /// collection, which hands the free pages back to the system at once
    /// rather than after its purge delay.
    fn settle(&self) {
        self.vfs.synchronize();
        // SAFETY: mimalloc is the global allocator (`main.rs`); a collection
        // may run at any time.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }

    fn can(&self, _: Op) -> bool {
        true
    }
    fn path_into(&self, p: &str, out: &mut String) {
        out.clear();
        out.push_str(p);
    }
    fn mkdir_all(&self, p: &str) -> std::io::Result<()> {
        self.vfs.create_dir_all(p)
    }
    fn put(&self, p: &str, data: &[u8]) -> std::io::Result<()> {
        self.vfs.write(p, data)
    }
    fn open_rw(&self, p: &str) -> std::io::Result<File> {
        self.vfs.open(p, OpenOptions::new().read(true).write(true))
    }
    fn create_open(&self, p: &str) -> std::io::Result<File> {
        self.vfs.open(p, OpenOptions::new().write(true).create(true))
    }
    #[inline]
    fn stat(&self, p: &String) -> std::io::Result<()> {
        std::hint::black_box(self.vfs.metadata(p)?);
        Ok(())
    }
    fn create(&self, p: &String) -> std::io::Result<()> {
        drop(self.vfs.open(p, OpenOptions::new().write(true).create(true))?);
        Ok(())
    }
    fn write_new(&self, p: &String, data: &[u8]) -> std::io::Result<()> {
        let mut f = self.vfs.open(p, OpenOptions::new().write(true).create(true).truncate(true))?;
        f.write_all(data)
    }
    fn read_some(&self, p: &String, buf: &mut [u8]) -> std::io::Result<usize> {
        self.vfs.open(p, OpenOptions::new().read(true))?.read(buf)
    }
    fn unlink(&self, p: &String) -> std::io::Result<()> {
        self.vfs.remove_file(p)
    }
    fn rename(&self, from: &String, to: &String) -> std::io::Result<()> {
        self.vfs.rename(from, to)
    }
    fn list_stat(&self, dir: &String) -> std::io::Result<u64> {
        let mut n = 0;
        for e in self.vfs.read_dir(dir)? {
            // `expect`, not `?`: with `?` the tree-walk measured 3-8% more
            // per entry than the same loop before the lab's rewrite.
            std::hint::black_box(e.expect("entry").metadata().expect("stat"));
            n += 1;
        }
        Ok(n)
    }
    fn list(&self, dir: &String) -> std::io::Result<u64> {
        let mut n = 0;
        for e in self.vfs.read_dir(dir)? {
            std::hint::black_box(e?);
            n += 1;
        }
        Ok(n)
    }
    fn read_at(&self, f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        f.read_at(buf, off)
    }
    fn write_at(&self, f: &File, buf: &[u8], off: u64) -> std::io::Result<usize> {
        f.write_at(buf, off)
    }
    fn host_lookups(&self) -> Option<u64> {
        self.stats.as_ref().map(|s| s.lookups.load(Ordering::Relaxed))
    }
}

// ------------------------------------------------------------------- host

/// A scratch directory on the host, removed on drop.
pub struct HostDir(pub PathBuf);

impl HostDir {
    pub fn new(under: &Path, tag: &str) -> std::io::Result<HostDir> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let p = under.join(format!("rcuvfs-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)?;
        Ok(HostDir(p))
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A path under the host root, NUL-terminated for the syscalls.
#[derive(Default)]
pub struct HostPath(Vec<u8>);

impl HostPath {
    fn c(&self) -> *const libc::c_char {
        self.0.as_ptr().cast()
    }
    fn as_path(&self) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(&self.0[..self.0.len() - 1]))
    }
}

/// The host kernel: syscalls on paths under `root` (a scratch directory it
/// removes on drop, or a directory given to it, left as it is).
pub struct HostSubject {
    pub(super) root: PathBuf,
    _scratch: Option<HostDir>,
}

impl HostSubject {
    /// On a fresh scratch directory under `under`.
    pub fn scratch(under: &Path, tag: &str) -> std::io::Result<HostSubject> {
        let d = HostDir::new(under, tag)?;
        Ok(HostSubject { root: d.0.clone(), _scratch: Some(d) })
    }
    /// On `root` itself.
    pub fn on(root: &Path) -> HostSubject {
        HostSubject { root: root.to_path_buf(), _scratch: None }
    }
    fn full(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }
}

fn check(r: libc::c_int, what: &str) -> std::io::Result<libc::c_int> {
    if r < 0 {
        let e = std::io::Error::last_os_error();
        Err(std::io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(r)
    }
}

impl Subject for HostSubject {
    type Path = HostPath;
    type File = std::fs::File;

    fn can(&self, _: Op) -> bool {
        true
    }
    fn path_into(&self, p: &str, out: &mut HostPath) {
        out.0.clear();
        out.0.extend_from_slice(self.root.as_os_str().as_bytes());
        let rel = p.trim_start_matches('/');
        if !rel.is_empty() {
            out.0.push(b'/');
            out.0.extend_from_slice(rel.as_bytes());
        }
        out.0.push(0);
    }
    fn mkdir_all(&self, p: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(self.full(p))
    }
    fn put(&self, p: &str, data: &[u8]) -> std::io::Result<()> {
        std::fs::write(self.full(p), data)
    }
    fn open_rw(&self, p: &str) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new().read(true).write(true).open(self.full(p))
    }
    fn create_open(&self, p: &str) -> std::io::Result<std::fs::File> {
        std::fs::File::create(self.full(p))
    }
    #[inline]
    fn stat(&self, p: &HostPath) -> std::io::Result<()> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: a NUL-terminated path and a buffer stat fills.
        check(unsafe { libc::stat(p.c(), st.as_mut_ptr()) }, "stat")?;
        std::hint::black_box(&st);
        Ok(())
    }
    fn create(&self, p: &HostPath) -> std::io::Result<()> {
        // SAFETY: a NUL-terminated path.
        let fd =
            check(unsafe { libc::open(p.c(), libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC, 0o644) }, "create")?;
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        Ok(())
    }
    fn write_new(&self, p: &HostPath, data: &[u8]) -> std::io::Result<()> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path.
        let fd = check(unsafe { libc::open(p.c(), flags, 0o644) }, "create")?;
        // SAFETY: `fd` is ours; `OwnedFd` closes it.
        let mut f = std::fs::File::from(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        f.write_all(data)
    }
    fn read_some(&self, p: &HostPath, buf: &mut [u8]) -> std::io::Result<usize> {
        // SAFETY: a NUL-terminated path.
        let fd = check(unsafe { libc::open(p.c(), libc::O_RDONLY | libc::O_CLOEXEC) }, "open")?;
        // SAFETY: `fd` is ours; `OwnedFd` closes it.
        let mut f = std::fs::File::from(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        f.read(buf)
    }
    fn unlink(&self, p: &HostPath) -> std::io::Result<()> {
        // SAFETY: a NUL-terminated path.
        check(unsafe { libc::unlink(p.c()) }, "unlink").map(drop)
    }
    fn rename(&self, from: &HostPath, to: &HostPath) -> std::io::Result<()> {
        // SAFETY: NUL-terminated paths.
        check(unsafe { libc::rename(from.c(), to.c()) }, "rename").map(drop)
    }
    fn list_stat(&self, dir: &HostPath) -> std::io::Result<u64> {
        let mut n = 0;
        for e in std::fs::read_dir(dir.as_path())? {
            // `fstatat` on the directory's descriptor, as `find` does.
            std::hint::black_box(e?.metadata()?);
            n += 1;
        }
        Ok(n)
    }
    fn list(&self, dir: &HostPath) -> std::io::Result<u64> {
        let mut n = 0;
        for e in std::fs::read_dir(dir.as_path())? {
            std::hint::black_box(e?);
            n += 1;
        }
        Ok(n)
    }
    fn read_at(&self, f: &std::fs::File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        f.read_at(buf, off)
    }
    fn write_at(&self, f: &std::fs::File, buf: &[u8], off: u64) -> std::io::Result<usize> {
        f.write_at(buf, off)
    }
}

// --------------------------------------------------------------- MemoryFS

/// The `vfs` crate's `MemoryFS`: stat, create and unlink, listings (its
/// API has no rename of files between directories with open handles kept,
/// and its files are whole buffers, so the data workloads do not apply).
pub struct MemoryFsSubject {
    fs: vfs::MemoryFS,
}

fn vio(e: vfs::VfsError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl MemoryFsSubject {
    pub fn new() -> MemoryFsSubject {
        MemoryFsSubject { fs: vfs::MemoryFS::new() }
    }
}

impl Subject for MemoryFsSubject {
    type Path = String;
    type File = ();

    fn can(&self, op: Op) -> bool {
        matches!(op, Op::Stat | Op::Create | Op::Namespace | Op::List)
    }
    fn path_into(&self, p: &str, out: &mut String) {
        out.clear();
        out.push_str(p);
    }
    fn mkdir_all(&self, p: &str) -> std::io::Result<()> {
        use vfs::FileSystem;
        let mut at = String::new();
        for part in p.split('/').filter(|c| !c.is_empty()) {
            at.push('/');
            at.push_str(part);
            if !self.fs.exists(&at).map_err(vio)? {
                self.fs.create_dir(&at).map_err(vio)?;
            }
        }
        Ok(())
    }
    fn put(&self, p: &str, data: &[u8]) -> std::io::Result<()> {
        use vfs::FileSystem;
        self.fs.create_file(p).map_err(vio)?.write_all(data)
    }
    #[inline]
    fn stat(&self, p: &String) -> std::io::Result<()> {
        use vfs::FileSystem;
        std::hint::black_box(self.fs.metadata(p).map_err(vio)?);
        Ok(())
    }
    fn create(&self, p: &String) -> std::io::Result<()> {
        use vfs::FileSystem;
        drop(self.fs.create_file(p).map_err(vio)?);
        Ok(())
    }
    fn write_new(&self, p: &String, data: &[u8]) -> std::io::Result<()> {
        self.put(p, data)
    }
    fn read_some(&self, p: &String, buf: &mut [u8]) -> std::io::Result<usize> {
        use vfs::FileSystem;
        self.fs.open_file(p).map_err(vio)?.read(buf)
    }
    fn unlink(&self, p: &String) -> std::io::Result<()> {
        use vfs::FileSystem;
        self.fs.remove_file(p).map_err(vio)
    }
    fn rename(&self, from: &String, to: &String) -> std::io::Result<()> {
        use vfs::FileSystem;
        self.fs.move_file(from, to).map_err(vio)
    }
    fn list_stat(&self, dir: &String) -> std::io::Result<u64> {
        use vfs::FileSystem;
        let mut n = 0;
        for name in self.fs.read_dir(dir).map_err(vio)? {
            std::hint::black_box(self.fs.metadata(&format!("{dir}/{name}")).map_err(vio)?);
            n += 1;
        }
        Ok(n)
    }
    fn list(&self, dir: &String) -> std::io::Result<u64> {
        use vfs::FileSystem;
        Ok(self.fs.read_dir(dir).map_err(vio)?.map(std::hint::black_box).count() as u64)
    }
}

// -------------------------------------------------------------- virtual-fs

/// wasmer's `virtual-fs` in-memory filesystem (`mem_fs`): stat, create and
/// unlink, listings. Its file I/O and rename are async (futures), so the
/// workloads that read, write or rename do not run on it, and `put` makes
/// the file empty.
pub struct VirtualFsSubject {
    fs: virtual_fs::mem_fs::FileSystem,
}

fn wio(e: virtual_fs::FsError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl VirtualFsSubject {
    pub fn new() -> VirtualFsSubject {
        VirtualFsSubject { fs: virtual_fs::mem_fs::FileSystem::default() }
    }
}

impl Subject for VirtualFsSubject {
    type Path = PathBuf;
    type File = ();

    fn can(&self, op: Op) -> bool {
        matches!(op, Op::Stat | Op::Create | Op::List)
    }
    fn path_into(&self, p: &str, out: &mut PathBuf) {
        out.clear();
        out.push(p);
    }
    fn mkdir_all(&self, p: &str) -> std::io::Result<()> {
        use virtual_fs::FileSystem;
        let mut at = PathBuf::from("/");
        for part in p.split('/').filter(|c| !c.is_empty()) {
            at.push(part);
            if self.fs.metadata(&at).is_err() {
                self.fs.create_dir(&at).map_err(wio)?;
            }
        }
        Ok(())
    }
    fn put(&self, p: &str, _: &[u8]) -> std::io::Result<()> {
        self.create(&PathBuf::from(p))
    }
    #[inline]
    fn stat(&self, p: &PathBuf) -> std::io::Result<()> {
        use virtual_fs::FileSystem;
        std::hint::black_box(self.fs.metadata(p).map_err(wio)?);
        Ok(())
    }
    fn create(&self, p: &PathBuf) -> std::io::Result<()> {
        use virtual_fs::FileSystem;
        drop(self.fs.new_open_options().write(true).create(true).open(p).map_err(wio)?);
        Ok(())
    }
    fn unlink(&self, p: &PathBuf) -> std::io::Result<()> {
        use virtual_fs::FileSystem;
        self.fs.remove_file(p).map_err(wio)
    }
    fn list_stat(&self, dir: &PathBuf) -> std::io::Result<u64> {
        use virtual_fs::FileSystem;
        let mut n = 0;
        for e in self.fs.read_dir(dir).map_err(wio)? {
            // The entry's own metadata, as std's `DirEntry::metadata`.
            std::hint::black_box(e.map_err(wio)?.metadata().map_err(wio)?);
            n += 1;
        }
        Ok(n)
    }
    fn list(&self, dir: &PathBuf) -> std::io::Result<u64> {
        use virtual_fs::FileSystem;
        Ok(self.fs.read_dir(dir).map_err(wio)?.map(std::hint::black_box).count() as u64)
    }
}

// ------------------------------------------------------------- flat maps

/// The value a flat map stores per path: what a stat returns.
#[derive(Clone, Copy)]
pub struct FlatAttr {
    _ino: u64,
    _mode: u32,
    _size: u64,
    _mtime: i64,
}

const FLAT: FlatAttr = FlatAttr { _ino: 7, _mode: 0o100644, _size: 1, _mtime: 0 };

/// A concurrent map from full path to attributes: what a server that
/// keeps no tree does. `K` is papaya's or dashmap's map.
pub struct MapSubject<K> {
    map: K,
}

/// The two maps' calls, so that one `Subject` covers both.
pub trait FlatMap: Send + Sync + 'static {
    fn new() -> Self;
    fn insert(&self, k: String, v: FlatAttr);
    fn get(&self, k: &str) -> Option<FlatAttr>;
}

impl FlatMap for papaya::HashMap<String, FlatAttr> {
    fn new() -> Self {
        papaya::HashMap::new()
    }
    fn insert(&self, k: String, v: FlatAttr) {
        self.pin().insert(k, v);
    }
    #[inline]
    fn get(&self, k: &str) -> Option<FlatAttr> {
        self.pin().get(k).copied()
    }
}

impl FlatMap for dashmap::DashMap<String, FlatAttr> {
    fn new() -> Self {
        dashmap::DashMap::new()
    }
    fn insert(&self, k: String, v: FlatAttr) {
        dashmap::DashMap::insert(self, k, v);
    }
    #[inline]
    fn get(&self, k: &str) -> Option<FlatAttr> {
        dashmap::DashMap::get(self, k).map(|v| *v)
    }
}

impl<K: FlatMap> MapSubject<K> {
    pub fn new() -> MapSubject<K> {
        MapSubject { map: K::new() }
    }
}

impl<K: FlatMap> Subject for MapSubject<K> {
    type Path = String;
    type File = ();

    fn can(&self, op: Op) -> bool {
        op == Op::Stat
    }
    fn path_into(&self, p: &str, out: &mut String) {
        out.clear();
        out.push_str(p);
    }
    fn mkdir_all(&self, _: &str) -> std::io::Result<()> {
        Ok(())
    }
    fn put(&self, p: &str, _: &[u8]) -> std::io::Result<()> {
        self.map.insert(p.to_string(), FLAT);
        Ok(())
    }
    #[inline]
    fn stat(&self, p: &String) -> std::io::Result<()> {
        let a = self.map.get(p).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))?;
        std::hint::black_box(a);
        Ok(())
    }
}
