//! The lab's story: one row per source document (seed), with the
//! technique, the seed's own headline figure, and the before/after ratio
//! this run measured for it, from the rows the run produced. Where the
//! effect does not show here, a line says why the seed's setting differs.

use serde::Serialize;

use super::Row;

/// Which direction the seed's effect goes.
#[derive(Clone, Copy)]
enum Effect {
    /// `after` is faster than `before` (ops/s ratio above 1).
    Faster,
    /// `after` costs more than `before` on one thread (ratio below 1): the
    /// price the seed itself measured.
    Slower,
}

/// Which thread count a seed's ratio is read at.
#[derive(Clone, Copy)]
enum At {
    /// The largest this run measured (the contended case).
    Most,
    /// One thread (the uncontended cost).
    One,
}

struct Seed {
    id: &'static str,
    technique: &'static str,
    /// The seed's own figure, quoted from it.
    headline: &'static str,
    workload: &'static str,
    before: &'static str,
    after: &'static str,
    at: At,
    effect: Effect,
    /// Why the effect may not show on this machine, printed only when it
    /// does not.
    why_not: &'static str,
}

/// A ratio above this (or below its inverse) is an effect; within it, noise.
const NOISE: f64 = 1.10;

static SEEDS: &[Seed] = &[
    Seed {
        id: "000",
        technique: "lockref: dget/dput by cmpxchg, d_lock only near zero",
        headline: "AIM7 short: +228% JPM on 80 cores (8 nodes), +0.9% on 1 node",
        workload: "short",
        before: "dlock",
        after: "lockref",
        at: At::Most,
        effect: Effect::Faster,
        why_not:
            "the seed's gain needs 20 CPUs or more (on 1 node it measured +0.9%); here the lock is rarely contended",
    },
    Seed {
        id: "001",
        technique: "page cache tree_lock as an rwlock",
        headline: "dd bs=1 read on a P4: 1.635 -> 1.87 us per byte (the rwlock's price, ~240 ns)",
        workload: "dd-read",
        before: "mutex",
        after: "rwlock",
        at: At::One,
        effect: Effect::Slower,
        why_not: "an uncontended rwlock costs about what a mutex does on this CPU; the P4's atomics were far slower",
    },
    Seed {
        id: "002",
        technique: "lockref moved off the cache line RCU lookup reads",
        headline: "will-it-scale stat2, 20 threads: 5.04M -> 7.84M ops/s (+55%)",
        workload: "stat-same",
        before: "rcuwalk+packed",
        after: "rcuwalk",
        at: At::Most,
        effect: Effect::Faster,
        why_not: "with 2 threads there is one other core to bounce the line with; the seed had 20",
    },
    Seed {
        id: "003",
        technique: "RCU path lookup instead of the global dcache_lock",
        headline: "SPECweb99 +12% on 8 CPUs; kernel build system time -10%; no change on 1 CPU",
        workload: "rename-storm",
        before: "global",
        after: "rcuwalk",
        at: At::Most,
        effect: Effect::Faster,
        why_not: "one thread takes an uncontended lock; the seed saw no change on 1 CPU either",
    },
    Seed {
        id: "004",
        technique: "list batching for the superblock's inode list",
        headline: "1000 threads exiting, 48 cores: 65.29 s -> 45.69 s elapsed (-30%)",
        workload: "inode-exit",
        before: "locked",
        after: "batch",
        at: At::Most,
        effect: Effect::Faster,
        why_not: "batching pays when many CPUs queue on one lock; 2 cores queue at most one waiter",
    },
];

/// The (seed, before, after) modes the seeds compare in `workload`.
pub fn compared(workload: &str) -> Vec<(&'static str, &'static str, &'static str)> {
    SEEDS.iter().filter(|s| s.workload == workload).map(|s| (s.id, s.before, s.after)).collect()
}

/// One seed's row as this run measured it.
#[derive(Serialize)]
pub struct SeedRow {
    pub seed: &'static str,
    pub technique: &'static str,
    pub headline: &'static str,
    pub workload: &'static str,
    pub before: &'static str,
    pub after: &'static str,
    /// The thread count of the comparison (None: not measured).
    pub threads: Option<usize>,
    /// ops/s after over ops/s before (for inode-exit, files per second of
    /// the exit phase), the medians of this run.
    pub ratio: Option<f64>,
    /// Whether the seed's effect showed (beyond the noise band).
    pub shows: Option<bool>,
    /// Why not, where it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<&'static str>,
}

/// The seeds' rows from this run's results.
pub fn summarize(rows: &[Row]) -> Vec<SeedRow> {
    SEEDS
        .iter()
        .map(|s| {
            let of = |mode: &'static str| rows.iter().filter(move |r| r.workload == s.workload && r.mode == mode);
            let both: Vec<usize> =
                of(s.before).map(|r| r.threads).filter(|t| of(s.after).any(|r| r.threads == *t)).collect();
            let threads = match s.at {
                At::Most => both.iter().copied().max(),
                At::One => both.iter().copied().min(),
            };
            let ratio = threads.and_then(|t| {
                let b = of(s.before).find(|r| r.threads == t)?.ops_per_sec;
                let a = of(s.after).find(|r| r.threads == t)?.ops_per_sec;
                (b > 0.0).then(|| a / b)
            });
            let shows = ratio.map(|r| match s.effect {
                Effect::Faster => r >= NOISE,
                Effect::Slower => r <= 1.0 / NOISE,
            });
            SeedRow {
                seed: s.id,
                technique: s.technique,
                headline: s.headline,
                workload: s.workload,
                before: s.before,
                after: s.after,
                threads,
                ratio,
                shows,
                why_not: (shows == Some(false)).then_some(s.why_not),
            }
        })
        .collect()
}

/// What the run measured for a seed, in words.
pub fn measured(r: &SeedRow) -> String {
    match (r.ratio, r.threads) {
        (Some(x), Some(t)) => format!("{} {}/{} at {t} thr: {x:.2}x", r.workload, r.after, r.before),
        _ => format!("not measured (run {} in {} and {})", r.workload, r.before, r.after),
    }
}

/// Prints the table that ends `rcuvfs bench`.
pub fn print(rows: &[SeedRow]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("\nThe seeds, measured in this run ({cores} cores; after/before ops/s, medians):");
    println!("{:<5} {:<54} here", "seed", "technique");
    for r in rows {
        println!("{:<5} {:<54} {}", r.seed, r.technique, measured(r));
        println!("{:<5} the seed: {}", "", r.headline);
        if let Some(w) = r.why_not {
            println!("{:<5} not shown here: {w}", "");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, mode: &str, threads: usize, ops_per_sec: f64) -> Row {
        Row::for_test(workload, mode, threads, ops_per_sec)
    }

    #[test]
    fn ratios_come_from_this_runs_rows() {
        let rows = vec![
            row("short", "dlock", 1, 100.0),
            row("short", "dlock", 2, 100.0),
            row("short", "lockref", 1, 100.0),
            row("short", "lockref", 2, 300.0),
            row("short", "lockref", 4, 900.0), // no dlock at 4: not compared
            row("dd-read", "mutex", 1, 100.0),
            row("dd-read", "rwlock", 1, 95.0),
            row("dd-read", "mutex", 2, 10.0),
            row("dd-read", "rwlock", 2, 1000.0),
        ];
        let s = summarize(&rows);
        let by = |id: &str| s.iter().find(|r| r.seed == id).unwrap();
        // 000 at the most threads both modes ran: 3x, shown.
        assert_eq!((by("000").threads, by("000").ratio, by("000").shows), (Some(2), Some(3.0), Some(true)));
        assert!(by("000").why_not.is_none());
        // 001 at one thread: 0.95x is within the noise band: not shown,
        // with its reason.
        assert_eq!((by("001").threads, by("001").ratio), (Some(1), Some(0.95)));
        assert_eq!(by("001").shows, Some(false));
        assert!(by("001").why_not.is_some());
        // Not run: no ratio, no verdict.
        assert_eq!((by("002").ratio, by("002").shows), (None, None));
        assert!(measured(by("002")).starts_with("not measured"));
    }
}
