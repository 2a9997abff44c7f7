//! Reads of N small files by path (`Vfs::read`: open, read, close) after
//! they were created, in 1,000 directories, as the `files` workload makes
//! them: ns per read, per pass. Past `dcache_target` (1M) most names have
//! no dentry, and each read finds its file through memfs.
//!
//!   cargo run --release -p rcuvfs --example read_loop -- N PASSES
use rcuvfs::Vfs;
use std::time::Instant;
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(100_000);
    let passes: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(2);
    let paths: Vec<String> = (0..n).map(|i| format!("/d{}/f{i}", i % 1000)).collect();
    let v = Vfs::builder().build()?;
    for d in 0..1000 {
        v.create_dir(format!("/d{d}"))?;
    }
    for p in &paths {
        v.write(p, b"x")?;
    }
    for _ in 0..passes {
        let t = Instant::now();
        for p in &paths {
            assert_eq!(v.read(p)?.len(), 1);
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        println!("read {ns:.0} ns, dentries {}", v.stats().dentries);
    }
    Ok(())
}
