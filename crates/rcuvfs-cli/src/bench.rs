//! The lab's harness: every thread is released from one barrier after a
//! warm-up and runs for a fixed duration; per-thread counters sit on their
//! own cache lines; each cell is repeated and the median reported.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Args;
use rcuvfs::{Layout, RefMode, Vfs};
use serde::Serialize;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workloads to run (default: all): stat-same, stat-private.
    workloads: Vec<String>,
    /// Thread counts, comma-separated, or `auto` (1 to the core count, plus
    /// twice the cores).
    #[arg(long, default_value = "1,2")]
    threads: String,
    /// Modes and peers, comma-separated, or `all`: global, lockref,
    /// rcuwalk, norefs (the reference axis), packed, split (the layout
    /// axis), host; `+` combines axes (`rcuwalk+packed`). A name sets its
    /// own axis and leaves the others at their defaults.
    #[arg(long, default_value = "all")]
    modes: String,
    /// Seconds per measured cell.
    #[arg(long, default_value_t = 1.0)]
    duration: f64,
    /// Repeats per cell; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Directory on the host's tmpfs for the `host` peer.
    #[arg(long, default_value = "/dev/shm")]
    host_dir: PathBuf,
    /// Filesystem under the Vfs: memfs (others come with their issues).
    #[arg(long, default_value = "memfs")]
    backend: String,
}

const WORKLOADS: &[&str] = &["stat-same", "stat-private"];
const MODES: &[&str] = &["global", "lockref", "rcuwalk", "norefs", "host"];
/// Mode names accepted besides `MODES`: the layout axis. A mode may also
/// combine names of different axes with `+` (`rcuwalk+packed`).
const LAYOUTS: &[&str] = &["packed", "split"];
/// Depth of the stat path, as the lab's stat workloads use.
const DEPTH: usize = 4;

#[derive(Serialize)]
struct Machine {
    cpus: usize,
    kernel: String,
    date: String,
}

#[derive(Serialize, Clone)]
struct Row {
    workload: String,
    mode: String,
    threads: usize,
    ops: u64,
    seconds: f64,
    ops_per_sec: f64,
    ns_per_op: f64,
    repeats: usize,
    backend: String,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    results: Vec<Row>,
}

/// One counter per cache line (two lines, against adjacent-line prefetch).
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// What a workload needs to run one thread's operation in a loop.
trait Target: Send + Sync {
    /// Runs operations until `stop`, counting them in `count`.
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64);
}

struct VfsStat {
    vfs: Vfs,
    paths: Vec<String>,
}

impl Target for VfsStat {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let path = &self.paths[thread % self.paths.len()];
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..64 {
                std::hint::black_box(self.vfs.metadata(path).expect("stat"));
            }
            n += 64;
            count.store(n, Ordering::Relaxed);
        }
    }
}

struct HostStat {
    paths: Vec<CString>,
}

impl Target for HostStat {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let path = &self.paths[thread % self.paths.len()];
        let mut n = 0u64;
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..64 {
                // SAFETY: `path` is NUL-terminated and `st` is writable.
                let rc = unsafe { libc::stat(path.as_ptr(), &mut st) };
                assert_eq!(rc, 0, "host stat failed");
            }
            n += 64;
            count.store(n, Ordering::Relaxed);
        }
    }
}

fn tree_paths(private: bool, threads: usize) -> Vec<String> {
    let dir: String = (0..DEPTH - 1).map(|i| format!("/d{i}")).collect();
    if private {
        (0..threads).map(|t| format!("{dir}/file{t}")).collect()
    } else {
        vec![format!("{dir}/file")]
    }
}

fn build_target(
    workload: &str,
    mode: &str,
    threads: usize,
    host_dir: &std::path::Path,
) -> std::io::Result<Box<dyn Target>> {
    let private = workload == "stat-private";
    let paths = tree_paths(private, threads);
    match mode {
        m if m != "host" && vfs_config(m).is_some() => {
            let (mode, layout) = vfs_config(m).unwrap();
            let vfs = Vfs::builder().mode(mode).layout(layout).build()?;
            for p in &paths {
                let parent = std::path::Path::new(p).parent().unwrap();
                vfs.create_dir_all(parent)?;
                vfs.write(p, b"x")?;
            }
            Ok(Box::new(VfsStat { vfs, paths }))
        }
        "host" => {
            let root = host_dir.join(format!("rcuvfs-bench-{}", std::process::id()));
            let mut c = Vec::new();
            for p in &paths {
                let full = root.join(p.trim_start_matches('/'));
                std::fs::create_dir_all(full.parent().unwrap())?;
                std::fs::write(&full, b"x")?;
                c.push(CString::new(full.into_os_string().into_encoded_bytes()).unwrap());
            }
            Ok(Box::new(HostStat { paths: c }))
        }
        other => Err(std::io::Error::other(format!("unknown mode {other}"))),
    }
}

/// Runs `threads` threads on `target` for `duration`; returns ops/s.
fn measure(target: &Arc<dyn Target>, threads: usize, duration: Duration) -> (u64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Arc<Vec<Counter>> = Arc::new((0..threads).map(|_| Counter::default()).collect());
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (target, stop, counters, barrier) = (target.clone(), stop.clone(), counters.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                target.run(t, &stop, &counters[t].0);
            })
        })
        .collect();
    barrier.wait();
    // Warm-up: a tenth of the duration, not counted.
    std::thread::sleep(duration / 10);
    let start_counts: Vec<u64> = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).collect();
    let t0 = Instant::now();
    std::thread::sleep(duration);
    let end_counts: Vec<u64> = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).collect();
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let ops: u64 = end_counts.iter().zip(&start_counts).map(|(e, s)| e - s).sum();
    (ops, secs)
}

/// The Vfs configuration a mode name stands for: each `+`-separated part
/// sets its axis; the others keep their defaults.
fn vfs_config(name: &str) -> Option<(RefMode, Layout)> {
    let (mut mode, mut layout) = (RefMode::default(), Layout::default());
    for part in name.split('+') {
        if let Some(m) = RefMode::from_name(part) {
            mode = m;
        } else if let Some(l) = Layout::from_name(part) {
            layout = l;
        } else {
            return None;
        }
    }
    Some((mode, layout))
}

fn parse_list(s: &str, all: &[&str], what: &str) -> std::io::Result<Vec<String>> {
    if s == "all" {
        return Ok(all.iter().map(|s| s.to_string()).collect());
    }
    let items: Vec<String> = s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect();
    for i in &items {
        let known = all.contains(&i.as_str()) || (what == "mode" && i != "host" && vfs_config(i).is_some());
        if !known {
            let extra =
                if what == "mode" { format!(", {}, and `+` combinations", LAYOUTS.join(", ")) } else { String::new() };
            return Err(std::io::Error::other(format!("unknown {what} {i:?} (known: {}{extra})", all.join(", "))));
        }
    }
    Ok(items)
}

fn parse_threads(s: &str) -> std::io::Result<Vec<usize>> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if s == "auto" {
        let mut v: Vec<usize> = (1..=cpus).collect();
        v.push(2 * cpus);
        return Ok(v);
    }
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| std::io::Error::other(format!("bad thread count {x:?}")))
        })
        .collect()
}

fn uname() -> String {
    // SAFETY: an all-zero utsname is valid; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is writable.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    // SAFETY: uname NUL-terminates its fields.
    let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    rel.to_string_lossy().into_owned()
}

pub fn run(args: BenchArgs) -> std::io::Result<()> {
    if args.backend != "memfs" {
        return Err(std::io::Error::other(format!("backend {:?} is not available yet (memfs only)", args.backend)));
    }
    let workloads = if args.workloads.is_empty() {
        WORKLOADS.iter().map(|s| s.to_string()).collect()
    } else {
        parse_list(&args.workloads.join(","), WORKLOADS, "workload")?
    };
    let modes = parse_list(&args.modes, MODES, "mode")?;
    let threads = parse_threads(&args.threads)?;
    let duration = Duration::from_secs_f64(args.duration.max(0.01));
    let mut rows = Vec::new();
    println!(
        "{:<14} {:<16} {:>7} {:>14} {:>12} {:>10} {:>9} {:>10}",
        "workload", "mode", "threads", "ops/s", "ops/s/thr", "ns/op", "speedup", "vs global"
    );
    for w in &workloads {
        for m in &modes {
            let mut base1 = None;
            for &t in &threads {
                let target: Arc<dyn Target> = Arc::from(build_target(w, m, t, &args.host_dir)?);
                let mut samples: Vec<(u64, f64)> =
                    (0..args.repeats.max(1)).map(|_| measure(&target, t, duration)).collect();
                samples.sort_by(|a, b| (a.0 as f64 / a.1).total_cmp(&(b.0 as f64 / b.1)));
                let (ops, secs) = samples[samples.len() / 2];
                let ops_per_sec = ops as f64 / secs;
                let base = *base1.get_or_insert(ops_per_sec);
                let global = rows
                    .iter()
                    .find(|r: &&Row| r.workload == *w && r.mode == "global" && r.threads == t)
                    .map(|r| ops_per_sec / r.ops_per_sec);
                println!(
                    "{:<14} {:<16} {:>7} {:>14.0} {:>12.0} {:>10.1} {:>8.2}x {:>10}",
                    w,
                    m,
                    t,
                    ops_per_sec,
                    ops_per_sec / t as f64,
                    1e9 * t as f64 / ops_per_sec,
                    ops_per_sec / base,
                    global.map_or("-".to_string(), |g| format!("{g:.2}x"))
                );
                rows.push(Row {
                    workload: w.clone(),
                    mode: m.clone(),
                    threads: t,
                    ops,
                    seconds: secs,
                    ops_per_sec,
                    ns_per_op: 1e9 * t as f64 / ops_per_sec,
                    repeats: samples.len(),
                    backend: args.backend.clone(),
                });
            }
        }
    }
    let host_root = args.host_dir.join(format!("rcuvfs-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(host_root);
    if let Some(path) = &args.json {
        let report = Report {
            machine: Machine {
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
                kernel: uname(),
                date: std::process::Command::new("date")
                    .arg("-Iseconds")
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                    .unwrap_or_default(),
            },
            results: rows,
        };
        std::fs::write(path, serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?)?;
    }
    Ok(())
}
