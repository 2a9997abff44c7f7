//! The `files` workload's loop without the lab around it, for a profiler:
//! one thread creates N empty files in 1,000 directories
//! (`write(path, "")`), stats each (unless `nostat`), then removes each,
//! for some rounds, and prints ns per file for each phase.
//!
//!   cargo run --release -p rcuvfs --example files_loop -- [stat|nostat] N ROUNDS
//!
//! Each round uses a fresh Vfs (with `REUSE` in the environment, one Vfs
//! for all rounds; `ROUNDS` prints each round's create figure; `TARGET=n`
//! builds it with a cache target of `n` dentries; `PHASES` prints each
//! phase's start and end on CLOCK_MONOTONIC, in seconds, for
//! `perf record -k CLOCK_MONOTONIC` and `perf report --time start,end`).
use rcuvfs::Vfs;
use std::time::Instant;

/// CLOCK_MONOTONIC now, in seconds (perf's `--time` unit).
fn mono() -> f64 {
    // SAFETY: clock_gettime fills the struct it is given.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or("stat".into());
    let n: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(10_000);
    let rounds: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(100);
    let paths: Vec<String> = (0..n).map(|i| format!("/d{}/f{i}", i % 1000)).collect();
    let (mut c, mut s, mut u) = (0u128, 0u128, 0u128);
    let reuse = std::env::var("REUSE").is_ok();
    let mut keep = None;
    for _ in 0..rounds {
        if !reuse || keep.is_none() {
            let mut b = Vfs::builder();
            if let Some(t) = std::env::var("TARGET").ok().and_then(|t| t.parse().ok()) {
                b = b.dcache_target(t);
            }
            let v = b.build()?;
            for d in 0..1000 {
                v.create_dir(format!("/d{d}"))?;
            }
            keep = Some(v);
        }
        let v = keep.as_ref().unwrap();
        let phases = std::env::var("PHASES").is_ok();
        let m = mono();
        let t = Instant::now();
        for p in &paths {
            v.write(p, b"")?;
        }
        c += t.elapsed().as_nanos();
        if phases {
            eprintln!("phase create {m:.6},{:.6}", mono());
        }
        let m = mono();
        let t = Instant::now();
        if what != "nostat" {
            for p in &paths {
                v.metadata(p)?;
            }
        }
        s += t.elapsed().as_nanos();
        if phases {
            eprintln!("phase stat {m:.6},{:.6}", mono());
        }
        let m = mono();
        let t = Instant::now();
        for p in &paths {
            v.remove_file(p)?;
        }
        u += t.elapsed().as_nanos();
        if phases {
            eprintln!("phase unlink {m:.6},{:.6}", mono());
        }
        if std::env::var("ROUNDS").is_ok() {
            eprintln!("round create {} ", c / n as u128);
            c = 0;
        }
    }
    let k = (n * rounds) as f64;
    println!("create {:.0} stat {:.0} unlink {:.0}", c as f64 / k, s as f64 / k, u as f64 / k);
    Ok(())
}
