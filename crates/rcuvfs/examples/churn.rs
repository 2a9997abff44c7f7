//! The lab's `churn` workload without the lab around it (for a profiler,
//! and with what the cache holds printed as it goes).
//!
//! A directory whose names come and go for ever at a steady count (a
//! build's temporary files, a mail spool, a cache directory): does a step
//! cost the same after a hundred turnovers as after one, and does the
//! memory stay put? Each step removes the oldest of `LIVE` names, creates
//! a new one (`write(path, "")`), stats a live name and stats a removed
//! one (a miss). Every tenth of the run prints ns per step, the RSS and
//! what the cache holds (dentries, negative dentries, cached misses).
//!
//! `cargo run --release -p rcuvfs --example churn -- LIVE STEPS DIRS [incomplete]`
//!
//! With `incomplete`, directories are not complete (`complete_dirs(false)`),
//! so every miss asks memfs and leaves its name in the directory's set of
//! absent names, and their eviction is part of the run.

use std::collections::VecDeque;
use std::time::Instant;

use rcuvfs::Vfs;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

fn main() -> std::io::Result<()> {
    let arg = |k: usize| std::env::args().nth(k).and_then(|a| a.parse::<usize>().ok());
    let live = arg(1).unwrap_or(10_000).max(1);
    let steps = arg(2).unwrap_or(10_000_000);
    let dirs = arg(3).unwrap_or(1).max(1);
    let complete = std::env::args().nth(4).as_deref() != Some("incomplete");
    let mut b = Vfs::builder().complete_dirs(complete);
    if let Some(n) = std::env::var("NEGATIVE").ok().and_then(|n| n.parse().ok()) {
        b = b.negative_dentries(n);
    }
    let v = b.build()?;
    for d in 0..dirs {
        v.create_dir(format!("/d{d}"))?;
    }
    let path = |i: usize| format!("/d{}/f{i}", i % dirs);
    let mut names: VecDeque<usize> = (0..live).collect();
    for &i in &names {
        v.write(path(i), b"")?;
    }
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let window = (steps / 10).max(1);
    println!("live {live}, steps {steps}, dirs {dirs}, complete {complete}");
    println!(
        "{:>11} {:>8} {:>7} {:>7} {:>6} {:>6} {:>8} {:>9} {:>9} {:>8}",
        "steps", "ns/step", "unlink", "create", "stat", "miss", "RSS MB", "dentries", "negative", "absent"
    );
    let mut t = Instant::now();
    let mut phase = [0u128; 4];
    for step in 1..=steps {
        let next = live + step - 1;
        let old = names.pop_front().unwrap();
        let (po, pn) = (path(old), path(next));
        let t0 = Instant::now();
        v.remove_file(&po)?;
        let t1 = Instant::now();
        v.write(&pn, b"")?;
        let t2 = Instant::now();
        phase[0] += (t1 - t0).as_nanos();
        phase[1] += (t2 - t1).as_nanos();
        names.push_back(next);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let hit = names[(rng % live as u64) as usize];
        let (ph, pg) = (path(hit), path(old.saturating_sub((rng >> 32) as usize % (10 * live))));
        let t0 = Instant::now();
        v.metadata(&ph)?;
        let t1 = Instant::now();
        // A name removed at most ten turnovers ago.
        let found = v.metadata(&pg).is_ok();
        let t2 = Instant::now();
        phase[2] += (t1 - t0).as_nanos();
        phase[3] += (t2 - t1).as_nanos();
        if found {
            return Err(std::io::Error::other(format!("{pg} was removed, yet a stat found it")));
        }
        if step % window == 0 {
            let ns = t.elapsed().as_nanos() as f64 / window as f64;
            let p = phase.map(|p| p as f64 / window as f64);
            let s = v.stats();
            println!(
                "{step:>11} {ns:>8.0} {:>7.0} {:>7.0} {:>6.0} {:>6.0} {:>8.1} {:>9} {:>9} {:>8}",
                p[0],
                p[1],
                p[2],
                p[3],
                rss() as f64 / 1e6,
                s.dentries,
                s.negative_dentries,
                s.absent_names
            );
            t = Instant::now();
            phase = [0; 4];
        }
    }
    Ok(())
}
