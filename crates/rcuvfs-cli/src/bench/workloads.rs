//! The lab's workloads: each reproduces one seed experiment, and runs in the
//! modes of the axis it exercises plus the peers.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rcuvfs::fs::passthrough::{Passthrough, PassthroughOptions, PassthroughStats};
use rcuvfs::{CacheMode, File, Layout, OpenOptions, RefMode, Vfs};

/// What a workload needs from the run.
pub struct Ctx {
    pub host_dir: PathBuf,
    /// What the Vfs serves.
    pub backend: Backend,
    /// The Vfs's dcache size target, when given.
    pub dcache_target: Option<usize>,
    /// Files in the tree-walk tree.
    pub tree_files: usize,
    /// pagecache-mix: the share of operations that write (0 to 1).
    pub write_share: f64,
}

/// The filesystem under the Vfs.
#[derive(Clone, Debug)]
pub enum Backend {
    Memfs,
    /// A host directory, through the passthrough filesystem.
    Passthrough(PathBuf),
    /// A tree in an etcd cluster (`ENDPOINTS[/PREFIX]`); each run gets a
    /// scratch tree under the prefix, deleted when the run ends.
    Etcd(rcuvfs::fs::etcd::EtcdOptions),
}

impl Backend {
    pub fn parse(s: &str) -> std::io::Result<Backend> {
        if s == "memfs" {
            return Ok(Backend::Memfs);
        }
        if let Some(dir) = s.strip_prefix("passthrough:") {
            let dir = PathBuf::from(dir);
            if !std::fs::metadata(&dir).map(|m| m.is_dir()).unwrap_or(false) {
                return Err(std::io::Error::other(format!("backend {s:?}: {} is not a directory", dir.display())));
            }
            return Ok(Backend::Passthrough(dir));
        }
        if let Some(spec) = s.strip_prefix("etcd:") {
            return Ok(Backend::Etcd(rcuvfs::fs::etcd::EtcdOptions::parse(spec)?));
        }
        Err(std::io::Error::other(format!("unknown backend {s:?} (memfs, passthrough:DIR, etcd:ENDPOINTS[/PREFIX])")))
    }
}

/// One workload prepared in one mode: many threads run its operation.
pub trait Target: Send + Sync {
    /// Runs operations until `stop`, publishing the count in `count`.
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64);
    /// Wrong answers seen so far (rename-storm's false negatives).
    fn false_negatives(&self) -> Option<u64> {
        None
    }
    /// Passthrough: lookups that reached the host so far, and the path
    /// components one operation looks up (for the dcache hit rate).
    fn host_lookups(&self) -> Option<(u64, f64)> {
        None
    }
}

pub struct Workload {
    pub name: &'static str,
    pub seed: &'static str,
    /// What one operation is.
    pub op: &'static str,
    /// The modes it runs in by default: its axis, then the peers.
    pub modes: &'static [&'static str],
    pub build: fn(&Ctx, &str, usize) -> std::io::Result<Arc<dyn Target>>,
}

const REF_MODES: [&str; 5] = ["global", "dlock", "lockref", "rcuwalk", "norefs"];
/// The reference axis, then the host kernel.
const REF_MODES_AND_HOST: [&str; 6] = [REF_MODES[0], REF_MODES[1], REF_MODES[2], REF_MODES[3], REF_MODES[4], "host"];
/// The reference axis, the host kernel, and the `vfs` crate's MemoryFS.
const REF_MODES_HOST_MEMORYFS: [&str; 7] =
    [REF_MODES[0], REF_MODES[1], REF_MODES[2], REF_MODES[3], REF_MODES[4], "host", "memoryfs"];

pub static WORKLOADS: &[Workload] = &[
    Workload {
        name: "stat-same",
        seed: "002",
        op: "stat of one shared file at depth 4 (will-it-scale stat2)",
        modes: &[
            REF_MODES[0],
            REF_MODES[1],
            REF_MODES[2],
            REF_MODES[3],
            "rcuwalk+packed",
            REF_MODES[4],
            "host",
            "papaya",
            "dashmap",
            "memoryfs",
        ],
        build: |c, m, t| stat(c, m, t, false),
    },
    Workload {
        name: "stat-private",
        seed: "002",
        op: "stat of a per-thread file at depth 4",
        modes: &[
            REF_MODES[0],
            REF_MODES[1],
            REF_MODES[2],
            REF_MODES[3],
            REF_MODES[4],
            "host",
            "papaya",
            "dashmap",
            "memoryfs",
        ],
        build: |c, m, t| stat(c, m, t, true),
    },
    Workload {
        name: "short",
        seed: "000",
        op: "AIM7-like job in a shared directory: create, stat, open, write, close, unlink",
        modes: &REF_MODES_AND_HOST,
        build: short,
    },
    Workload {
        name: "create-private",
        seed: "-",
        op: "create (open O_CREAT, close) then unlink of one of 64 names, each thread in its own directory (one op = both)",
        modes: &REF_MODES_HOST_MEMORYFS,
        build: |c, m, t| create_unlink(c, m, t, true),
    },
    Workload {
        name: "create-shared",
        seed: "-",
        op: "create (open O_CREAT, close) then unlink of one of 64 names per thread, all threads in one directory",
        modes: &REF_MODES_HOST_MEMORYFS,
        build: |c, m, t| create_unlink(c, m, t, false),
    },
    Workload {
        name: "rename-storm",
        seed: "003",
        op: "stat of a name that never moves while a thread renames its siblings",
        modes: &REF_MODES_AND_HOST,
        build: rename_storm,
    },
    Workload {
        name: "tree-walk",
        seed: "003",
        op: "readdir of a directory of a 100k-file tree, and stat of each entry (ops = entries)",
        modes: &[REF_MODES[0], REF_MODES[2], REF_MODES[3], REF_MODES[4], "host", "memoryfs"],
        build: tree_walk,
    },
    Workload {
        name: "dd-write",
        seed: "001",
        op: "1-byte write, sequential over a 2 MiB file per thread (dd bs=1)",
        modes: &["mutex", "rwlock", "lockless", "host"],
        build: |c, m, t| dd(c, m, t, true),
    },
    Workload {
        name: "dd-read",
        seed: "001",
        op: "1-byte read, sequential over a 2 MiB file per thread (dd bs=1)",
        modes: &["mutex", "rwlock", "lockless", "host"],
        build: |c, m, t| dd(c, m, t, false),
    },
    Workload {
        name: "pagecache-mix",
        seed: "001",
        op: "64-byte read or write at a random offset of 4 shared 1 MiB files (--write-share writes)",
        modes: &["mutex", "rwlock", "lockless", "host"],
        build: pagecache_mix,
    },
];

/// Every axis of a Vfs configuration.
#[derive(Clone, Copy)]
pub struct VfsConfig {
    pub refs: RefMode,
    pub layout: Layout,
    pub cache: CacheMode,
}

/// The Vfs configuration a mode name stands for: each `+`-separated part
/// sets its axis; the others keep their defaults.
pub fn vfs_config(name: &str) -> Option<VfsConfig> {
    let mut c = VfsConfig { refs: RefMode::default(), layout: Layout::default(), cache: CacheMode::default() };
    for part in name.split('+') {
        if let Some(m) = RefMode::from_name(part) {
            c.refs = m;
        } else if let Some(l) = Layout::from_name(part) {
            c.layout = l;
        } else if let Some(p) = CacheMode::from_name(part) {
            c.cache = p;
        } else {
            return None;
        }
    }
    Some(c)
}

pub fn is_known_mode(name: &str) -> bool {
    matches!(name, "host" | "papaya" | "dashmap" | "memoryfs") || vfs_config(name).is_some()
}

fn new_vfs(mode: &str) -> std::io::Result<Vfs> {
    let c = vfs_config(mode).ok_or_else(|| std::io::Error::other(format!("unknown mode {mode}")))?;
    Vfs::builder().mode(c.refs).layout(c.layout).page_cache(c.cache).build()
}

/// A Vfs in `mode` over the context's backend, with the passthrough's
/// counters when it is one.
fn backend_vfs(ctx: &Ctx, mode: &str) -> std::io::Result<(Vfs, Option<Arc<PassthroughStats>>)> {
    let c = vfs_config(mode).ok_or_else(|| std::io::Error::other(format!("unknown mode {mode}")))?;
    let mut b = Vfs::builder().mode(c.refs).layout(c.layout).page_cache(c.cache);
    if let Some(t) = ctx.dcache_target {
        b = b.dcache_target(t);
    }
    match &ctx.backend {
        Backend::Memfs => Ok((b.build()?, None)),
        Backend::Passthrough(dir) => {
            let pt = Passthrough::new(dir, PassthroughOptions::default())?;
            let stats = pt.stats();
            Ok((b.filesystem(Arc::new(pt)).build()?, Some(stats)))
        }
        Backend::Etcd(o) => {
            static RUN: AtomicU64 = AtomicU64::new(0);
            let mut o = o.clone();
            o.prefix = format!("{}/bench-{}-{}", o.prefix, std::process::id(), RUN.fetch_add(1, Ordering::Relaxed));
            o.remove_on_drop = true;
            let fs = rcuvfs::fs::etcd::Etcd::connect(o)?;
            Ok((b.filesystem(Arc::new(fs)).build()?, None))
        }
    }
}

/// Workloads that only run on memfs say so for other backends.
fn memfs_only(ctx: &Ctx, workload: &str) -> std::io::Result<()> {
    match ctx.backend {
        Backend::Memfs => Ok(()),
        // Namespace workloads run on etcd too: a create is a transaction.
        Backend::Etcd(_) if workload.starts_with("create") => Ok(()),
        Backend::Passthrough(_) | Backend::Etcd(_) => {
            Err(std::io::Error::other(format!(
                "{workload} runs on memfs only (passthrough: stat-same, stat-private, tree-walk; etcd: those and create-private, create-shared)"
            )))
        }
    }
}

fn unsupported(mode: &str, workload: &str) -> std::io::Error {
    std::io::Error::other(format!("mode {mode} does not apply to {workload}"))
}

/// A scratch directory on the host's tmpfs, removed on drop.
struct HostDir(PathBuf);

impl HostDir {
    fn new(ctx: &Ctx, tag: &str) -> std::io::Result<HostDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = ctx.host_dir.join(format!("rcuvfs-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&p)?;
        Ok(HostDir(p))
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in bench paths")
}

/// Counts in batches of 64, publishing after each batch.
#[inline]
pub(super) fn batches(stop: &AtomicBool, count: &AtomicU64, mut op: impl FnMut()) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            op();
        }
        n += 64;
        count.store(n, Ordering::Relaxed);
    }
}

// ------------------------------------------------------------------ stat

const DEPTH_DIR: &str = "/d0/d1/d2";

fn stat_paths(private: bool, threads: usize) -> Vec<String> {
    if private {
        (0..threads).map(|t| format!("{DEPTH_DIR}/file{t}")).collect()
    } else {
        vec![format!("{DEPTH_DIR}/file")]
    }
}

struct VfsStat {
    vfs: Vfs,
    paths: Vec<String>,
    /// Passthrough: its counters and the components of one stat.
    host: Option<(Arc<PassthroughStats>, f64)>,
}

impl Target for VfsStat {
    fn host_lookups(&self) -> Option<(u64, f64)> {
        self.host.as_ref().map(|(s, c)| (s.lookups.load(Ordering::Relaxed), *c))
    }

    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let p = &self.paths[thread % self.paths.len()];
        batches(stop, count, || {
            std::hint::black_box(self.vfs.metadata(p).expect("stat"));
        });
    }
}

struct HostStat {
    _dir: Option<HostDir>,
    paths: Vec<CString>,
}

impl Target for HostStat {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let p = &self.paths[thread % self.paths.len()];
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        batches(stop, count, || {
            // SAFETY: `p` is NUL-terminated and `st` is writable.
            assert_eq!(unsafe { libc::stat(p.as_ptr(), &mut st) }, 0, "host stat");
            std::hint::black_box(&st);
        });
    }
}

/// The value a flat map stores per path: what a stat returns.
#[derive(Clone, Copy)]
struct FlatAttr {
    _ino: u64,
    _mode: u32,
    _size: u64,
    _mtime: i64,
}

struct PapayaStat {
    map: papaya::HashMap<String, FlatAttr>,
    paths: Vec<String>,
}

impl Target for PapayaStat {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let p = &self.paths[thread % self.paths.len()];
        batches(stop, count, || {
            std::hint::black_box(*self.map.pin().get(p.as_str()).expect("present"));
        });
    }
}

struct DashStat {
    map: dashmap::DashMap<String, FlatAttr>,
    paths: Vec<String>,
}

impl Target for DashStat {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let p = &self.paths[thread % self.paths.len()];
        batches(stop, count, || {
            std::hint::black_box(*self.map.get(p.as_str()).expect("present"));
        });
    }
}

fn stat(ctx: &Ctx, mode: &str, threads: usize, private: bool) -> std::io::Result<Arc<dyn Target>> {
    let paths = stat_paths(private, threads);
    let attr = FlatAttr { _ino: 7, _mode: 0o100644, _size: 1, _mtime: 0 };
    if let Backend::Passthrough(dir) = &ctx.backend {
        // The same files on the host directory, for the Vfs and the host
        // peer alike (left there afterwards: they are the benchmark's).
        for p in &paths {
            let full = dir.join(p.trim_start_matches('/'));
            std::fs::create_dir_all(full.parent().unwrap())?;
            if !full.exists() {
                std::fs::write(&full, b"x")?;
            }
        }
        return Ok(match mode {
            "host" => Arc::new(HostStat {
                _dir: None,
                paths: paths.iter().map(|p| cstr(&dir.join(p.trim_start_matches('/')))).collect(),
            }),
            "papaya" | "dashmap" | "memoryfs" => return Err(unsupported(mode, "the passthrough backend")),
            m => {
                let (vfs, stats) = backend_vfs(ctx, m)?;
                let components = DEPTH_DIR.matches('/').count() as f64 + 1.0;
                Arc::new(VfsStat { vfs, paths, host: stats.map(|s| (s, components)) })
            }
        });
    }
    Ok(match mode {
        "host" => {
            let dir = HostDir::new(ctx, "stat")?;
            let mut c = Vec::new();
            for p in &paths {
                let full = dir.0.join(p.trim_start_matches('/'));
                std::fs::create_dir_all(full.parent().unwrap())?;
                std::fs::write(&full, b"x")?;
                c.push(cstr(&full));
            }
            Arc::new(HostStat { _dir: Some(dir), paths: c })
        }
        "memoryfs" => {
            let fs = super::memoryfs::build(&[DEPTH_DIR.to_string()], &paths)?;
            Arc::new(super::memoryfs::Stat { fs, paths })
        }
        "papaya" => {
            let map = papaya::HashMap::new();
            for p in &paths {
                map.pin().insert(p.clone(), attr);
            }
            Arc::new(PapayaStat { map, paths })
        }
        "dashmap" => {
            let map = dashmap::DashMap::new();
            for p in &paths {
                map.insert(p.clone(), attr);
            }
            Arc::new(DashStat { map, paths })
        }
        m => {
            let (vfs, _) = backend_vfs(ctx, m)?;
            vfs.create_dir_all(DEPTH_DIR)?;
            for p in &paths {
                vfs.write(p, b"x")?;
            }
            Arc::new(VfsStat { vfs, paths, host: None })
        }
    })
}

// ------------------------------------------------------------------ short

/// Directories the short jobs share (AIM7 runs many users in few dirs).
const SHORT_DIRS: usize = 2;

struct VfsShort {
    vfs: Vfs,
}

impl Target for VfsShort {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let mut n = 0u64;
        let mut buf = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            let p = format!("/short/d{}/f{thread}-{}", thread % SHORT_DIRS, n % 8);
            let mut f = self.vfs.open(&p, OpenOptions::new().write(true).create(true).truncate(true)).expect("create");
            f.write_all(b"short job output, 64 bytes of it, written in one go, AIM7 st").expect("write");
            drop(f);
            std::hint::black_box(self.vfs.metadata(&p).expect("stat"));
            let mut r = self.vfs.open(&p, OpenOptions::new().read(true)).expect("open");
            let _ = r.read(&mut buf).expect("read");
            drop(r);
            self.vfs.remove_file(&p).expect("unlink");
            n += 1;
            count.store(n, Ordering::Relaxed);
        }
    }
}

struct HostShort {
    dir: HostDir,
}

impl Target for HostShort {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let mut n = 0u64;
        let mut buf = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            let p = self.dir.0.join(format!("d{}/f{thread}-{}", thread % SHORT_DIRS, n % 8));
            let mut f = std::fs::File::create(&p).expect("create");
            f.write_all(b"short job output, 64 bytes of it, written in one go, AIM7 st").expect("write");
            drop(f);
            std::hint::black_box(std::fs::metadata(&p).expect("stat"));
            let mut r = std::fs::File::open(&p).expect("open");
            let _ = r.read(&mut buf).expect("read");
            drop(r);
            std::fs::remove_file(&p).expect("unlink");
            n += 1;
            count.store(n, Ordering::Relaxed);
        }
    }
}

fn short(ctx: &Ctx, mode: &str, _threads: usize) -> std::io::Result<Arc<dyn Target>> {
    memfs_only(ctx, "short")?;
    match mode {
        "papaya" | "dashmap" | "memoryfs" => Err(unsupported(mode, "short")),
        "host" => {
            let dir = HostDir::new(ctx, "short")?;
            for d in 0..SHORT_DIRS {
                std::fs::create_dir(dir.0.join(format!("d{d}")))?;
            }
            Ok(Arc::new(HostShort { dir }))
        }
        m => {
            let vfs = new_vfs(m)?;
            for d in 0..SHORT_DIRS {
                vfs.create_dir_all(format!("/short/d{d}"))?;
            }
            Ok(Arc::new(VfsShort { vfs }))
        }
    }
}

// ------------------------------------------------------ create-private/-shared

/// Names each thread cycles through.
const CREATE_NAMES: usize = 64;

/// Thread `t`'s names: in its own directory `d{t}`, or all in `d0`.
fn create_names(root: &str, private: bool, t: usize) -> Vec<String> {
    let dir = if private { t } else { 0 };
    (0..CREATE_NAMES).map(|i| format!("{root}/d{dir}/t{t}-{i}")).collect()
}

struct VfsCreate {
    vfs: Vfs,
    names: Vec<Vec<String>>,
}

impl Target for VfsCreate {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let names = &self.names[thread];
        let mut i = 0;
        batches(stop, count, || {
            let p = &names[i % CREATE_NAMES];
            drop(self.vfs.open(p, OpenOptions::new().write(true).create(true)).expect("create"));
            self.vfs.remove_file(p).expect("unlink");
            i += 1;
        });
    }
}

struct HostCreate {
    _dir: HostDir,
    names: Vec<Vec<CString>>,
}

impl Target for HostCreate {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let names = &self.names[thread];
        let mut i = 0;
        batches(stop, count, || {
            let p = &names[i % CREATE_NAMES];
            // SAFETY: NUL-terminated paths.
            unsafe {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC, 0o644);
                assert!(fd >= 0, "create: {}", std::io::Error::last_os_error());
                libc::close(fd);
                assert_eq!(libc::unlink(p.as_ptr()), 0, "unlink: {}", std::io::Error::last_os_error());
            }
            i += 1;
        });
    }
}

fn create_unlink(ctx: &Ctx, mode: &str, threads: usize, private: bool) -> std::io::Result<Arc<dyn Target>> {
    let tag = if private { "create-private" } else { "create-shared" };
    memfs_only(ctx, tag)?;
    let dirs = if private { threads } else { 1 };
    match mode {
        "papaya" | "dashmap" => Err(unsupported(mode, tag)),
        "memoryfs" => {
            let fs = super::memoryfs::build(&(0..dirs).map(|d| format!("/c/d{d}")).collect::<Vec<_>>(), &[])?;
            let names = (0..threads).map(|t| create_names("/c", private, t)).collect();
            Ok(Arc::new(super::memoryfs::Create { fs, names }))
        }
        "host" => {
            let dir = HostDir::new(ctx, tag)?;
            for d in 0..dirs {
                std::fs::create_dir(dir.0.join(format!("d{d}")))?;
            }
            let root = dir.0.to_str().ok_or_else(|| std::io::Error::other("host dir is not UTF-8"))?.to_string();
            let names = (0..threads)
                .map(|t| create_names(&root, private, t).into_iter().map(|n| cstr(Path::new(&n))).collect())
                .collect();
            Ok(Arc::new(HostCreate { _dir: dir, names }))
        }
        m => {
            let vfs = new_vfs(m)?;
            for d in 0..dirs {
                vfs.create_dir_all(format!("/c/d{d}"))?;
            }
            let names = (0..threads).map(|t| create_names("/c", private, t)).collect();
            Ok(Arc::new(VfsCreate { vfs, names }))
        }
    }
}

// ------------------------------------------------------------ rename-storm

const STABLE: usize = 16;
const MOVING: usize = 16;

/// Renames `r{i}` to `r{i}.moved` and back, in one thread, until dropped.
struct Renamer {
    stop: Arc<AtomicBool>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Renamer {
    fn start(rename: impl Fn(usize, bool) + Send + 'static) -> Renamer {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for i in 0..MOVING {
                    rename(i, true);
                    rename(i, false);
                }
            }
        });
        Renamer { stop, handle: Mutex::new(Some(handle)) }
    }
}

impl Drop for Renamer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.lock().unwrap().take() {
            let _ = h.join();
        }
    }
}

struct VfsStorm {
    vfs: Vfs,
    misses: AtomicU64,
    _renamer: Renamer,
}

impl Target for VfsStorm {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let paths: Vec<String> = (0..STABLE).map(|i| format!("/storm/s{}", (i + thread) % STABLE)).collect();
        let mut i = 0;
        batches(stop, count, || {
            if self.vfs.metadata(&paths[i % STABLE]).is_err() {
                self.misses.fetch_add(1, Ordering::Relaxed);
            }
            i += 1;
        });
    }
    fn false_negatives(&self) -> Option<u64> {
        Some(self.misses.load(Ordering::Relaxed))
    }
}

struct HostStorm {
    _dir: Arc<HostDir>,
    paths: Vec<CString>,
    misses: AtomicU64,
    _renamer: Renamer,
}

impl Target for HostStorm {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let mut i = thread;
        batches(stop, count, || {
            // SAFETY: NUL-terminated path, writable buffer.
            if unsafe { libc::stat(self.paths[i % STABLE].as_ptr(), &mut st) } != 0 {
                self.misses.fetch_add(1, Ordering::Relaxed);
            }
            i += 1;
        });
    }
    fn false_negatives(&self) -> Option<u64> {
        Some(self.misses.load(Ordering::Relaxed))
    }
}

fn rename_storm(ctx: &Ctx, mode: &str, _threads: usize) -> std::io::Result<Arc<dyn Target>> {
    memfs_only(ctx, "rename-storm")?;
    match mode {
        "papaya" | "dashmap" | "memoryfs" => Err(unsupported(mode, "rename-storm")),
        "host" => {
            let dir = Arc::new(HostDir::new(ctx, "storm")?);
            for i in 0..STABLE {
                std::fs::write(dir.0.join(format!("s{i}")), b"s")?;
            }
            for i in 0..MOVING {
                std::fs::write(dir.0.join(format!("r{i}")), b"r")?;
            }
            let paths = (0..STABLE).map(|i| cstr(&dir.0.join(format!("s{i}")))).collect();
            let d = dir.clone();
            let renamer = Renamer::start(move |i, out| {
                let (a, b) = (d.0.join(format!("r{i}")), d.0.join(format!("r{i}.moved")));
                let r = if out { std::fs::rename(&a, &b) } else { std::fs::rename(&b, &a) };
                r.expect("host rename");
            });
            Ok(Arc::new(HostStorm { _dir: dir, paths, misses: AtomicU64::new(0), _renamer: renamer }))
        }
        m => {
            let vfs = new_vfs(m)?;
            vfs.create_dir("/storm")?;
            for i in 0..STABLE {
                vfs.write(format!("/storm/s{i}"), b"s")?;
            }
            for i in 0..MOVING {
                vfs.write(format!("/storm/r{i}"), b"r")?;
            }
            let v = vfs.clone();
            let renamer = Renamer::start(move |i, out| {
                let (a, b) = (format!("/storm/r{i}"), format!("/storm/r{i}.moved"));
                let r = if out { v.rename(&a, &b) } else { v.rename(&b, &a) };
                r.expect("vfs rename");
            });
            Ok(Arc::new(VfsStorm { vfs, misses: AtomicU64::new(0), _renamer: renamer }))
        }
    }
}

// --------------------------------------------------------------- tree-walk

/// The tree: `a{0..A}/b{0..B}/c{0..C}`, each leaf directory with F files.
fn tree_shape(files: usize) -> (usize, usize, usize, usize) {
    let leaves = files.div_ceil(100).max(1);
    let a = (leaves as f64).cbrt().ceil() as usize;
    let b = a;
    let c = leaves.div_ceil(a * b);
    (a, b, c, 100)
}

fn leaf_dirs(files: usize) -> Vec<String> {
    let (a, b, c, _) = tree_shape(files);
    let mut v = Vec::new();
    for i in 0..a {
        for j in 0..b {
            for k in 0..c {
                v.push(format!("/t/a{i}/b{j}/c{k}"));
            }
        }
    }
    v
}

struct VfsTree {
    vfs: Vfs,
    dirs: Vec<String>,
    /// Passthrough: its counters and the mean components of one stat.
    host: Option<(Arc<PassthroughStats>, f64)>,
}

impl Target for VfsTree {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let (mut n, mut i) = (0u64, thread);
        while !stop.load(Ordering::Relaxed) {
            let dir = &self.dirs[i % self.dirs.len()];
            for e in self.vfs.read_dir(dir).expect("readdir") {
                std::hint::black_box(e.expect("entry").metadata().expect("stat"));
                n += 1;
            }
            count.store(n, Ordering::Relaxed);
            i += 7; // stride through the tree
        }
    }

    fn host_lookups(&self) -> Option<(u64, f64)> {
        self.host.as_ref().map(|(s, c)| (s.lookups.load(Ordering::Relaxed), *c))
    }
}

struct HostTree {
    _dir: Option<HostDir>,
    root: PathBuf,
    dirs: Vec<String>,
}

impl Target for HostTree {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let (mut n, mut i) = (0u64, thread);
        while !stop.load(Ordering::Relaxed) {
            let dir = self.root.join(self.dirs[i % self.dirs.len()].trim_start_matches('/'));
            for e in std::fs::read_dir(&dir).expect("readdir") {
                // `fstatat` on the directory's descriptor, as `find` does.
                std::hint::black_box(e.expect("entry").metadata().expect("stat"));
                n += 1;
            }
            count.store(n, Ordering::Relaxed);
            i += 7;
        }
    }
}

/// Every directory under `root` that has entries, as Vfs paths ("/" for
/// the root), and the mean components of the paths of their entries.
fn host_tree_dirs(root: &Path) -> std::io::Result<(Vec<String>, f64)> {
    let (mut dirs, mut stack) = (Vec::new(), vec![String::from("/")]);
    let (mut entries, mut components) = (0u64, 0u64);
    while let Some(d) = stack.pop() {
        let mut any = false;
        for e in std::fs::read_dir(root.join(d.trim_start_matches('/')))? {
            let e = e?;
            any = true;
            let child = if d == "/" {
                format!("/{}", e.file_name().to_string_lossy())
            } else {
                format!("{d}/{}", e.file_name().to_string_lossy())
            };
            entries += 1;
            components += child.matches('/').count() as u64;
            if e.file_type()?.is_dir() {
                stack.push(child);
            }
        }
        if any {
            dirs.push(d);
        }
    }
    if dirs.is_empty() {
        return Err(std::io::Error::other(format!("tree-walk: {} is empty", root.display())));
    }
    Ok((dirs, components as f64 / entries.max(1) as f64))
}

fn tree_walk(ctx: &Ctx, mode: &str, _threads: usize) -> std::io::Result<Arc<dyn Target>> {
    if let Backend::Passthrough(root) = &ctx.backend {
        // The tree is whatever the directory holds (a source tree, say).
        let (dirs, components) = host_tree_dirs(root)?;
        return match mode {
            "papaya" | "dashmap" | "memoryfs" => Err(unsupported(mode, "tree-walk")),
            "host" => Ok(Arc::new(HostTree { _dir: None, root: root.clone(), dirs })),
            m => {
                let (vfs, stats) = backend_vfs(ctx, m)?;
                Ok(Arc::new(VfsTree { vfs, dirs, host: stats.map(|s| (s, components)) }))
            }
        };
    }
    let dirs = leaf_dirs(ctx.tree_files);
    let per = tree_shape(ctx.tree_files).3;
    match mode {
        "papaya" | "dashmap" => Err(unsupported(mode, "tree-walk")),
        "memoryfs" => {
            let files: Vec<String> = dirs.iter().flat_map(|d| (0..per).map(move |f| format!("{d}/f{f}"))).collect();
            let fs = super::memoryfs::build(&dirs, &files)?;
            Ok(Arc::new(super::memoryfs::Tree { fs, dirs }))
        }
        "host" => {
            let dir = HostDir::new(ctx, "tree")?;
            for d in &dirs {
                let p = dir.0.join(d.trim_start_matches('/'));
                std::fs::create_dir_all(&p)?;
                for f in 0..per {
                    std::fs::write(p.join(format!("f{f}")), b"")?;
                }
            }
            let root = dir.0.clone();
            Ok(Arc::new(HostTree { _dir: Some(dir), root, dirs }))
        }
        m => {
            let (vfs, _) = backend_vfs(ctx, m)?;
            for d in &dirs {
                vfs.create_dir_all(d)?;
                for f in 0..per {
                    vfs.write(format!("{d}/f{f}"), b"")?;
                }
            }
            Ok(Arc::new(VfsTree { vfs, dirs, host: None }))
        }
    }
}

// ------------------------------------------------------------- page cache

const DD_SIZE: u64 = 2 << 20;

struct VfsDd {
    files: Vec<File>,
    write: bool,
}

impl Target for VfsDd {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let f = &self.files[thread % self.files.len()];
        let mut pos = 0u64;
        let mut b = [0u8; 1];
        batches(stop, count, || {
            if self.write {
                f.write_at(&[pos as u8], pos).expect("write");
            } else {
                f.read_at(&mut b, pos).expect("read");
                std::hint::black_box(b);
            }
            pos = (pos + 1) % DD_SIZE;
        });
    }
}

struct HostDd {
    _dir: HostDir,
    fds: Vec<std::fs::File>,
    write: bool,
}

impl Target for HostDd {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        use std::os::unix::fs::FileExt;
        let f = &self.fds[thread % self.fds.len()];
        let mut pos = 0u64;
        let mut b = [0u8; 1];
        batches(stop, count, || {
            if self.write {
                f.write_at(&[pos as u8], pos).expect("write");
            } else {
                f.read_at(&mut b, pos).expect("read");
                std::hint::black_box(b);
            }
            pos = (pos + 1) % DD_SIZE;
        });
    }
}

fn dd(ctx: &Ctx, mode: &str, threads: usize, write: bool) -> std::io::Result<Arc<dyn Target>> {
    memfs_only(ctx, "dd")?;
    let content = vec![0x5Au8; DD_SIZE as usize];
    match mode {
        "papaya" | "dashmap" | "memoryfs" => Err(unsupported(mode, "dd")),
        "host" => {
            let dir = HostDir::new(ctx, "dd")?;
            let mut fds = Vec::new();
            for t in 0..threads {
                let p = dir.0.join(format!("f{t}"));
                std::fs::write(&p, &content)?;
                fds.push(std::fs::OpenOptions::new().read(true).write(true).open(&p)?);
            }
            Ok(Arc::new(HostDd { _dir: dir, fds, write }))
        }
        m => {
            let vfs = new_vfs(m)?;
            let mut files = Vec::new();
            for t in 0..threads {
                let p = format!("/f{t}");
                vfs.write(&p, &content)?;
                files.push(vfs.open(&p, OpenOptions::new().read(true).write(true))?);
            }
            Ok(Arc::new(VfsDd { files, write }))
        }
    }
}

const MIX_FILES: usize = 4;
const MIX_SIZE: u64 = 1 << 20;

/// A small xorshift generator per thread: no shared state in the loop.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn mix_op(x: &mut u64, write_share: f64) -> (usize, u64, bool) {
    let r = next(x);
    let file = (r % MIX_FILES as u64) as usize;
    let off = (r >> 8) % (MIX_SIZE - 64);
    let write = ((r >> 40) as f64 / (1u64 << 24) as f64) < write_share;
    (file, off, write)
}

struct VfsMix {
    files: Vec<File>,
    write_share: f64,
}

impl Target for VfsMix {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64 + 1);
        let mut buf = [0u8; 64];
        batches(stop, count, || {
            let (f, off, write) = mix_op(&mut x, self.write_share);
            if write {
                self.files[f].write_at(&buf, off).expect("write");
            } else {
                self.files[f].read_at(&mut buf, off).expect("read");
            }
        });
    }
}

struct HostMix {
    _dir: HostDir,
    fds: Vec<std::fs::File>,
    write_share: f64,
}

impl Target for HostMix {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        use std::os::unix::fs::FileExt;
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64 + 1);
        let mut buf = [0u8; 64];
        batches(stop, count, || {
            let (f, off, write) = mix_op(&mut x, self.write_share);
            if write {
                self.fds[f].write_at(&buf, off).expect("write");
            } else {
                self.fds[f].read_at(&mut buf, off).expect("read");
            }
        });
    }
}

fn pagecache_mix(ctx: &Ctx, mode: &str, _threads: usize) -> std::io::Result<Arc<dyn Target>> {
    memfs_only(ctx, "pagecache-mix")?;
    let content = vec![0x33u8; MIX_SIZE as usize];
    match mode {
        "papaya" | "dashmap" | "memoryfs" => Err(unsupported(mode, "pagecache-mix")),
        "host" => {
            let dir = HostDir::new(ctx, "mix")?;
            let mut fds = Vec::new();
            for i in 0..MIX_FILES {
                let p = dir.0.join(format!("m{i}"));
                std::fs::write(&p, &content)?;
                fds.push(std::fs::OpenOptions::new().read(true).write(true).open(&p)?);
            }
            Ok(Arc::new(HostMix { _dir: dir, fds, write_share: ctx.write_share }))
        }
        m => {
            let vfs = new_vfs(m)?;
            let mut files = Vec::new();
            for i in 0..MIX_FILES {
                let p = format!("/m{i}");
                vfs.write(&p, &content)?;
                files.push(vfs.open(&p, OpenOptions::new().read(true).write(true))?);
            }
            Ok(Arc::new(VfsMix { files, write_share: ctx.write_share }))
        }
    }
}
