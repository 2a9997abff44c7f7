//! loom models of the dcache's lock-free protocols, on the real code (the
//! rcu facade's loom stand-in defers every free to the end of the model).
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --lib --release loom_`.
//!
//! One hash bucket, so that every dentry shares the chain the reader walks.
//! Each reader starts with a `yield_now`: without a scheduling point there,
//! loom's exploration never runs the writer first (measured: 1 execution
//! instead of 188 for the rename model, and a removed `HASHED` check went
//! unnoticed).

use std::sync::Arc;

use loom::thread;

use super::Dcache;
use crate::cred::Cred;
use crate::error::{fail, Result, ENOENT};
use crate::fs::{Attr, DirEntry, FileSystem, FileType, Ino, Owner, RenameFlags, SetAttr, StatFs, Timespec, WritePos};
use crate::namei::Walk;
use crate::sync::atomic::loom_model as model;

/// Inodes below 10 are directories, the rest files; nothing else exists.
struct Stub;

fn attr(ino: Ino) -> Attr {
    Attr {
        ino,
        kind: if ino < 10 { FileType::Dir } else { FileType::File },
        perm: 0o755,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        atime: Timespec::default(),
        mtime: Timespec::default(),
        ctime: Timespec::default(),
        rdev: 0,
    }
}

impl FileSystem for Stub {
    fn root(&self) -> Ino {
        1
    }
    fn lookup(&self, _: Ino, _: &[u8]) -> Result<Attr> {
        fail(ENOENT)
    }
    fn forget(&self, _: Ino, _: u64) {}
    fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(attr(ino))
    }
    fn setattr(&self, ino: Ino, _: &SetAttr) -> Result<Attr> {
        Ok(attr(ino))
    }
    fn create(&self, _: Ino, _: &[u8], _: u32, _: Owner) -> Result<Attr> {
        fail(ENOENT)
    }
    fn mkdir(&self, _: Ino, _: &[u8], _: u32, _: Owner) -> Result<Attr> {
        fail(ENOENT)
    }
    fn mknod(&self, _: Ino, _: &[u8], _: FileType, _: u32, _: u64, _: Owner) -> Result<Attr> {
        fail(ENOENT)
    }
    fn symlink(&self, _: Ino, _: &[u8], _: &[u8], _: Owner) -> Result<Attr> {
        fail(ENOENT)
    }
    fn link(&self, _: Ino, _: Ino, _: &[u8]) -> Result<Attr> {
        fail(ENOENT)
    }
    fn unlink(&self, _: Ino, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn rmdir(&self, _: Ino, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn rename(&self, _: Ino, _: &[u8], _: Ino, _: &[u8], _: RenameFlags) -> Result<()> {
        Ok(())
    }
    fn readlink(&self, _: Ino) -> Result<Vec<u8>> {
        fail(ENOENT)
    }
    fn readdir(&self, _: Ino, _: u64) -> Result<Vec<DirEntry>> {
        Ok(Vec::new())
    }
    fn read(&self, _: Ino, _: u64, _: &mut [u8]) -> Result<usize> {
        Ok(0)
    }
    fn write(&self, _: Ino, _: WritePos, _: &[u8]) -> Result<u64> {
        Ok(0)
    }
    fn statfs(&self) -> Result<StatFs> {
        Ok(StatFs::default())
    }
}

fn cache() -> Arc<Dcache> {
    Arc::new(Dcache::new(Arc::new(Stub), 1, false, false, Default::default(), 1 << 20, 1 << 18).unwrap())
}

/// Adds `name` -> file `ino` under the root, and leaves it cached, unused.
fn add(dc: &Dcache, name: &[u8], ino: Ino) {
    let ip = dc.root_sb().iget(&attr(ino), false, &dc.counters);
    drop(dc.d_add(dc.root(), name, ip));
}

/// A reader that finds a dentry being inserted sees it whole: its name,
/// its inode and the inode's attributes were published before it.
#[test]
fn loom_insert_vs_lookup() {
    model(|| {
        let dc = cache();
        let writer = {
            let dc = dc.clone();
            thread::spawn(move || add(&dc, b"x", 20))
        };
        {
            loom::thread::yield_now();
            let g = dc.rcu.read_lock();
            if let Some((d, seq)) = dc.lookup_rcu(&g, dc.root(), b"x") {
                let a = d.inode().expect("inserted positive").attr();
                assert_eq!(a.ino, 20);
                assert!(!d.seq.read_retry(seq), "nobody changes it after insertion");
            }
        }
        writer.join().unwrap();
        let g = dc.rcu.read_lock();
        assert!(dc.lookup_rcu(&g, dc.root(), b"x").is_some(), "an insert that returned is visible");
    });
}

/// A reader racing an unhash either validates a dentry that was there, or
/// fails its sequence check; once the unhash has returned, nobody finds it.
#[test]
fn loom_unhash_vs_lookup() {
    model(|| {
        let dc = cache();
        add(&dc, b"x", 20);
        let writer = {
            let dc = dc.clone();
            thread::spawn(move || {
                let d = dc.d_lookup(dc.root(), b"x").expect("cached");
                dc.d_invalidate(&d);
            })
        };
        {
            loom::thread::yield_now();
            let g = dc.rcu.read_lock();
            if let Some((d, seq)) = dc.lookup_rcu(&g, dc.root(), b"x") {
                let ino = d.inode().map(|i| i.attr().ino);
                if !d.seq.read_retry(seq) {
                    assert_eq!(ino, Some(20));
                }
            }
        }
        writer.join().unwrap();
        let g = dc.rcu.read_lock();
        assert!(dc.lookup_rcu(&g, dc.root(), b"x").is_none());
        drop(g);
        assert!(dc.d_lookup(dc.root(), b"x").is_none());
    });
}

/// Seed 003's rename race: while a sibling is renamed through the shared
/// chain, a lookup of a name that never moves is never a miss, neither by
/// `d_lookup` (which retries under the rename lock) nor by RCU-walk (which
/// may only fall back); and the renamed entry is found under one name.
#[test]
fn loom_rename_vs_rcu_lookup() {
    model(|| {
        let dc = cache();
        add(&dc, b"s", 21); // the stable name, at the chain's tail
        add(&dc, b"a", 22); // renamed to "z"
        let dst = dc.d_add(dc.root(), b"z", std::ptr::null());
        drop(dst);
        let writer = {
            let dc = dc.clone();
            thread::spawn(move || {
                let src = dc.d_lookup(dc.root(), b"a").expect("cached");
                let dst = dc.d_lookup(dc.root(), b"z").expect("negative, cached");
                dc.d_move(&src, dc.root(), b"z", &dst, false);
            })
        };
        let cred = Cred::root();
        {
            loom::thread::yield_now();
            let g = dc.rcu.read_lock();
            let root = dc.root();
            let seq = root.seq.read_begin().unwrap();
            let r = dc.walk_rcu(&g, &mut Walk::new(&cred), dc.ns.root(), root, seq, b"s", true);
            assert!(!matches!(r, Some(Err(_))), "RCU-walk reported a stable name missing");
        }
        assert!(dc.d_lookup(dc.root(), b"s").is_some(), "d_lookup missed a stable name");
        writer.join().unwrap();
        let z = dc.d_lookup(dc.root(), b"z").expect("renamed entry");
        assert_eq!(z.inode().map(|i| i.ino), Some(22));
        assert!(dc.d_lookup(dc.root(), b"a").is_none());
    });
}

/// A walk racing a mount and a lazy umount on the directory it crosses:
/// whatever it answers, once validated, is either the directory itself in
/// the root mount or the mounted filesystem's root in the new mount, never
/// a mix (the `MOUNTED` flag, the mount hash and the namespace count are
/// published in the right order).
#[test]
fn loom_mount_umount_vs_walk() {
    model(|| {
        let dc = cache();
        add(&dc, b"m", 2); // a directory
        let sb = dc.new_super(Arc::new(Stub)).unwrap() as usize;
        let writer = {
            let dc = dc.clone();
            thread::spawn(move || {
                let root_mnt = dc.ns.root();
                let m = dc.d_lookup(dc.root(), b"m").expect("cached");
                dc.do_mount(root_mnt, &m, sb as *const crate::inode::Super);
                let top = {
                    let g = dc.rcu.read_lock();
                    dc.mntget(dc.ns.lookup(&g, root_mnt, &m).expect("just mounted"))
                };
                drop(m);
                dc.do_umount(top, true).unwrap();
            })
        };
        let cred = Cred::root();
        {
            thread::yield_now();
            let g = dc.rcu.read_lock();
            let root = dc.root();
            let seq = root.seq.read_begin().unwrap();
            let r = dc.walk_rcu(&g, &mut Walk::new(&cred), dc.ns.root(), root, seq, b"m", true);
            if let Some(Ok((mnt, d, dseq))) = r {
                let ino = d.inode().map(|i| i.ino);
                if !d.seq.read_retry(dseq) {
                    let mounted = !std::ptr::eq(mnt, dc.ns.root());
                    // The mounted filesystem's root is inode 1; the
                    // directory under it is inode 2.
                    assert_eq!(ino, Some(if mounted { 1 } else { 2 }), "a mixed answer");
                }
            }
        }
        writer.join().unwrap();
        let g = dc.rcu.read_lock();
        let root = dc.root();
        let seq = root.seq.read_begin().unwrap();
        let r = dc.walk_rcu(&g, &mut Walk::new(&cred), dc.ns.root(), root, seq, b"m", true);
        let (mnt, d, _) = r.expect("no writer left").expect("m exists");
        assert!(std::ptr::eq(mnt, dc.ns.root()) && d.inode().map(|i| i.ino) == Some(2), "detached at once");
    });
}
