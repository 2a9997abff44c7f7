//! `churn`: does a directory whose names come and go cost the same after
//! many turnovers as after one? One thread keeps N names in one directory
//! (a build's temporary files, a mail spool, a cache directory): each step
//! removes the oldest name, creates a new one, stats a live name and stats
//! a name removed at most ten turnovers (and a quarter of the run) ago (a
//! miss). Every structure a removal touches keeps something of it
//! (tombstones in the directory's index, negative dentries, names in a set
//! of absent names), so a cost that grows with the number of steps shows
//! here and not in `files`, which grows the number of files instead.
//!
//! Reports ns per operation in the fifth tenth of the run (half-way: past
//! the warm-up, while the first 262,144 removals fill the cache's default
//! bound on cached misses) and in the last, their ratio for a whole step,
//! and the memory kept per
//! live name at the end (RSS growth for the Vfs, the kernel's slab growth
//! for `host`). Each operation is timed on its own, so each figure holds
//! one clock read (20-40 ns on this project's VM), the same for every
//! mode.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::files::{median_by, repeated, rss, slab};
use super::subject::{HostSubject, Subject, VfsSubject};

/// Steps in a run of `live` names: ten turnovers, but at least a million
/// (past the default bound on cached misses, 262,144, four times over) and
/// at most four million (the host's steps cost 20-30 us here).
fn steps_for(live: usize) -> usize {
    (10 * live).clamp(1_000_000, 4_000_000)
}

/// ns per operation over a tenth of a run.
#[derive(Serialize, Clone, Copy, Default)]
pub struct Tenth {
    pub unlink_ns: f64,
    pub create_ns: f64,
    pub stat_ns: f64,
    pub miss_ns: f64,
}

impl Tenth {
    fn step_ns(&self) -> f64 {
        self.unlink_ns + self.create_ns + self.stat_ns + self.miss_ns
    }
}

#[derive(Serialize, Clone)]
pub struct ChurnRow {
    pub mode: String,
    /// Names in the directory throughout.
    pub live: usize,
    pub steps: usize,
    /// Every tenth of the run, in order.
    pub tenths: Vec<Tenth>,
    /// The last tenth's step over the fifth's: 1.0 if a step costs the
    /// same at the end as half-way.
    pub last_over_middle: f64,
    /// Memory growth at the end, settled, per live name (as in `files`,
    /// what an earlier cell of the same process freed and the allocator
    /// kept hides up to as much of a later cell's).
    pub bytes_per_name: f64,
    /// What `bytes_per_name` measures.
    pub memory: &'static str,
}

impl ChurnRow {
    /// The row's cells, as the terminal's table and the HTML report show
    /// them: mode, names, steps, each operation's ns half-way and last,
    /// last over half-way, bytes per name.
    pub fn cells(&self) -> [String; 9] {
        let pair = |f: fn(&Tenth) -> f64| format!("{:.0} / {:.0}", f(&self.tenths[4]), f(&self.tenths[9]));
        [
            self.mode.clone(),
            self.live.to_string(),
            self.steps.to_string(),
            pair(|t| t.unlink_ns),
            pair(|t| t.create_ns),
            pair(|t| t.stat_ns),
            pair(|t| t.miss_ns),
            format!("{:.2}", self.last_over_middle),
            format!("{:.0}", self.bytes_per_name),
        ]
    }
}

fn run_on<S: Subject>(
    s: &S,
    mode: &str,
    live: usize,
    steps: usize,
    memory: (fn() -> u64, &'static str),
) -> std::io::Result<ChurnRow> {
    if live == 0 || steps < 10 {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    s.mkdir_all("/c")?;
    let path = |i: usize, buf: &mut String| {
        use std::fmt::Write;
        buf.clear();
        let _ = write!(buf, "/c/f{i}");
    };
    let (mut name, mut p) = (String::new(), S::Path::default());
    let m0 = memory.0();
    let mut names: VecDeque<usize> = (0..live).collect();
    for i in 0..live {
        path(i, &mut name);
        s.path_into(&name, &mut p);
        s.write_new(&p, b"")?;
    }
    let (mut next, mut rng) = (live, 0x2545_f491_4f6c_dd1d_u64);
    let window = steps / 10;
    // How far back a miss's name was removed: ten turnovers, but no more
    // than a quarter of the run, so that the misses are drawn alike from
    // then on (past the bound on cached misses, the older of them are
    // asked of the filesystem again).
    let gone_range = (10 * live).min(steps / 4).max(1);
    let (mut tenths, mut sums) = (Vec::new(), [0u128; 4]);
    for step in 1..=steps {
        let old = names.pop_front().expect("live >= 1");
        path(old, &mut name);
        s.path_into(&name, &mut p);
        let t = Instant::now();
        s.unlink(&p)?;
        sums[0] += t.elapsed().as_nanos();
        path(next, &mut name);
        s.path_into(&name, &mut p);
        let t = Instant::now();
        s.write_new(&p, b"")?;
        sums[1] += t.elapsed().as_nanos();
        names.push_back(next);
        next += 1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        path(names[(rng % live as u64) as usize], &mut name);
        s.path_into(&name, &mut p);
        let t = Instant::now();
        s.stat(&p)?;
        sums[2] += t.elapsed().as_nanos();
        path(old.saturating_sub((rng >> 32) as usize % gone_range), &mut name);
        s.path_into(&name, &mut p);
        let t = Instant::now();
        let found = s.stat(&p).is_ok();
        sums[3] += t.elapsed().as_nanos();
        if found {
            return Err(std::io::Error::other(format!("churn: {name} was removed, yet a stat found it")));
        }
        if step % window == 0 {
            let w = window as f64;
            tenths.push(Tenth {
                unlink_ns: sums[0] as f64 / w,
                create_ns: sums[1] as f64 / w,
                stat_ns: sums[2] as f64 / w,
                miss_ns: sums[3] as f64 / w,
            });
            sums = [0; 4];
        }
    }
    s.settle();
    let bytes_per_name = memory.0().saturating_sub(m0) as f64 / live as f64;
    let last_over_middle = tenths[tenths.len() - 1].step_ns() / tenths[4].step_ns();
    Ok(ChurnRow { mode: mode.to_string(), live, steps, tenths, last_over_middle, bytes_per_name, memory: memory.1 })
}

fn run_vfs(mode: &str, live: usize, dcache_target: Option<usize>) -> std::io::Result<ChurnRow> {
    let s = VfsSubject { vfs: super::workloads::mode_vfs(mode, dcache_target)?, stats: None };
    run_on(&s, mode, live, steps_for(live), (rss, "process RSS"))
}

fn run_host(live: usize, host_dir: &Path) -> std::io::Result<ChurnRow> {
    run_on(&HostSubject::scratch(host_dir, "churn")?, "host", live, steps_for(live), (slab, "kernel slab"))
}

/// Runs every size in every mode, `repeats` times each; each figure is
/// the median over the runs (memory: the first run's, as in `files`).
pub fn sweep(
    modes: &[String],
    sizes: &[usize],
    repeats: usize,
    dcache_target: Option<usize>,
    host_dir: &Path,
) -> std::io::Result<Vec<ChurnRow>> {
    println!("\nchurn: one thread keeps N names in one directory; a step removes the oldest, creates one, stats a live and a removed name");
    println!(
        "{:<18} {:>9} {:>9} {:>22} {:>22} {:>22} {:>22} {:>8} {:>8}",
        "mode",
        "names",
        "steps",
        "unlink ns mid/last",
        "create ns mid/last",
        "stat ns mid/last",
        "miss ns mid/last",
        "last/mid",
        "B/name"
    );
    let mut rows = Vec::new();
    for &n in sizes {
        for m in modes {
            let run = || if m == "host" { run_host(n, host_dir) } else { run_vfs(m, n, dcache_target) };
            let Some(runs) = repeated(m, n, repeats, run) else { continue };
            let tenths = (0..10)
                .map(|k| Tenth {
                    unlink_ns: median_by_key(&runs, k, |t| t.unlink_ns),
                    create_ns: median_by_key(&runs, k, |t| t.create_ns),
                    stat_ns: median_by_key(&runs, k, |t| t.stat_ns),
                    miss_ns: median_by_key(&runs, k, |t| t.miss_ns),
                })
                .collect::<Vec<_>>();
            let r = ChurnRow {
                mode: m.clone(),
                live: n,
                steps: runs[0].steps,
                last_over_middle: median_by(&runs, |r| r.last_over_middle),
                bytes_per_name: runs[0].bytes_per_name,
                memory: runs[0].memory,
                tenths,
            };
            let c = r.cells();
            println!(
                "{:<18} {:>9} {:>9} {:>22} {:>22} {:>22} {:>22} {:>8} {:>8}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]
            );
            rows.push(r);
        }
    }
    Ok(rows)
}

/// The median over `runs` of one figure of their `k`th tenth.
fn median_by_key(runs: &[ChurnRow], k: usize, f: fn(&Tenth) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(|r| f(&r.tenths[k])).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run answers every stat of a live name and no stat of a removed
    /// one, over a Vfs and over the host, keeps its N names, and reports
    /// ten tenths.
    #[test]
    fn a_small_churn_runs_in_the_vfs_and_on_the_host() {
        let s = VfsSubject { vfs: super::super::workloads::mode_vfs("norefs", None).unwrap(), stats: None };
        let r = run_on(&s, "norefs", 50, 2_000, (rss, "process RSS")).unwrap();
        assert_eq!(r.tenths.len(), 10);
        assert!(r.tenths.iter().all(|t| t.unlink_ns > 0.0 && t.create_ns > 0.0));
        assert_eq!(s.vfs.read_dir("/c").unwrap().count(), 50);
        let h = HostSubject::scratch(&std::env::temp_dir(), "churn-test").unwrap();
        let r = run_on(&h, "host", 20, 500, (slab, "kernel slab")).unwrap();
        assert_eq!(r.tenths.len(), 10);
        assert_eq!(std::fs::read_dir(h.root.join("c")).unwrap().count(), 20);
        // No names, or too few steps for ten tenths: EINVAL.
        let e = |r: std::io::Result<ChurnRow>| r.err().and_then(|e| e.raw_os_error());
        assert_eq!(e(run_on(&s, "norefs", 0, 100, (rss, "process RSS"))), Some(libc::EINVAL));
        assert_eq!(e(run_on(&s, "norefs", 5, 9, (rss, "process RSS"))), Some(libc::EINVAL));
    }
}
