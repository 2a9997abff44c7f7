//! `files`: does a cost per file grow with the number of files? One thread
//! creates N empty files spread over 1,000 directories (`write(path, "")`),
//! stats each path once in creation order (cold: the previous stat was of
//! another directory), then removes each. Reports ns per file for each
//! phase and the memory each file costs: the growth of the process's RSS
//! for the Vfs, right after the creates and again once they have settled
//! (a grace period, so that what they retired, such as an index's old
//! table, is freed, and the allocator handed back its free pages); for the
//! `host` peer (the same syscalls on the host's tmpfs) the growth of the
//! kernel's slab, where the kernel keeps its dentries and inodes. Between
//! the stats and the unlinks it also stats names that were never created
//! (up to [`MISSES_MAX`], one per file): ns per miss. The directories are
//! made through the Vfs, so over memfs they are complete and a miss leaves
//! nothing (mode part `+incomplete`: a name in its directory's set of
//! absent names each, as over any filesystem that can change behind the
//! cache; a negative dentry each until 2026-11-28). What cached misses
//! cost is measured in a process of its own (`cargo run --release
//! --example negative`): here the RSS would not grow while the allocator
//! reuses what the creates' settling freed.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::subject::{HostSubject, Subject, VfsSubject};

/// Directories the files are spread over.
const DIRS: usize = 1000;

/// Names that do not exist looked up per run, at most: few enough that
/// the negative dentries they leave fit both under the Vfs's default bound
/// on them (a quarter of its dcache target) and, at a million files, under
/// the dcache target itself (2^20 dentries: the files, their 1,000
/// directories and these), so that the shrinker frees nothing meanwhile.
/// With 200,000 (until 2026-11-26) they pushed a million files' cache past
/// its target, the shrinker freed the oldest files, and the unlinks that
/// follow looked about 150,000 of them up again: the unlink figure at 1M
/// partly measured the miss phase.
const MISSES_MAX: usize = 40_000;

#[derive(Serialize, Clone)]
pub struct FilesRow {
    pub mode: String,
    pub files: usize,
    pub create_ns: f64,
    pub stat_ns: f64,
    pub unlink_ns: f64,
    /// Vfs: RSS growth per file after the creates; host: slab growth.
    pub bytes_per_file: f64,
    /// The same once the creates have settled ([`Subject::settle`]: for
    /// the Vfs, after a grace period and the allocator's collection; for
    /// the host, the same as `bytes_per_file`).
    pub bytes_per_file_settled: f64,
    /// What `bytes_per_file` measures.
    pub memory: &'static str,
    /// ns per lookup of a name that does not exist (a stat that fails,
    /// leaving what a miss leaves: see the module doc), in the directories
    /// of the files.
    pub miss_ns: f64,
    /// Of `create_ns`, the kernel's time on the creating thread
    /// (`getrusage(RUSAGE_THREAD)`, 1 ms resolution at worst): for the
    /// Vfs, which makes no system call there, the page faults of its
    /// fresh memory; for the host, the syscalls themselves. On this
    /// project's VM a fault's cost varies tenfold between runs (the
    /// hypervisor backing pages, THP compaction), and this column shows
    /// how much of a create figure that was.
    pub create_sys_ns: f64,
}

/// What one load costs on this machine when it depends on the one before
/// and its line is not cached: the floor under a cold lookup, whose name
/// index slot is such a load once the index outgrows the caches (a million
/// names: 16 MB of slots). Measured, not assumed: on this project's VM the
/// last-level cache the guest really gets is a few MB (a walk over 16 MB
/// already costs about what one over 512 MB does), and a load from memory
/// costs 120-170 ns, more than a warm stat of a whole path.
#[derive(Serialize, Clone, Copy)]
pub struct MemoryLatency {
    /// ns per dependent load over a 4 MB working set (caches).
    pub cached_ns: f64,
    /// ns per dependent load over a 256 MB working set (memory).
    pub memory_ns: f64,
}

/// u64s per 64-byte line.
const LINE: usize = 8;

/// `lines` 64-byte lines, each pointing (its first u64, an index into the
/// returned Vec) at the next in one random cycle through all of them
/// (Fisher-Yates with a fixed xorshift), in huge pages where the kernel
/// allows them, so that a chase measures the load, not the page walk.
fn random_cycle(lines: usize) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::with_capacity(lines * LINE);
    #[cfg(target_os = "linux")]
    // SAFETY: advice on memory this Vec owns; it changes no contents.
    unsafe {
        libc::madvise(v.as_mut_ptr().cast(), lines * LINE * 8, libc::MADV_HUGEPAGE);
    }
    v.resize(lines * LINE, 0);
    let mut order: Vec<u32> = (0..lines as u32).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    for w in 0..lines {
        v[order[w] as usize * LINE] = order[(w + 1) % lines] as u64 * LINE as u64;
    }
    v
}

/// Chases a random cycle through `mb` megabytes, one line per step: ns
/// per step.
fn chase(mb: usize) -> f64 {
    let lines = mb * 1024 * 1024 / 64;
    let v = random_cycle(lines);
    let steps = 2_000_000;
    let mut at = 0u64;
    // An eighth of the steps first (once around the small cycle), to warm
    // what can be warm.
    for _ in 0..lines.min(steps / 8) {
        at = v[at as usize];
    }
    let t = Instant::now();
    for _ in 0..steps {
        at = v[std::hint::black_box(at) as usize];
    }
    let ns = t.elapsed().as_nanos() as f64 / steps as f64;
    std::hint::black_box(at);
    ns
}

/// [`MemoryLatency`] on this machine, now.
pub fn memory_latency() -> MemoryLatency {
    MemoryLatency { cached_ns: chase(4), memory_ns: chase(256) }
}

/// The kernel time this thread has used so far, in ns.
fn thread_sys_ns() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } != 0 {
        return 0;
    }
    u.ru_stime.tv_sec as u64 * 1_000_000_000 + u.ru_stime.tv_usec as u64 * 1_000
}

pub(super) fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|x| x.parse::<u64>().ok()))
        .unwrap_or(0)
        * 4096
}

/// The kernel's slab, in bytes (`Slab:` of /proc/meminfo).
pub(super) fn slab() -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("Slab:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// The path of file `i` under `root`, written into `buf`.
fn path_of(buf: &mut String, root: &str, i: usize) {
    use std::fmt::Write;
    buf.clear();
    let _ = write!(buf, "{root}/d{}/f{i}", i % DIRS);
}

/// The path of the `i`th name that is never created, as long as file `i`'s.
fn missing_of(buf: &mut String, i: usize) {
    use std::fmt::Write;
    buf.clear();
    let _ = write!(buf, "/d{}/m{i}", i % DIRS);
}

fn per_file(t: Instant, n: usize) -> f64 {
    t.elapsed().as_nanos() as f64 / n as f64
}

/// One run on `s`: `memory` reads what a file's memory shows in (the
/// process's RSS for rcuvfs, the kernel's slab for the host), named by
/// its second part.
fn run_on<S: Subject>(s: &S, mode: &str, n: usize, memory: (fn() -> u64, &'static str)) -> std::io::Result<FilesRow> {
    for d in 0..DIRS {
        s.mkdir_all(&format!("/d{d}"))?;
    }
    let (mut name, mut p) = (String::new(), S::Path::default());
    let m0 = (memory.0)();
    let sys0 = thread_sys_ns();
    let t = Instant::now();
    for i in 0..n {
        path_of(&mut name, "", i);
        s.path_into(&name, &mut p);
        s.write_new(&p, b"")?;
    }
    let create_ns = per_file(t, n);
    let create_sys_ns = (thread_sys_ns() - sys0) as f64 / n as f64;
    let bytes = (memory.0)().saturating_sub(m0) as f64 / n as f64;
    s.settle();
    let settled = (memory.0)().saturating_sub(m0) as f64 / n as f64;
    let t = Instant::now();
    for i in 0..n {
        path_of(&mut name, "", i);
        s.path_into(&name, &mut p);
        s.stat(&p)?;
    }
    let stat_ns = per_file(t, n);
    let misses = n.min(MISSES_MAX);
    let t = Instant::now();
    for i in 0..misses {
        missing_of(&mut name, i);
        s.path_into(&name, &mut p);
        if s.stat(&p).is_ok() {
            return Err(std::io::Error::other(format!("{name} was never created, yet a stat found it")));
        }
    }
    let miss_ns = per_file(t, misses);
    let t = Instant::now();
    for i in 0..n {
        path_of(&mut name, "", i);
        s.path_into(&name, &mut p);
        s.unlink(&p)?;
    }
    let unlink_ns = per_file(t, n);
    Ok(FilesRow {
        mode: mode.to_string(),
        files: n,
        create_ns,
        stat_ns,
        unlink_ns,
        bytes_per_file: bytes,
        bytes_per_file_settled: settled,
        memory: memory.1,
        miss_ns,
        create_sys_ns,
    })
}

/// One run in a Vfs mode (the builder's defaults but the reference mode,
/// and the dcache target when given).
pub fn run_vfs(mode: &str, n: usize, dcache_target: Option<usize>) -> std::io::Result<FilesRow> {
    let s = VfsSubject { vfs: super::workloads::mode_vfs(mode, dcache_target)?, stats: None };
    run_on(&s, mode, n, (rss, "process RSS"))
}

/// The `host` peer: the same calls as syscalls on a scratch directory
/// under `host_dir`.
pub fn run_host(n: usize, host_dir: &Path) -> std::io::Result<FilesRow> {
    run_on(&HostSubject::scratch(host_dir, "files")?, "host", n, (slab, "kernel slab"))
}

/// `repeats` runs of one cell; `None`, said on stdout, if one fails (the
/// host's tmpfs may allow fewer inodes than N: /dev/shm allows half the
/// memory's pages), and the sweep goes on.
pub(super) fn repeated<R>(
    mode: &str,
    n: usize,
    repeats: usize,
    run: impl Fn() -> std::io::Result<R>,
) -> Option<Vec<R>> {
    match (0..repeats.max(1)).map(|_| run()).collect() {
        Ok(r) => Some(r),
        Err(e) => {
            println!("{:<10} {:>10} skipped: {e}", mode, n);
            None
        }
    }
}

/// The median of `f` over `runs` (not empty).
pub(super) fn median_by<R>(runs: &[R], f: fn(&R) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs every size in every mode, `repeats` times each (the median of
/// each time; the largest memory figure, the first run's, since later runs
/// reuse memory the allocator kept), printing the table as it goes. Sizes
/// run in the order given: memory an earlier, smaller size freed can hide
/// up to its own share of a later figure.
pub fn sweep(
    modes: &[String],
    sizes: &[usize],
    repeats: usize,
    dcache_target: Option<usize>,
    host_dir: &Path,
) -> std::io::Result<(Vec<FilesRow>, MemoryLatency)> {
    println!("\nfiles: one thread creates N empty files in {DIRS} directories, stats each once, unlinks each");
    println!(
        "{:<10} {:>10} {:>12} {:>8} {:>10} {:>12} {:>10} {:>10} {:>9}  memory",
        "mode", "files", "create ns", "(sys)", "stat ns", "unlink ns", "B/file", "settled", "miss ns"
    );
    let mut rows = Vec::new();
    for &n in sizes {
        for m in modes {
            let run = || if m == "host" { run_host(n, host_dir) } else { run_vfs(m, n, dcache_target) };
            let Some(runs) = repeated(m, n, repeats, run) else { continue };
            let med = |f: fn(&FilesRow) -> f64| median_by(&runs, f);
            let r = FilesRow {
                mode: m.clone(),
                files: n,
                create_ns: med(|r| r.create_ns),
                stat_ns: med(|r| r.stat_ns),
                unlink_ns: med(|r| r.unlink_ns),
                // The largest: a later run in the same process reuses the
                // memory an earlier one freed to the allocator.
                bytes_per_file: runs.iter().map(|r| r.bytes_per_file).fold(0.0, f64::max),
                bytes_per_file_settled: runs.iter().map(|r| r.bytes_per_file_settled).fold(0.0, f64::max),
                memory: runs[0].memory,
                miss_ns: med(|r| r.miss_ns),
                create_sys_ns: med(|r| r.create_sys_ns),
            };
            println!(
                "{:<10} {:>10} {:>12.0} {:>8.0} {:>10.0} {:>12.0} {:>10.0} {:>10.0} {:>9.0}  {}",
                r.mode,
                r.files,
                r.create_ns,
                r.create_sys_ns,
                r.stat_ns,
                r.unlink_ns,
                r.bytes_per_file,
                r.bytes_per_file_settled,
                r.miss_ns,
                r.memory
            );
            rows.push(r);
        }
    }
    // After the runs: the allocator keeps what this frees, and a run after
    // it would grow its RSS less than its files cost.
    let lat = memory_latency();
    println!(
        "(on this machine a load that depends on the one before costs {:.0} ns from memory, {:.0} ns within 4 MB: \
         a cold stat at 1M files makes at least one from memory, its name's index slot)",
        lat.memory_ns, lat.cached_ns
    );
    Ok((rows, lat))
}

pub fn parse_sizes(s: &str) -> std::io::Result<Vec<usize>> {
    s.split(',')
        .map(|x| {
            let x = x.trim().replace('_', "");
            let (num, mul) = match x.chars().last() {
                Some('k') => (&x[..x.len() - 1], 1_000),
                Some('M') => (&x[..x.len() - 1], 1_000_000),
                _ => (&x[..], 1),
            };
            num.parse::<usize>()
                .ok()
                .map(|n| n * mul)
                .filter(|&n| n > 0)
                .ok_or_else(|| std::io::Error::other(format!("bad file count {x:?}")))
        })
        .collect()
}

// ------------------------------------------------------------------ big-dir

/// `big-dir`: is a listing linear in the directory's size? One thread
/// creates N empty files in one directory, then lists it whole, first the
/// names alone (`readdir`), then each entry with its attributes (`readdir`
/// and `DirEntry::metadata`, which is `fstatat` on the directory's
/// descriptor for the `host` peer).
#[derive(Serialize, Clone)]
pub struct BigDirRow {
    pub mode: String,
    pub files: usize,
    /// ns per entry of a whole listing, names only.
    pub list_ns: f64,
    /// ns per entry of a whole listing with each entry's attributes.
    pub list_stat_ns: f64,
}

/// One big-dir run on `s`.
fn list_on<S: Subject>(s: &S, mode: &str, n: usize) -> std::io::Result<BigDirRow> {
    s.mkdir_all("/big")?;
    let mut p = String::new();
    for i in 0..n {
        use std::fmt::Write;
        p.clear();
        let _ = write!(p, "/big/f{i}");
        s.put(&p, b"")?;
    }
    let dir = s.path("/big");
    let t = Instant::now();
    let mut seen = s.list(&dir)?;
    let list_ns = per_file(t, n);
    let t = Instant::now();
    seen += s.list_stat(&dir)?;
    let list_stat_ns = per_file(t, n);
    if seen != 2 * n as u64 {
        return Err(std::io::Error::other(format!("big-dir: listed {seen} entries of 2 x {n}")));
    }
    Ok(BigDirRow { mode: mode.into(), files: n, list_ns, list_stat_ns })
}

fn list_vfs(mode: &str, n: usize) -> std::io::Result<BigDirRow> {
    list_on(&VfsSubject { vfs: super::workloads::mode_vfs(mode, None)?, stats: None }, mode, n)
}

fn list_host(n: usize, host_dir: &Path) -> std::io::Result<BigDirRow> {
    list_on(&HostSubject::scratch(host_dir, "bigdir")?, "host", n)
}

/// Runs `big-dir` for every size in every mode (medians of `repeats`),
/// printing the table as it goes.
pub fn big_dir_sweep(
    modes: &[String],
    sizes: &[usize],
    repeats: usize,
    host_dir: &Path,
) -> std::io::Result<Vec<BigDirRow>> {
    println!("\nbig-dir: one thread lists a directory of N files whole: names, then names and attributes");
    println!("{:<10} {:>10} {:>12} {:>16}", "mode", "files", "list ns", "list+stat ns");
    let mut rows = Vec::new();
    for &n in sizes {
        for m in modes {
            let run = || if m == "host" { list_host(n, host_dir) } else { list_vfs(m, n) };
            let Some(runs) = repeated(m, n, repeats, run) else { continue };
            let med = |f: fn(&BigDirRow) -> f64| median_by(&runs, f);
            let r = BigDirRow {
                mode: m.clone(),
                files: n,
                list_ns: med(|r| r.list_ns),
                list_stat_ns: med(|r| r.list_stat_ns),
            };
            println!("{:<10} {:>10} {:>12.1} {:>16.1}", r.mode, r.files, r.list_ns, r.list_stat_ns);
            rows.push(r);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chase visits every line once per turn: a cycle shorter than
    /// all the lines would measure a smaller working set than it says.
    #[test]
    fn the_chase_is_one_cycle_through_every_line() {
        for lines in [1, 2, 3, 1000, 65_536] {
            let v = random_cycle(lines);
            let (mut at, mut seen) = (0u64, vec![false; lines]);
            for _ in 0..lines {
                let line = at as usize / LINE;
                assert!(!seen[line], "line {line} of {lines} visited twice in one turn");
                seen[line] = true;
                at = v[at as usize];
            }
            assert_eq!(at, 0, "{lines} lines: back at the start after one turn");
        }
    }
}
