//! Directory listings and tree walks through the `Vfs`: lazy listings that
//! resume from any cookie, every entry present for a whole listing returned
//! exactly once while other threads create and remove names, `DirEntry`
//! metadata without a path walk (mounts crossed, permissions kept), and the
//! serial and parallel tree walkers.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{errno, scaled};
use rcuvfs::fs::memfs::{MemFs, MemFsOptions};
use rcuvfs::{Cred, FileType, RefMode, Vfs};

#[test]
fn a_large_listing_is_lazy_ordered_by_cookie_and_resumes_anywhere() {
    let v = Vfs::new();
    v.create_dir("/d").unwrap();
    let n = scaled(5000);
    for i in 0..n {
        v.write(format!("/d/f{i}"), b"").unwrap();
    }
    let mut rd = v.read_dir("/d").unwrap();
    assert_eq!(rd.cookie(), 0);
    let all: Vec<_> = rd.by_ref().map(|e| e.unwrap()).collect();
    assert_eq!(all.len(), n);
    let set: BTreeSet<_> = all.iter().map(|e| e.file_name()).collect();
    assert_eq!(set.len(), n, "a name listed twice");
    // Cookies increase, and each is where the listing stood after it.
    assert!(all.windows(2).all(|w| w[0].cookie() < w[1].cookie()));
    assert_eq!(rd.cookie(), all.last().unwrap().cookie());
    assert!(rd.next().is_none());
    // seekdir to any entry's cookie: exactly the entries after it.
    for k in [0, 1, n / 3, n - 2, n - 1] {
        let mut rd = v.read_dir("/d").unwrap();
        rd.seek(all[k].cookie());
        let rest: Vec<_> = rd.map(|e| e.unwrap().file_name()).collect();
        let want: Vec<_> = all[k + 1..].iter().map(|e| e.file_name()).collect();
        assert_eq!(rest, want, "resumed after entry {k}");
    }
    // Rewind.
    let mut rd = v.read_dir("/d").unwrap();
    rd.nth(10);
    rd.seek(0);
    assert_eq!(rd.count(), n);
}

#[test]
fn entries_present_for_a_whole_listing_are_listed_exactly_once_under_churn() {
    for mode in RefMode::ALL {
        let v = Vfs::builder().mode(mode).build().unwrap();
        v.create_dir("/d").unwrap();
        let stable = scaled(3000);
        for i in 0..stable {
            v.write(format!("/d/s{i}"), b"").unwrap();
        }
        let stop = AtomicBool::new(false);
        let (wrong, listings) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            // Churn: names come and go, enough to resize the directory's
            // index up and down while listings run.
            s.spawn(|| {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..scaled(2000) {
                        v.write(format!("/d/c{round}-{i}"), b"").unwrap();
                    }
                    for i in 0..scaled(2000) {
                        v.remove_file(format!("/d/c{round}-{i}")).unwrap();
                    }
                    round += 1;
                }
            });
            s.spawn(|| {
                for _ in 0..scaled(20) {
                    let mut seen = BTreeMap::<String, u32>::new();
                    for e in v.read_dir("/d").unwrap() {
                        *seen.entry(e.unwrap().file_name().into_string().unwrap()).or_default() += 1;
                    }
                    let dups = seen.values().filter(|&&c| c > 1).count();
                    let missing = (0..stable).filter(|i| !seen.contains_key(&format!("s{i}"))).count();
                    wrong.fetch_add((dups + missing) as u64, Ordering::Relaxed);
                    listings.fetch_add(1, Ordering::Relaxed);
                }
                stop.store(true, Ordering::Relaxed);
            });
        });
        assert!(listings.load(Ordering::Relaxed) > 0);
        assert_eq!(wrong.load(Ordering::Relaxed), 0, "{mode:?}: entries missed or listed twice");
    }
}

#[test]
fn dir_entry_metadata_is_lstat_of_the_name_without_a_walk() {
    let v = Vfs::new();
    v.create_dir("/d").unwrap();
    v.write("/d/f", b"hello").unwrap();
    v.create_dir("/d/sub").unwrap();
    v.symlink("/nowhere", "/d/l").unwrap();
    let mut seen = 0;
    for e in v.read_dir("/d").unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        assert_eq!(m, v.symlink_metadata(e.path()).unwrap(), "{:?}", e.path());
        assert_eq!(m, e.metadata_now().unwrap());
        assert_eq!(m.file_type(), e.file_type().unwrap());
        assert_eq!(m.ino(), e.ino());
        seen += 1;
    }
    assert_eq!(seen, 3);
    // The handle-level listing, as FUSE's readdirplus takes it.
    let d = v.entry("/d").unwrap();
    let plus = v.read_dir_plus(&d, 0).unwrap();
    assert_eq!(plus.len(), 3);
    for p in &plus {
        assert_eq!(p.child.ino(), p.entry.ino);
        assert_eq!(p.metadata, p.child.metadata().unwrap());
    }
    // A name removed after it was listed: its attributes now are ENOENT.
    let e = v.read_dir("/d").unwrap().map(|e| e.unwrap()).find(|e| e.name_bytes() == b"f").unwrap();
    v.remove_file("/d/f").unwrap();
    assert_eq!(errno(&e.metadata_now()), libc::ENOENT);
    assert_eq!(errno(&e.entry()), libc::ENOENT);
}

#[test]
fn dir_entry_metadata_crosses_a_mount_on_the_name() {
    let v = Vfs::new();
    v.create_dir("/m").unwrap();
    v.create_dir("/m/under").unwrap();
    let fs = Arc::new(MemFs::new(MemFsOptions::default()));
    v.mount("/m/under", fs).unwrap();
    v.write("/m/under/inside", b"").unwrap();
    let mounted = v.metadata("/m/under").unwrap();
    let e = v.read_dir("/m").unwrap().next().unwrap().unwrap();
    assert_eq!(e.metadata().unwrap(), mounted, "fstatat crosses the mount");
    // d_ino stays the covered directory's, as getdents reports it.
    assert_ne!(e.ino(), mounted.ino());
    v.unmount("/m/under").unwrap();
    let covered = v.metadata("/m/under").unwrap();
    assert_eq!(e.metadata().unwrap(), covered);
}

#[test]
fn dir_entry_metadata_needs_search_permission_on_the_directory() {
    let v = Vfs::new();
    v.create_dir("/r").unwrap();
    v.write("/r/f", b"").unwrap();
    v.set_permissions("/r", rcuvfs::Permissions::from_mode(0o744)).unwrap();
    let user = v.with_cred(Cred::new(1000, 1000, &[]));
    // Readable but not searchable: names yes, attributes no (as `ls -l`).
    let e = user.read_dir("/r").unwrap().next().unwrap().unwrap();
    assert_eq!(e.file_name(), "f");
    assert_eq!(errno(&e.metadata()), libc::EACCES);
    v.set_permissions("/r", rcuvfs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(errno(&user.read_dir("/r")), libc::EACCES);
}

/// A tree of directories, files and symlinks, and every path in it.
fn make_tree(v: &Vfs) -> BTreeSet<PathBuf> {
    let mut all = BTreeSet::from([PathBuf::from("/t")]);
    v.create_dir("/t").unwrap();
    for a in 0..4 {
        let d = format!("/t/a{a}");
        v.create_dir(&d).unwrap();
        all.insert(d.clone().into());
        for b in 0..5 {
            let e = format!("{d}/b{b}");
            v.create_dir(&e).unwrap();
            all.insert(e.clone().into());
            for f in 0..scaled(40) {
                v.write(format!("{e}/f{f}"), b"x").unwrap();
                all.insert(format!("{e}/f{f}").into());
            }
        }
        // A symlink to a directory: listed, never followed.
        v.symlink("/t", format!("{d}/up")).unwrap();
        all.insert(format!("{d}/up").into());
    }
    all
}

#[test]
fn a_tree_walk_yields_every_entry_once_in_preorder_with_its_metadata() {
    let v = Vfs::new();
    let all = make_tree(&v);
    let walked: Vec<_> = v.walk("/t").map(|w| w.unwrap()).collect();
    let paths: BTreeSet<_> = walked.iter().map(|w| w.path().to_path_buf()).collect();
    assert_eq!(walked.len(), all.len(), "an entry walked twice");
    assert_eq!(paths, all);
    for (i, w) in walked.iter().enumerate() {
        assert_eq!(w.depth(), w.path().components().count() - 2, "{:?}", w.path());
        // The same, but atime: listing a directory may update it.
        let (mut a, mut b) = (w.metadata().attr().clone(), v.symlink_metadata(w.path()).unwrap().attr().clone());
        (a.atime, b.atime) = (b.atime, a.atime);
        assert_eq!(
            (a.ino, a.mode(), a.nlink, a.size, a.mtime, a.ctime),
            (b.ino, b.mode(), b.nlink, b.size, b.mtime, b.ctime)
        );
        // Pre-order: a directory's parent came before it.
        if let Some(p) = w.path().parent().filter(|_| i > 0) {
            assert!(walked[..i].iter().any(|x| x.path() == p), "{:?} before its parent", w.path());
        }
    }
    let links = walked.iter().filter(|w| w.file_type() == FileType::Symlink).count();
    assert_eq!(links, 4);
    // A walk of a file is the file alone; of nothing, one error.
    assert_eq!(v.walk("/t/a0/b0/f0").count(), 1);
    let r: Vec<_> = v.walk("/absent").collect();
    assert_eq!(r.len(), 1);
    assert_eq!(errno(&r[0]), libc::ENOENT);
}

#[test]
fn a_parallel_walk_sees_what_the_serial_walk_sees() {
    let v = Vfs::new();
    let all = make_tree(&v);
    for threads in [1, 2, 5] {
        let got = Mutex::new(Vec::new());
        v.walk_parallel("/t", threads, |w| got.lock().unwrap().push(w.unwrap().path().to_path_buf()));
        let got = got.into_inner().unwrap();
        let set: BTreeSet<_> = got.iter().cloned().collect();
        assert_eq!(got.len(), set.len(), "{threads} threads: an entry walked twice");
        assert_eq!(set, all, "{threads} threads");
    }
}

#[test]
fn a_walk_reports_a_directory_it_may_not_read_and_goes_on() {
    let v = Vfs::new();
    v.create_dir("/w").unwrap();
    v.create_dir_mode("/w/closed", 0o700).unwrap();
    v.write("/w/closed/secret", b"").unwrap();
    v.create_dir("/w/open").unwrap();
    v.write("/w/open/f", b"").unwrap();
    let user = v.with_cred(Cred::new(1000, 1000, &[]));
    let r: Vec<_> = user.walk("/w").collect();
    let ok: BTreeSet<_> = r.iter().filter_map(|w| w.as_ref().ok()).map(|w| w.path().to_path_buf()).collect();
    let errs: Vec<_> = r.iter().filter(|w| w.is_err()).map(errno).collect();
    assert_eq!(errs, vec![libc::EACCES]);
    let want: BTreeSet<PathBuf> = ["/w", "/w/closed", "/w/open", "/w/open/f"].into_iter().map(Into::into).collect();
    assert_eq!(ok, want);
}

#[test]
fn a_panic_in_a_parallel_walk_reaches_the_caller_instead_of_hanging_the_walk() {
    let v = Arc::new(Vfs::new());
    make_tree(&v);
    let (tx, rx) = std::sync::mpsc::channel();
    let walker = {
        let v = v.clone();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                v.walk_parallel("/t", 2, |w| {
                    // f1: the tree has it at every size (Miri makes two files a directory).
                    if w.unwrap().path().ends_with("a1/b2/f1") {
                        panic!("the caller's callback failed");
                    }
                })
            }));
            let _ = tx.send(r.is_err());
        })
    };
    // A deadline on a hang, not a speed bound: the walk takes milliseconds.
    let panicked = rx.recv_timeout(std::time::Duration::from_secs(120)).expect("walk_parallel hung after a panic");
    assert!(panicked, "the panic reached the caller");
    walker.join().unwrap();
}
