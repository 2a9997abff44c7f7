//! The lab's workloads: each reproduces one seed experiment, and runs in the
//! modes of the axis it exercises plus the peers. Each is written once,
//! generic over [`Subject`] (rcuvfs, the host kernel, the peer libraries);
//! [`on_subject!`] picks the subject a mode names.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rcuvfs::fs::passthrough::{Passthrough, PassthroughOptions, PassthroughStats};
use rcuvfs::{CacheMode, Layout, RefMode, Vfs};

use super::subject::{
    FlatAttr, HostSubject, MapSubject, MemoryFsSubject, Op, Subject, VfsSubject, VirtualFsSubject, PEERS,
};

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
/// The reference axis, the host kernel, and the embeddable peers: the
/// `vfs` crate's MemoryFS and wasmer's virtual-fs.
const REF_MODES_HOST_PEERS: [&str; 8] =
    [REF_MODES[0], REF_MODES[1], REF_MODES[2], REF_MODES[3], REF_MODES[4], "host", "memoryfs", "virtualfs"];

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
            "virtualfs",
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
            "virtualfs",
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
        modes: &REF_MODES_HOST_PEERS,
        build: |c, m, t| create_unlink(c, m, t, true),
    },
    Workload {
        name: "create-shared",
        seed: "-",
        op: "create (open O_CREAT, close) then unlink of one of 64 names per thread, all threads in one directory",
        modes: &REF_MODES_HOST_PEERS,
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
        modes: &[REF_MODES[0], REF_MODES[2], REF_MODES[3], REF_MODES[4], "host", "memoryfs", "virtualfs"],
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
    /// Directories made here answer misses by themselves (the builder's
    /// `complete_dirs`); the `incomplete` part turns it off.
    pub complete: bool,
}

/// The Vfs configuration a mode name stands for: each `+`-separated part
/// sets its axis; the others keep their defaults.
pub fn vfs_config(name: &str) -> Option<VfsConfig> {
    let mut c =
        VfsConfig { refs: RefMode::default(), layout: Layout::default(), cache: CacheMode::default(), complete: true };
    for part in name.split('+') {
        if part == "incomplete" {
            c.complete = false;
        } else if let Some(m) = RefMode::from_name(part) {
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
    PEERS.contains(&name) || vfs_config(name).is_some()
}

/// A builder for a Vfs in `mode`, with the dcache target when given.
fn mode_builder(mode: &str, dcache_target: Option<usize>) -> std::io::Result<rcuvfs::VfsBuilder> {
    let c = vfs_config(mode).ok_or_else(|| std::io::Error::other(format!("unknown mode {mode}")))?;
    let b = Vfs::builder().mode(c.refs).layout(c.layout).page_cache(c.cache).complete_dirs(c.complete);
    Ok(match dcache_target {
        Some(t) => b.dcache_target(t),
        None => b,
    })
}

/// A Vfs in `mode` over memfs, with the dcache target when given.
pub fn mode_vfs(mode: &str, dcache_target: Option<usize>) -> std::io::Result<Vfs> {
    mode_builder(mode, dcache_target)?.build()
}

/// A Vfs in `mode` over the context's backend, with the passthrough's
/// counters when it is one.
fn backend_vfs(ctx: &Ctx, mode: &str) -> std::io::Result<(Vfs, Option<Arc<PassthroughStats>>)> {
    let b = mode_builder(mode, ctx.dcache_target)?;
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

/// Runs `$body` with `$s` bound to the subject `$mode` names: the host
/// kernel (on a scratch directory under `--host-dir`, or on the
/// passthrough's directory itself), a peer library (memfs backend only),
/// or a Vfs in that mode over the run's backend.
macro_rules! on_subject {
    ($ctx:expr, $mode:expr, $tag:expr, |$s:ident| $body:expr) => {{
        let (ctx, mode): (&Ctx, &str) = ($ctx, $mode);
        match mode {
            "host" => {
                let $s = match &ctx.backend {
                    Backend::Passthrough(dir) => HostSubject::on(dir),
                    _ => HostSubject::scratch(&ctx.host_dir, $tag)?,
                };
                $body
            }
            "memoryfs" | "virtualfs" | "papaya" | "dashmap" if !matches!(ctx.backend, Backend::Memfs) => {
                Err(unsupported(mode, "a backend other than memfs"))
            }
            "memoryfs" => {
                let $s = MemoryFsSubject::new();
                $body
            }
            "virtualfs" => {
                let $s = VirtualFsSubject::new();
                $body
            }
            "papaya" => {
                let $s = MapSubject::<papaya::HashMap<String, FlatAttr>>::new();
                $body
            }
            "dashmap" => {
                let $s = MapSubject::<dashmap::DashMap<String, FlatAttr>>::new();
                $body
            }
            m => {
                let (vfs, stats) = backend_vfs(ctx, m)?;
                let $s = VfsSubject { vfs, stats };
                $body
            }
        }
    }};
}

/// `Err` unless `s` can do each of `ops`.
fn need<S: Subject>(s: &S, ops: &[Op], mode: &str, workload: &str) -> std::io::Result<()> {
    match ops.iter().all(|&o| s.can(o)) {
        true => Ok(()),
        false => Err(unsupported(mode, workload)),
    }
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

struct Stat<S: Subject> {
    s: S,
    paths: Vec<S::Path>,
}

impl<S: Subject> Target for Stat<S> {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let p = &self.paths[thread % self.paths.len()];
        batches(stop, count, || self.s.stat(p).expect("stat"));
    }

    fn host_lookups(&self) -> Option<(u64, f64)> {
        let components = DEPTH_DIR.matches('/').count() as f64 + 1.0;
        self.s.host_lookups().map(|l| (l, components))
    }
}

fn stat(ctx: &Ctx, mode: &str, threads: usize, private: bool) -> std::io::Result<Arc<dyn Target>> {
    let paths = stat_paths(private, threads);
    on_subject!(ctx, mode, "stat", |s| stat_on(s, mode, &paths))
}

/// The files at depth 4 (on a passthrough's directory, left there
/// afterwards: they are the benchmark's).
fn stat_on<S: Subject>(s: S, mode: &str, paths: &[String]) -> std::io::Result<Arc<dyn Target>> {
    need(&s, &[Op::Stat], mode, "stat")?;
    s.mkdir_all(DEPTH_DIR)?;
    for p in paths {
        s.put(p, b"x")?;
    }
    let paths = paths.iter().map(|p| s.path(p)).collect();
    Ok(Arc::new(Stat { s, paths }))
}

// ------------------------------------------------------------------ short

/// Directories the short jobs share (AIM7 runs many users in few dirs).
const SHORT_DIRS: usize = 2;
/// Names each thread cycles through.
const SHORT_NAMES: usize = 8;

struct Short<S: Subject> {
    s: S,
    /// Per thread, its names.
    names: Vec<Vec<S::Path>>,
}

impl<S: Subject> Target for Short<S> {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let mut n = 0u64;
        let mut buf = [0u8; 64];
        let names = &self.names[thread];
        while !stop.load(Ordering::Relaxed) {
            let p = &names[n as usize % SHORT_NAMES];
            self.s.write_new(p, b"short job output, 64 bytes of it, written in one go, AIM7 st").expect("create");
            self.s.stat(p).expect("stat");
            self.s.read_some(p, &mut buf).expect("read");
            self.s.unlink(p).expect("unlink");
            n += 1;
            count.store(n, Ordering::Relaxed);
        }
    }
}

fn short(ctx: &Ctx, mode: &str, threads: usize) -> std::io::Result<Arc<dyn Target>> {
    memfs_only(ctx, "short")?;
    on_subject!(ctx, mode, "short", |s| short_on(s, mode, threads))
}

fn short_on<S: Subject>(s: S, mode: &str, threads: usize) -> std::io::Result<Arc<dyn Target>> {
    need(&s, &[Op::Stat, Op::Namespace], mode, "short")?;
    for d in 0..SHORT_DIRS {
        s.mkdir_all(&format!("/short/d{d}"))?;
    }
    let names = (0..threads)
        .map(|t| (0..SHORT_NAMES).map(|i| s.path(&format!("/short/d{}/f{t}-{i}", t % SHORT_DIRS))).collect())
        .collect();
    Ok(Arc::new(Short { s, names }))
}

// ------------------------------------------------------ create-private/-shared

/// Names each thread cycles through.
const CREATE_NAMES: usize = 64;

struct Create<S: Subject> {
    s: S,
    names: Vec<Vec<S::Path>>,
    /// Creates or unlinks that failed: each thread's names are its own,
    /// so any failure is a wrong answer (a peer that loses names under
    /// concurrent updates shows here instead of ending the run).
    wrong: AtomicU64,
}

impl<S: Subject> Target for Create<S> {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let names = &self.names[thread];
        let mut i = 0;
        batches(stop, count, || {
            let p = &names[i % CREATE_NAMES];
            if self.s.create(p).is_err() || self.s.unlink(p).is_err() {
                self.wrong.fetch_add(1, Ordering::Relaxed);
            }
            i += 1;
        });
    }
    fn false_negatives(&self) -> Option<u64> {
        Some(self.wrong.load(Ordering::Relaxed))
    }
}

fn create_unlink(ctx: &Ctx, mode: &str, threads: usize, private: bool) -> std::io::Result<Arc<dyn Target>> {
    let tag = if private { "create-private" } else { "create-shared" };
    memfs_only(ctx, tag)?;
    on_subject!(ctx, mode, tag, |s| create_on(s, mode, tag, threads, private))
}

/// Thread `t`'s names: in its own directory `d{t}`, or all in `d0`.
fn create_on<S: Subject>(
    s: S,
    mode: &str,
    tag: &str,
    threads: usize,
    private: bool,
) -> std::io::Result<Arc<dyn Target>> {
    need(&s, &[Op::Create], mode, tag)?;
    let dirs = if private { threads } else { 1 };
    for d in 0..dirs {
        s.mkdir_all(&format!("/c/d{d}"))?;
    }
    let names = (0..threads)
        .map(|t| {
            let dir = if private { t } else { 0 };
            (0..CREATE_NAMES).map(|i| s.path(&format!("/c/d{dir}/t{t}-{i}"))).collect()
        })
        .collect();
    Ok(Arc::new(Create { s, names, wrong: AtomicU64::new(0) }))
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

struct Storm<S: Subject> {
    s: Arc<S>,
    paths: Vec<S::Path>,
    misses: AtomicU64,
    _renamer: Renamer,
}

impl<S: Subject> Target for Storm<S> {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let mut i = thread;
        batches(stop, count, || {
            if self.s.stat(&self.paths[i % STABLE]).is_err() {
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
    on_subject!(ctx, mode, "storm", |s| storm_on(s, mode))
}

fn storm_on<S: Subject>(s: S, mode: &str) -> std::io::Result<Arc<dyn Target>> {
    need(&s, &[Op::Stat, Op::Namespace], mode, "rename-storm")?;
    s.mkdir_all("/storm")?;
    for i in 0..STABLE {
        s.put(&format!("/storm/s{i}"), b"s")?;
    }
    for i in 0..MOVING {
        s.put(&format!("/storm/r{i}"), b"r")?;
    }
    let paths = (0..STABLE).map(|i| s.path(&format!("/storm/s{i}"))).collect();
    let moves: Vec<(S::Path, S::Path)> =
        (0..MOVING).map(|i| (s.path(&format!("/storm/r{i}")), s.path(&format!("/storm/r{i}.moved")))).collect();
    let s = Arc::new(s);
    let r = s.clone();
    let renamer = Renamer::start(move |i, out| {
        let (a, b) = &moves[i];
        let res = if out { r.rename(a, b) } else { r.rename(b, a) };
        res.expect("rename");
    });
    Ok(Arc::new(Storm { s, paths, misses: AtomicU64::new(0), _renamer: renamer }))
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

struct Tree<S: Subject> {
    s: S,
    dirs: Vec<S::Path>,
    /// The mean components of the path of one entry (for the hit rate).
    components: f64,
}

impl<S: Subject> Target for Tree<S> {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let (mut n, mut i) = (0u64, thread);
        while !stop.load(Ordering::Relaxed) {
            n += self.s.list_stat(&self.dirs[i % self.dirs.len()]).expect("readdir");
            count.store(n, Ordering::Relaxed);
            i += 7; // stride through the tree
        }
    }

    fn host_lookups(&self) -> Option<(u64, f64)> {
        self.s.host_lookups().map(|l| (l, self.components))
    }
}

fn tree_walk(ctx: &Ctx, mode: &str, _threads: usize) -> std::io::Result<Arc<dyn Target>> {
    on_subject!(ctx, mode, "tree", |s| tree_on(s, ctx, mode))
}

fn tree_on<S: Subject>(s: S, ctx: &Ctx, mode: &str) -> std::io::Result<Arc<dyn Target>> {
    need(&s, &[Op::List], mode, "tree-walk")?;
    let (dirs, components) = if let Backend::Passthrough(root) = &ctx.backend {
        // The tree is whatever the directory holds (a source tree, say).
        host_tree_dirs(root)?
    } else {
        let dirs = leaf_dirs(ctx.tree_files);
        let per = tree_shape(ctx.tree_files).3;
        for d in &dirs {
            s.mkdir_all(d)?;
            for f in 0..per {
                s.put(&format!("{d}/f{f}"), b"")?;
            }
        }
        // An entry's path: its directory's components and its own name.
        let components = dirs[0].matches('/').count() as f64 + 1.0;
        (dirs, components)
    };
    let dirs = dirs.iter().map(|d| s.path(d)).collect();
    Ok(Arc::new(Tree { s, dirs, components }))
}

// ------------------------------------------------------------- page cache

const DD_SIZE: u64 = 2 << 20;

struct Dd<S: Subject> {
    s: S,
    files: Vec<S::File>,
    write: bool,
}

impl<S: Subject> Target for Dd<S> {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let f = &self.files[thread % self.files.len()];
        let mut pos = 0u64;
        let mut b = [0u8; 1];
        batches(stop, count, || {
            if self.write {
                self.s.write_at(f, &[pos as u8], pos).expect("write");
            } else {
                self.s.read_at(f, &mut b, pos).expect("read");
                std::hint::black_box(b);
            }
            pos = (pos + 1) % DD_SIZE;
        });
    }
}

fn dd(ctx: &Ctx, mode: &str, threads: usize, write: bool) -> std::io::Result<Arc<dyn Target>> {
    memfs_only(ctx, "dd")?;
    on_subject!(ctx, mode, "dd", |s| dd_on(s, mode, threads, write))
}

fn dd_on<S: Subject>(s: S, mode: &str, threads: usize, write: bool) -> std::io::Result<Arc<dyn Target>> {
    need(&s, &[Op::Data], mode, "dd")?;
    let content = vec![0x5Au8; DD_SIZE as usize];
    let mut files = Vec::new();
    for t in 0..threads {
        let p = format!("/f{t}");
        s.put(&p, &content)?;
        files.push(s.open_rw(&p)?);
    }
    Ok(Arc::new(Dd { s, files, write }))
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

struct Mix<S: Subject> {
    s: S,
    files: Vec<S::File>,
    write_share: f64,
}

impl<S: Subject> Target for Mix<S> {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64 + 1);
        let mut buf = [0u8; 64];
        batches(stop, count, || {
            let (f, off, write) = mix_op(&mut x, self.write_share);
            if write {
                self.s.write_at(&self.files[f], &buf, off).expect("write");
            } else {
                self.s.read_at(&self.files[f], &mut buf, off).expect("read");
            }
        });
    }
}

fn pagecache_mix(ctx: &Ctx, mode: &str, _threads: usize) -> std::io::Result<Arc<dyn Target>> {
    memfs_only(ctx, "pagecache-mix")?;
    on_subject!(ctx, mode, "mix", |s| mix_on(s, mode, ctx.write_share))
}

fn mix_on<S: Subject>(s: S, mode: &str, write_share: f64) -> std::io::Result<Arc<dyn Target>> {
    need(&s, &[Op::Data], mode, "pagecache-mix")?;
    let content = vec![0x33u8; MIX_SIZE as usize];
    let mut files = Vec::new();
    for i in 0..MIX_FILES {
        let p = format!("/m{i}");
        s.put(&p, &content)?;
        files.push(s.open_rw(&p)?);
    }
    Ok(Arc::new(Mix { s, files, write_share }))
}
