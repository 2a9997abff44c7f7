//! The shared-write audit: how many stores to memory that other threads can
//! see one lookup or stat of a cached path makes, per mode. Run with
//! `cargo test -p rcuvfs --features audit --test audit`.
#![cfg(feature = "audit")]

use rcuvfs::sync::audit;
use rcuvfs::{Cred, Layout, RefMode, Vfs};

const PATH: &str = "/d0/d1/d2/file";
/// Dentries a REF-walk of PATH holds in turn: the root and four components.
const DENTRIES: u64 = 5;

fn cached(mode: RefMode) -> Vfs {
    let v = Vfs::builder().mode(mode).build().unwrap();
    v.create_dir_all("/d0/d1/d2").unwrap();
    v.write(PATH, b"x").unwrap();
    // Warm: the path is cached and the file's attributes current.
    for _ in 0..3 {
        v.metadata(PATH).unwrap();
    }
    v
}

fn writes_per_stat(v: &Vfs) -> u64 {
    let before = audit::count();
    for _ in 0..10 {
        v.metadata(PATH).unwrap();
    }
    (audit::count() - before) / 10
}

#[test]
fn norefs_stat_writes_nothing_shared() {
    assert_eq!(writes_per_stat(&cached(RefMode::NoRefs)), 0);
    // Also for an unprivileged caller (permission checks read attributes),
    // in the packed layout, and for a cached miss.
    let v = cached(RefMode::NoRefs);
    let user = v.with_cred(Cred::new(1000, 1000, &[]));
    assert_eq!(writes_per_stat(&user), 0);
    let p = Vfs::builder().layout(Layout::Packed).build().unwrap();
    p.create_dir_all("/d0/d1/d2").unwrap();
    p.write(PATH, b"x").unwrap();
    // A file made through the Vfs has no dentry: its first stat reads
    // memfs's index and marks the inode (one store); the second makes the
    // dentry (`Dcache::stays_bare`); from then on the path is cached.
    let before = audit::count();
    p.metadata(PATH).unwrap();
    assert_eq!(audit::count() - before, 1, "a first stat of a file with no dentry marks it");
    p.metadata(PATH).unwrap();
    assert_eq!(writes_per_stat(&p), 0);
    let _ = v.metadata("/d0/missing");
    let before = audit::count();
    assert!(v.metadata("/d0/missing").is_err());
    assert_eq!(audit::count() - before, 0, "a cached miss writes nothing either");
    // Also one cached in a directory's set of absent names, where the
    // directory is not complete.
    let v = Vfs::builder().complete_dirs(false).build().unwrap();
    v.create_dir_all("/d0").unwrap();
    assert!(v.metadata("/d0/missing").is_err());
    assert_eq!(v.stats().absent_names, 1);
    let before = audit::count();
    assert!(v.metadata("/d0/missing").is_err());
    assert_eq!(audit::count() - before, 0, "a miss cached as an absent name writes nothing");
}

#[test]
fn rcuwalk_stat_writes_a_get_and_a_put() {
    assert_eq!(writes_per_stat(&cached(RefMode::RcuWalk)), 2);
}

#[test]
fn lockref_stat_writes_a_get_and_a_put_per_component() {
    assert_eq!(writes_per_stat(&cached(RefMode::Lockref)), 2 * DENTRIES);
}

#[test]
fn locked_modes_write_more() {
    // dlock: lock, count, unlock for every get and put.
    assert!(writes_per_stat(&cached(RefMode::Dlock)) > 2 * DENTRIES);
    // global: the same, plus the global lock.
    assert!(writes_per_stat(&cached(RefMode::Global)) > writes_per_stat(&cached(RefMode::Dlock)));
}

/// The fewest shared writes one create and unlink of `dir/f` makes (the
/// minimum over several, past the occasional index resize).
fn writes_per_update(v: &Vfs, dir: &str) -> u64 {
    let p = format!("{dir}/f");
    (0..20)
        .map(|_| {
            let before = audit::count();
            drop(v.open(&p, rcuvfs::OpenOptions::new().write(true).create(true)).unwrap());
            v.remove_file(&p).unwrap();
            audit::count() - before
        })
        .min()
        .unwrap()
}

#[test]
fn the_parent_walk_of_an_update_stores_nothing_on_the_ancestors() {
    // RCU-walk to the parent, pinning only the directory: an update three
    // levels deeper writes exactly as much as one at the top.
    for mode in [RefMode::NoRefs, RefMode::RcuWalk] {
        let v = cached(mode);
        v.create_dir("/top").unwrap();
        assert_eq!(writes_per_update(&v, "/top"), writes_per_update(&v, "/d0/d1/d2"), "{mode:?}");
    }
    // REF-walk (the lockref mode) takes and drops a reference on every
    // component on the way: the deeper update writes more (what this test
    // catches if updates fall back to it).
    let v = cached(RefMode::Lockref);
    v.create_dir("/top").unwrap();
    assert!(writes_per_update(&v, "/d0/d1/d2") > writes_per_update(&v, "/top"));
}

/// The fewest shared writes a stat of a name that is not cached in `dir`
/// makes (each name is new, so each stat asks the filesystem).
fn writes_per_refetch(v: &Vfs, dir: &str) -> u64 {
    (0..20)
        .map(|i| {
            let (p, q) = (format!("{dir}/missing{i}"), format!("{dir}/other{i}"));
            let before = audit::count();
            assert!(v.metadata(&p).is_err());
            // A lookup handle's walk (and open's) goes on the same way.
            assert!(v.entry(&q).is_err());
            audit::count() - before
        })
        .min()
        .unwrap()
}

#[test]
fn a_stat_that_asks_the_filesystem_stores_nothing_on_the_ancestors() {
    // The RCU walk stops at the name it cannot find and the REF walk goes on
    // from the directory it reached (`try_to_unlazy`): a stat three levels
    // deeper writes exactly as much as one at the top. (Restarting the
    // walk in REF mode took and dropped a reference on every component.)
    // Directories that are not complete, so that the filesystem is asked.
    for mode in [RefMode::NoRefs, RefMode::RcuWalk] {
        let v = Vfs::builder().mode(mode).complete_dirs(false).build().unwrap();
        v.create_dir_all("/d0/d1/d2").unwrap();
        v.create_dir("/top").unwrap();
        assert_eq!(writes_per_refetch(&v, "/top"), writes_per_refetch(&v, "/d0/d1/d2"), "{mode:?}");
    }
}

#[test]
fn a_stat_that_memfs_answers_writes_nothing_shared() {
    // Names the cache dropped, in directories no longer complete: a bound
    // memfs answers a stat (from its inode) and a miss in the RCU walk,
    // with no dentry made, no lock, no reference: the one store is the
    // mark a first stat leaves on the inode (`Dcache::stays_bare`; the
    // second makes the dentry, and the path is cached from then on).
    let v = Vfs::builder().build().unwrap();
    v.create_dir_all("/d0/d1/d2").unwrap();
    for i in 0..20 {
        v.write(format!("/d0/d1/d2/f{i}"), b"x").unwrap();
    }
    v.drop_caches();
    v.metadata("/d0/d1/d2").unwrap();
    for i in 0..20 {
        let (f, m) = (format!("/d0/d1/d2/f{i}"), format!("/d0/d1/d2/m{i}"));
        let before = audit::count();
        assert_eq!(v.metadata(&f).unwrap().len(), 1);
        assert!(v.metadata(&m).is_err());
        assert_eq!(audit::count() - before, 1, "{f}: the first stat's mark");
        assert_eq!(v.stats().dentries, 4, "{f}: a dentry made (the root and three directories only)");
    }
}

/// The fewest shared writes `op` makes on the objects under `dir`: a
/// file `f`, a symlink `s` to it (the minimum over several rounds, past
/// the occasional index resize, and past the coarse clock: a change
/// stores the directory's times at most once per tick).
fn writes_per_op(v: &Vfs, dir: &str, op: impl Fn(&Vfs, &str)) -> u64 {
    (0..20)
        .map(|_| {
            let before = audit::count();
            op(v, dir);
            audit::count() - before
        })
        .min()
        .unwrap()
}

#[test]
fn attribute_changes_readlink_and_link_store_nothing_on_the_ancestors() {
    // An update of an object that exists walks in RCU and pins only what
    // it finds, as `open` and a lookup handle do: one three levels deeper
    // writes exactly as much as one at the top. (chmod, chown, utimens,
    // truncate, readlink and link's source walked in REF mode, taking and
    // dropping a reference on every directory on the way: two changes of
    // two files in one directory wrote the same directory's count.)
    use rcuvfs::{Permissions, SetTime};
    type Op = fn(&Vfs, &str);
    let ops: [(&str, Op); 6] = [
        ("chmod", |v, d| v.set_permissions(format!("{d}/f"), Permissions::from_mode(0o640)).unwrap()),
        ("chown", |v, d| v.chown(format!("{d}/f"), Some(0), Some(0)).unwrap()),
        ("utimens", |v, d| v.set_times(format!("{d}/f"), Some(SetTime::Now), None).unwrap()),
        ("truncate", |v, d| v.truncate(format!("{d}/f"), 1).unwrap()),
        ("readlink", |v, d| assert_eq!(v.read_link(format!("{d}/s")).unwrap().as_os_str(), "f")),
        ("link", |v, d| {
            v.hard_link(format!("{d}/f"), format!("{d}/l")).unwrap();
            v.remove_file(format!("{d}/l")).unwrap();
        }),
    ];
    for mode in [RefMode::NoRefs, RefMode::RcuWalk] {
        let v = cached(mode);
        v.create_dir("/top").unwrap();
        for d in ["/top", "/d0/d1/d2"] {
            v.write(format!("{d}/f"), b"x").unwrap();
            v.symlink("f", format!("{d}/s")).unwrap();
        }
        for (name, op) in ops {
            let (top, deep) = (writes_per_op(&v, "/top", op), writes_per_op(&v, "/d0/d1/d2", op));
            assert_eq!(top, deep, "{name}, {mode:?}");
        }
    }
}

/// Through the etcd backend too: a cached path's stat never asks etcd and
/// stores nothing shared (its dentries are plain dcache entries; the
/// backend's coherence comes from its watcher, not from a check per
/// lookup). Runs with `--features audit,etcd`; starts its own member.
#[cfg(feature = "etcd")]
#[test]
fn norefs_stat_through_etcd_writes_nothing_shared() {
    use rcuvfs::fs::etcd::{Etcd, EtcdOptions, LocalCluster};
    let c = LocalCluster::start(1).unwrap();
    let mut o = EtcdOptions::parse(&c.spec("audit")).unwrap();
    o.remove_on_drop = true;
    let fs = std::sync::Arc::new(Etcd::connect(o).unwrap());
    let v = Vfs::builder().mode(RefMode::NoRefs).filesystem(fs.clone()).build().unwrap();
    v.create_dir_all("/d0/d1/d2").unwrap();
    v.write(PATH, b"x").unwrap();
    for _ in 0..3 {
        v.metadata(PATH).unwrap();
    }
    let commits = fs.stats().commits.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(writes_per_stat(&v), 0);
    assert_eq!(
        fs.stats().commits.load(std::sync::atomic::Ordering::Relaxed),
        commits,
        "a stat of a cached path committed nothing"
    );
}
