//! Last references racing the code that kills dentries (issue 15): handles
//! taken and dropped to zero (`entry`, FUSE-style `lookup_at` + forget,
//! `open` + close) while another thread drops caches, renames over the
//! same names, unlinks and recreates them, sends `Notify` invalidations, or
//! runs the shrinker through a tiny `dcache_target`; in every reference
//! mode. Before the fix these crashed, corrupted the heap or hung within
//! seconds. Each also counts wrong answers: a name that exists for the
//! whole call reported missing, or a read that returns bytes nobody wrote.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use common::scaled;
use rcuvfs::fs::memfs::MemFs;
use rcuvfs::fs::{Attr, DirEntry, FileSystem, FileType, Ino, Notify, Owner, RenameFlags, SetAttr, StatFs, WritePos};
use rcuvfs::{OpenOptions, RefMode, Vfs};

/// Names each test works on, all in one directory.
const NAMES: usize = 64;
/// Threads taking and dropping handles.
const HOLDERS: usize = 6;

/// memfs with a handle on the `Notify` the VFS gives it, so that a test can
/// send invalidations as a backend whose truth changes elsewhere would.
struct Notifying {
    fs: MemFs,
    notify: OnceLock<Arc<dyn Notify>>,
    /// No page cache for the VFS (as the passthrough): sizes come from
    /// `getattr`, and writes go through `write`.
    no_pages: bool,
    /// Run once inside the next `getattr`, between its reading of the size
    /// and of ctime: a change made while a host stat is under way (a host
    /// write sets ctime, then grows the size).
    torn: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Run once at the start of the next `getattr`.
    before: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// The next `getattr` fails (EIO).
    fail: AtomicBool,
    /// The next `lookup` answers this (an answer read earlier).
    stale_lookup: std::sync::Mutex<Option<Attr>>,
}

impl Notifying {
    fn new(no_pages: bool) -> Notifying {
        Notifying {
            fs: MemFs::default(),
            notify: OnceLock::new(),
            no_pages,
            torn: Default::default(),
            before: Default::default(),
            fail: AtomicBool::new(false),
            stale_lookup: Default::default(),
        }
    }
}

impl FileSystem for Notifying {
    fn root(&self) -> Ino {
        self.fs.root()
    }
    fn lookup(&self, p: Ino, n: &[u8]) -> std::io::Result<Attr> {
        let found = self.fs.lookup(p, n)?;
        Ok(self.stale_lookup.lock().unwrap().take().unwrap_or(found))
    }
    fn forget(&self, i: Ino, n: u64) {
        self.fs.forget(i, n)
    }
    fn getattr(&self, i: Ino) -> std::io::Result<Attr> {
        let before = self.before.lock().unwrap().take();
        if let Some(f) = before {
            f();
        }
        if self.fail.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        let mut a = self.fs.getattr(i)?;
        let torn = self.torn.lock().unwrap().take();
        if let Some(change) = torn {
            change();
            a.ctime = self.fs.getattr(i)?.ctime;
        }
        Ok(a)
    }
    fn setattr(&self, i: Ino, s: &SetAttr) -> std::io::Result<Attr> {
        self.fs.setattr(i, s)
    }
    fn create(&self, p: Ino, n: &[u8], perm: u32, o: Owner) -> std::io::Result<Attr> {
        self.fs.create(p, n, perm, o)
    }
    fn mkdir(&self, p: Ino, n: &[u8], perm: u32, o: Owner) -> std::io::Result<Attr> {
        self.fs.mkdir(p, n, perm, o)
    }
    fn mknod(&self, p: Ino, n: &[u8], k: FileType, perm: u32, r: u64, o: Owner) -> std::io::Result<Attr> {
        self.fs.mknod(p, n, k, perm, r, o)
    }
    fn symlink(&self, p: Ino, n: &[u8], t: &[u8], o: Owner) -> std::io::Result<Attr> {
        self.fs.symlink(p, n, t, o)
    }
    fn link(&self, i: Ino, p: Ino, n: &[u8]) -> std::io::Result<Attr> {
        self.fs.link(i, p, n)
    }
    fn unlink(&self, p: Ino, n: &[u8]) -> std::io::Result<()> {
        self.fs.unlink(p, n)
    }
    fn rmdir(&self, p: Ino, n: &[u8]) -> std::io::Result<()> {
        self.fs.rmdir(p, n)
    }
    fn rename(&self, p: Ino, n: &[u8], np: Ino, nn: &[u8], f: RenameFlags) -> std::io::Result<()> {
        self.fs.rename(p, n, np, nn, f)
    }
    fn readlink(&self, i: Ino) -> std::io::Result<Vec<u8>> {
        self.fs.readlink(i)
    }
    fn readdir(&self, i: Ino, o: u64) -> std::io::Result<Vec<DirEntry>> {
        self.fs.readdir(i, o)
    }
    fn read(&self, i: Ino, o: u64, b: &mut [u8]) -> std::io::Result<usize> {
        self.fs.read(i, o, b)
    }
    fn write(&self, i: Ino, p: WritePos, d: &[u8]) -> std::io::Result<u64> {
        self.fs.write(i, p, d)
    }
    fn statfs(&self) -> std::io::Result<StatFs> {
        self.fs.statfs()
    }
    fn page_cache(&self, i: Ino) -> Option<Arc<rcuvfs::filemap::PageCache>> {
        if self.no_pages {
            return None;
        }
        self.fs.page_cache(i)
    }
    fn note_access(&self, i: Ino) {
        self.fs.note_access(i)
    }
    fn note_modify(&self, i: Ino) {
        self.fs.note_modify(i)
    }
    fn attach(&self, n: Arc<dyn Notify>) {
        let _ = self.notify.set(n);
    }
}

/// What the killer thread does, over and over.
#[derive(Clone, Copy, Debug)]
enum Killer {
    /// `drop_caches`: the tree shrink kills every unused dentry.
    DropCaches,
    /// Replaces each name the way editors do: write a temporary file, rename
    /// it over the name (the old dentry is invalidated).
    RenameOver,
    /// Unlinks each name and creates it again.
    UnlinkRecreate,
    /// The backend reports each name changed, and now and then everything.
    Notify,
    /// Nothing: the shrinker runs on its own, the cache being far over a
    /// tiny target.
    Shrinker,
    /// All of the above at once, a thread each, with the shrinker running
    /// throughout (the passthrough mount's crash: a shrinker and inotify
    /// invalidations).
    All,
}

struct Outcome {
    /// Handles taken and dropped.
    handles: u64,
    /// A stable name reported missing, or a read that returned bytes no
    /// writer wrote.
    wrong: u64,
}

fn name(i: usize) -> String {
    format!("/d/f{i}")
}

/// Holder threads (more than this machine's 2 cores: a holder descheduled
/// between its decrement to zero and what follows gives the killer a whole
/// time slice in that window, which is what makes these races show within
/// a second) take and drop handles on the names, each drop usually the
/// last reference, while a killer runs, for `ms` milliseconds.
fn race(mode: RefMode, killer: Killer, ms: u64) -> Outcome {
    let fs = Arc::new(Notifying::new(false));
    let mut b = Vfs::builder().mode(mode).filesystem(fs.clone());
    if matches!(killer, Killer::Shrinker | Killer::All) {
        b = b.dcache_target(16).negative_dentries(4);
    }
    let v = b.build().unwrap();
    v.create_dir("/d").unwrap();
    // Extra names, so that the shrinker has plenty to evict.
    if matches!(killer, Killer::Shrinker | Killer::All) {
        for i in 0..256 {
            v.write(format!("/d/pad{i}"), b"").unwrap();
        }
    }
    for i in 0..NAMES {
        v.write(name(i), b"old").unwrap();
    }
    let dir_ino = v.metadata("/d").unwrap().ino();
    // Names exist for the whole run except under UnlinkRecreate.
    let stable = !matches!(killer, Killer::UnlinkRecreate | Killer::All);
    let stop = Arc::new(AtomicBool::new(false));
    let wrong = Arc::new(AtomicU64::new(0));
    let handles = Arc::new(AtomicU64::new(0));
    let holders: Vec<_> = (0..HOLDERS)
        .map(|t| {
            let (v, stop, wrong, handles) = (v.clone(), stop.clone(), wrong.clone(), handles.clone());
            thread::spawn(move || {
                let dir = v.entry("/d").unwrap();
                let mut round = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..NAMES {
                        let r = match (round + t) % 3 {
                            // A path handle (`O_PATH`), dropped at once.
                            0 => v.entry(name(i)).map(drop),
                            // FUSE: a lookup counted on a node, then forget.
                            1 => v.lookup_at(&dir, format!("f{i}")).map(|e| {
                                let e2 = e.clone();
                                drop(e);
                                e2.forget();
                            }),
                            // An open, a read, a close.
                            _ => v.open(name(i), OpenOptions::new().read(true)).and_then(|mut f| {
                                let mut buf = Vec::new();
                                std::io::Read::read_to_end(&mut f, &mut buf)?;
                                if buf != b"old" && buf != b"new" && !buf.is_empty() {
                                    wrong.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(())
                            }),
                        };
                        match r {
                            Ok(()) => {
                                handles.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) if stable || e.raw_os_error() != Some(libc::ENOENT) => {
                                eprintln!("{mode:?} {killer:?}: {}: {e}", name(i));
                                wrong.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {}
                        }
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let killers = match killer {
        Killer::All => vec![Killer::DropCaches, Killer::RenameOver, Killer::UnlinkRecreate, Killer::Notify],
        k => vec![k],
    };
    let renamer_tmp = |k: usize| format!("/d/tmp{k}");
    let killer_threads: Vec<_> = killers
        .into_iter()
        .enumerate()
        .map(|(k, which)| {
            let (v, stop, fs, tmp) = (v.clone(), stop.clone(), fs.clone(), renamer_tmp(k));
            thread::spawn(move || {
                let notify = fs.notify.get().expect("attached").clone();
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match which {
                        Killer::DropCaches => v.drop_caches(),
                        Killer::RenameOver => {
                            for i in 0..NAMES {
                                v.write(&tmp, b"new").unwrap();
                                v.rename(&tmp, name(i)).unwrap();
                            }
                        }
                        Killer::UnlinkRecreate => {
                            for i in 0..NAMES {
                                // Another killer may replace it meanwhile.
                                let _ = v.remove_file(name(i));
                                v.write(name(i), b"new").unwrap();
                            }
                        }
                        Killer::Notify => {
                            for i in 0..NAMES {
                                notify.entry_changed(dir_ino, format!("f{i}").as_bytes());
                            }
                            notify.inode_changed(dir_ino);
                            if round & 3 == 0 {
                                notify.all_changed();
                            }
                        }
                        Killer::Shrinker | Killer::All => {
                            // Misses and new names keep the shrinker running.
                            for i in 0..16 {
                                let _ = v.metadata(format!("/d/miss{round}-{i}"));
                                let _ = v.metadata(format!("/d/pad{}", (round as usize * 16 + i) % 256));
                            }
                        }
                    }
                    // The cache's invariants hold at every moment: a dentry
                    // freed while still on the LRU shows here even before its
                    // memory is reused (which is when it would crash).
                    if round & 7 == 0 {
                        v.check_invariants().unwrap_or_else(|e| panic!("{mode:?} {which:?}: {e}"));
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(ms) {
        thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for h in holders {
        h.join().unwrap();
    }
    for k in killer_threads {
        k.join().unwrap();
    }
    v.check_invariants().unwrap_or_else(|e| panic!("{mode:?} {killer:?}: {e}"));
    // Every name still reads as written, and teardown frees everything.
    for i in 0..NAMES {
        let data = v.read(name(i)).unwrap();
        assert!(data == b"old" || data == b"new", "{mode:?} {killer:?}: {} holds {data:?}", name(i));
    }
    let counters = v.live_counters();
    drop(v);
    assert_eq!((counters.dentries(), counters.inodes()), (0, 0), "{mode:?} {killer:?}: teardown leaked");
    Outcome { handles: handles.load(Ordering::Relaxed), wrong: wrong.load(Ordering::Relaxed) }
}

/// How long each (mode, killer) pair runs: `RCUVFS_RACE_MS`, or 200 ms
/// (a few ms under Miri, which runs a handful of rounds).
fn run_ms() -> u64 {
    std::env::var("RCUVFS_RACE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(scaled(200_000) as u64 / 1000)
}

fn every_mode(killer: Killer) {
    for mode in RefMode::ALL {
        let o = race(mode, killer, run_ms());
        assert!(o.handles > 0, "{mode:?} {killer:?}: no handle was taken");
        assert_eq!(o.wrong, 0, "{mode:?} {killer:?}: wrong answers");
    }
}

#[test]
fn last_references_race_drop_caches() {
    every_mode(Killer::DropCaches);
}

#[test]
fn last_references_race_renames_over_the_name() {
    every_mode(Killer::RenameOver);
}

#[test]
fn last_references_race_unlink_and_recreate() {
    every_mode(Killer::UnlinkRecreate);
}

#[test]
fn last_references_race_notify_invalidations() {
    every_mode(Killer::Notify);
}

#[test]
fn last_references_race_the_shrinker() {
    every_mode(Killer::Shrinker);
}

#[test]
fn last_references_race_every_killer_at_once() {
    every_mode(Killer::All);
}

/// ".." in a REF-walk takes a reference on the parent of a dentry it holds
/// (`dget_parent`), while renames move that dentry between parents and
/// killers free the parent it left: the reference must never land on a
/// dead parent (the audit of issue 15 found it could).
#[test]
fn dotdot_races_renames_and_killers() {
    for mode in RefMode::ALL {
        let v = Vfs::builder().mode(mode).dcache_target(16).negative_dentries(4).build().unwrap();
        for d in ["/a", "/c", "/a/b"] {
            v.create_dir(d).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let wrong = Arc::new(AtomicU64::new(0));
        let walkers: Vec<_> = (0..HOLDERS)
            .map(|t| {
                let (v, stop, wrong) = (v.clone(), stop.clone(), wrong.clone());
                thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for p in ["/a/b/..", "/c/b/.."] {
                            // `entry` walks in REF mode in every mode.
                            match v.entry(p) {
                                Ok(e) => {
                                    // ".." of b is whichever of /a or /c held it.
                                    if !e.is_dir() {
                                        wrong.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                                Err(e) => {
                                    eprintln!("{mode:?}: {p}: {e}");
                                    wrong.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        n += 1;
                        if n & 63 == t as u64 {
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        // The parent b leaves is killed right after (the rename drops its
        // last reference): the window in which a ".." may still be taking
        // a reference on it.
        let mover = {
            let (v, stop) = (v.clone(), stop.clone());
            thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    v.rename("/a/b", "/c/b").unwrap();
                    v.drop_caches();
                    v.rename("/c/b", "/a/b").unwrap();
                    // Misses keep the shrinker busy (a tiny target).
                    let _ = v.metadata(format!("/miss{round}"));
                    if round & 7 == 0 {
                        v.check_invariants().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
                    }
                    round += 1;
                }
            })
        };
        // Three times the usual run: the window is a few instructions wide,
        // and only a walker descheduled inside it lets the rename and the
        // kill land there (measured: 1 failure in 3 runs of 1 s before the
        // fix).
        thread::sleep(Duration::from_millis(3 * run_ms()));
        stop.store(true, Ordering::Relaxed);
        for w in walkers {
            w.join().unwrap();
        }
        mover.join().unwrap();
        v.check_invariants().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(wrong.load(Ordering::Relaxed), 0, "{mode:?}");
        let counters = v.live_counters();
        drop(v);
        assert_eq!((counters.dentries(), counters.inodes()), (0, 0), "{mode:?}: teardown leaked");
    }
}

/// A directory invalidated by its backend while a handle holds it (`Notify`)
/// keeps one dentry: a create made through the old handle is then seen by
/// path lookups, instead of hiding behind a negative entry cached under a
/// second dentry of the same directory (Linux's rule: a directory inode has
/// one dentry, `d_splice_alias`). Found by the race above under TSan.
#[test]
fn an_invalidated_directory_keeps_one_dentry() {
    for mode in RefMode::ALL {
        let fs = Arc::new(Notifying::new(false));
        let v = Vfs::builder().mode(mode).filesystem(fs.clone()).build().unwrap();
        v.create_dir("/d").unwrap();
        let held = v.entry("/d").unwrap();
        fs.notify.get().unwrap().all_changed();
        assert!(v.metadata("/d/x").is_err(), "{mode:?}: not created yet");
        v.open_at(&held, "x", OpenOptions::new().write(true).create(true)).unwrap();
        assert!(v.metadata("/d/x").is_ok(), "{mode:?}: a create through the held handle is hidden");
        assert_eq!(v.read_dir("/d").unwrap().count(), 1, "{mode:?}");
        drop(held);
        v.check_invariants().unwrap();
    }
}

/// An open racing a rename over its name always opens a file: the one
/// the name had or the one it has now, never ENOENT. A large file's data
/// goes at its last link (for its space), so the file a walk found could
/// lose it before the open counted itself, and the open failed with
/// ENOENT although the name never stopped existing (the kernel's tmpfs
/// never fails there). The open now walks again.
#[test]
fn an_open_racing_a_rename_over_a_large_file_finds_a_file() {
    use std::io::Read;
    let v = Vfs::new();
    let big = vec![3u8; (1 << 20) + 4096];
    v.write("/f", &big).unwrap();
    let done = AtomicBool::new(false);
    let (opens, missing) = thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..scaled(300) {
                v.write("/tmp", &big).unwrap();
                v.rename("/tmp", "/f").unwrap();
            }
            done.store(true, Ordering::Relaxed);
        });
        let (mut opens, mut missing) = (0u64, 0u64);
        while !done.load(Ordering::Relaxed) {
            match v.open("/f", OpenOptions::new().read(true)) {
                Ok(mut f) => {
                    let mut b = [0u8; 1];
                    assert_eq!(f.read(&mut b).unwrap(), 1);
                    assert_eq!(b[0], 3, "bytes nobody wrote");
                }
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
                    missing += 1;
                }
            }
            opens += 1;
        }
        (opens, missing)
    });
    assert_eq!(missing, 0, "{missing} of {opens} opens of a name that always existed failed with ENOENT");
}

/// Directories made through the VFS over its own memfs start complete: a
/// miss in one is answered by the cache alone (ENOENT, no negative
/// dentry). Here the shrinker (a tiny target, kept busy by misses) and
/// `drop_caches` drop their names while readers look those names up by
/// path, by handle and by open; every name exists for the whole run, so a
/// reader that gets ENOENT got a wrong answer. A directory must stop being
/// complete before its first name leaves its index; each round makes a
/// fresh complete directory, so that the drop is raced again and again.
/// Counts wrong answers in every reference mode; shown failing (hundreds
/// per run) with the flag's clear taken out of `unhash_locked`.
#[test]
fn complete_directories_race_the_shrinker_and_drop_caches() {
    const FILES: usize = 32;
    for mode in RefMode::ALL {
        let v = Vfs::builder().mode(mode).dcache_target(64).negative_dentries(16).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let round = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
        let wrong = Arc::new(AtomicU64::new(0));
        let lookups = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..HOLDERS)
            .map(|t| {
                let (v, stop, round, wrong, lookups) =
                    (v.clone(), stop.clone(), round.clone(), wrong.clone(), lookups.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let r = round.load(Ordering::Acquire);
                        if r == usize::MAX {
                            thread::yield_now();
                            continue;
                        }
                        for i in 0..FILES {
                            let p = format!("/r{r}/f{i}");
                            let res = match (i + t) % 3 {
                                0 => v.metadata(&p).map(drop),
                                1 => v.entry(&p).map(drop),
                                _ => v.open(&p, OpenOptions::new().read(true)).map(drop),
                            };
                            lookups.fetch_add(1, Ordering::Relaxed);
                            if let Err(e) = res {
                                eprintln!("{mode:?}: {p}: {e}");
                                wrong.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        let killer = {
            let (v, stop) = (v.clone(), stop.clone());
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if n.is_multiple_of(8) {
                        v.drop_caches();
                    }
                    // Misses and lookups of names the shrinker dropped keep
                    // it running.
                    for i in 0..8 {
                        let _ = v.metadata(format!("/r0/miss{n}-{i}"));
                    }
                    n += 1;
                }
            })
        };
        let t0 = Instant::now();
        let mut r = 0;
        while t0.elapsed() < Duration::from_millis(run_ms()) {
            v.create_dir(format!("/r{r}")).unwrap();
            for i in 0..FILES {
                v.write(format!("/r{r}/f{i}"), b"").unwrap();
            }
            round.store(r, Ordering::Release);
            r += 1;
            thread::sleep(Duration::from_millis(2));
        }
        stop.store(true, Ordering::Relaxed);
        for h in readers {
            h.join().unwrap();
        }
        killer.join().unwrap();
        v.check_invariants().unwrap();
        assert!(lookups.load(Ordering::Relaxed) > 0, "{mode:?}: no lookup ran");
        assert_eq!(wrong.load(Ordering::Relaxed), 0, "{mode:?}: names that exist were reported missing");
        // Each directory still lists every file.
        for d in 0..r {
            assert_eq!(v.read_dir(format!("/r{d}")).unwrap().count(), FILES);
        }
    }
}

fn is_enoent<T>(r: &std::io::Result<T>) -> bool {
    matches!(r, Err(e) if e.raw_os_error() == Some(libc::ENOENT))
}

/// Removals over a bound memfs past the bound on negative dentries (0
/// here), whose `d_delete` unhashes the dentry and whose last reference
/// kills it (`kills_removed`), in every mode, racing everything that may
/// hold or find that dentry: an open file and an `entry` held across the
/// unlink, a hard link, mkdir and rmdir around a file, unlinks and
/// re-creates under a rename over the same names, readers of removed,
/// just-created and linked names and by inode number, `drop_caches`, and
/// misses that keep the shrinker busy. Counted wrong: a name found after
/// its unlink returned, ENOENT and then the name found, a link count off,
/// a read of bytes nobody wrote; the counters must come back to the root
/// alone and then to zero. (Written from a review's stress test; it finds
/// removed names when the unlink leaves its dentry hashed.)
#[test]
fn removals_past_the_negative_bound_race_holders_readers_and_killers() {
    use std::sync::atomic::AtomicUsize;
    for mode in RefMode::ALL {
        let v = Vfs::builder().mode(mode).dcache_target(64).negative_dentries(0).build().unwrap();
        v.create_dir("/d").unwrap();
        for i in 0..128 {
            v.write(format!("/d/pad{i}"), b"").unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let wrong = Arc::new(AtomicU64::new(0));
        // g{n}: created in order, removed in order; h{n}: its hard link.
        let (created, removed, linked) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let ino_pub = Arc::new(AtomicU64::new(0));
        let mut ts = Vec::new();
        {
            let (v, stop, wrong) = (v.clone(), stop.clone(), wrong.clone());
            let (created, removed, linked, ino_pub) =
                (created.clone(), removed.clone(), linked.clone(), ino_pub.clone());
            ts.push(thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let (g, h) = (format!("/d/g{n}"), format!("/d/h{n}"));
                    v.write(&g, b"data").unwrap();
                    created.store(n + 1, Ordering::Release);
                    v.hard_link(&g, &h).unwrap();
                    linked.store(n + 1, Ordering::Release);
                    ino_pub.store(v.metadata(&g).unwrap().ino(), Ordering::Release);
                    let held = n.is_multiple_of(2).then(|| v.open(&g, OpenOptions::new().read(true)).unwrap());
                    let e = n.is_multiple_of(3).then(|| v.entry(&h).unwrap());
                    v.remove_file(&g).unwrap();
                    if !is_enoent(&v.metadata(&g)) {
                        eprintln!("{mode:?}: {g} found after its unlink returned");
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    match v.metadata(&h) {
                        Ok(m) if m.nlink() == 1 => {}
                        r => {
                            eprintln!("{mode:?}: {h} after unlinking {g}: {:?}", r.map(|m| m.nlink()));
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    v.remove_file(&h).unwrap();
                    if let Some(mut f) = held {
                        let mut buf = Vec::new();
                        std::io::Read::read_to_end(&mut f, &mut buf).unwrap();
                        if buf != b"data" {
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    drop(e);
                    removed.store(n + 1, Ordering::Release);
                    n += 1;
                }
            }));
        }
        {
            let (v, stop, wrong) = (v.clone(), stop.clone(), wrong.clone());
            ts.push(thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let d = format!("/d/D{}", n % 8);
                    v.create_dir(&d).unwrap();
                    v.write(format!("{d}/x"), b"x").unwrap();
                    v.remove_file(format!("{d}/x")).unwrap();
                    v.remove_dir(&d).unwrap();
                    if !is_enoent(&v.metadata(&d)) {
                        eprintln!("{mode:?}: {d} found after its rmdir returned");
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            }));
        }
        for k in 0..2 {
            let (v, stop) = (v.clone(), stop.clone());
            ts.push(thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let r = format!("/d/r{}", n % 4);
                    if k == 0 {
                        let _ = v.remove_file(&r);
                        let _ = v.write(&r, b"r");
                    } else {
                        let _ = v.write("/d/rt", b"t");
                        let _ = v.rename("/d/rt", &r);
                        let _ = v.metadata(&r);
                    }
                    n += 1;
                }
            }));
        }
        for t in 0..3u64 {
            let (v, stop, wrong) = (v.clone(), stop.clone(), wrong.clone());
            let (created, removed, linked, ino_pub) =
                (created.clone(), removed.clone(), linked.clone(), ino_pub.clone());
            ts.push(thread::spawn(move || {
                let mut x = t;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let r = removed.load(Ordering::Acquire);
                    if r > 0 {
                        let p = format!("/d/g{}", r - 1 - (x >> 33) as usize % r.min(16));
                        let res = match t {
                            0 => v.metadata(&p).map(drop),
                            1 => v.entry(&p).map(drop),
                            _ => v.open(&p, OpenOptions::new().read(true)).map(drop),
                        };
                        if !is_enoent(&res) {
                            eprintln!("{mode:?}: {p} removed before, found: {res:?}");
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    for (count, name) in [(&created, "g"), (&linked, "h")] {
                        let c = count.load(Ordering::Acquire);
                        if c > 0 {
                            let p = format!("/d/{name}{}", c - 1);
                            let a = v.entry(&p).map(drop);
                            let b = v.metadata(&p);
                            if is_enoent(&a) && !is_enoent(&b) {
                                eprintln!("{mode:?}: {p}: ENOENT, then found");
                                wrong.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    let ino = ino_pub.load(Ordering::Acquire);
                    if ino != 0 {
                        let _ = v.entry_by_ino(ino).map(drop);
                    }
                    let _ = v.metadata(format!("/d/D{}/x", x % 8));
                    let _ = v.metadata(format!("/d/pad{}", (x >> 40) % 128));
                }
            }));
        }
        {
            let (v, stop) = (v.clone(), stop.clone());
            ts.push(thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if round.is_multiple_of(4) {
                        v.drop_caches();
                    }
                    for i in 0..8 {
                        let _ = v.metadata(format!("/d/miss{round}-{i}"));
                    }
                    v.check_invariants().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
                    round += 1;
                }
            }));
        }
        thread::sleep(Duration::from_millis(run_ms()));
        stop.store(true, Ordering::Relaxed);
        for t in ts {
            t.join().unwrap();
        }
        v.check_invariants().unwrap();
        assert_eq!(wrong.load(Ordering::Relaxed), 0, "{mode:?}: wrong answers");
        assert!(removed.load(Ordering::Relaxed) > 0, "{mode:?}: nothing removed");
        let counters = v.live_counters();
        v.drop_caches();
        let (d, n) = (counters.dentries(), counters.negative_dentries());
        assert_eq!((d, n), (1, 0), "{mode:?}: dentries and negative dentries left after drop_caches");
        drop(v);
        assert_eq!(
            (counters.dentries(), counters.negative_dentries(), counters.inodes()),
            (0, 0, 0),
            "{mode:?}: teardown"
        );
    }
}

/// Creates at the cache's size target, in a directory that is not
/// complete, make no dentry: memfs alone has the new name, and what keeps
/// its answers right is the name's lock and the directory's set of absent
/// names, which a removal of a cached name and a lookup's miss fill and
/// the create must empty first. Owners create their own names (with data,
/// through an open file, and empty), check them, cache some (`entry`),
/// remove them, check the miss and cache it (a lookup by handle), then
/// create them again; readers look the same names up by path, by handle
/// and by open, and `drop_caches`, misses and the shrinker run, in every
/// mode; and in the default mode far from the target too, where no create
/// of a file makes a dentry (`Dcache::files_bare`). Every other round an
/// owner's name is in a directory it has just made, which is complete
/// until that create. Counted wrong: an owner's name missing after its
/// create returned, found after its removal returned, or read with bytes
/// it did not write. Shown failing (thousands) with the create's
/// `absent_forget` taken out.
#[test]
fn creates_at_the_target_race_removals_readers_and_killers() {
    let configs = RefMode::ALL.into_iter().map(|m| (m, 64)).chain([(RefMode::NoRefs, 1 << 20)]);
    for (mode, target) in configs {
        let v = Vfs::builder().mode(mode).dcache_target(target).negative_dentries(1 << 12).build().unwrap();
        v.create_dir("/d").unwrap();
        for i in 0..256 {
            v.write(format!("/d/pad{i}"), b"").unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let wrong = Arc::new(AtomicU64::new(0));
        let rounds = Arc::new(AtomicU64::new(0));
        let mut ts = Vec::new();
        for k in 0..3 {
            let (v, stop, wrong, rounds) = (v.clone(), stop.clone(), wrong.clone(), rounds.clone());
            ts.push(thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let fresh = n % 2 == 1;
                    let p = if fresh { format!("/d/s{k}/o") } else { format!("/d/o{k}-{}", n % 8) };
                    if fresh {
                        v.create_dir(format!("/d/s{k}")).unwrap();
                    }
                    let data = if n.is_multiple_of(3) { String::new() } else { format!("{k}:{n}") };
                    v.write(&p, data.as_bytes()).unwrap();
                    match v.read(&p) {
                        Ok(b) if b == data.as_bytes() => {}
                        r => {
                            eprintln!("{mode:?}: {p} after its create: {r:?}");
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if let Err(e) = v.metadata(&p) {
                        eprintln!("{mode:?}: {p} stat after its create: {e}");
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    if n.is_multiple_of(2) && v.entry(&p).is_err() {
                        eprintln!("{mode:?}: {p} no handle after its create");
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    v.remove_file(&p).unwrap();
                    if !is_enoent(&v.metadata(&p)) || !is_enoent(&v.entry(&p)) {
                        eprintln!("{mode:?}: {p} found after its unlink returned");
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    if fresh {
                        v.remove_dir(format!("/d/s{k}")).unwrap();
                    }
                    n += 1;
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        for t in 0..2u64 {
            let (v, stop) = (v.clone(), stop.clone());
            ts.push(thread::spawn(move || {
                let mut x = t;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let p = if x >> 60 == 0 {
                        format!("/d/s{}/o", (x >> 33) % 3)
                    } else {
                        format!("/d/o{}-{}", (x >> 33) % 3, (x >> 40) % 8)
                    };
                    match (x >> 50) % 3 {
                        0 => drop(v.metadata(&p)),
                        1 => drop(v.entry(&p)),
                        _ => drop(v.open(&p, OpenOptions::new().read(true))),
                    }
                    let _ = v.metadata(format!("/d/pad{}", (x >> 20) % 256));
                }
            }));
        }
        {
            let (v, stop) = (v.clone(), stop.clone());
            ts.push(thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if round.is_multiple_of(4) {
                        v.drop_caches();
                    }
                    for i in 0..8 {
                        let _ = v.entry(format!("/d/miss{}", (round * 8 + i) % 512));
                    }
                    round += 1;
                }
            }));
        }
        thread::sleep(Duration::from_millis(run_ms()));
        stop.store(true, Ordering::Relaxed);
        for t in ts {
            t.join().unwrap();
        }
        v.check_invariants().unwrap();
        assert_eq!(wrong.load(Ordering::Relaxed), 0, "{mode:?} at {target}: wrong answers");
        assert!(rounds.load(Ordering::Relaxed) > 0, "{mode:?} at {target}: nothing created");
        let counters = v.live_counters();
        v.drop_caches();
        assert_eq!(counters.dentries(), 1, "{mode:?}: dentries left after drop_caches");
        drop(v);
        assert_eq!((counters.dentries(), counters.inodes()), (0, 0), "{mode:?}: teardown");
    }
}

/// An answer of the filesystem read while a change was under way (ctime
/// moved already, the size not yet: a host's write) must not replace the
/// one the change's own refresh stored after it, and ctime cannot tell the
/// two apart. Seen through the FUSE mount of the passthrough with the
/// kernel's cache: fsx, and an `fstat` after a write that the kernel sent
/// in two halves finding the first half's size, as the watcher's refresh
/// of the first half landed last. The change runs inside the reading of
/// the attributes, between the size and ctime; fails when the torn answer
/// is stored (before the attributes' version: 2, then 6).
#[test]
fn an_answer_read_during_a_change_does_not_replace_the_changes_own() {
    let fs = Arc::new(Notifying::new(true));
    let v = Vfs::builder().filesystem(fs.clone()).build().unwrap();
    v.write("/f", b"ab").unwrap();
    let f = Arc::new(v.open("/f", OpenOptions::new().write(true)).unwrap());
    let e = v.entry("/f").unwrap();
    let during = |change: Box<dyn FnOnce() + Send>| {
        *fs.torn.lock().unwrap() = Some(change);
        // A refresh as an event from the backend makes one (and a FUSE
        // getattr in kernel passthrough mode).
        e.refresh().unwrap();
        assert!(fs.torn.lock().unwrap().is_none(), "the change did not run");
    };
    let w = f.clone();
    during(Box::new(move || assert_eq!(w.write_at(b"cdef", 2).unwrap(), 4)));
    assert_eq!(f.metadata().unwrap().len(), 6, "a write's size lost to an answer read during it");
    assert_eq!(v.metadata("/f").unwrap().len(), 6);
    let t = f.clone();
    during(Box::new(move || t.set_len(1).unwrap()));
    assert_eq!(f.metadata().unwrap().len(), 1, "a truncate's size lost to an answer read during it");
    assert_eq!(v.read("/f").unwrap(), b"a");
}

/// A read that begins after another and fails refuses nothing: the other's
/// answer lands. Here a FUSE getattr's refresh (kernel passthrough mode,
/// where the kernel writes the host file itself) reads 6 while a watcher's
/// refresh, begun after it, fails. Fails when any later start refuses a
/// store (the version rule before the tickets): the stat's 2, where the
/// host file has 6, until something reads again.
#[test]
fn a_failed_read_refuses_no_store() {
    let fs = Arc::new(Notifying::new(true));
    let v = Vfs::builder().filesystem(fs.clone()).build().unwrap();
    v.write("/f", b"ab").unwrap();
    let e = v.entry("/f").unwrap();
    let ino = e.ino();
    let (host, watcher) = (fs.clone(), v.entry("/f").unwrap());
    *fs.before.lock().unwrap() = Some(Box::new(move || {
        // The file grows behind the VFS, and the watcher's refresh of it
        // begins, then fails to read.
        assert_eq!(host.fs.write(ino, WritePos::At(2), b"cdef").unwrap(), 2);
        host.fail.store(true, Ordering::SeqCst);
        assert!(watcher.refresh().is_err());
    }));
    assert_eq!(e.refresh().unwrap().len(), 6, "the refresh answered an older size than it read");
    assert!(fs.before.lock().unwrap().is_none(), "the change did not run");
    // The watcher's failure marked the attributes stale too: the stat
    // reads again, and finds the same.
    assert_eq!(e.metadata().unwrap().len(), 6, "a read that failed refused the store of one begun before it");
}

/// A gate for a filesystem hook: the hook tells the test it is inside the
/// call (`entered`), then waits until the test opens the gate (`go`, or its
/// drop when the test fails first).
fn gate() -> (Box<dyn FnOnce() + Send>, std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let hook = Box::new(move || {
        entered_tx.send(()).unwrap();
        let _ = go_rx.recv();
    });
    (hook, entered, go)
}

/// A change's own refresh that fails leaves whatever a read begun before it
/// stored, which may have seen the change half made: the attributes are
/// marked stale, and the next stat reads again. Here a watcher's read takes
/// the size before the file grows and its ctime after (a torn answer: 2
/// bytes with the write's ctime), and lands after the change's refresh
/// failed. Fails when a failed refresh does not mark the attributes stale
/// (the stat's 2, where the host file has 6).
#[test]
fn a_failed_refresh_leaves_no_torn_answer_in_core() {
    let fs = Arc::new(Notifying::new(true));
    let v = Vfs::builder().filesystem(fs.clone()).build().unwrap();
    v.write("/f", b"ab").unwrap();
    let e = v.entry("/f").unwrap();
    let ino = e.ino();
    let (hook, entered_rx, go_tx) = gate();
    *fs.torn.lock().unwrap() = Some(hook);
    let watcher = v.entry("/f").unwrap();
    let w = thread::spawn(move || watcher.refresh().map(|m| m.len()));
    entered_rx.recv().unwrap();
    // The watcher has read the size (2). The file grows; the change's own
    // refresh begins after the watcher's, and fails.
    fs.fs.write(ino, WritePos::At(2), b"cdef").unwrap();
    fs.fail.store(true, Ordering::SeqCst);
    assert!(e.refresh().is_err());
    go_tx.send(()).unwrap();
    assert_eq!(w.join().unwrap().unwrap(), 2, "the watcher's answer was not torn");
    assert_eq!(e.metadata().unwrap().len(), 6, "a failed refresh left a torn answer in core");
}

/// A refresh that has returned leaves in core its own answer or one read
/// after it began, even while a read begun later (a watcher's) is still
/// under way. Here the change's refresh reads 6 while the watcher's, begun
/// after it, waits inside the filesystem; a stat then must answer 6. Fails
/// when the later read's start refuses the earlier read's store (the
/// stat's 2): CI's fsx "Size error" through the io_uring passthrough
/// mount, where a stat after a write the kernel sent in two halves found
/// the first half's size.
#[test]
fn a_refresh_is_in_core_when_it_returns_while_a_later_one_is_under_way() {
    let fs = Arc::new(Notifying::new(true));
    let v = Vfs::builder().filesystem(fs.clone()).build().unwrap();
    v.write("/f", b"ab").unwrap();
    let e = v.entry("/f").unwrap();
    let ino = e.ino();
    let (hook, entered_rx, go_tx) = gate();
    let (host, watcher) = (fs.clone(), v.entry("/f").unwrap());
    let slot = Arc::new(std::sync::Mutex::new(None));
    let slot_in = slot.clone();
    *fs.before.lock().unwrap() = Some(Box::new(move || {
        // The file grows behind the VFS; the watcher's refresh of it starts
        // and waits inside the filesystem's getattr.
        host.fs.write(ino, WritePos::At(2), b"cdef").unwrap();
        *host.before.lock().unwrap() = Some(hook);
        *slot_in.lock().unwrap() = Some(thread::spawn(move || watcher.refresh().map(|m| m.len())));
        entered_rx.recv().unwrap();
    }));
    assert_eq!(e.refresh().unwrap().len(), 6);
    let in_core = e.metadata().unwrap().len();
    go_tx.send(()).unwrap();
    let t = slot.lock().unwrap().take().expect("the watcher's refresh did not start");
    assert_eq!(t.join().unwrap().unwrap(), 6);
    assert_eq!(in_core, 6, "a refresh that returned left an older answer in core");
    assert_eq!(e.metadata().unwrap().len(), 6);
}

/// A lookup's answer for an inode already in core may be older than what
/// is in core (read before a change whose own refresh has landed, with
/// the same ctime): it must not replace it. Here the name's dentry is
/// invalidated while a handle keeps the inode, and the lookup that finds
/// it again answers the size from before a write, with the write's ctime.
/// Fails when the lookup's answer is stored (2, not 6).
#[test]
fn a_lookups_older_answer_does_not_replace_what_is_in_core() {
    let fs = Arc::new(Notifying::new(true));
    let v = Vfs::builder().filesystem(fs.clone()).build().unwrap();
    v.write("/f", b"ab").unwrap();
    let e = v.entry("/f").unwrap();
    let mut torn = fs.getattr(e.ino()).unwrap();
    let f = v.open("/f", OpenOptions::new().write(true)).unwrap();
    assert_eq!(f.write_at(b"cdef", 2).unwrap(), 4);
    assert_eq!(e.metadata().unwrap().len(), 6);
    torn.ctime = fs.getattr(e.ino()).unwrap().ctime;
    *fs.stale_lookup.lock().unwrap() = Some(torn);
    fs.notify.get().expect("attached").entry_changed(v.root_entry().ino(), b"f");
    assert_eq!(v.metadata("/f").unwrap().len(), 6, "a lookup's older answer replaced what was in core");
    assert!(fs.stale_lookup.lock().unwrap().is_none(), "the lookup did not reach the filesystem");
    assert_eq!(e.metadata().unwrap().len(), 6);
}

/// Cached misses (`dcache::absent`: names in their directory's set, no
/// dentry) under everything that must take them out or may drop them: in
/// a directory the cache cannot know whole (`complete_dirs(false)`),
/// writers make and remove their names over and over (a file written, a
/// directory made, a file renamed over the name; unlinks and rmdirs),
/// readers stat and open them and names that never exist, the backend
/// reports every name changed (`Notify`), `drop_caches` runs, and a bound
/// of 16 cached misses and a dcache target of 64 keep eviction and the
/// shrinker busy. Each name's state is published around each change (odd
/// while it changes), so a reader knows what its answer must be when the
/// state is the same before and after its call; counted wrong: a name that
/// exists throughout reported missing (a stale cached miss), a name absent
/// throughout found, or a never-made name found. Every reference mode;
/// the counters must come back to zero.
#[test]
fn cached_misses_race_creates_removals_notifies_and_evictions() {
    use std::sync::atomic::AtomicUsize;
    const PER_WRITER: usize = 8;
    const WRITERS: usize = 2;
    for mode in RefMode::ALL {
        let fs = Arc::new(Notifying::new(false));
        let v = Arc::new(
            Vfs::builder()
                .filesystem(fs.clone())
                .mode(mode)
                .complete_dirs(false)
                .dcache_target(64)
                .negative_dentries(16)
                .build()
                .unwrap(),
        );
        v.create_dir("/d").unwrap();
        let dir_ino = v.metadata("/d").unwrap().ino();
        // Per name: (generation << 2) | present << 1 | changing.
        let state: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS * PER_WRITER).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let (wrong, checked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut ts = Vec::new();
        for w in 0..WRITERS {
            let (v, state, stop) = (v.clone(), state.clone(), stop.clone());
            ts.push(thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for k in 0..PER_WRITER {
                        let i = w * PER_WRITER + k;
                        let p = format!("/d/n{i}");
                        let s = &state[i];
                        let g = s.load(Ordering::SeqCst) >> 2;
                        let dir = round % 3 == 1;
                        s.store((g << 2) | 1, Ordering::SeqCst);
                        match round % 3 {
                            0 => v.write(&p, b"x").unwrap(),
                            1 => v.create_dir(&p).unwrap(),
                            _ => {
                                let t = format!("/d/t{i}");
                                v.write(&t, b"x").unwrap();
                                v.rename(&t, &p).unwrap();
                            }
                        }
                        s.store(((g + 1) << 2) | 2, Ordering::SeqCst);
                        thread::yield_now();
                        s.store(((g + 1) << 2) | 3, Ordering::SeqCst);
                        if dir {
                            v.remove_dir(&p).unwrap();
                        } else {
                            v.remove_file(&p).unwrap();
                        }
                        s.store((g + 2) << 2, Ordering::SeqCst);
                    }
                    round += 1;
                }
            }));
        }
        for r in 0..3 {
            let (v, state, stop, wrong, checked) =
                (v.clone(), state.clone(), stop.clone(), wrong.clone(), checked.clone());
            ts.push(thread::spawn(move || {
                let mut k: usize = r;
                while !stop.load(Ordering::Relaxed) {
                    k = k.wrapping_mul(2654435761).wrapping_add(12345) % 1_000_003;
                    let i = k % (WRITERS * PER_WRITER);
                    let p = format!("/d/n{i}");
                    let before = state[i].load(Ordering::SeqCst);
                    let found = if k.is_multiple_of(4) {
                        v.open(&p, OpenOptions::new().read(true)).map(drop)
                    } else {
                        v.metadata(&p).map(drop)
                    };
                    let after = state[i].load(Ordering::SeqCst);
                    if before == after && before & 1 == 0 {
                        checked.fetch_add(1, Ordering::Relaxed);
                        let present = before & 2 != 0;
                        if present != found.is_ok() || (!present && !is_enoent(&found)) {
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // A name never made: a miss that leaves one more cached.
                    if v.metadata(format!("/d/never{}", k % 64)).is_ok() {
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        {
            let (v, fs, stop) = (v.clone(), fs.clone(), stop.clone());
            ts.push(thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(notify) = fs.notify.get() {
                        let name = format!("n{}", n % (WRITERS * PER_WRITER));
                        notify.entry_changed(dir_ino, name.as_bytes());
                        if n.is_multiple_of(97) {
                            notify.all_changed();
                        }
                    }
                    if n.is_multiple_of(50) {
                        v.drop_caches();
                    }
                    n += 1;
                    thread::yield_now();
                }
            }));
        }
        thread::sleep(Duration::from_millis(run_ms()));
        stop.store(true, Ordering::Relaxed);
        for t in ts {
            t.join().unwrap();
        }
        assert!(checked.load(Ordering::Relaxed) > 0, "{mode:?}: no answer was checked");
        assert_eq!(wrong.load(Ordering::Relaxed), 0, "{mode:?}: wrong answers about names made and removed");
        v.check_invariants().unwrap();
        let counters = v.live_counters();
        drop(v);
        assert_eq!((counters.dentries(), counters.inodes(), counters.absent_names()), (0, 0, 0), "{mode:?}: leaked");
    }
}
