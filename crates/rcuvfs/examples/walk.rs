//! Walks a tree of N files (default 100,000: 100 per directory, three
//! levels) with `Vfs::walk` and with `Vfs::walk_parallel` over 1 to T
//! threads, and prints ns per entry of each (the median of 5 walks).
//!
//! `cargo run --release -p rcuvfs --example walk -- [N] [T]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rcuvfs::Vfs;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> std::io::Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = args.first().copied().unwrap_or(100_000);
    let max_threads = args.get(1).copied().unwrap_or(2);
    let v = Vfs::new();
    let dirs = n.div_ceil(100);
    let side = (dirs as f64).sqrt().ceil() as usize;
    for d in 0..dirs {
        let dir = format!("/t/a{}/b{}", d / side, d % side);
        v.create_dir_all(&dir)?;
        for f in 0..100.min(n - d * 100) {
            v.write(format!("{dir}/f{f}"), b"")?;
        }
    }
    let total = v.walk("/t").count();
    println!("tree: {n} files, {total} entries");
    let serial = median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                let mut k = 0;
                for w in v.walk("/t") {
                    std::hint::black_box(w.expect("entry").metadata());
                    k += 1;
                }
                assert_eq!(k, total);
                t.elapsed().as_nanos() as f64 / total as f64
            })
            .collect(),
    );
    println!("walk            {serial:>8.1} ns/entry");
    for threads in 1..=max_threads {
        let par = median(
            (0..5)
                .map(|_| {
                    let k = AtomicU64::new(0);
                    let t = Instant::now();
                    v.walk_parallel("/t", threads, |w| {
                        std::hint::black_box(w.expect("entry").metadata());
                        k.fetch_add(1, Ordering::Relaxed);
                    });
                    assert_eq!(k.load(Ordering::Relaxed) as usize, total);
                    t.elapsed().as_nanos() as f64 / total as f64
                })
                .collect(),
        );
        println!("walk_parallel {threads:>2} {par:>8.1} ns/entry  ({:.2}x the serial walk)", serial / par);
    }
    Ok(())
}
