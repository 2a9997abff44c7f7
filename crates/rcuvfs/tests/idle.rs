//! A program that deletes files and then does nothing gets their memory
//! back: the reclaimer thread hands over the retired inodes of idle
//! threads and trims the page pool once no frame moves, to no resident
//! free frame at all (issue 19: deleted data freed within a second, even
//! when nothing else runs).
//!
//! One test in its own binary: the page allocator is process-wide, so no
//! other test may write files meanwhile.

use std::io::Write;
use std::time::{Duration, Instant};

use rcuvfs::{OpenOptions, Vfs};

/// Resident bytes of this process (`/proc/self/statm`).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Waits, doing nothing else, until `done` holds, for at most `limit` (a
/// liveness bound, not a speed check: it is generous).
fn idle_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while !done() {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn deleted_small_files_go_back_to_the_system_while_the_program_is_idle() {
    let v = Vfs::new();
    // A few files: their inodes wait in this thread's list of retired
    // objects, which fills only with more deletes.
    for n in [10, 1000, 100_000] {
        for i in 0..n {
            let mut f = v.open(format!("/f{i}"), OpenOptions::new().write(true).create(true)).unwrap();
            f.write_all(b"a small file's bytes").unwrap();
        }
        let full = rss();
        for i in 0..n {
            v.remove_file(format!("/f{i}")).unwrap();
        }
        let freed = idle_until(Duration::from_secs(10), || {
            let s = rcuvfs::filemap::pool_stats();
            s.used_frames == 0 && s.dirty_free_frames == 0
        });
        assert!(freed, "{n} files: {:?}", rcuvfs::filemap::pool_stats());
        if n == 100_000 {
            // 390 MiB of frames were written; what the pool kept of them
            // for more small files (up to 256 MiB) went back too.
            let now = rss();
            assert!(now + (200 << 20) < full, "rss {} MiB after, {} MiB full", now >> 20, full >> 20);
        }
    }
}
