//! loom models of the dcache's lock-free protocols, on the real code (the
//! rcu facade's loom stand-in defers every free to the end of the model).
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --lib --release loom_`.
//!
//! The root's children share one small index, so writers and readers meet
//! in it. Each reader starts with a `yield_now`: without a scheduling point there,
//! loom's exploration never runs the writer first (measured: 1 execution
//! instead of 188 for the rename model, and a removed `HASHED` check went
//! unnoticed).

use std::sync::Arc;

use loom::thread;

use super::{Dcache, DcacheOptions};
use crate::cred::Cred;
use crate::error::{fail, Result, ENOENT};
use crate::fs::{Attr, DirEntry, FileSystem, FileType, Ino, Owner, RenameFlags, SetAttr, StatFs, Timespec, WritePos};
use crate::namei::RcuWalk;
use crate::sync::atomic::{loom_model as model, until_done};

/// Inodes below 10 are directories, the rest files. A lookup is counted
/// and finds `answer` (a file) for every name, or nothing but `x` once a
/// `create` made it (file 20).
/// `getattr` answers `changes` as the size and the ctime (0 unless a
/// model changes it), as a filesystem whose every change moves ctime. While
/// `lag` is 1 the size is one change behind: a change under way, its ctime
/// set and its size not yet (a host's write).
struct Stub {
    answer: Option<Ino>,
    lookups: loom::sync::atomic::AtomicUsize,
    changes: loom::sync::atomic::AtomicU64,
    lag: loom::sync::atomic::AtomicU64,
    /// `x` was made by `create`.
    made: loom::sync::atomic::AtomicBool,
}

impl Stub {
    fn new(answer: Option<Ino>) -> Stub {
        Stub {
            answer,
            lookups: loom::sync::atomic::AtomicUsize::new(0),
            changes: loom::sync::atomic::AtomicU64::new(0),
            lag: loom::sync::atomic::AtomicU64::new(0),
            made: loom::sync::atomic::AtomicBool::new(false),
        }
    }
}

pub(crate) fn attr(ino: Ino) -> Attr {
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
    fn lookup(&self, _: Ino, name: &[u8]) -> Result<Attr> {
        self.lookups.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
        match self.answer {
            Some(ino) => Ok(attr(ino)),
            None if name == b"x" && self.made.load(loom::sync::atomic::Ordering::SeqCst) => Ok(attr(20)),
            None => fail(ENOENT),
        }
    }
    fn forget(&self, _: Ino, _: u64) {}
    fn getattr(&self, ino: Ino) -> Result<Attr> {
        let n = self.changes.load(loom::sync::atomic::Ordering::SeqCst);
        let mut a = attr(ino);
        a.size = n.saturating_sub(self.lag.load(loom::sync::atomic::Ordering::SeqCst));
        a.ctime = Timespec { sec: n as i64, nsec: 0 };
        Ok(a)
    }
    fn setattr(&self, ino: Ino, _: &SetAttr) -> Result<Attr> {
        Ok(attr(ino))
    }
    fn create(&self, _: Ino, name: &[u8], _: u32, _: Owner) -> Result<Attr> {
        if name != b"x" {
            return fail(ENOENT);
        }
        self.made.store(true, loom::sync::atomic::Ordering::SeqCst);
        Ok(attr(20))
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
    cache_over(Arc::new(Stub::new(None)))
}

fn cache_over(fs: Arc<dyn FileSystem>) -> Arc<Dcache> {
    cache_over_bounded(fs, 1 << 18)
}

/// [`cache_over`] with a bound on negative dentries: 0 makes every removal
/// over a bound memfs unhash its dentry (`kills_removed`) instead of
/// turning it negative.
fn cache_over_bounded(fs: Arc<dyn FileSystem>, negative_target: usize) -> Arc<Dcache> {
    cache_with(fs, negative_target, false)
}

fn cache_with(fs: Arc<dyn FileSystem>, negative_target: usize, bare_leaves: bool) -> Arc<Dcache> {
    let o = DcacheOptions {
        packed: false,
        lock_only: false,
        inode_list: Default::default(),
        target: 1 << 20,
        negative_target,
        complete_dirs: true,
        bare_leaves,
    };
    Arc::new(Dcache::new(fs, o).unwrap())
}

/// Adds `name` -> file `ino` under the root, and leaves it cached, unused.
fn add(dc: &Dcache, name: &[u8], ino: Ino) {
    let ip = dc.root_sb().iget(&attr(ino), false, &dc.counters).unwrap();
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
/// may only fall back), nor by a clean miss in a complete directory; and
/// the renamed entry is found under one name. The reader waits (yielding)
/// until the move has begun its write section or ended: after a plain
/// yield, loom ran it only before the move's first store (measured: in
/// all 92 executions the sibling's count was still 0).
#[test]
fn loom_rename_vs_rcu_lookup() {
    use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
    model(|| {
        let dc = cache();
        add(&dc, b"s", 21); // the stable name
        add(&dc, b"a", 22); // renamed to "z"
        let dst = dc.d_add(dc.root(), b"z", std::ptr::null());
        drop(dst);
        dc.root().flags.fetch_or(super::dentry::COMPLETE, SeqCst);
        let a = dc.d_lookup(dc.root(), b"a").expect("cached");
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (dc, done) = (dc.clone(), done.clone());
            thread::spawn(move || {
                let src = dc.d_lookup(dc.root(), b"a").expect("cached");
                let dst = dc.d_lookup(dc.root(), b"z").expect("negative, cached");
                dc.d_move(&src, dc.root(), b"z", &dst, false);
                done.store(true, SeqCst);
            })
        };
        let cred = Cred::root();
        {
            while a.seq.raw() & 1 == 0 && !done.load(SeqCst) {
                loom::thread::yield_now();
            }
            let g = dc.rcu.read_lock();
            let root = dc.root();
            let seq = root.seq.read_begin().unwrap();
            let r = dc.walk_rcu(&g, &mut RcuWalk::new(&cred), dc.ns.root(), root, seq, b"s", true);
            assert!(!matches!(r, Some(Err(_))), "RCU-walk reported a stable name missing");
            assert!(
                !(dc.misses_cleanly(&g, root, b"s") && root.is_complete()),
                "a complete directory missed a stable name"
            );
        }
        assert!(dc.d_lookup(dc.root(), b"s").is_some(), "d_lookup missed a stable name");
        writer.join().unwrap();
        drop(a);
        let z = dc.d_lookup(dc.root(), b"z").expect("renamed entry");
        assert_eq!(z.inode().map(|i| i.ino), Some(22));
        assert!(dc.d_lookup(dc.root(), b"a").is_none());
        assert!(dc.root().is_complete(), "a rename keeps its directory complete");
    });
}

/// What a memfs-backed model's reader learns of root's `x`: it misses
/// in the dcache, waits (yielding) until `changed` is set, then asks memfs
/// (`fs_probe`); `Some(answer)` if memfs answered (`want` tells which
/// answer counts: `Absent` for false, `Found` for true), else `None`.
fn memfs_answer(dc: &Dcache, changed: &loom::sync::atomic::AtomicBool, want: bool) -> Option<bool> {
    use crate::namei::FsAnswer;
    let g = dc.rcu.read_lock();
    let root = dc.root();
    let missed = dc.lookup_rcu(&g, root, b"x").is_none();
    while !changed.load(loom::sync::atomic::Ordering::SeqCst) {
        loom::thread::yield_now();
    }
    if !missed {
        return None;
    }
    match dc.fs_probe(&g, root, root.inode().unwrap(), b"x", super::name_hash(root, b"x")) {
        FsAnswer::Absent if !want => Some(false),
        FsAnswer::Found(_) if want => Some(true),
        _ => None,
    }
}

/// A stat of root's `x` in RCU-walk: `Some(found)`, or `None` where it
/// falls back.
fn rcu_stat_x(dc: &Dcache) -> Option<bool> {
    rcu_stat(dc, b"x", false)
}

/// A stat of root's `name` in RCU-walk: `Some(found)`, or `None` where it
/// falls back. With `memfs`, a fallback at a last name the bound memfs
/// has counts as found: a first stat reads it there (`stat_found`); the
/// models do not depend on whether the name was stat'ed before
/// (`Dcache::stays_bare`).
fn rcu_stat(dc: &Dcache, name: &[u8], memfs: bool) -> Option<bool> {
    let cred = Cred::root();
    let g = dc.rcu.read_lock();
    let root = dc.root();
    let seq = root.seq.read_begin().unwrap();
    let mut w = RcuWalk::new(&cred);
    match dc.walk_rcu(&g, &mut w, dc.ns.root(), root, seq, name, true) {
        Some(r) => Some(r.is_ok()),
        None => (memfs && w.stop.is_some_and(|s| s.found())).then_some(true),
    }
}

/// A miss answered by memfs's index (`fs_absent`) in a directory that is
/// not complete, racing an unlink of the name (as the VFS does it: the
/// name's dentry, refetched and held, then memfs's removal, then
/// `d_delete`). The reader misses in the dcache, then waits (yielding)
/// until memfs's removal is done before it asks memfs (loom otherwise ran
/// it only before the unlinker's first steps, as the rename models found),
/// then stats again. A stat that answered ENOENT must never be followed by
/// one that finds the name: the unlinker's positive dentry is still in
/// the dcache after memfs's removal. Fails without `fs_absent`'s second,
/// clean probe of the dcache. (Until 2026-11-28 the unlinker's dentry
/// turned negative in place, and stayed in the index to the model's end;
/// now, the root not being complete, `d_delete` unhashes it and puts its
/// name in the root's set of absent names, as the bound below did: the
/// two models differ only in that bound.)
#[test]
fn loom_memfs_miss_vs_unlink() {
    memfs_miss_vs_unlink(1 << 18);
}

/// The same past the bound on negative dentries (0 here): the unlinker's
/// `d_delete` unhashes its dentry and its last reference kills it, while
/// the reader stats. An ENOENT is still never followed by the name, and
/// nothing is touched after its grace period (`check_cache`).
#[test]
fn loom_memfs_miss_vs_unlink_that_kills() {
    memfs_miss_vs_unlink(0);
}

fn memfs_miss_vs_unlink(negative_target: usize) {
    use crate::fs::memfs::MemFs;
    use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
    model(move || {
        let fs = Arc::new(MemFs::default());
        let dc = cache_over_bounded(fs.clone(), negative_target);
        fs.create(fs.root(), b"x", 0o644, crate::fs::Owner { uid: 0, gid: 0 }).unwrap();
        // The name was added behind the cache: the root is not complete.
        dc.root().set_incomplete();
        let removed = Arc::new(AtomicBool::new(false));
        let unlinker = {
            let (dc, fs, removed) = (dc.clone(), fs.clone(), removed.clone());
            thread::spawn(move || {
                let x = dc.lookup_ref(dc.root(), b"x").unwrap();
                assert!(x.inode().is_some());
                let (root, sb) = (dc.root(), dc.root_sb());
                fs.unlink_bound(sb, root.inode().unwrap(), b"x", x.inode().unwrap()).unwrap().unwrap();
                removed.store(true, SeqCst);
                dc.d_delete(&x);
                // Its name goes to the root's set of absent names (the root
                // is not complete), or past the bound it is killed.
                assert!(x.flags.load(SeqCst) & super::dentry::HASHED == 0, "unhashed");
            })
        };
        let first = memfs_answer(&dc, &removed, false);
        let second = rcu_stat_x(&dc);
        assert!(!(first == Some(false) && second == Some(true)), "ENOENT, then the name found again");
        unlinker.join().unwrap();
        check_cache(&dc);
    });
}

/// An unlink of a name the dcache holds no dentry for, over the bound
/// memfs, as the VFS does it (`Vfs::remove_uncached`): the name's lock, a
/// cached lookup, and if it misses, memfs's removal with no dentry made
/// (else the removal and `d_delete`), racing a lookup that caches memfs's
/// answer. Every dentry of a name is made under its lock, so the lookup's
/// dentry is either there before the unlink's cached lookup, which then
/// deletes it, or made after memfs's removal: negative. No positive
/// dentry of the removed name is left. Fails (a positive dentry of the
/// removed name) when the unlink lets go of the lock before memfs's
/// removal.
#[test]
fn loom_uncached_unlink_vs_lookup() {
    uncached_removal_vs_lookup(false);
}

/// The same for rmdir (`Vfs::remove_uncached` with `want_dir`), whose
/// memfs removal first closes the directory's index, then takes the
/// parent's home lock.
#[test]
fn loom_uncached_rmdir_vs_lookup() {
    uncached_removal_vs_lookup(true);
}

fn uncached_removal_vs_lookup(dir: bool) {
    use crate::fs::memfs::MemFs;
    model(move || {
        let fs = Arc::new(MemFs::default());
        let dc = cache_over_bounded(fs.clone(), 1 << 18);
        let owner = crate::fs::Owner { uid: 0, gid: 0 };
        if dir {
            fs.mkdir(fs.root(), b"x", 0o755, owner).unwrap();
        } else {
            fs.create(fs.root(), b"x", 0o644, owner).unwrap();
        }
        // The name was added behind the cache: the root is not complete.
        dc.root().set_incomplete();
        let remover = {
            let (dc, fs) = (dc.clone(), fs.clone());
            thread::spawn(move || {
                let (root, sb) = (dc.root(), dc.root_sb());
                let lock = dc.names.lock(super::name_hash(root, b"x"));
                let ri = root.inode().unwrap();
                match dc.lookup_cached(root, b"x").unwrap() {
                    Some(x) => {
                        if dir {
                            fs.rmdir(ri.ino, b"x").unwrap();
                        } else {
                            fs.unlink_bound(sb, ri, b"x", x.inode().unwrap()).unwrap().unwrap();
                        }
                        dc.d_delete(&x);
                    }
                    None if dir => fs.rmdir_bound_checked(sb, ri, b"x", |_| Ok(())).unwrap().unwrap(),
                    None => fs.unlink_bound_checked(sb, ri, b"x", |_| Ok(())).unwrap().unwrap(),
                }
                drop(lock);
            })
        };
        drop(dc.lookup_ref(dc.root(), b"x").unwrap());
        remover.join().unwrap();
        let positive = dc.d_lookup(dc.root(), b"x").map(|d| d.inode().is_some());
        assert_ne!(positive, Some(true), "a positive dentry of a removed name");
        check_cache(&dc);
    });
}

/// Makes `x` in the root as `Vfs::create_uncached` does, with no dentry:
/// the name's lock, a cached lookup that misses, (`bare`: the root's
/// `COMPLETE` cleared, `Dcache::creates_bare`), the name's cached miss
/// taken out, memfs's create (of an inode born with no reference, as for an empty write).
fn create_x_uncached(dc: &Dcache, fs: &crate::fs::memfs::MemFs, bare: bool) {
    use crate::fs::NewNode;
    let (root, sb) = (dc.root(), dc.root_sb());
    let hash = super::name_hash(root, b"x");
    let lock = dc.names.lock(hash);
    assert!(dc.lookup_cached(root, b"x").unwrap().is_none(), "only this thread makes x");
    if bare {
        assert!(dc.creates_bare(root, |_| true));
    }
    dc.absent_forget(root, b"x", hash);
    let owner = crate::fs::Owner { uid: 0, gid: 0 };
    let ip = fs.create_bound(sb, root.inode().unwrap(), b"x", &NewNode::File, 0o644, owner, false, &dc.counters);
    assert!(ip.unwrap().is_ok(), "only this thread makes x");
    drop(lock);
}

/// A create of a name the dcache holds no dentry for, over the bound
/// memfs, as the VFS does it at the cache's size target
/// (`Vfs::create_uncached`): the name's lock, a cached lookup that misses,
/// the name's cached miss taken out, then memfs's create, with no dentry
/// made; racing a lookup that caches memfs's answer (the root is not
/// complete: a miss goes to its set of absent names) and then a stat in
/// RCU-walk. A stat must not lose a name the lookup found, and after the
/// create no cached miss may hide the name. Fails (ENOENT at the end) when
/// the create leaves the set alone.
#[test]
fn loom_uncached_create_vs_lookup() {
    use crate::fs::memfs::MemFs;
    model(|| {
        let fs = Arc::new(MemFs::default());
        let dc = cache_over_bounded(fs.clone(), 1 << 18);
        dc.root().set_incomplete();
        let creator = {
            let (dc, fs) = (dc.clone(), fs.clone());
            thread::spawn(move || create_x_uncached(&dc, &fs, false))
        };
        thread::yield_now();
        let found = dc.lookup_positive(dc.root(), b"x").is_ok();
        let after = rcu_stat_x(&dc);
        assert!(!(found && after == Some(false)), "found, then ENOENT");
        creator.join().unwrap();
        assert!(dc.lookup_positive(dc.root(), b"x").is_ok(), "a created name answered ENOENT");
        assert_ne!(rcu_stat_x(&dc), Some(false), "a created name answered ENOENT in RCU-walk");
        check_cache(&dc);
    });
}

/// A create of a file in a `COMPLETE` directory of the bound memfs, in the
/// default mode, which makes it no dentry (`Dcache::creates_bare`): the
/// name's lock, a cached lookup that misses, the directory's `COMPLETE`
/// cleared, then memfs's create; racing two stats in RCU-walk, which
/// answer a miss from the flag while it is set. A stat that found the name
/// must not be followed by one that answers ENOENT, and after the create
/// the name is found. Fails (ENOENT at the end) when the create leaves
/// the flag set.
#[test]
fn loom_bare_create_in_a_complete_dir_vs_stats() {
    use crate::fs::memfs::MemFs;
    model(|| {
        let fs = Arc::new(MemFs::default());
        let dc = cache_with(fs.clone(), 1 << 18, true);
        assert!(dc.root().is_complete(), "an empty memfs root is complete");
        let creator = {
            let (dc, fs) = (dc.clone(), fs.clone());
            thread::spawn(move || create_x_uncached(&dc, &fs, true))
        };
        thread::yield_now();
        let first = rcu_stat(&dc, b"x", true);
        let second = rcu_stat(&dc, b"x", true);
        assert!(!(first == Some(true) && second == Some(false)), "found, then ENOENT");
        creator.join().unwrap();
        assert_eq!(rcu_stat(&dc, b"x", true), Some(true), "a created name not found in RCU-walk");
        assert!(dc.d_lookup(dc.root(), b"x").is_none(), "the create made a dentry");
        // A REF lookup (a handle's) makes the dentry.
        assert!(dc.lookup_positive(dc.root(), b"x").is_ok(), "a created name answered ENOENT");
        check_cache(&dc);
    });
}

/// memfs bound to a cache's superblock (`MemFs::bind`, as the cache is
/// made) while a `FileSystem` call creates a file: the new inode is
/// inserted in memfs's table, then looks at `bound` (`MemFs::alloc`); the
/// bind stores `bound`, then walks the table, setting each inode's
/// superblock. One of them must set it. Fails (an inode with no
/// superblock) when `alloc` does not look again. It does not fail with
/// either side's fence taken out (tried): `bound` is not a loom atomic
/// (it is loaded on every bound path, and would multiply the other
/// models' schedules), so loom cannot show the load reading an old value.
/// The fences' argument is in `bind`'s and `alloc`'s comments.
#[test]
fn loom_bind_vs_create() {
    use crate::fs::memfs::MemFs;
    model(|| {
        let fs = Arc::new(MemFs::default());
        let creator = {
            let fs = fs.clone();
            thread::spawn(move || {
                let owner = crate::fs::Owner { uid: 0, gid: 0 };
                let a = fs.create(fs.root(), b"x", 0o644, owner).unwrap();
                fs.forget(a.ino, 1);
            })
        };
        let dc = cache_with(fs.clone(), 1 << 18, true);
        creator.join().unwrap();
        // Added behind the cache, which may have found the root empty.
        dc.root().set_incomplete();
        let d = dc.lookup_positive(dc.root(), b"x").expect("created");
        let sb: *const crate::inode::Super = dc.root_sb();
        assert_eq!(d.inode().unwrap().owner_ptr(), sb, "an inode with no superblock");
        drop(d);
        check_cache(&dc);
    });
}

/// A create that fails after memfs made its inode (its directory was
/// removed: the index is closed), racing a `link` of the inode's number
/// by a caller that guessed it (memfs's `FileSystem` calls take numbers).
/// If the link named it, the inode lives on with one link and the name
/// finds it; if not, the name is absent. Fails (the inode gone while
/// `l` names it) when the failed create sets the link count to 0 instead
/// of taking back its own link (`MemFs::unname_new`).
#[test]
fn loom_link_by_number_vs_a_failed_create() {
    use crate::fs::memfs::MemFs;
    model(|| {
        let fs = Arc::new(MemFs::default());
        let owner = crate::fs::Owner { uid: 0, gid: 0 };
        let root = fs.root();
        let d = fs.mkdir(root, b"d", 0o755, owner).unwrap();
        fs.rmdir(root, b"d").unwrap();
        // This thread's next number follows `y`'s.
        let y = fs.create(root, b"y", 0o644, owner).unwrap();
        fs.forget(y.ino, 1);
        let guess = y.ino + 1;
        let done = Arc::new(crate::sync::atomic::AtomicBool::new(false));
        let linker = {
            let (fs, done) = (fs.clone(), done.clone());
            thread::spawn(move || {
                until_done(&done, || match fs.link(guess, root, b"l") {
                    Ok(a) => {
                        fs.forget(a.ino, 1);
                        true
                    }
                    Err(_) => false,
                })
            })
        };
        let made = fs.create(d.ino, b"x", 0o644, owner);
        done.store(true, std::sync::atomic::Ordering::Release);
        assert_eq!(made.map(drop).map_err(|e| crate::error::errno_of(&e)), Err(crate::error::ENOENT));
        let linked = linker.join().unwrap();
        fs.forget(d.ino, 1);
        match fs.lookup(root, b"l") {
            Ok(a) => {
                assert!(linked);
                assert_eq!(a.ino, guess);
                assert_eq!(fs.getattr(guess).map(|a| a.nlink).ok(), Some(1), "the linked inode is gone");
                fs.forget(a.ino, 1);
            }
            Err(_) => assert!(!linked, "a link that succeeded left no name"),
        }
    });
}

/// A memfs with one file, `f` in the root (no lookup of it out), and a
/// thread that calls `call` with the memfs and the file's number, again
/// and again ([`until_done`](crate::sync::atomic::until_done)), while this
/// one unlinks the file's last name; then only the root is left. Returns
/// the memfs for the model's own checks.
fn racing_the_last_unlink(
    call: impl Fn(&crate::fs::memfs::MemFs, Ino) + Send + Sync + 'static,
) -> Arc<crate::fs::memfs::MemFs> {
    let fs = Arc::new(crate::fs::memfs::MemFs::default());
    let owner = crate::fs::Owner { uid: 0, gid: 0 };
    let root = fs.root();
    let a = fs.create(root, b"f", 0o644, owner).unwrap();
    fs.forget(a.ino, 1);
    let done = Arc::new(crate::sync::atomic::AtomicBool::new(false));
    let racer = {
        let (fs, done) = (fs.clone(), done.clone());
        thread::spawn(move || {
            until_done(&done, || {
                call(&fs, a.ino);
                false
            })
        })
    };
    fs.unlink(root, b"f").unwrap();
    done.store(true, std::sync::atomic::Ordering::Release);
    racer.join().unwrap();
    assert_eq!(fs.live_inodes(), 1, "only the root is left");
    fs
}

/// memfs's `lookup` (a `FileSystem` call, as over a memfs that is not
/// bound) racing the unlink of the name's last link: a lookup either
/// finds the name gone, or hands out a lookup that keeps the inode until
/// it is forgotten. Fails (a lookup handed out on a freed inode) when the
/// lookup is counted without the references' lock
/// (`Inode::lookups_add_live`).
#[test]
fn loom_lookup_vs_unlink_of_the_last_name() {
    model(|| {
        racing_the_last_unlink(|fs, _| {
            if let Ok(a) = fs.lookup(fs.root(), b"f") {
                assert!(fs.getattr(a.ino).is_ok(), "a lookup handed out on a freed inode");
                fs.forget(a.ino, 1);
            }
        });
    });
}

/// memfs's `setxattr` (a `FileSystem` call, as the VFS makes it, or a
/// caller of memfs itself) racing the unlink of the file's last name:
/// the bytes a change charges go back with the inode, whichever comes
/// first. Fails (bytes left charged for a freed inode) when the change
/// holds nothing that keeps the inode: the free then counts the list it
/// saw, and the change publishes another after it.
#[test]
fn loom_setxattr_vs_unlink_of_the_last_name() {
    model(|| {
        let fs = racing_the_last_unlink(|fs, ino| {
            let _ = fs.setxattr(ino, b"user.a", b"v", crate::fs::XattrSet::Either);
        });
        assert_eq!(fs.used_bytes(), 0, "an attribute's bytes stayed charged for a freed inode");
    });
}

/// A name added to memfs under its name lock, with no dentry (as a bare
/// create adds it, `Dcache::creates_bare`; here a link of `z`'s file, the
/// same insert with less around it for loom), racing an unlink of `y`, in
/// memfs's index of four homes: `z` sits at `x`'s home, `y` in the next
/// slot, its own home. The unlink vacates `y`'s slot, so `x`'s insert,
/// passing `z` and `y`, may claim the slot after `y`'s, then find `y`'s
/// empty and move back, its entry hidden meanwhile (`sync::index`). Two
/// stats of `x` in RCU-walk must not find it, then answer ENOENT. Fails
/// without `fs_probe`'s look at the name's lock (with three preemptions;
/// not with two). With the look, every schedule of three preemptions
/// takes this model more than 40 minutes on the project's VM (it fails in
/// about a minute without), so it runs in `scripts/verify --full` only;
/// the protocol alone, on the index with a lock word and no dcache or
/// memfs around it, is modelled in the fast tier
/// (`tests/loom_index.rs`, `loom_lock_look_before_probe_keeps_a_moving_insert_found`,
/// about a minute, with its failing twin).
#[test]
#[ignore = "over 40 minutes: scripts/verify --full runs it"]
fn loom_bare_insert_moving_back_vs_stats() {
    use crate::fs::memfs::{name_key, MemFs};
    // Homes in a table of four (the top two bits of the key).
    let home = |n: &[u8]| name_key(n) >> 62;
    let named = |want: u64, skip: usize| {
        (0..1000)
            .map(|i| format!("n{i}").into_bytes())
            .filter(|n| home(n) == want)
            .nth(skip)
            .expect("a name with that home")
    };
    let (x, z, y) = (named(0, 0), named(0, 1), named(1, 0));
    crate::sync::atomic::loom_model_bound(3, move || {
        let fs = Arc::new(MemFs::default());
        let dc = cache_with(fs.clone(), 1 << 18, true);
        let owner = crate::fs::Owner { uid: 0, gid: 0 };
        let mut inos = Vec::new();
        for n in [&z, &y] {
            let a = fs.create(fs.root(), n, 0o644, owner).unwrap();
            fs.forget(a.ino, 1);
            inos.push(a.ino);
        }
        // The names were added behind the cache: the root is not complete.
        dc.root().set_incomplete();
        let unlinker = {
            let (dc, fs, y) = (dc.clone(), fs.clone(), y.clone());
            // No name lock: its stripe may be `x`'s (a few stripes under
            // loom), which would keep the two apart.
            thread::spawn(move || {
                let (root, sb) = (dc.root(), dc.root_sb());
                fs.unlink_bound_checked(sb, root.inode().unwrap(), &y, |_| Ok(())).unwrap().unwrap();
            })
        };
        let adder = {
            let (dc, fs, x, zi) = (dc.clone(), fs.clone(), x.clone(), inos[0]);
            thread::spawn(move || {
                let lock = dc.names.lock(super::name_hash(dc.root(), &x));
                let a = fs.link(zi, fs.root(), &x).unwrap();
                fs.forget(a.ino, 1);
                drop(lock);
            })
        };
        thread::yield_now();
        let first = rcu_stat(&dc, &x, true);
        let second = rcu_stat(&dc, &x, true);
        assert!(!(first == Some(true) && second == Some(false)), "found, then ENOENT");
        unlinker.join().unwrap();
        adder.join().unwrap();
        assert_eq!(rcu_stat(&dc, &x, true), Some(true));
        check_cache(&dc);
    });
}

/// An open at the cache's size target of a name the dcache does not hold
/// (`Dcache::pin_found`, as `Vfs::begin_walk_file` calls it): the RCU walk
/// finds the inode in the bound memfs and takes a VFS reference on it,
/// racing an unlink with no dentry (`Vfs::remove_uncached`) that drops the
/// name's last link, after which memfs frees the inode once nothing holds
/// it. The open either gets no reference (the inode dying: it falls back)
/// or holds a live inode until it puts it, and the in-core count comes
/// back to what it was. Fails (a dead inode held, or the count off) when
/// the reference is taken without `hold`'s check.
#[test]
fn loom_open_found_vs_uncached_unlink() {
    use crate::fs::memfs::MemFs;
    model(|| {
        let fs = Arc::new(MemFs::default());
        let dc = cache_over_bounded(fs.clone(), 1 << 18);
        let owner = crate::fs::Owner { uid: 0, gid: 0 };
        let a = fs.create(fs.root(), b"x", 0o644, owner).unwrap();
        // Only its name keeps it: the lookup the create counted, paid back.
        fs.forget(a.ino, 1);
        // The name was added behind the cache: the root is not complete.
        dc.root().set_incomplete();
        let inodes = dc.counters.inodes();
        let x = {
            let g = dc.rcu.read_lock();
            let (root, sb) = (dc.root(), dc.root_sb());
            fs.find_bound(sb, &g, root.inode().unwrap(), b"x").unwrap().unwrap() as *const crate::inode::Inode
        };
        let unlinker = {
            let dc = dc.clone();
            let fs = fs.clone();
            thread::spawn(move || {
                let (root, sb) = (dc.root(), dc.root_sb());
                let lock = dc.names.lock(super::name_hash(root, b"x"));
                assert!(dc.lookup_cached(root, b"x").unwrap().is_none());
                fs.unlink_bound_checked(sb, root.inode().unwrap(), b"x", |_| Ok(())).unwrap().unwrap();
                drop(lock);
            })
        };
        thread::yield_now();
        let cred = Cred::root();
        {
            let g = dc.rcu.read_lock();
            let root = dc.root();
            let seq = root.seq.read_begin().unwrap();
            let mut w = RcuWalk::new(&cred);
            if dc.walk_rcu(&g, &mut w, dc.ns.root(), root, seq, b"x", true).is_none() {
                if let Some((rw, ip)) = dc.pin_found(&g, &w) {
                    drop(g);
                    thread::yield_now();
                    // SAFETY: the reference `pin_found` took.
                    let i = unsafe { &*ip };
                    assert!(!i.is_dead(), "an open holds a freed inode");
                    drop(rw);
                    // SAFETY: as above: ours to put.
                    unsafe { dc.iput(ip) };
                }
            }
        }
        unlinker.join().unwrap();
        assert_eq!(dc.counters.inodes(), inodes, "in-core inodes counted back");
        // SAFETY: the stand-in frees nothing before the model ends.
        assert!(unsafe { &*x }.is_dead(), "the unlinked file's inode is freed");
        check_cache(&dc);
    });
}

/// Past the bound on negative dentries, an unlink whose `d_delete` may
/// find its reference the only one (then it unhashes the dentry, and its
/// own last `dput` kills it) or not (another holder's last `dput` does),
/// racing that other holder's `dput`: whichever comes last kills the
/// dentry once, and nothing is touched after its grace period.
#[test]
fn loom_dput_vs_unlink_that_kills() {
    use crate::fs::memfs::MemFs;
    model(|| {
        let fs = Arc::new(MemFs::default());
        let dc = cache_over_bounded(fs.clone(), 0);
        fs.create(fs.root(), b"x", 0o644, crate::fs::Owner { uid: 0, gid: 0 }).unwrap();
        // The name was added behind the cache: the root is not complete.
        dc.root().set_incomplete();
        let held = dc.lookup_ref(dc.root(), b"x").unwrap();
        assert!(held.inode().is_some());
        let held = held.into_raw() as usize;
        let putter = {
            let dc = dc.clone();
            thread::spawn(move || {
                // SAFETY: the reference `lookup_ref` took, dropped once.
                unsafe { dc.dput(&*(held as *const super::Dentry)) }
            })
        };
        let unlinker = {
            let (dc, fs) = (dc.clone(), fs.clone());
            thread::spawn(move || {
                let x = dc.lookup_ref(dc.root(), b"x").unwrap();
                let (root, sb) = (dc.root(), dc.root_sb());
                fs.unlink_bound(sb, root.inode().unwrap(), b"x", x.inode().unwrap()).unwrap().unwrap();
                dc.d_delete(&x);
            })
        };
        putter.join().unwrap();
        unlinker.join().unwrap();
        check_cache(&dc);
        assert!(dc.d_lookup(dc.root(), b"x").is_none(), "the removed name is gone from the cache");
    });
}

/// The other direction: a name found in memfs's index (`fs_probe`'s
/// `Found`, which a stat answers from) racing a create (as the VFS does it:
/// a negative dentry for the name first, then memfs's insert, then the
/// dentry made positive, left out here: the window is before it). The
/// reader misses in the dcache, waits (yielding) until memfs's insert is
/// done, asks memfs, then stats again. A stat that found the name must
/// never be followed by one that answers ENOENT from the creator's negative
/// dentry. Fails without `fs_probe`'s second, clean probe of the dcache.
#[test]
fn loom_memfs_hit_vs_create() {
    use crate::fs::memfs::MemFs;
    use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
    model(|| {
        let fs = Arc::new(MemFs::default());
        let dc = cache_over(fs.clone());
        dc.root().set_incomplete();
        let created = Arc::new(AtomicBool::new(false));
        let creator = {
            let (dc, fs, created) = (dc.clone(), fs.clone(), created.clone());
            thread::spawn(move || {
                let x = dc.lookup_ref(dc.root(), b"x").unwrap();
                assert!(x.inode().is_none(), "a negative dentry first");
                fs.create(fs.root(), b"x", 0o644, crate::fs::Owner { uid: 0, gid: 0 }).unwrap();
                created.store(true, SeqCst);
                drop(x);
            })
        };
        let first = memfs_answer(&dc, &created, true);
        let second = rcu_stat_x(&dc);
        assert!(!(first == Some(true) && second == Some(false)), "found, then ENOENT");
        creator.join().unwrap();
    });
}

/// An RCU walk of `d/x` stops at `x`, which is not cached, and legitimizes
/// the directory it reached (`unlazy`, Linux's `try_to_unlazy`) while the
/// shrinker frees `d` (cached, unused). The REF walk must go on from a
/// directory that is alive and still the one the walk read: `d` pinned and
/// not killed, with `x` left, or the root (if `d` was gone before the walk
/// reached it), with `d/x` left; or it falls back. Fails if `unlazy` takes
/// its reference without the dead check (`get` for `get_not_dead`): a
/// double free. Of 97 executions, 50 go on from `d`, 21 from the root, 26
/// fall back.
#[test]
fn loom_unlazy_vs_shrinker() {
    use crate::sync::lockref::DEAD;
    model(|| {
        let dc = cache();
        add(&dc, b"d", 2);
        let shrinker = {
            let dc = dc.clone();
            thread::spawn(move || {
                dc.shrink(1, false);
            })
        };
        let cred = Cred::root();
        {
            loom::thread::yield_now();
            let g = dc.rcu.read_lock();
            let root = dc.root();
            let seq = root.seq.read_begin().unwrap();
            let mut w = RcuWalk::new(&cred);
            let r = dc.walk_rcu(&g, &mut w, dc.ns.root(), root, seq, b"d/x", true);
            assert!(r.is_none(), "nothing cached answers d/x");
            if let Some((_rw, dir, rest)) = dc.unlazy(&g, &w, b"d/x") {
                dir.check_live();
                assert_ne!(dir.lockref().count_hint(), DEAD, "the walk went on from a killed directory");
                match rest {
                    b"x" => assert!(!dir.is_root() && dir.is_dir() && dir.is_hashed()),
                    b"d/x" => assert!(dir.is_root()),
                    r => panic!("rest {r:?}"),
                }
            }
        }
        shrinker.join().unwrap();
        check_cache(&dc);
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
        let sb = dc.new_super(Arc::new(Stub::new(None))).unwrap() as usize;
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
            let r = dc.walk_rcu(&g, &mut RcuWalk::new(&cred), dc.ns.root(), root, seq, b"m", true);
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
        let r = dc.walk_rcu(&g, &mut RcuWalk::new(&cred), dc.ns.root(), root, seq, b"m", true);
        let (mnt, d, _) = r.expect("no writer left").expect("m exists");
        assert!(std::ptr::eq(mnt, dc.ns.root()) && d.inode().map(|i| i.ino) == Some(2), "detached at once");
    });
}

/// A dentry pointer that may cross to a spawned model thread.
#[derive(Clone, Copy)]
struct Held(usize);

/// A counted reference to the cached `name` under the root, as a raw
/// pointer the caller must `dput`.
fn hold(dc: &Dcache, name: &[u8]) -> Held {
    Held(dc.d_lookup(dc.root(), name).expect("cached").into_raw() as usize)
}

/// The state every model must leave: every LRU list is a well-linked list
/// of live dentries, each flagged `ON_LRU`; the tree (found through the
/// indexes) holds exactly as many dentries as the counter says, none dead.
fn check_cache(dc: &Dcache) {
    use super::dentry::{Dentry, NEG_LRU, ON_LRU};
    use crate::sync::lockref::DEAD;
    dc.lrus.for_each_locked(|_, negative, head, tail| {
        let mut prev: *const Dentry = std::ptr::null();
        let mut p = head;
        let mut stamp = 0;
        while !p.is_null() {
            // SAFETY: the stand-in frees nothing before the model ends;
            // `check_live` says whether the real build could have.
            let d = unsafe { &*p };
            d.check_live();
            let f = d.flags.load(loom::sync::atomic::Ordering::SeqCst);
            assert!(f & ON_LRU != 0, "on the LRU without ON_LRU");
            assert_eq!(f & NEG_LRU != 0, negative, "NEG_LRU names the other list");
            assert_eq!(
                d.inode.load(loom::sync::atomic::Ordering::SeqCst).is_null(),
                negative,
                "on the other kind's list"
            );
            assert_ne!(d.lockref().count_hint(), DEAD, "a dead dentry on the LRU");
            // SAFETY: the shard's lock is held.
            let (pv, nx, st) = unsafe { super::lru::lru_next(d) };
            assert_eq!(pv, prev, "a broken LRU back link");
            assert!(st > stamp, "LRU stamps out of order");
            stamp = st;
            prev = p;
            p = nx;
        }
        assert_eq!(tail, prev, "a broken LRU tail");
    });
    let g = dc.rcu.read_lock();
    let mut n = 0;
    let mut stack = vec![dc.root()];
    while let Some(d) = stack.pop() {
        d.check_live();
        assert!(d.lockref().count_hint() >= 0, "a dead dentry in the tree");
        n += 1;
        d.children.for_each(&g, |c| stack.push(c));
    }
    drop(g);
    assert_eq!(dc.counters.dentries(), n, "the dentry counter disagrees with the tree");
}

/// The last `dput` of `x` in a second thread racing `killer` in this one:
/// whatever the interleaving, no dentry is touched after its grace period,
/// and the cache is left consistent.
fn dput_vs(killer: fn(&Dcache), setup: fn(&Dcache)) {
    model(move || {
        let dc = cache();
        add(&dc, b"x", 20);
        add(&dc, b"y", 21);
        let x = hold(&dc, b"x");
        setup(&dc);
        let putter = {
            let dc = dc.clone();
            thread::spawn(move || {
                // SAFETY: the reference `hold` took, dropped once.
                unsafe { dc.dput(&*(x.0 as *const super::Dentry)) }
            })
        };
        // The killer in a thread of its own too: with the main thread as
        // one side, loom explores only a handful of interleavings here
        // (measured: 5; see the module doc).
        let killer = {
            let dc = dc.clone();
            thread::spawn(move || killer(&dc))
        };
        putter.join().unwrap();
        killer.join().unwrap();
        check_cache(&dc);
    });
}

/// `drop_caches` (the tree shrink) kills every unused dentry.
#[test]
fn loom_dput_vs_drop_caches() {
    dput_vs(|dc| dc.shrink_all(), |_| {});
}

/// `rename(y, x)`: the dentry of the name renamed over is invalidated.
#[test]
fn loom_dput_vs_rename_over() {
    dput_vs(
        |dc| {
            let src = dc.d_lookup(dc.root(), b"y").expect("cached");
            let dst = dc.d_lookup(dc.root(), b"x").expect("cached");
            dc.d_move(&src, dc.root(), b"x", &dst, false);
        },
        |_| {},
    );
}

/// `unlink(x)` while another holder lets go: `d_delete` unhashes it.
#[test]
fn loom_dput_vs_unlink() {
    dput_vs(
        |dc| {
            let d = dc.d_lookup(dc.root(), b"x").expect("cached");
            dc.d_delete(&d);
        },
        |_| {},
    );
}

/// A `Notify` invalidation of every cached name (`all_changed`), which
/// holds no reference of its own.
#[test]
fn loom_dput_vs_notify_invalidation() {
    dput_vs(|dc| dc.invalidate_super(dc.root_sb()), |_| {});
}

/// The LRU shrinker, with `x` on the list, held, and its second chance
/// already spent: it frees `x` the moment the count reaches zero.
#[test]
fn loom_dput_vs_lru_shrinker() {
    dput_vs(
        |dc| {
            dc.shrink(1, false);
        },
        |dc| {
            // `x` stays on the LRU while held (lazy removal); clear its bit.
            let x = dc.d_lookup(dc.root(), b"x").expect("cached");
            x.flags.fetch_and(!super::dentry::REFERENCED, loom::sync::atomic::Ordering::SeqCst);
        },
    );
}

/// A dentry that turns negative or positive while on the LRU (lazily, in
/// use) moves to its shard's list of its new kind, racing a shrinker pass
/// of either kind: `flip` runs in one thread on the cached, unused `x`
/// (20) with the negative `n` also cached; the shrinker frees one dentry
/// in another. Whatever the interleaving, every list holds only its own
/// kind (`check_cache`), and nothing is touched after its grace period.
fn flip_vs_shrinker(flip: fn(&Dcache), negatives_only: bool) {
    model(move || {
        let dc = cache();
        // A complete root (every name it has, x, is cached): the only
        // holder's unlink leaves a negative dentry there, below the bound
        // (elsewhere its name goes to the root's set of absent names).
        dc.root().flags.fetch_or(super::dentry::COMPLETE, std::sync::atomic::Ordering::Relaxed);
        add(&dc, b"x", 20);
        drop(dc.d_add(dc.root(), b"n", std::ptr::null()));
        let flipper = {
            let dc = dc.clone();
            thread::spawn(move || flip(&dc))
        };
        let shrinker = {
            let dc = dc.clone();
            thread::spawn(move || dc.shrink(1, negatives_only))
        };
        flipper.join().unwrap();
        shrinker.join().unwrap();
        check_cache(&dc);
    });
}

/// `unlink(x)` by its only holder: `d_delete` turns it negative in place,
/// and it moves from the positive list to the negative one, under a pass
/// for negatives only (the negative-dentry target).
#[test]
fn loom_unlink_vs_negative_shrinker() {
    flip_vs_shrinker(
        |dc| {
            let d = dc.d_lookup(dc.root(), b"x").expect("cached");
            dc.d_delete(&d);
            assert!(d.inode().is_none(), "the only holder's unlink leaves it negative");
        },
        true,
    );
}

/// A create over the cached negative `n`: `d_instantiate` moves it to the
/// positive list, under a pass over the whole cache.
#[test]
fn loom_create_over_negative_vs_shrinker() {
    flip_vs_shrinker(
        |dc| {
            // The shrinker may have freed `n` already: then there is
            // nothing to flip.
            if let Some(d) = dc.d_lookup(dc.root(), b"n") {
                let ip = dc.root_sb().iget(&attr(22), false, &dc.counters).unwrap();
                dc.d_instantiate(&d, ip, false);
            }
        },
        false,
    );
}

/// `..` in a REF-walk (`dget_parent`) on a dentry that a rename moves to
/// another parent, after which a killer frees the parent it left: the
/// reference must land on a live dentry that is, or was at some instant,
/// the parent (the audit of issue 15 found a plain `get` on a dead one).
#[test]
fn loom_dget_parent_vs_rename_and_kill() {
    model(|| {
        let dc = cache();
        add(&dc, b"a", 2); // directories
        add(&dc, b"c", 3);
        let a = dc.d_lookup(dc.root(), b"a").expect("cached");
        let ip = dc.root_sb().iget(&attr(4), false, &dc.counters).unwrap();
        drop(dc.d_add(&a, b"b", ip));
        drop(a);
        let b = Held(dc.d_lookup(&dc.d_lookup(dc.root(), b"a").unwrap(), b"b").unwrap().into_raw() as usize);
        let walker = {
            let dc = dc.clone();
            thread::spawn(move || {
                // SAFETY: the reference taken above, dropped at the end.
                let b = unsafe { &*(b.0 as *const super::Dentry) };
                let p = dc.dget_parent(b);
                p.check_live();
                let ino = p.inode().map(|i| i.ino);
                assert!(ino == Some(2) || ino == Some(3), "a parent b never had: {ino:?}");
                drop(p);
                dc.dput(b);
            })
        };
        let killer = {
            let dc = dc.clone();
            thread::spawn(move || {
                // SAFETY: b is held by the walker until it ends.
                let b = unsafe { &*(b.0 as *const super::Dentry) };
                let c = dc.d_lookup(dc.root(), b"c").expect("cached");
                let dst = dc.d_add(&c, b"b", std::ptr::null());
                dc.d_move(b, &c, b"b", &dst, false);
                drop(dst);
                drop(c);
                dc.shrink_all();
            })
        };
        walker.join().unwrap();
        killer.join().unwrap();
        check_cache(&dc);
    });
}

/// Parallel lookups of one missing name (`d_alloc_parallel`'s purpose):
/// the name lock hands the first one's answer to the other, so the
/// filesystem is asked once, and both get the same dentry.
#[test]
fn loom_parallel_lookups_make_one_filesystem_call() {
    model(|| {
        let fs = Arc::new(Stub::new(Some(20)));
        let dc = cache_over(fs.clone());
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let dc = dc.clone();
                thread::spawn(move || {
                    thread::yield_now();
                    let d = dc.lookup_ref(dc.root(), b"x").expect("found");
                    d.inode().map(|i| i.ino)
                })
            })
            .collect();
        for t in ts {
            assert_eq!(t.join().unwrap(), Some(20));
        }
        assert_eq!(fs.lookups.load(loom::sync::atomic::Ordering::SeqCst), 1, "the filesystem was asked twice");
        check_cache(&dc);
    });
}

/// An update that changed an inode in its filesystem marks it stale; a
/// stat racing it (which refreshes when it sees a mark) never leaves it
/// marked clean with the attributes from before the change: once both are
/// done, a stat shows the change. Two updates, so that a mark also lands
/// on a refresh in flight.
#[test]
fn loom_mark_stale_vs_refresh() {
    model(|| {
        let fs = Arc::new(Stub::new(Some(20)));
        let dc = cache_over(fs.clone());
        // Twice: the second put marks `x` referenced, so that the
        // threads' puts take the lockless path. This model is about the
        // stale mark; the LRU's first put has models of its own, and three
        // threads each taking its lock ran for minutes.
        drop(dc.lookup_ref(dc.root(), b"x").expect("found"));
        drop(dc.lookup_ref(dc.root(), b"x").expect("cached"));
        let update = |dc: Arc<Dcache>, fs: Arc<Stub>| {
            thread::spawn(move || {
                fs.changes.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
                let d = dc.lookup_ref(dc.root(), b"x").expect("cached");
                d.inode().expect("positive").mark_stale();
            })
        };
        let updater = update(dc.clone(), fs.clone());
        let reader = {
            let dc = dc.clone();
            thread::spawn(move || {
                thread::yield_now();
                let d = dc.lookup_ref(dc.root(), b"x").expect("cached");
                d.inode().expect("positive").attr().size
            })
        };
        let second = update(dc.clone(), fs.clone());
        updater.join().unwrap();
        second.join().unwrap();
        let seen = reader.join().unwrap();
        assert!(seen <= 2);
        let d = dc.lookup_ref(dc.root(), b"x").expect("cached");
        assert_eq!(d.inode().expect("positive").attr().size, 2, "a change was lost to a refresh in flight");
    });
}

/// A refresh that read the filesystem while a change was under way (its
/// ctime moved, its size not yet: a host's write) never outlives the
/// change's own refresh: once both are done, the size is the changed one;
/// and once the change's refresh has returned, that size is in core,
/// whatever the watcher's is doing. ctime cannot order the two answers (it
/// is the same); the order in which the reads began does (their tickets).
/// Fails without the tickets (the torn answer stored last), and when a read
/// begun later refuses an earlier one's store while it is under way (the
/// writer's assertion: size 0).
#[test]
fn loom_a_refresh_torn_by_a_change_never_outlives_the_changes_own() {
    model(|| {
        let fs = Arc::new(Stub::new(Some(20)));
        let dc = cache_over(fs.clone());
        drop(dc.lookup_ref(dc.root(), b"x").expect("found"));
        drop(dc.lookup_ref(dc.root(), b"x").expect("cached"));
        let writer = {
            let (dc, fs) = (dc.clone(), fs.clone());
            thread::spawn(move || {
                fs.lag.store(1, loom::sync::atomic::Ordering::SeqCst);
                fs.changes.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
                fs.lag.store(0, loom::sync::atomic::Ordering::SeqCst);
                let d = dc.lookup_ref(dc.root(), b"x").expect("cached");
                let inode = d.inode().expect("positive");
                inode.refresh(&*fs);
                // Its own answer or a newer one, even with the watcher's
                // read still under way. (One load, not `attr`: the model's
                // time.)
                assert_eq!(inode.size_now(), 1, "a refresh that returned left an older answer in core");
            })
        };
        let watcher = {
            let (dc, fs) = (dc.clone(), fs.clone());
            thread::spawn(move || {
                thread::yield_now();
                let d = dc.lookup_ref(dc.root(), b"x").expect("cached");
                d.inode().expect("positive").refresh(&*fs);
            })
        };
        writer.join().unwrap();
        watcher.join().unwrap();
        let d = dc.lookup_ref(dc.root(), b"x").expect("cached");
        assert_eq!(d.inode().expect("positive").attr().size, 1, "a refresh read during the change was stored last");
    });
}

/// A `COMPLETE` directory answers a clean miss in its index by itself
/// (ENOENT): `x` cached, positive and unused under a complete root, which
/// a shrinker pass frees while a reader probes for it. The reader either
/// finds `x`, or meets it unusable (falls back), or misses it cleanly;
/// after a clean miss the flag it reads next must be clear, since `x`
/// still exists in the filesystem. Fails if the shrinker's unhash does not
/// clear the flag before the index removal.
#[test]
fn loom_shrinker_vs_miss_in_complete_dir() {
    model(|| {
        let dc = cache();
        add(&dc, b"x", 20);
        dc.root().flags.fetch_or(super::dentry::COMPLETE, loom::sync::atomic::Ordering::SeqCst);
        let shrinker = {
            let dc = dc.clone();
            thread::spawn(move || {
                dc.shrink(1, false);
            })
        };
        {
            loom::thread::yield_now();
            let g = dc.rcu.read_lock();
            if dc.misses_cleanly(&g, dc.root(), b"x") {
                assert!(!dc.root().is_complete(), "a complete directory answered ENOENT for a name it has");
            }
        }
        shrinker.join().unwrap();
        assert!(!dc.root().is_complete(), "a name was dropped, yet the directory says it has every name");
        check_cache(&dc);
    });
}

/// A rename over a name in a `COMPLETE` directory, and an exchange: the
/// name renamed over exists throughout, so a reader must never take it for
/// a clean miss, though both dentries are in write sections and the slot
/// changes from one to the other. The reader waits (yielding) until the
/// move has begun its write sections or ended, then probes: loom otherwise
/// ran it only at the writer's first home lock, before them. Fails if a
/// probe that met the name's entry mid-change counted as a miss.
fn rename_vs_miss_in_complete_dir(exchange: bool) {
    use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
    model(move || {
        let dc = cache();
        add(&dc, b"a", 21);
        add(&dc, b"z", 22);
        dc.root().flags.fetch_or(super::dentry::COMPLETE, SeqCst);
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (dc, done) = (dc.clone(), done.clone());
            thread::spawn(move || {
                let src = dc.d_lookup(dc.root(), b"a").expect("cached");
                let dst = dc.d_lookup(dc.root(), b"z").expect("cached");
                dc.d_move(&src, dc.root(), b"z", &dst, exchange);
                done.store(true, SeqCst);
            })
        };
        {
            let z = dc.d_lookup(dc.root(), b"z").expect("cached");
            while z.seq.raw() & 1 == 0 && !done.load(SeqCst) {
                loom::thread::yield_now();
            }
            let g = dc.rcu.read_lock();
            let miss = dc.misses_cleanly(&g, dc.root(), b"z");
            assert!(!(miss && dc.root().is_complete()), "a name renamed over was answered missing");
        }
        writer.join().unwrap();
        assert!(dc.root().is_complete(), "a rename leaves a directory complete");
        let z = dc.d_lookup(dc.root(), b"z").expect("renamed entry");
        assert_eq!(z.inode().map(|i| i.ino), Some(21));
        if exchange {
            assert_eq!(dc.d_lookup(dc.root(), b"a").and_then(|a| a.inode().map(|i| i.ino)), Some(22));
        }
    });
}

#[test]
fn loom_rename_over_vs_miss_in_complete_dir() {
    rename_vs_miss_in_complete_dir(false);
}

#[test]
fn loom_exchange_vs_miss_in_complete_dir() {
    rename_vs_miss_in_complete_dir(true);
}

/// An exchange whose source is hashed and whose destination was unhashed
/// (invalidated while held): the source's old name now names the
/// destination's file but has no dentry, so its directory must stop being
/// complete. Sequential (the review of the change found the case: the
/// clear covered only an unhashed source); fails without it.
#[test]
fn loom_exchange_with_an_unhashed_destination_leaves_no_complete_dir() {
    model(|| {
        let dc = cache();
        // /p, a directory (ino 2), and /p/z (file 22); /a (file 21).
        let pip = dc.root_sb().iget(&attr(2), false, &dc.counters).unwrap();
        let p = dc.d_add(dc.root(), b"p", pip);
        let zip = dc.root_sb().iget(&attr(22), false, &dc.counters).unwrap();
        drop(dc.d_add(&p, b"z", zip));
        add(&dc, b"a", 21);
        dc.root().flags.fetch_or(super::dentry::COMPLETE, loom::sync::atomic::Ordering::SeqCst);
        let src = dc.d_lookup(dc.root(), b"a").expect("cached");
        let dst = dc.d_lookup(&p, b"z").expect("cached");
        dc.d_invalidate(&dst);
        assert!(dc.root().is_complete(), "the invalidation was in /p");
        dc.d_move(&src, &p, b"z", &dst, true);
        let g = dc.rcu.read_lock();
        let miss = dc.misses_cleanly(&g, dc.root(), b"a");
        assert!(!(miss && dc.root().is_complete()), "/a exists (file 22) but a complete / answers a clean miss");
    });
}

/// A lookup's `d_add` of a name under a directory, racing that directory
/// leaving the tree (`unhash_tree`, as `d_delete` of an rmdir'd directory
/// someone else holds does): the new child must stay unhashed (the index
/// was closed before its insert) or be found and unhashed by the walk,
/// which `Index::close` makes sure of by waiting for the inserts in
/// flight. Without that wait the child stayed hashed under the dead
/// directory: the dentry counter disagrees with the tree. (From a review,
/// which found it in the races test's removals.)
#[test]
fn loom_d_add_vs_unhash_tree() {
    model(|| {
        let dc = cache();
        // A directory `d` (ino 2) under the root, cached.
        add(&dc, b"d", 2);
        let d = hold(&dc, b"d");
        let d2 = hold(&dc, b"d");
        let adder = {
            let dc = dc.clone();
            thread::spawn(move || {
                thread::yield_now();
                // SAFETY: held by `d`.
                let dir = unsafe { &*(d.0 as *const super::Dentry) };
                let _l = dc.names.lock(super::name_hash(dir, b"x"));
                drop(dc.d_add(dir, b"x", std::ptr::null()));
                drop(_l);
                // The reference `hold` took, dropped once.
                dc.dput(dir)
            })
        };
        let remover = {
            let dc = dc.clone();
            thread::spawn(move || {
                // SAFETY: held by `d2`.
                let dir = unsafe { &*(d2.0 as *const super::Dentry) };
                dc.unhash_tree(dir, true);
                // The reference `hold` took, dropped once.
                dc.dput(dir)
            })
        };
        adder.join().unwrap();
        remover.join().unwrap();
        check_cache(&dc);
    });
}

/// The create of `x` as the VFS does it: the name's lock, its lookup
/// (which takes a cached miss out), the filesystem's create, the dentry
/// made positive; `created` is set after the filesystem's create.
fn create_x(dc: &Dcache, fs: &Stub, created: &loom::sync::atomic::AtomicBool) {
    let root = dc.root();
    let _lock = dc.names.lock(super::name_hash(root, b"x"));
    let x = dc.lookup_locked(root, b"x", None).unwrap();
    assert!(x.inode().is_none(), "x is made here");
    let a = fs.create(1, b"x", 0o644, Owner { uid: 0, gid: 0 }).unwrap();
    created.store(true, loom::sync::atomic::Ordering::SeqCst);
    let ip = dc.root_sb().iget(&a, false, &dc.counters).unwrap();
    dc.d_instantiate(&x, ip, false);
}

/// A miss cached in the root's set of absent names (`absent`), then a
/// create of the name racing an RCU reader of the set and a lookup of the
/// name: a reader that saw the create's filesystem change never finds the
/// cached miss (the create's lookup took it out before), and the lookup
/// answers ENOENT only before that change. Afterwards the set is empty and
/// the name found. Fails with the create's lookup not taking the entry
/// out (`absent_forget` in `lookup_fs`), and with the filesystem's create
/// moved before that lookup (the reader's assertion).
#[test]
fn loom_cached_miss_vs_create() {
    use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
    model(|| {
        let fs = Arc::new(Stub::new(None));
        let dc = cache_over(fs.clone());
        dc.root().set_incomplete();
        let root = dc.root();
        assert!(dc.lookup_positive(root, b"x").is_err());
        assert_eq!(dc.counters.absent_names(), 1, "the miss is cached in the set");
        let created = Arc::new(AtomicBool::new(false));
        let creator = {
            let (dc, fs, created) = (dc.clone(), fs.clone(), created.clone());
            thread::spawn(move || create_x(&dc, &fs, &created))
        };
        thread::yield_now();
        let seen = created.load(SeqCst);
        let known = dc.absent_known(&dc.rcu.read_lock(), root, b"x", super::name_hash(root, b"x"));
        assert!(!(seen && known), "the cached miss outlived the create it was read after");
        let seen = created.load(SeqCst);
        if dc.lookup_positive(root, b"x").is_err() {
            assert!(!seen, "ENOENT after the create");
        }
        creator.join().unwrap();
        assert_eq!(dc.counters.absent_names(), 0);
        assert!(dc.lookup_positive(root, b"x").is_ok());
        check_cache(&dc);
    });
}

/// A thread that evicts one cached miss (`absent_evict`), for the models
/// below to race.
fn evict_one(dc: &Arc<Dcache>) -> thread::JoinHandle<()> {
    let dc = dc.clone();
    thread::spawn(move || {
        dc.absent_evict(1);
    })
}

/// The oldest set let go (`absent_evict`: the flag cleared, the set
/// emptied, the list's reference dropped) racing a miss cached in the same
/// directory, which lists it again if it finds the flag clear: at the
/// end, whenever the set holds a name the directory is held and listed
/// once, and its count is the filesystem's reference plus the set's.
/// Then `drop_caches`' purge leaves nothing cached and the count as it was
/// before the first miss. Fails when the eviction lets its directory go
/// without looking whether its set is empty (a miss cached before the
/// eviction's batch, and not in it, is left in a directory nothing
/// holds).
#[test]
fn loom_absent_eviction_vs_cached_miss() {
    use super::dentry::ABSENT_HELD;
    model(|| {
        let dc = cache();
        dc.root().set_incomplete();
        let root = dc.root();
        let base = root.lockref().count_hint();
        assert!(dc.lookup_positive(root, b"a").is_err());
        let evictor = evict_one(&dc);
        thread::yield_now();
        assert!(dc.lookup_positive(root, b"b").is_err());
        evictor.join().unwrap();
        let held = root.flags.load(loom::sync::atomic::Ordering::SeqCst) & ABSENT_HELD != 0;
        let names = dc.counters.absent_names();
        assert!(names == 0 || held, "{names} cached misses in a directory that is not held");
        assert_eq!(dc.absent_dirs.listed(), held as usize);
        assert_eq!(root.lockref().count_hint(), base + held as i32);
        dc.absent_purge(None);
        assert_eq!((dc.counters.absent_names(), dc.absent_dirs.listed()), (0, 0));
        assert_eq!(root.lockref().count_hint(), base);
        check_cache(&dc);
    });
}

/// A purge of a superblock's sets (its teardown, `drop_caches`) racing an
/// eviction that takes one of the root's two cached misses and would put
/// the root back on its list: when the purge returns, nothing of the
/// superblock is listed or held (a teardown would find the root held, or
/// free it while listed). Fails without the eviction's look at `purging`
/// before it puts a directory back (the schedule helper-25's review
/// found: popped, the purge's scan, pushed back, then the purge's look at
/// `busy`).
#[test]
fn loom_absent_purge_vs_partial_eviction() {
    model(|| {
        let dc = cache();
        dc.root().set_incomplete();
        let root = dc.root();
        let base = root.lockref().count_hint();
        assert!(dc.lookup_positive(root, b"a").is_err());
        assert!(dc.lookup_positive(root, b"b").is_err());
        let evictor = evict_one(&dc);
        thread::yield_now();
        dc.absent_purge(Some(dc.root_sb()));
        assert_eq!(dc.absent_dirs.listed(), 0, "a directory listed after the purge");
        assert_eq!(dc.counters.absent_names(), 0);
        assert_eq!(root.lockref().count_hint(), base, "the root held after the purge");
        evictor.join().unwrap();
        check_cache(&dc);
    });
}
