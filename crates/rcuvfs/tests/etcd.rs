//! The etcd filesystem: several `Vfs` clients on one cluster see one tree.
//! Each test starts its own members on loopback ports (`LocalCluster`, from
//! the `etcd` binary of Debian's etcd-server) and stops them.
//!
//! After each test that races or breaks things, `Etcd::check` reads the
//! whole tree at one revision and must find no broken invariant.
#![cfg(feature = "etcd")]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::errno;
use rcuvfs::fs::etcd::{Etcd, EtcdOptions, LocalCluster};
use rcuvfs::{OpenOptions, Vfs};

fn options(c: &LocalCluster, prefix: &str) -> EtcdOptions {
    let mut o = EtcdOptions::parse(&c.spec(prefix)).unwrap();
    o.timeout = Duration::from_secs(3);
    o.orphan_grace = Duration::from_millis(300);
    o.lease_ttl = Duration::from_secs(2);
    o
}

/// A client: its Vfs and its filesystem (for counters and the check).
fn client(o: &EtcdOptions) -> (Vfs, Arc<Etcd>) {
    let fs = Arc::new(Etcd::connect(o.clone()).unwrap());
    (Vfs::builder().filesystem(fs.clone()).build().unwrap(), fs)
}

/// Polls `f` until it holds, for at most 10 s: the tests check that a
/// change shows up, not how fast (the lab measures that).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "not seen within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Aborts the process if the caller is not done within `secs`: a test
/// that hangs then fails at once instead of holding CI until its limit.
/// (The racing test hung in about 1 run in 30, a thread spinning in
/// `d_lookup`, until a lookup's move of a directory's dentry took the old
/// name's lock too; see README.)
struct Watchdog(Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    fn new(what: &'static str, secs: u64) -> Watchdog {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < deadline {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            // Past the test harness's capture of `eprintln!`.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{what}: still running after {secs} s: a hang; aborting");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn assert_whole(fs: &Etcd) {
    let bad = fs.check().unwrap();
    assert!(bad.is_empty(), "the tree is torn: {bad:#?}");
}

#[test]
fn bad_specs_are_refused() {
    for s in ["", "/prefix", "localhost", "a:1,b/x"] {
        let e = EtcdOptions::parse(s).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{s:?}");
    }
    let o = EtcdOptions::parse("h1:1,h2:2/trees/a/").unwrap();
    assert_eq!((o.endpoints.len(), o.prefix.as_str()), (2, "trees/a"));
    assert_eq!(EtcdOptions::parse("h:1").unwrap().prefix, "rcuvfs");
}

#[test]
fn one_client_is_a_posix_filesystem() {
    let c = LocalCluster::start(1).unwrap();
    let (v, fs) = client(&options(&c, "posix"));
    v.create_dir_all("/a/b").unwrap();
    v.write("/a/b/f", b"hello").unwrap();
    assert_eq!(v.read("/a/b/f").unwrap(), b"hello");
    assert_eq!(errno(&v.create_dir("/a")), libc::EEXIST);
    assert_eq!(errno(&v.remove_dir("/a")), libc::ENOTEMPTY);
    assert_eq!(errno(&v.remove_file("/a/b")), libc::EISDIR);
    assert_eq!(errno(&v.remove_dir("/a/b/f")), libc::ENOTDIR);
    assert_eq!(errno(&v.metadata("/a/b/f/x")), libc::ENOTDIR);
    assert_eq!(errno(&v.rename("/a", "/a/b/c")), libc::EINVAL);
    assert_eq!(v.metadata("/a").unwrap().nlink(), 3);

    // Data across chunk edges, holes, truncation.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    v.write("/big", &big).unwrap();
    assert_eq!(v.read("/big").unwrap(), big);
    let f = v.open("/big", OpenOptions::new().read(true).write(true)).unwrap();
    f.write_at(b"XYZ", 65_535).unwrap();
    f.write_at(b"end", 400_000).unwrap();
    let mut want = big.clone();
    want[65_535..65_538].copy_from_slice(b"XYZ");
    want.resize(400_000, 0);
    want.extend_from_slice(b"end");
    assert_eq!(v.read("/big").unwrap(), want);
    f.set_len(70_000).unwrap();
    f.set_len(80_000).unwrap();
    want.truncate(70_000);
    want.resize(80_000, 0);
    assert_eq!(v.read("/big").unwrap(), want);
    drop(f);

    // Links, symlinks, renames over names, xattrs.
    v.hard_link("/big", "/a/big2").unwrap();
    assert_eq!(v.metadata("/big").unwrap().nlink(), 2);
    v.symlink("a/b/f", "/s").unwrap();
    assert_eq!(v.read("/s").unwrap(), b"hello");
    v.write("/g", b"g").unwrap();
    v.rename("/g", "/a/b/f").unwrap();
    assert_eq!(v.read("/a/b/f").unwrap(), b"g");
    v.create_dir("/a/e").unwrap();
    v.rename("/a/e", "/a/b/e").unwrap();
    assert_eq!((v.metadata("/a").unwrap().nlink(), v.metadata("/a/b").unwrap().nlink()), (3, 3));
    v.set_permissions("/big", rcuvfs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(v.metadata("/a/big2").unwrap().permissions().mode() & 0o777, 0o600);
    v.set_xattr("/big", "user.k", b"v", rcuvfs::fs::XattrSet::Create).unwrap();
    assert_eq!(v.get_xattr("/big", "user.k").unwrap(), b"v");
    assert_eq!(errno(&v.set_xattr("/big", "user.k", b"w", rcuvfs::fs::XattrSet::Create)), libc::EEXIST);
    assert_eq!(errno(&v.get_xattr("/big", "user.none")), libc::ENODATA);

    // Listings: every name once, from any cookie.
    for i in 0..600 {
        v.write(format!("/a/n{i}"), b"").unwrap();
    }
    let names: Vec<_> = v.read_dir("/a").unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 602);
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 602);
    v.remove_dir_all("/a").unwrap();
    assert_eq!(errno(&v.metadata("/a")), libc::ENOENT);
    assert_whole(&fs);
    // None of its own changes came back to it through the watch.
    let r = fs.revision().unwrap();
    eventually("the watcher at the last change", || fs.watched_revision() >= r);
    assert_eq!(fs.stats().events.load(Ordering::Relaxed), 0);
}

#[test]
fn two_clients_see_each_others_changes() {
    let c = LocalCluster::start(1).unwrap();
    let o = options(&c, "coherence");
    let (a, afs) = client(&o);
    let (b, bfs) = client(&o);
    // B caches a miss; A's create must replace it.
    assert_eq!(errno(&b.metadata("/f")), libc::ENOENT);
    a.write("/f", b"one").unwrap();
    // A's own change is visible to A at once.
    assert_eq!(a.read("/f").unwrap(), b"one");
    eventually("create on B", || b.read("/f").map(|d| d == b"one").unwrap_or(false));
    // B caches the file's attributes; A's write must refresh them.
    assert_eq!(b.metadata("/f").unwrap().len(), 3);
    a.write("/f", b"longer").unwrap();
    eventually("write on B", || b.metadata("/f").map(|m| m.len() == 6).unwrap_or(false));
    assert_eq!(b.read("/f").unwrap(), b"longer");
    a.set_permissions("/f", rcuvfs::Permissions::from_mode(0o640)).unwrap();
    eventually("chmod on B", || b.metadata("/f").map(|m| m.permissions().mode() & 0o777 == 0o640).unwrap_or(false));
    b.create_dir("/d").unwrap();
    a.metadata("/d").ok();
    b.rename("/f", "/d/g").unwrap();
    eventually("rename on A", || errno(&a.metadata("/f")) == libc::ENOENT && a.read("/d/g").is_ok());
    a.remove_file("/d/g").unwrap();
    eventually("unlink on B", || errno(&b.metadata("/d/g")) == libc::ENOENT);
    // Listings: a client's own change shows at once in its next listing
    // (it keeps whole listings), another's once its watcher has seen it.
    let names = |v: &Vfs| {
        let mut n: Vec<_> = v.read_dir("/d").unwrap().map(|e| e.unwrap().file_name()).collect();
        n.sort();
        n
    };
    assert!(names(&a).is_empty() && names(&b).is_empty());
    a.write("/d/x", b"").unwrap();
    assert_eq!(names(&a), ["x"]);
    eventually("a create in B's listing", || names(&b) == ["x"]);
    b.rename("/d/x", "/d/y").unwrap();
    assert_eq!(names(&b), ["y"]);
    eventually("a rename in A's listing", || names(&a) == ["y"]);
    b.remove_file("/d/y").unwrap();
    eventually("an unlink in A's listing", || names(&a).is_empty());
    assert!(afs.stats().events.load(Ordering::Relaxed) > 0 && bfs.stats().events.load(Ordering::Relaxed) > 0);
    assert_whole(&afs);
}

/// Two clients, two threads each, create, rename, link and unlink the same
/// few names in two directories and in two directories made and removed; every answer must be one POSIX allows,
/// and the tree must end whole and the same on both.
#[test]
fn racing_clients_end_consistent() {
    let _watchdog = Watchdog::new("racing_clients_end_consistent", 120);
    let c = LocalCluster::start(1).unwrap();
    let o = options(&c, "race");
    let clients: Vec<_> = (0..2).map(|_| client(&o)).collect();
    clients[0].0.create_dir("/x").unwrap();
    clients[0].0.create_dir("/y").unwrap();
    let wrong = AtomicUsize::new(0);
    // Names in the directories that are made and removed, so that creates
    // and renames into a directory race its rmdir.
    let names = ["/x/a", "/x/b", "/y/a", "/y/b", "/x/d", "/y/d", "/x/d/e", "/y/d/e"];
    std::thread::scope(|s| {
        for (ci, (v, _)) in clients.iter().enumerate() {
            for t in 0..2 {
                let wrong = &wrong;
                s.spawn(move || {
                    let mut seed = (ci * 2 + t) as u64 * 7919 + 1;
                    let mut rnd = |n: usize| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed % n as u64) as usize
                    };
                    for _ in 0..150 {
                        let (p, q) = (names[rnd(names.len())], names[rnd(names.len())]);
                        let r = match rnd(6) {
                            0 => v.write(p, b"data").map(|_| ()),
                            1 => v.rename(p, q),
                            2 => v.remove_file(p),
                            3 => v.hard_link(p, q),
                            4 => v.create_dir(p),
                            _ => v.remove_dir(p),
                        };
                        let ok = [
                            0,
                            libc::ENOENT,
                            libc::EEXIST,
                            libc::EISDIR,
                            libc::ENOTDIR,
                            libc::ENOTEMPTY,
                            libc::EPERM,
                            libc::EINVAL,
                        ];
                        if !ok.contains(&errno(&r)) {
                            eprintln!("unexpected: {r:?}");
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        }
    });
    assert_eq!(wrong.load(Ordering::Relaxed), 0);
    assert_whole(&clients[0].1);
    // Both clients converge on the same listing.
    let list = |v: &Vfs, d: &str| {
        let mut n: Vec<_> = v.read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect();
        n.sort();
        n
    };
    for d in ["/x", "/y"] {
        let want = list(&clients[0].0, d);
        eventually("the same listing on both", || list(&clients[1].0, d) == want);
        for n in &want {
            let p = format!("{d}/{}", n.to_string_lossy());
            let seen =
                |v: &Vfs| v.symlink_metadata(&p).map(|m| (m.ino(), m.nlink(), m.len())).map_err(|e| e.raw_os_error());
            let mut last = None;
            eventually("the same attributes on both", || {
                let (m0, m1) = (seen(&clients[0].0), seen(&clients[1].0));
                let same = m0.is_ok() && m0 == m1;
                if !same && last != Some((m0, m1)) {
                    // (ino, nlink, size) or errno, on each client.
                    eprintln!("{p}: {m0:?} against {m1:?}");
                    last = Some((m0, m1));
                }
                same
            });
        }
    }
}

#[test]
fn unlinked_while_held_stays_readable_then_goes() {
    let c = LocalCluster::start(1).unwrap();
    let o = options(&c, "orphans");
    let (a, afs) = client(&o);
    let (b, _bfs) = client(&o);
    a.write("/f", b"kept").unwrap();
    a.write("/g", b"mine").unwrap();
    let held = a.open("/f", OpenOptions::new().read(true)).unwrap();
    let own = a.open("/g", OpenOptions::new().read(true)).unwrap();
    eventually("f on B", || b.metadata("/f").is_ok());
    // Another client unlinks one, this client the other.
    b.remove_file("/f").unwrap();
    a.remove_file("/g").unwrap();
    std::thread::sleep(o.orphan_grace * 4);
    let mut buf = [0u8; 16];
    let n = held.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"kept");
    let n = own.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"mine");
    assert_eq!(afs.orphans().unwrap(), (2, 2));
    assert_whole(&afs);
    drop((held, own));
    eventually("both orphans reclaimed", || afs.orphans().unwrap() == (0, 0));
    assert_whole(&afs);
}

/// An orphan nobody holds waits out its grace period, counted by the
/// cluster (its grace key's lease), before any client's sweep reclaims it,
/// then goes; even when the sweeping client's wall clock is an hour ahead
/// (a child process under libfaketime). Before, the period was a time
/// stamp of the unlinking machine's clock compared with the sweeper's: this
/// test failed, the skewed sweeper reclaiming the orphan at its first sweep.
#[test]
fn an_orphan_waits_out_its_grace_period_whatever_the_clocks() {
    if let Ok(spec) = std::env::var("RCUVFS_ETCD_SWEEPER") {
        // The child: a client that only sweeps, until its stdin ends (the
        // parent lets go of it, or dies). Not killed: the parent's child is
        // `faketime`, which forks this process and waits for it, so a kill
        // reached `faketime` alone and this one swept on, orphaned, until
        // the cluster was gone, then wrote its failure to a closed pipe
        // (CI's log showed "io error when listing tests" in a later suite).
        let mut o = EtcdOptions::parse(&spec).unwrap();
        o.orphan_grace = Duration::from_secs(2);
        let (_v, _fs) = client(&o);
        println!("READY");
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        std::process::exit(0);
    }
    let c = LocalCluster::start(1).unwrap();
    let mut o = options(&c, "grace");
    o.orphan_grace = Duration::from_secs(2);
    let (a, afs) = client(&o);
    let mut child = std::process::Command::new("faketime")
        .args(["-f", "+1h"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "an_orphan_waits_out_its_grace_period_whatever_the_clocks", "--nocapture"])
        .env("RCUVFS_ETCD_SWEEPER", c.spec("grace"))
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("faketime (Debian's faketime package; .ci/run installs it)");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("READY") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "the child died");
    }
    a.write("/f", b"gone").unwrap();
    let unlinked = Instant::now();
    a.remove_file("/f").unwrap();
    let mut seen = 0;
    loop {
        let orphans = afs.orphans().unwrap();
        // Read before the elapsed time: if the grace period was still on
        // after the read, the orphan must have been there.
        if unlinked.elapsed() >= o.orphan_grace {
            break;
        }
        assert_eq!(orphans, (1, 0), "reclaimed {:?} after the unlink, within the grace period", unlinked.elapsed());
        seen += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("the orphan was there at {seen} reads within the grace period");
    eventually("the orphan reclaimed", || afs.orphans().unwrap() == (0, 0));
    // The child's stdin ends: it exits, and `faketime` with it.
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "the sweeping child failed");
    assert_whole(&afs);
    assert!(a.read("/f").is_err());
}

/// A client killed with SIGKILL in the middle of its writes leaves the tree
/// whole: the other sees each file as its last committed write, and the
/// dead client's holds go with its lease.
#[test]
fn a_killed_client_leaves_no_torn_state() {
    if let Ok(spec) = std::env::var("RCUVFS_ETCD_CHILD") {
        // The child: writes files, holds one unlinked, until killed.
        let mut o = EtcdOptions::parse(&spec).unwrap();
        o.lease_ttl = Duration::from_secs(2);
        o.orphan_grace = Duration::from_millis(300);
        o.timeout = Duration::from_secs(3);
        let (v, _) = client(&o);
        v.write("/held", b"h").unwrap();
        let f = v.open("/held", OpenOptions::new().read(true)).unwrap();
        v.remove_file("/held").unwrap();
        println!("READY");
        let block = vec![b'z'; 200_000];
        for i in 0.. {
            v.write(format!("/w{}", i % 4), &block).unwrap();
            let _ = f.metadata();
        }
        unreachable!();
    }
    let c = LocalCluster::start(1).unwrap();
    let o = options(&c, "killed");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_killed_client_leaves_no_torn_state", "--nocapture"])
        .env("RCUVFS_ETCD_CHILD", c.spec("killed"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("READY") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "the child died");
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let (v, fs) = client(&o);
    for i in 0..4 {
        if let Ok(d) = v.read(format!("/w{i}")) {
            // `write` is a truncating open, then one write call (one
            // transaction): empty or whole, never a part.
            assert!(d.is_empty() || d.len() == 200_000 && d.iter().all(|b| *b == b'z'), "w{i} torn: {} bytes", d.len());
        }
    }
    assert_whole(&fs);
    // The orphan it held goes once its lease runs out.
    eventually("the dead client's orphan reclaimed", || fs.orphans().unwrap() == (0, 0));
    assert_whole(&fs);
}

/// Three members: one killed, work goes on; two killed, calls fail with
/// ETIMEDOUT or EIO within a bound and change nothing; back, work resumes.
#[test]
fn members_die_and_return() {
    let mut c = LocalCluster::start(3).unwrap();
    let o = options(&c, "faults");
    let (v, fs) = client(&o);
    v.create_dir("/d").unwrap();
    let mut n = 0;
    let mut work = |v: &Vfs, count: usize| -> std::io::Result<()> {
        for _ in 0..count {
            v.write(format!("/d/f{n}"), format!("{n}"))?;
            n += 1;
        }
        Ok(())
    };
    work(&v, 20).unwrap();
    c.kill(0);
    // A client may have been talking to the dead member, and a leader
    // election takes a moment: a call may fail once, then work goes on.
    let t = Instant::now();
    while work(&v, 1).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "no progress with 2 of 3 members");
    }
    work(&v, 20).unwrap();
    c.kill(1);
    let t = Instant::now();
    let r = v.write("/d/lost", b"x");
    let took = t.elapsed();
    assert!(matches!(errno(&r), libc::ETIMEDOUT | libc::EIO), "without quorum: {r:?}");
    assert!(took < o.timeout * 3, "an answer without quorum took {took:?}");
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    c.wait_healthy(Duration::from_secs(30)).unwrap();
    let t = Instant::now();
    while work(&v, 1).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "no progress after the members returned");
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in 0..n {
        assert_eq!(v.read(format!("/d/f{i}")).unwrap(), format!("{i}").as_bytes());
    }
    assert_whole(&fs);
}

/// A lookup on one client in flight while another creates (or removes) the
/// name: once the first client's watcher has passed the change, the name
/// must look as the change left it. Before the notification waited for the
/// lookup in flight, the miss it had read was cached after the watcher
/// dropped nothing, and stayed.
#[test]
fn a_change_is_not_lost_to_a_lookup_in_flight() {
    let c = LocalCluster::start(1).unwrap();
    let o = options(&c, "inflight");
    let (a, afs) = client(&o);
    let (b, bfs) = client(&o);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rounds = 150;
    let wrong = AtomicUsize::new(0);
    let current = AtomicUsize::new(0);
    /// Stops the lookups however the rounds end.
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    /// Waits until A's watcher has passed B's last change.
    fn settle(afs: &Etcd, bfs: &Etcd) {
        let r = bfs.revision().unwrap();
        eventually("A's watcher at B's change", || afs.watched_revision() >= r);
    }
    std::thread::scope(|s| {
        let _stop = Stop(&stop);
        // A's threads look up the name of the round all the time.
        for _ in 0..3 {
            let (a, stop, current) = (&a, &stop, &current);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = a.metadata(format!("/n{}", current.load(Ordering::Relaxed)));
                }
            });
        }
        for i in 0..rounds {
            current.store(i, Ordering::Relaxed);
            let name = format!("/n{i}");
            let present = i % 2 == 0;
            b.write(&name, b"").unwrap();
            if !present {
                // Seen on A first (its positive dentry then goes stale).
                settle(&afs, &bfs);
                if a.metadata(&name).is_err() {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
                b.remove_file(&name).unwrap();
            }
            settle(&afs, &bfs);
            if a.metadata(&name).is_ok() != present {
                wrong.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    assert_eq!(wrong.load(Ordering::Relaxed), 0, "names that stayed as they were before the change");
    assert_whole(&afs);
}

/// A client renames a name whose cached answer is stale (another client
/// has just put a new file there, and the first client's watcher has not
/// told it yet): the filesystem moves the file that is there now, and the
/// client's cache, which moved what it believed was there, must not keep
/// that belief. Its own commits are not news to it, but where they left a
/// name naming something else than its cache says, the cache must drop
/// it. Without that, the racing test ended with the clients disagreeing
/// for good (2 runs of 30). This test failed in 1 of 3 runs of 20 rounds.
#[test]
fn an_own_change_made_through_a_stale_name_is_corrected() {
    let c = LocalCluster::start(1).unwrap();
    let o = options(&c, "stale-own");
    let (a, afs) = client(&o);
    let (b, _) = client(&o);
    let ino = |v: &Vfs, p: &str| v.metadata(p).map(|m| m.ino()).map_err(|e| e.raw_os_error());
    for _ in 0..50 {
        a.write("/a", b"old").unwrap();
        eventually("/a on B", || ino(&b, "/a") == ino(&a, "/a"));
        let old = ino(&b, "/a").unwrap();
        // A replaces /a; B, at once, renames /a as it knows it.
        a.write("/n", b"new").unwrap();
        a.rename("/n", "/a").unwrap();
        b.rename("/a", "/c").unwrap();
        eventually("/c on A", || ino(&a, "/c").is_ok());
        let new = ino(&a, "/c").unwrap();
        assert_ne!(new, old);
        eventually("the same /c on both", || ino(&b, "/c") == Ok(new));
        assert_eq!(b.read("/c").unwrap(), b"new");
        a.remove_file("/c").unwrap();
        eventually("/c gone on B", || ino(&b, "/c") == Err(Some(libc::ENOENT)));
    }
    assert_whole(&afs);
}
