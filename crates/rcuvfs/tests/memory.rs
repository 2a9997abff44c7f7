//! Deleted data goes back to the system: the page allocator's frames are
//! freed once the file's last reference goes, without waiting for other
//! activity, and the process's resident memory falls.
//!
//! One test in its own binary: the page allocator is process-wide, so no
//! other test may write files meanwhile.

use std::time::{Duration, Instant};

use rcuvfs::{OpenOptions, Vfs};

/// Resident bytes of this process (`/proc/self/statm`).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Waits until the page allocator holds no frame in use, for at most
/// `limit` (a liveness bound, not a speed check: it is generous); returns
/// how long it took.
fn frames_freed_within(limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if rcuvfs::filemap::pool_stats().used_frames == 0 {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn deleted_data_is_handed_back_to_the_system_without_other_activity() {
    let mib = if cfg!(miri) { 1 } else { 128 };
    let v = Vfs::new();
    let chunk = vec![0x5Au8; 1 << 20];
    let base = rss();
    for round in 0..3 {
        let path = format!("/big{round}");
        {
            let f = v.open(&path, OpenOptions::new().write(true).create(true)).unwrap();
            for i in 0..mib {
                f.write_at(&chunk, (i << 20) as u64).unwrap();
            }
        }
        let full = rss();
        let s = rcuvfs::filemap::pool_stats();
        assert_eq!(s.used_frames, mib * 256, "round {round}: {s:?}");
        if !cfg!(miri) {
            assert!(full >= base + (mib as u64 - 8) * (1 << 20), "round {round}: rss {full} from {base}");
        }
        v.remove_file(&path).unwrap();
        // No synchronize, no other call: the data must go by itself.
        let took = frames_freed_within(Duration::from_secs(5));
        assert!(took.is_some(), "round {round}: frames still in use: {:?}", rcuvfs::filemap::pool_stats());
        let s = rcuvfs::filemap::pool_stats();
        // What stays mapped: the pool's spare chunks (four of 2 MiB) at
        // most; what stays resident is checked below.
        assert!(s.mapped_bytes <= 8 << 20, "round {round}: {s:?}");
        if !cfg!(miri) {
            let after = rss();
            assert!(
                after + (mib as u64 - 16) * (1 << 20) <= full,
                "round {round}: rss {after} after the delete, {full} with the file"
            );
        }
        // The space is refunded too (what df shows).
        assert_eq!(v.statfs().unwrap().blocks - v.statfs().unwrap().bfree, 0, "round {round}");
    }
}
