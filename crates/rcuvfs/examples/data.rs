//! Sequential data through the library: writes a file of N MiB in 1 MiB
//! calls, reads it back, deletes it, and prints the rates and the
//! process's resident memory at each step (the deleted data's memory goes
//! back to the system).
//!
//! `cargo run --release -p rcuvfs --example data -- 1024`

use std::time::Instant;

use rcuvfs::{OpenOptions, Vfs};

fn rss_mib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    (s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096) >> 20
}

fn main() -> std::io::Result<()> {
    let mib: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let v = Vfs::new();
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8).collect();
    println!("start: rss {} MiB", rss_mib());
    for round in 0..3 {
        let f = v.open("/data", OpenOptions::new().read(true).write(true).create(true))?;
        let t = Instant::now();
        for i in 0..mib {
            f.write_at(&chunk, (i << 20) as u64)?;
        }
        let w = t.elapsed();
        let mut buf = vec![0u8; 1 << 20];
        let t = Instant::now();
        for i in 0..mib {
            f.read_at(&mut buf, (i << 20) as u64)?;
        }
        let r = t.elapsed();
        assert_eq!(buf, chunk);
        let full = rss_mib();
        drop(f);
        v.remove_file("/data")?;
        let t = Instant::now();
        while rcuvfs::filemap::pool_stats().used_frames != 0 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        let freed = t.elapsed();
        let gb = mib as f64 * 1048576.0 / 1e9;
        println!(
            "round {round}: write {:.2} GB/s, read {:.2} GB/s, rss {} MiB with the file, {} MiB {:.1} ms after the delete",
            gb / w.as_secs_f64(),
            gb / r.as_secs_f64(),
            full,
            rss_mib(),
            freed.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
