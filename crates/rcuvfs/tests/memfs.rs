//! memfs used directly (not bound to a `Vfs`): its own per-name locking
//! under many writers in one directory, with a reader listing it, then a
//! full consistency check of what is left (entries, link counts, inode
//! accounting).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::errno;
use rcuvfs::fs::memfs::{MemFs, MemFsOptions};
use rcuvfs::fs::{FileSystem, FileType, Ino, Owner, RenameFlags};

const ROOT: Owner = Owner { uid: 0, gid: 0 };
const NAMES: usize = 24;
const STABLE: usize = 8;

fn name(i: usize) -> Vec<u8> {
    format!("n{i}").into_bytes()
}

/// The whole listing of `dir`, resuming after each batch's last cookie.
fn list(fs: &MemFs, dir: Ino) -> Vec<(Vec<u8>, Ino, FileType)> {
    let mut out = Vec::new();
    let mut off = 0;
    loop {
        let batch = fs.readdir(dir, off).unwrap();
        let Some(last) = batch.last() else { break };
        off = last.offset;
        out.extend(batch.into_iter().map(|e| (e.name, e.ino, e.kind)));
    }
    out
}

/// Looks `n` up in `dir` and pays the lookup back at once (FUSE's
/// protocol: every counted lookup is forgotten).
fn lookup(fs: &MemFs, dir: Ino, n: &[u8]) -> std::io::Result<rcuvfs::fs::Attr> {
    let a = fs.lookup(dir, n)?;
    fs.forget(a.ino, 1);
    Ok(a)
}

#[test]
fn writers_in_one_directory_keep_it_consistent() {
    let fs = Arc::new(MemFs::new(MemFsOptions::default()));
    let d = fs.mkdir(fs.root(), b"d", 0o755, ROOT).unwrap();
    fs.forget(d.ino, 1);
    for i in 0..STABLE {
        let a = fs.create(d.ino, format!("stable{i}").as_bytes(), 0o644, ROOT).unwrap();
        fs.forget(a.ino, 1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let wrong = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) || ops < 2000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let a = name(x as usize % NAMES);
                    let b = name((x >> 16) as usize % NAMES);
                    let r = match (x >> 32) % 7 {
                        0 | 1 => fs.create(d.ino, &a, 0o644, ROOT).map(|a| fs.forget(a.ino, 1)),
                        2 => fs.unlink(d.ino, &a),
                        3 => fs.rename(d.ino, &a, d.ino, &b, RenameFlags::default()),
                        4 => fs.mkdir(d.ino, &a, 0o755, ROOT).map(|a| fs.forget(a.ino, 1)),
                        5 => fs.rmdir(d.ino, &a),
                        // A create inside a directory that may be going.
                        _ => lookup(&fs, d.ino, &a).and_then(|s| {
                            if s.kind != FileType::Dir {
                                return Ok(());
                            }
                            let r = fs.create(s.ino, b"inner", 0o644, ROOT).map(|i| fs.forget(i.ino, 1));
                            if r.is_ok() {
                                // Usually undone, so rmdirs can succeed.
                                let _ = fs.unlink(s.ino, b"inner");
                            }
                            r
                        }),
                    };
                    // Only the errors the race allows.
                    if let Err(e) = &r {
                        let ok =
                            [libc::EEXIST, libc::ENOENT, libc::ENOTEMPTY, libc::ENOTDIR, libc::EISDIR, libc::EINVAL];
                        assert!(ok.contains(&errno(&r)), "unexpected error {e}");
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    // A reader: every stable name appears exactly once in every listing,
    // and no listing names anything twice.
    let reader = {
        let (fs, stop, wrong) = (fs.clone(), stop.clone(), wrong.clone());
        std::thread::spawn(move || {
            let mut lists = 0;
            while !stop.load(Ordering::Relaxed) {
                let l = list(&fs, d.ino);
                let mut seen = BTreeMap::new();
                for (n, ..) in &l {
                    *seen.entry(n.clone()).or_insert(0) += 1;
                }
                for i in 0..STABLE {
                    if seen.get(format!("stable{i}").as_bytes()) != Some(&1) {
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
                lists += 1;
            }
            lists
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(common::scaled(1500) as u64));
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    let lists = reader.join().unwrap();
    assert!(ops > 0 && lists > 0);
    assert_eq!(wrong.load(Ordering::Relaxed), 0, "stable names missing or doubled in {lists} listings");

    // What is left agrees with itself.
    let l = list(&fs, d.ino);
    let names: BTreeSet<_> = l.iter().map(|e| e.0.clone()).collect();
    assert_eq!(names.len(), l.len(), "a name listed twice");
    let mut inodes = 2; // the root and d
    let mut subdirs = 0;
    for (n, ino, kind) in &l {
        let a = lookup(&fs, d.ino, n).unwrap();
        assert_eq!((a.ino, a.kind), (*ino, *kind), "{}", String::from_utf8_lossy(n));
        inodes += 1;
        match kind {
            FileType::Dir => {
                subdirs += 1;
                let inner = list(&fs, a.ino);
                assert_eq!(a.nlink, 2, "an empty-of-directories directory has 2 links");
                assert_eq!(a.size as usize, inner.len(), "a directory's size is its entry count");
                inodes += inner.len() as u64;
            }
            _ => assert_eq!(a.nlink, 1, "no hard links were made"),
        }
    }
    let da = fs.getattr(d.ino).unwrap();
    assert_eq!(da.nlink, 2 + subdirs, "d's link count counts its subdirectories");
    assert_eq!(da.size as usize, l.len());
    // Every unlinked, forgotten inode was freed, and nothing else.
    assert_eq!(fs.live_inodes(), inodes);
}

#[test]
fn an_rmdir_and_a_create_inside_never_both_win() {
    // Either the create lands first (rmdir: ENOTEMPTY) or the rmdir does
    // (create: ENOENT); never a file in a removed directory.
    let fs = Arc::new(MemFs::new(MemFsOptions::default()));
    for round in 0..common::scaled(2000) {
        let d = fs.mkdir(fs.root(), b"v", 0o755, ROOT).unwrap();
        fs.forget(d.ino, 1);
        let c = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.create(d.ino, b"f", 0o644, ROOT).map(|a| fs.forget(a.ino, 1)))
        };
        let r = fs.rmdir(fs.root(), b"v");
        let cr = c.join().unwrap();
        match (&r, &cr) {
            (Ok(()), Err(_)) => assert_eq!(errno(&cr), libc::ENOENT, "round {round}"),
            (Err(_), Ok(())) => {
                assert_eq!(errno(&r), libc::ENOTEMPTY, "round {round}");
                fs.unlink(d.ino, b"f").unwrap();
                fs.rmdir(fs.root(), b"v").unwrap();
            }
            _ => panic!("round {round}: rmdir {r:?}, create {cr:?}"),
        }
        assert_eq!(fs.live_inodes(), 1, "round {round}: only the root is left");
    }
}
