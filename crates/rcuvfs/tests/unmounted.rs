//! An unmounted filesystem's memory goes back: a memfs mounted in a `Vfs`,
//! written, unmounted, and the `Vfs` dropped right after, frees its file
//! data. (Its superblock, retired through the `Vfs`'s RCU domain, held that
//! domain alive, and the domain held it: the mounted tree leaked, as Miri's
//! leak check on the mount tests showed.)
//!
//! One test in its own binary: the page allocator is process-wide, so no
//! other test may write files meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rcuvfs::fs::memfs::{MemFs, MemFsOptions};
use rcuvfs::{OpenOptions, Vfs};

#[test]
fn an_unmounted_memfs_frees_its_data_once_its_vfs_goes() {
    let mib = if cfg!(miri) { 1 } else { 16 };
    let chunk = vec![0x5Au8; 1 << 20];
    for round in 0..3 {
        let v = Vfs::new();
        v.create_dir("/mnt").unwrap();
        v.mount("/mnt", Arc::new(MemFs::new(MemFsOptions::default()))).unwrap();
        {
            let f = v.open("/mnt/f", OpenOptions::new().write(true).create(true)).unwrap();
            for i in 0..mib {
                f.write_at(&chunk, (i << 20) as u64).unwrap();
            }
        }
        assert_eq!(rcuvfs::filemap::pool_stats().used_frames, mib * 256, "round {round}");
        v.unmount("/mnt").unwrap();
        drop(v);
        // A liveness bound, not a speed check.
        let t = Instant::now();
        while rcuvfs::filemap::pool_stats().used_frames != 0 {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "round {round}: the unmounted tree's data is still held: {:?}",
                rcuvfs::filemap::pool_stats()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
