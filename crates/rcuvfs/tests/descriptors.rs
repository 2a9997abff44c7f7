//! The passthrough holds a bounded number of descriptors whatever the
//! number of names the VFS holds: nodes keep file handles, and descriptors
//! are a cache reopened from them. A file unlinked while open stays
//! readable through evictions.
//!
//! Its own binary: it counts the process's descriptors, which other tests
//! running at once would change.

use std::sync::Arc;

use rcuvfs::fs::passthrough::{Passthrough, PassthroughOptions};
use rcuvfs::{OpenOptions, Vfs};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn thousands_of_held_files_use_a_bounded_number_of_descriptors() {
    let dir = std::env::temp_dir().join(format!("rcuvfs-fds-{}", std::process::id()));
    let n = 2000;
    for d in 0..10 {
        std::fs::create_dir_all(dir.join(format!("d{d}"))).unwrap();
        for f in 0..n / 10 {
            std::fs::write(dir.join(format!("d{d}/f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    let budget = 32;
    let opts = PassthroughOptions { descriptor_cache: Some(budget), ..Default::default() };
    let pt = Arc::new(Passthrough::new(&dir, opts).unwrap());
    let (handles, ..) = pt.descriptors();
    // SAFETY: a plain query.
    let root = unsafe { libc::geteuid() } == 0;
    // As root on the test's own temporary directory (ext4, tmpfs: both
    // export handles), handles must work; without CAP_DAC_READ_SEARCH they
    // cannot, and the passthrough keeps descriptors as before.
    assert!(handles || !root, "no file handles as root under {}", dir.display());
    if !handles {
        eprintln!("no file handles without root: skipped");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let v = Vfs::builder().filesystem(pt.clone()).build().unwrap();
    let base = open_fds();
    // Hold every name (as the kernel above a mount does), read and write
    // each file, and a file unlinked while open.
    let victim = v.open("/d0/f0", OpenOptions::new().read(true)).unwrap();
    v.remove_file("/d0/f0").unwrap();
    let mut held = Vec::new();
    let mut peak = 0;
    for round in 0..2 {
        for d in 0..10 {
            for f in 0..n / 10 {
                if (d, f) == (0, 0) {
                    continue;
                }
                let p = format!("/d{d}/f{f}");
                if round == 0 {
                    held.push(v.entry(&p).unwrap());
                    v.write(&p, format!("{d}/{f}!")).unwrap();
                }
                assert_eq!(v.read_to_string(&p).unwrap(), format!("{d}/{f}!"), "{p}");
                peak = peak.max(open_fds());
            }
        }
    }
    let (_, cached, bound, reopened) = pt.descriptors();
    assert!(cached <= bound, "{cached} nodes hold descriptors, bound {bound}");
    // Two per cached node, the pinned victim's two, and slack for the
    // directories being listed and the watcher.
    assert!(peak <= base + 2 * budget + 16, "{peak} descriptors open at the peak, {base} before");
    assert!(reopened > 0, "nothing was evicted and reopened");
    let mut buf = [0u8; 16];
    let k = victim.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..k], b"0/0", "the unlinked open file lost its data");
    drop((held, victim, v));
    std::fs::remove_dir_all(&dir).unwrap();
}
