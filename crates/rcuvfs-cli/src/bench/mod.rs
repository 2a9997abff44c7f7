//! The lab's harness (`rcuvfs bench`): every thread is released from one
//! start line ([`Gate`]) after a warm-up and runs for a fixed duration; per-thread
//! counters sit on their own cache lines; each cell is repeated and the
//! median reported. Results go to a table on stdout, ending with the
//! seeds' table (`seeds`), JSON (`--json`), SVG plots (`--plot`) and one
//! HTML page (`--report`).

mod churn;
mod exit;
mod files;
mod plot;
mod report;
mod seeds;
mod subject;
mod workloads;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use workloads::{is_known_mode, vfs_config, Ctx, Target, WORKLOADS};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workloads to run (default: all): stat-same, stat-private, short,
    /// create-private, create-shared, and (only when named, it takes
    /// minutes) files, big-dir and churn,
    /// rename-storm, tree-walk, dd-write, dd-read, pagecache-mix,
    /// inode-exit.
    workloads: Vec<String>,
    /// Thread counts, comma-separated, or `auto` (1 to the core count, plus
    /// twice the cores).
    #[arg(long, default_value = "1,2")]
    threads: String,
    /// Modes and peers, comma-separated, or `all` (each workload's own
    /// list): global, dlock, lockref, rcuwalk, norefs (the reference axis),
    /// packed, split (the layout axis), mutex, rwlock, lockless (the page
    /// cache axis), locked, batch, percpu (inode-exit's list axis),
    /// incomplete (directories never answer a miss by themselves), host,
    /// papaya, dashmap, memoryfs, virtualfs (peers); `+`
    /// combines axes (`rcuwalk+packed`). A name sets its own axis and leaves
    /// the others at their defaults.
    #[arg(long, default_value = "all")]
    modes: String,
    /// Seconds per measured run of a cell.
    #[arg(long, default_value_t = 0.4)]
    duration: f64,
    /// Runs per cell; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG plot of ops/s against threads per workload here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write one self-contained HTML page with the seeds' table, every
    /// table and every plot.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Directory on the host's tmpfs for the `host` peer.
    #[arg(long, default_value = "/dev/shm")]
    host_dir: PathBuf,
    /// Filesystem under the Vfs: memfs, or passthrough:DIR (a host
    /// directory; stat-same and tree-walk, with the `host` peer on the same
    /// DIR; tree-walk walks whatever DIR holds).
    #[arg(long, default_value = "memfs")]
    backend: String,
    /// The Vfs's dcache size target (default: the library's, 1M).
    #[arg(long)]
    dcache_target: Option<usize>,
    /// Files in the tree-walk tree.
    #[arg(long, default_value_t = 100_000)]
    tree_files: usize,
    /// pagecache-mix: the share of operations that write.
    #[arg(long, default_value_t = 0.1)]
    write_share: f64,
    /// files and big-dir: the numbers of files to sweep (k and M suffixes);
    /// churn: the numbers of names its directory keeps.
    #[arg(long, default_value = "10k,100k,1M,10M")]
    files: String,
    /// inode-exit: files each thread creates and keeps open.
    #[arg(long, default_value_t = 8000)]
    exit_files: usize,
}

#[derive(Serialize)]
struct Machine {
    cpus: usize,
    kernel: String,
    date: String,
}

#[derive(Serialize)]
struct Config {
    refs: &'static str,
    layout: &'static str,
    page_cache: &'static str,
    complete_dirs: bool,
}

#[derive(Serialize)]
pub struct Row {
    pub workload: String,
    pub mode: String,
    pub threads: usize,
    ops: u64,
    seconds: f64,
    pub ops_per_sec: f64,
    ns_per_op: f64,
    /// User + system CPU seconds of the whole process during the median run.
    cpu_seconds: f64,
    repeats: usize,
    backend: String,
    /// Every axis of a Vfs mode; absent for peers.
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<Config>,
    /// Lookups of names that existed that reported them missing (must be 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    false_negatives: Option<u64>,
    /// inode-exit: seconds the threads took to create and open their files
    /// (`seconds` is the exit phase).
    #[serde(skip_serializing_if = "Option::is_none")]
    create_seconds: Option<f64>,
    /// Passthrough: the share of path components the dcache answered
    /// without a host lookup, over the measured runs and their warm-ups.
    #[serde(skip_serializing_if = "Option::is_none")]
    hit_rate: Option<f64>,
}

#[cfg(test)]
impl Row {
    /// A row with only what the seeds' table and the report read.
    pub(crate) fn for_test(workload: &str, mode: &str, threads: usize, ops_per_sec: f64) -> Row {
        Row {
            workload: workload.into(),
            mode: mode.into(),
            threads,
            ops: ops_per_sec as u64,
            seconds: 1.0,
            ops_per_sec,
            ns_per_op: 1e9 * threads as f64 / ops_per_sec,
            cpu_seconds: 0.0,
            repeats: 1,
            backend: "memfs".into(),
            config: None,
            false_negatives: None,
            create_seconds: None,
            hit_rate: None,
        }
    }
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    results: Vec<Row>,
    /// The `files` sweep: ns per file and bytes per file against N.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files: Vec<files::FilesRow>,
    /// With the `files` sweep: what a load that misses the caches costs
    /// on this machine, the floor under its cold figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    files_memory: Option<files::MemoryLatency>,
    /// The `big-dir` sweep: ns per entry of a whole listing against N.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    big_dir: Vec<files::BigDirRow>,
    /// The `churn` sweep: ns per operation in a directory whose names come
    /// and go, early and late in the run, against its number of names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    churn: Vec<churn::ChurnRow>,
    /// One row per seed: its figure and this run's before/after ratio.
    seeds: Vec<seeds::SeedRow>,
}

/// One counter per cache-line pair (against adjacent-line prefetch).
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

pub(crate) fn cpu_time() -> f64 {
    // SAFETY: an all-zero rusage is valid to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is writable.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// A start line for many threads: each [`arrive`](Self::arrive)s, and
/// waits on one futex word until [`open`](Self::open) wakes them all.
///
/// Not `std::sync::Barrier`: its waiters sleep on a condition variable and
/// each must take the barrier's mutex again on its way out, one after the
/// other. With 1000 threads on 2 cores the released ones ran the workload
/// while the rest queued for that mutex, each hand-over waiting for a time
/// slice among hundreds of busy threads: a measured second of
/// `create-private` at 1000 threads then ran with hundreds of threads
/// still in the barrier (seen in gdb: 563 of 1000, 30 s into a run), and
/// its figure swung from 25k to 1.6M jobs/s between runs of one binary.
/// Here nothing is taken on the way out.
pub(crate) struct Gate {
    arrived: AtomicUsize,
    open: AtomicU32,
}

impl Gate {
    pub(crate) fn new() -> Gate {
        Gate { arrived: AtomicUsize::new(0), open: AtomicU32::new(0) }
    }

    /// Counts the caller in, then waits until the gate is open.
    pub(crate) fn arrive(&self) {
        // Release/Acquire: the opener sees what each thread did before it
        // arrived, and each thread what the opener did before it opened.
        self.arrived.fetch_add(1, Ordering::Release);
        while self.open.load(Ordering::Acquire) == 0 {
            // SAFETY: FUTEX_WAIT on a live, aligned u32 that we own a
            // reference to; it returns at once if the word is no longer 0.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.open.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    0u32,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
    }

    /// Waits (polling, one thread) until `n` threads have arrived.
    pub(crate) fn wait_for(&self, n: usize) {
        while self.arrived.load(Ordering::Acquire) < n {
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Opens the gate and wakes every thread waiting at it.
    pub(crate) fn open(&self) {
        self.open.store(1, Ordering::Release);
        // SAFETY: FUTEX_WAKE on a live, aligned u32.
        unsafe {
            libc::syscall(libc::SYS_futex, self.open.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX)
        };
    }
}

/// Runs `threads` threads on `target` for `duration`: (ops, seconds, cpu).
/// `Err` with its message if a thread panicked (a peer library that
/// breaks under concurrency: the cell fails, the run goes on).
fn measure(target: &Arc<dyn Target>, threads: usize, duration: Duration) -> Result<(u64, f64, f64), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Arc<Vec<Counter>> = Arc::new((0..threads).map(|_| Counter::default()).collect());
    let gate = Arc::new(Gate::new());
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (target, stop, counters, gate) = (target.clone(), stop.clone(), counters.clone(), gate.clone());
            std::thread::spawn(move || {
                gate.arrive();
                target.run(t, &stop, &counters[t].0);
            })
        })
        .collect();
    gate.wait_for(threads);
    gate.open();
    std::thread::sleep(duration / 10); // warm-up, not counted
    let start: Vec<u64> = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).collect();
    let (t0, c0) = (Instant::now(), cpu_time());
    std::thread::sleep(duration);
    let end: Vec<u64> = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).collect();
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_time() - c0);
    stop.store(true, Ordering::Relaxed);
    let mut panicked = None;
    for h in handles {
        if let Err(p) = h.join() {
            let what = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            panicked = Some(what.unwrap_or_else(|| "a thread panicked".into()));
        }
    }
    match panicked {
        Some(p) => Err(p),
        None => Ok((end.iter().zip(&start).map(|(e, s)| e - s).sum(), secs, cpu)),
    }
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
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy().into_owned()
}

pub fn run(args: BenchArgs) -> std::io::Result<()> {
    let backend = workloads::Backend::parse(&args.backend)?;
    let run_exit = matches!(backend, workloads::Backend::Memfs)
        && (args.workloads.is_empty() || args.workloads.iter().any(|w| w == "inode-exit"));
    let selected: Vec<&workloads::Workload> = if args.workloads.is_empty() {
        WORKLOADS.iter().collect()
    } else {
        args.workloads
            .iter()
            .filter(|name| !matches!(name.as_str(), "inode-exit" | "files" | "big-dir" | "churn"))
            .map(|name| {
                WORKLOADS.iter().find(|w| w.name == name).ok_or_else(|| {
                    let known: Vec<_> = WORKLOADS.iter().map(|w| w.name).collect();
                    std::io::Error::other(format!("unknown workload {name:?} (known: {})", known.join(", ")))
                })
            })
            .collect::<std::io::Result<_>>()?
    };
    let explicit: Option<Vec<String>> =
        (args.modes != "all").then(|| args.modes.split(',').map(|m| m.trim().to_string()).collect());
    if let Some(ms) = &explicit {
        if let Some(bad) = ms.iter().find(|m| !is_known_mode(m) && !exit::MODES.contains(&m.as_str())) {
            return Err(std::io::Error::other(format!(
                "unknown mode {bad:?} (known: global, dlock, lockref, rcuwalk, norefs, packed, split, mutex, rwlock, lockless, locked, batch, percpu, host, papaya, dashmap, memoryfs, virtualfs, and + combinations)"
            )));
        }
    }
    let run_files = args.workloads.iter().any(|w| w == "files");
    let run_big_dir = args.workloads.iter().any(|w| w == "big-dir");
    let run_churn = args.workloads.iter().any(|w| w == "churn");
    let file_sizes = files::parse_sizes(&args.files)?;
    let threads = parse_threads(&args.threads)?;
    let max_threads = *threads.iter().max().unwrap();
    let duration = Duration::from_secs_f64(args.duration.max(0.01));
    let ctx = Ctx {
        host_dir: args.host_dir.clone(),
        backend,
        dcache_target: args.dcache_target,
        tree_files: args.tree_files,
        write_share: args.write_share.clamp(0.0, 1.0),
    };

    let plan: Vec<(&workloads::Workload, Vec<String>)> = selected
        .iter()
        .map(|w| (*w, explicit.clone().unwrap_or_else(|| w.modes.iter().map(|m| m.to_string()).collect())))
        .collect();
    let cells: u64 = plan.iter().map(|(_, m)| (m.len() * threads.len()) as u64).sum::<u64>()
        + if run_exit { (exit::MODES.len() * threads.len()) as u64 } else { 0 };
    let progress = indicatif::ProgressBar::with_draw_target(Some(cells), indicatif::ProgressDrawTarget::stderr());

    let mut rows: Vec<Row> = Vec::new();
    for (w, modes) in &plan {
        match w.seed {
            "-" => println!("\n{}: {}", w.name, w.op),
            seed => println!("\n{} (seed {seed}): {}", w.name, w.op),
        }
        println!(
            "{:<16} {:>7} {:>13} {:>12} {:>10} {:>9} {:>10} {:>6} {:>8}",
            "mode", "threads", "ops/s", "ops/s/thr", "ns/op", "speedup", "vs global", "wrong", "hits"
        );
        for m in modes {
            let target = match (w.build)(&ctx, m, max_threads) {
                Ok(t) => t,
                Err(e) => {
                    println!("{m:<16} skipped: {e}");
                    progress.inc(threads.len() as u64);
                    continue;
                }
            };
            let mut one = None;
            for &t in &threads {
                progress.set_message(format!("{} {} x{}", w.name, m, t));
                let lookups0 = target.host_lookups();
                let samples: Result<Vec<(u64, f64, f64)>, String> =
                    (0..args.repeats.max(1)).map(|_| measure(&target, t, duration)).collect();
                let mut samples = match samples {
                    Ok(s) => s,
                    Err(p) => {
                        println!("{m:<16} {t:>7} failed: a thread panicked: {p}");
                        progress.inc(threads.iter().skip_while(|&&x| x != t).count() as u64);
                        // The target's state is not to be trusted after a
                        // panic: its other thread counts are skipped too.
                        break;
                    }
                };
                let all_ops: u64 = samples.iter().map(|s| s.0).sum();
                let hit_rate = match (lookups0, target.host_lookups()) {
                    (Some((l0, comps)), Some((l1, _))) if all_ops > 0 => {
                        Some((1.0 - (l1 - l0) as f64 / (all_ops as f64 * comps)).max(0.0))
                    }
                    _ => None,
                };
                samples.sort_by(|a, b| (a.0 as f64 / a.1).total_cmp(&(b.0 as f64 / b.1)));
                let (ops, secs, cpu) = samples[samples.len() / 2];
                let ops_per_sec = ops as f64 / secs;
                let base = *one.get_or_insert(ops_per_sec);
                let vs_global = rows
                    .iter()
                    .find(|r| r.workload == w.name && r.mode == "global" && r.threads == t)
                    .map(|r| format!("{:.2}x", ops_per_sec / r.ops_per_sec));
                let fneg = target.false_negatives();
                println!(
                    "{:<16} {:>7} {:>13.0} {:>12.0} {:>10.1} {:>8.2}x {:>10} {:>6} {:>8}",
                    m,
                    t,
                    ops_per_sec,
                    ops_per_sec / t as f64,
                    1e9 * t as f64 / ops_per_sec,
                    ops_per_sec / base,
                    vs_global.unwrap_or_else(|| "-".into()),
                    fneg.map_or("-".to_string(), |n| n.to_string()),
                    hit_rate.map_or("-".to_string(), |h| format!("{:.2}%", 100.0 * h)),
                );
                rows.push(Row {
                    workload: w.name.to_string(),
                    mode: m.clone(),
                    threads: t,
                    ops,
                    seconds: secs,
                    ops_per_sec,
                    ns_per_op: 1e9 * t as f64 / ops_per_sec,
                    cpu_seconds: cpu,
                    repeats: samples.len(),
                    backend: args.backend.clone(),
                    config: vfs_config(m).filter(|_| !subject::PEERS.contains(&m.as_str())).map(|c| Config {
                        refs: c.refs.name(),
                        layout: c.layout.name(),
                        page_cache: c.cache.name(),
                        complete_dirs: c.complete,
                    }),
                    false_negatives: fneg,
                    create_seconds: None,
                    hit_rate,
                });
                progress.inc(1);
            }
        }
    }
    if run_exit {
        let modes: Vec<String> = match &explicit {
            Some(ms) => ms.iter().filter(|m| exit::MODES.contains(&m.as_str())).cloned().collect(),
            None => exit::MODES.iter().map(|m| m.to_string()).collect(),
        };
        println!("\ninode-exit (seed 004): {} files per thread, created and kept open, then unlinked and closed by all threads at once", args.exit_files);
        println!(
            "{:<16} {:>7} {:>9} {:>10} {:>12} {:>10} {:>10}",
            "mode", "threads", "files", "exit s", "exit cpu s", "create s", "vs locked"
        );
        for &t in &threads {
            for m in &modes {
                progress.set_message(format!("inode-exit {m} x{t}"));
                let runs: std::io::Result<Vec<exit::ExitRun>> =
                    (0..args.repeats.max(1)).map(|_| exit::run(m, t, args.exit_files, &args.host_dir)).collect();
                let mut runs = match runs {
                    Ok(r) => r,
                    Err(e) => {
                        println!("{m:<16} {t:>7} skipped: {e}");
                        progress.inc(1);
                        continue;
                    }
                };
                runs.sort_by(|a, b| a.exit_seconds.total_cmp(&b.exit_seconds));
                let r = &runs[runs.len() / 2];
                let vs = rows
                    .iter()
                    .find(|x| x.workload == "inode-exit" && x.mode == "locked" && x.threads == t)
                    .map(|x| format!("{:.2}x", r.exit_seconds / x.seconds));
                println!(
                    "{:<16} {:>7} {:>9} {:>10.3} {:>12.3} {:>10.3} {:>10}",
                    m,
                    t,
                    r.files,
                    r.exit_seconds,
                    r.exit_cpu_seconds,
                    r.create_seconds,
                    vs.unwrap_or_else(|| "-".into())
                );
                rows.push(Row {
                    workload: "inode-exit".into(),
                    mode: m.clone(),
                    threads: t,
                    ops: r.files,
                    seconds: r.exit_seconds,
                    ops_per_sec: r.files as f64 / r.exit_seconds,
                    ns_per_op: 1e9 * r.exit_seconds / r.files as f64,
                    cpu_seconds: r.exit_cpu_seconds,
                    repeats: runs.len(),
                    backend: args.backend.clone(),
                    config: None,
                    false_negatives: None,
                    create_seconds: Some(r.create_seconds),
                    hit_rate: None,
                });
                progress.inc(1);
            }
        }
    }
    progress.finish_and_clear();
    let (mut file_rows, mut big_dir_rows, mut churn_rows, mut files_memory) =
        (Vec::new(), Vec::new(), Vec::new(), None);
    let sweep_modes: Vec<String> = match &explicit {
        Some(ms) => ms.iter().filter(|m| *m == "host" || vfs_config(m).is_some()).cloned().collect(),
        None => vec!["norefs".into(), "host".into()],
    };
    if run_files {
        let (r, lat) = files::sweep(&sweep_modes, &file_sizes, args.repeats, args.dcache_target, &args.host_dir)?;
        (file_rows, files_memory) = (r, Some(lat));
    }
    if run_big_dir {
        big_dir_rows = files::big_dir_sweep(&sweep_modes, &file_sizes, args.repeats, &args.host_dir)?;
    }
    if run_churn {
        churn_rows = churn::sweep(&sweep_modes, &file_sizes, args.repeats, args.dcache_target, &args.host_dir)?;
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)?;
        if run_files {
            plot::write_files(&dir.join("files.svg"), &file_rows)?;
        }
        std::fs::create_dir_all(dir)?;
        for (w, _) in &plan {
            plot::write(&dir.join(format!("{}.svg", w.name)), w.name, &rows)?;
        }
        if run_exit {
            plot::write(&dir.join("inode-exit.svg"), "inode-exit", &rows)?;
        }
    }
    let seed_rows = seeds::summarize(&rows);
    seeds::print(&seed_rows);
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
        files: file_rows,
        files_memory,
        big_dir: big_dir_rows,
        churn: churn_rows,
        seeds: seed_rows,
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?)?;
    }
    if let Some(path) = &args.report {
        let mut sections: Vec<report::Section> =
            plan.iter().map(|(w, _)| report::Section { name: w.name, seed: w.seed, op: w.op }).collect();
        if run_exit {
            sections.push(report::Section {
                name: "inode-exit",
                seed: "004",
                op: "files created and kept open by each thread, then unlinked and closed by all threads at once (ops/s: files per second of the exit)",
            });
        }
        report::write(path, &report, &sections)?;
    }
    Ok(())
}
