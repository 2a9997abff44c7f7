//! The hot stat: one thread stats one cached path over and over
//! (`Vfs::metadata`), for a few paths of different shapes, and prints ns
//! per stat (the median of 7 runs of 2M stats each). What the walk costs
//! when nothing misses the caches: `stat-same`'s path at depth 4, a short
//! one, and a source tree's.
//!
//!   cargo run --release -p rcuvfs --example hot_stat -- [RUNS]
use rcuvfs::Vfs;
use std::time::Instant;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PATHS: [&str; 3] = ["/d0/d1/d2/file", "/d2/f2", "/src/components/button/index.tsx"];

fn main() -> std::io::Result<()> {
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    let v = Vfs::new();
    for p in PATHS {
        let (dir, _) = p.rsplit_once('/').expect("an absolute path");
        v.create_dir_all(dir)?;
        v.write(p, b"x")?;
    }
    for p in PATHS {
        let mut ns: Vec<f64> = (0..runs)
            .map(|_| {
                const N: u32 = 2_000_000;
                let t = Instant::now();
                for _ in 0..N {
                    std::hint::black_box(v.metadata(std::hint::black_box(p)).expect("a cached file"));
                }
                t.elapsed().as_nanos() as f64 / f64::from(N)
            })
            .collect();
        ns.sort_by(f64::total_cmp);
        println!("{p:<36} {:>6.1} ns (runs {:.1}-{:.1})", ns[ns.len() / 2], ns[0], ns[ns.len() - 1]);
    }
    Ok(())
}
