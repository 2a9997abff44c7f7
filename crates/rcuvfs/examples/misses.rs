//! Misses past the negative-dentry target with many files cached: one
//! thread creates N empty files (spread over 1,000 directories, as the
//! lab's `files`), then stats M names that do not exist, in rounds of
//! 100,000, and prints ns per miss for each round. The first rounds fill
//! the negative dentries up to their target (a quarter of the dcache
//! target, 2^18 by default); from then on every 1/64 of the dcache target
//! (16,384 misses) starts a pass that frees negative dentries. The files
//! stay cached (N plus the negatives stay under the dcache target), so a
//! pass that had to step over them (one list for both kinds, before
//! 2026-11-26) cost per miss what N does.
//!
//! `cargo run --release -p rcuvfs --example misses -- 700000 1000000`

use std::time::Instant;

use rcuvfs::Vfs;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let n = args.next().unwrap_or(700_000);
    let m = args.next().unwrap_or(1_000_000);
    let v = Vfs::builder().build()?;
    for d in 0..1000 {
        v.create_dir(format!("/d{d}"))?;
    }
    let t = Instant::now();
    for i in 0..n {
        v.write(format!("/d{}/f{i}", i % 1000), b"")?;
    }
    println!("{n} files created: {:.0} ns per file", t.elapsed().as_nanos() as f64 / n as f64);
    const ROUND: usize = 100_000;
    let mut done = 0;
    while done < m {
        let k = ROUND.min(m - done);
        let names: Vec<String> = (done..done + k).map(|i| format!("/d{}/m{i}", i % 1000)).collect();
        let t = Instant::now();
        for p in &names {
            if v.metadata(p).is_ok() {
                return Err(std::io::Error::other(format!("{p} was never created, yet a stat found it")));
            }
        }
        done += k;
        println!("misses {:>8} to {:>8}: {:.0} ns per miss", done - k, done, t.elapsed().as_nanos() as f64 / k as f64);
    }
    // Every file is still cached: a stat of each finds it without a miss.
    let t = Instant::now();
    for i in 0..n {
        v.metadata(format!("/d{}/f{i}", i % 1000))?;
    }
    println!("files stat'ed again: {:.0} ns per file", t.elapsed().as_nanos() as f64 / n as f64);
    Ok(())
}
