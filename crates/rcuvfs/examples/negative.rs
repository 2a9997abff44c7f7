//! What a cached miss costs: N lookups of names that do not exist (spread
//! over 1,000 directories, as the lab's `files`), in a process of its own
//! so that the RSS grows by what they leave (the lab's `files` runs them
//! after its creates have settled, when the allocator has free memory to
//! reuse). Prints ns per miss, the same again for a second miss of each
//! name (answered from the cache), and the RSS growth per cached miss. It
//! allocates with mimalloc, as the CLI does.
//!
//! Run twice: the directories here are made through the Vfs, so they are
//! complete (the builder's `complete_dirs`, on by default), and a miss in
//! them leaves nothing at all; with `complete_dirs(false)` (the second
//! line) every miss asks memfs, as over any filesystem that can change
//! behind the cache (the passthrough, etcd), and leaves its name in its
//! directory's set of absent names (`dcache::absent`; a 128-byte negative
//! dentry each before: 151 bytes a miss with mimalloc, 273-284 with the
//! system allocator).
//!
//! `cargo run --release -p rcuvfs --example negative -- 200000`
//!
//! With a bound and a number of directories after N (`negative -- 2000000
//! 262144 1`), the misses run past that bound on cached misses (the
//! dcache target twice it), so that evictions are part of what a
//! miss costs.

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
    let n = arg(1).unwrap_or(200_000);
    // Room for every negative dentry unless a bound is given: none is
    // shrunk while counted.
    let bound = arg(2).unwrap_or(2 * n + 4096);
    let dirs = arg(3).unwrap_or(1000).max(1);
    for complete in [true, false] {
        run(n, bound, dirs, complete)?;
    }
    Ok(())
}

fn run(n: usize, bound: usize, dirs: usize, complete: bool) -> std::io::Result<()> {
    let v = Vfs::builder().dcache_target(2 * bound).negative_dentries(bound).complete_dirs(complete).build()?;
    for d in 0..dirs {
        v.create_dir(format!("/d{d}"))?;
    }
    let names: Vec<String> = (0..n).map(|i| format!("/d{}/m{i}", i % dirs)).collect();
    let before = rss();
    let t = Instant::now();
    for p in &names {
        if v.metadata(p).is_ok() {
            return Err(std::io::Error::other(format!("{p} was never created, yet a stat found it")));
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    let grown = rss().saturating_sub(before) as f64 / n as f64;
    let t = Instant::now();
    for p in &names {
        if v.metadata(p).is_ok() {
            return Err(std::io::Error::other(format!("{p} was never created, yet a stat found it")));
        }
    }
    let again = t.elapsed().as_nanos() as f64 / n as f64;
    let s = v.stats();
    println!(
        "complete_dirs({complete}): {n} misses: {ns:.0} ns each, {again:.0} ns again; RSS +{grown:.0} bytes per miss ({} absent names and {} negative dentries cached)",
        s.absent_names, s.negative_dentries
    );
    Ok(())
}
