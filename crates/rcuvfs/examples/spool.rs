//! A spool: one thread creates files in a directory, another removes them
//! a little behind (a mail queue, a build's temporary files handed from
//! one stage to the next), LAG files behind. Prints, per round, ns per
//! file for the pair, and the ns each create and each remove took on its
//! own thread (the consumer's waits for the producer left out).
//!
//!   cargo run --release -p rcuvfs --example spool -- N LAG ROUNDS
//!
//! What it found (2026-11-29): the consumer, whose shard of the inode
//! table only ever removed, summed every shard's count at each remove
//! (`Index::shrink_if_sparse`), reading the line the producer writes at
//! each insert.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rcuvfs::Vfs;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::io::Result<()> {
    let arg = |k: usize, d: usize| std::env::args().nth(k).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n, lag, rounds) = (arg(1, 2_000_000), arg(2, 100_000), arg(3, 3));
    for _ in 0..rounds {
        let v = Vfs::builder().build()?;
        v.create_dir("/q")?;
        let made = AtomicUsize::new(0);
        let t = Instant::now();
        let (create, remove) = std::thread::scope(|s| {
            let producer = s.spawn(|| {
                let t = Instant::now();
                for i in 0..n {
                    v.write(format!("/q/f{i}"), b"").unwrap();
                    made.store(i + 1, Ordering::Release);
                }
                t.elapsed().as_nanos()
            });
            let consumer = s.spawn(|| {
                let (mut p, mut busy) = (String::new(), 0u128);
                for i in 0..n {
                    while made.load(Ordering::Acquire) < (i + lag).min(n) {
                        std::hint::spin_loop();
                    }
                    let t = Instant::now();
                    p.clear();
                    use std::fmt::Write;
                    write!(p, "/q/f{i}").unwrap();
                    v.remove_file(&p).unwrap();
                    busy += t.elapsed().as_nanos();
                }
                busy
            });
            (producer.join().unwrap(), consumer.join().unwrap())
        });
        let per = |ns: u128| ns as f64 / n as f64;
        println!(
            "ns per file {:.0}, a create {:.0}, a remove {:.0}",
            per(t.elapsed().as_nanos()),
            per(create),
            per(remove)
        );
    }
    Ok(())
}
