//! The passthrough filesystem: a host directory under the dcache. Nothing
//! escapes the root; changes made on the host (with std::fs) show up, with
//! inotify watches and with the TTL alone; complete directories list
//! without getdents; memory holds to the dcache target.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::errno;
use rcuvfs::fs::passthrough::{Passthrough, PassthroughOptions, PassthroughStats};
use rcuvfs::{OpenOptions, Vfs};

/// A fresh host directory, removed at drop.
struct HostDir(PathBuf);

impl HostDir {
    fn new(tag: &str) -> HostDir {
        let p = std::env::temp_dir().join(format!("rcuvfs-pt-{tag}-{}-{:?}", std::process::id(), Instant::now()));
        std::fs::create_dir_all(&p).unwrap();
        HostDir(p)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn serve(dir: &Path, opts: PassthroughOptions) -> (Vfs, Arc<PassthroughStats>) {
    let pt = Passthrough::new(dir, opts).unwrap();
    let stats = pt.stats();
    (Vfs::builder().filesystem(Arc::new(pt)).build().unwrap(), stats)
}

fn watched() -> PassthroughOptions {
    PassthroughOptions::default()
}

fn ttl_only() -> PassthroughOptions {
    PassthroughOptions { watch: false, ttl: Duration::from_millis(50), ..Default::default() }
}

/// Polls `f` until it holds, for at most 10 s: the test checks that the
/// change shows up, not how fast.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "not seen within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn operations_reach_the_host_directory() {
    let h = HostDir::new("ops");
    let (v, _) = serve(&h.0, watched());
    v.create_dir_all("/a/b").unwrap();
    v.write("/a/b/f", b"through rcuvfs").unwrap();
    assert_eq!(std::fs::read(h.path("a/b/f")).unwrap(), b"through rcuvfs");
    v.symlink("b/f", "/a/link").unwrap();
    assert_eq!(std::fs::read_link(h.path("a/link")).unwrap(), Path::new("b/f"));
    assert_eq!(v.read("/a/link").unwrap(), b"through rcuvfs");
    v.hard_link("/a/b/f", "/a/g").unwrap();
    assert_eq!(v.metadata("/a/g").unwrap().nlink(), 2);
    v.rename("/a/g", "/a/h").unwrap();
    assert!(h.path("a/h").exists() && !h.path("a/g").exists());
    v.set_permissions("/a/h", rcuvfs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(std::fs::metadata(h.path("a/h")).unwrap().permissions().mode() & 0o777, 0o600);
    v.truncate("/a/h", 4).unwrap();
    assert_eq!(std::fs::read(h.path("a/h")).unwrap(), b"thro");
    let mut f = v.open("/a/h", OpenOptions::new().append(true)).unwrap();
    std::io::Write::write_all(&mut f, b"+").unwrap();
    drop(f);
    assert_eq!(v.read("/a/h").unwrap(), b"thro+");
    let mut names: Vec<_> = v.read_dir("/a").unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["b", "h", "link"]);
    v.remove_file("/a/h").unwrap();
    v.remove_dir_all("/a").unwrap();
    assert!(!h.path("a").exists());
    // The inode numbers are the host's.
    std::fs::write(h.path("n"), b"").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(v.metadata("/n").unwrap().ino(), std::fs::metadata(h.path("n")).unwrap().ino());
    assert_eq!(v.metadata("/").unwrap().ino(), std::fs::metadata(&h.0).unwrap().ino());
}

#[test]
fn nothing_escapes_the_root() {
    let outside = HostDir::new("outside");
    std::fs::write(outside.path("secret"), b"outside").unwrap();
    let h = HostDir::new("root");
    std::fs::create_dir(h.path("d")).unwrap();
    std::fs::write(h.path("inside"), b"inside").unwrap();
    let rel_escape = format!("../../../../../../..{}", outside.path("secret").display());
    std::os::unix::fs::symlink(&rel_escape, h.path("rel")).unwrap();
    std::os::unix::fs::symlink(outside.path("secret"), h.path("abs_out")).unwrap();
    std::os::unix::fs::symlink("/inside", h.path("abs_in")).unwrap();
    std::os::unix::fs::symlink("/", h.path("d/root")).unwrap();
    // The escapes work on the host, so each case below would catch one.
    assert_eq!(std::fs::read(h.path("rel")).unwrap(), b"outside");
    assert_eq!(std::fs::read(h.path("abs_out")).unwrap(), b"outside");
    for opts in [watched(), ttl_only()] {
        let (v, _) = serve(&h.0, opts);
        // ".." at the root stays at the root.
        let root = v.metadata("/").unwrap().ino();
        assert_eq!(v.metadata("/..").unwrap().ino(), root);
        assert_eq!(v.metadata("/d/../../..").unwrap().ino(), root);
        assert_eq!(v.read("/../../inside").unwrap(), b"inside");
        // An absolute symlink resolves from the root.
        assert_eq!(v.read("/abs_in").unwrap(), b"inside");
        assert_eq!(errno(&v.read("/abs_out")), libc::ENOENT, "an absolute target outside");
        assert_eq!(v.metadata("/d/root").unwrap().ino(), root);
        assert_eq!(v.read("/d/root/inside").unwrap(), b"inside");
        // A relative one cannot climb out either.
        assert_eq!(errno(&v.read("/rel")), libc::ENOENT, "a relative target climbing out");
        assert_eq!(errno(&v.read("/d/../../secret")), libc::ENOENT);
        // Names with '/' never reach the host.
        let root_e = v.root_entry();
        assert_eq!(errno(&v.lookup_at(&root_e, "d/../..")), libc::EINVAL);
    }
}

/// The outside-change checks, for a Vfs over `h` in either mode.
fn sees_outside_changes(h: &HostDir, opts: PassthroughOptions) {
    let (v, _) = serve(&h.0, opts);
    // A cached miss gives way when the name appears. It is a name in the
    // root's set of absent names, not a negative dentry, in both modes:
    // with watches, the watch's report takes it out; with the TTL alone,
    // it is asked about at each lookup (as a negative dentry would be).
    assert_eq!(errno(&v.metadata("/new")), libc::ENOENT);
    assert_eq!(errno(&v.metadata("/new")), libc::ENOENT);
    let s = v.stats();
    assert_eq!((s.absent_names, s.negative_dentries), (1, 0));
    std::fs::write(h.path("new"), b"12345").unwrap();
    eventually("a created file", || v.metadata("/new").is_ok_and(|m| m.len() == 5));
    // Data and size.
    std::fs::write(h.path("new"), b"1234567890").unwrap();
    eventually("a grown file", || v.metadata("/new").is_ok_and(|m| m.len() == 10));
    assert_eq!(v.read("/new").unwrap(), b"1234567890");
    // Permissions.
    std::fs::set_permissions(h.path("new"), std::fs::Permissions::from_mode(0o640)).unwrap();
    eventually("a chmod", || v.metadata("/new").is_ok_and(|m| m.mode() & 0o777 == 0o640));
    // Rename and delete.
    std::fs::rename(h.path("new"), h.path("moved")).unwrap();
    eventually("a rename", || v.metadata("/new").is_err() && v.metadata("/moved").is_ok());
    std::fs::remove_file(h.path("moved")).unwrap();
    eventually("a delete", || errno(&v.metadata("/moved")) == libc::ENOENT);
    // A directory made outside, with content; listed and walked.
    v.create_dir("/d").unwrap();
    assert!(v.read_dir("/d").unwrap().next().is_none());
    std::fs::create_dir(h.path("d/sub")).unwrap();
    std::fs::write(h.path("d/sub/x"), b"x").unwrap();
    eventually("a listing", || v.read_dir("/d").unwrap().count() == 1);
    eventually("a nested file", || v.read("/d/sub/x").is_ok_and(|d| d == b"x"));
    // A directory replaced by a file.
    std::fs::remove_dir_all(h.path("d/sub")).unwrap();
    std::fs::write(h.path("d/sub"), b"now a file").unwrap();
    eventually("a dir replaced by a file", || v.metadata("/d/sub").is_ok_and(|m| m.is_file()));
    assert_eq!(errno(&v.metadata("/d/sub/x")), libc::ENOTDIR);
}

#[test]
fn outside_changes_show_up_with_watches() {
    let h = HostDir::new("watch");
    sees_outside_changes(&h, watched());
}

#[test]
fn outside_changes_show_up_with_the_ttl_alone() {
    let h = HostDir::new("ttl");
    sees_outside_changes(&h, ttl_only());
}

/// Without watches, a cached miss is asked about before an update trusts
/// it, as a negative dentry was: a name made on the host after the miss is
/// opened by an `O_CREAT` open without `O_EXCL` (not made again: the host's
/// bytes stay), a hard link onto it fails EEXIST, and a rename onto it
/// replaces it; a removal leaves its name in the set, and the name made
/// again on the host is found. Fails (EEXIST from the open) when the
/// update's lookup trusts the cached miss.
#[test]
fn without_watches_an_update_asks_about_a_cached_miss() {
    let h = HostDir::new("ttl-update");
    let (v, _) = serve(&h.0, ttl_only());
    v.write("/src", b"src").unwrap();
    for name in ["/late", "/link", "/over"] {
        assert_eq!(errno(&v.metadata(name)), libc::ENOENT);
        std::fs::write(h.path(&name[1..]), b"host").unwrap();
    }
    assert_eq!(v.stats().absent_names, 3);
    let mut f = v.open("/late", OpenOptions::new().write(true).create(true)).unwrap();
    std::io::Write::write_all(&mut f, b"H").unwrap();
    drop(f);
    assert_eq!(std::fs::read(h.path("late")).unwrap(), b"Host");
    assert_eq!(errno(&v.hard_link("/src", "/link")), libc::EEXIST);
    assert_eq!(std::fs::read(h.path("link")).unwrap(), b"host");
    v.rename("/src", "/over").unwrap();
    assert_eq!(std::fs::read(h.path("over")).unwrap(), b"src");
    assert_eq!(v.read("/over").unwrap(), b"src");
    assert_eq!(v.stats().absent_names, 0, "each update took its name's entry out");
    // A removal leaves the name in the set, not a negative dentry, and a
    // name made again on the host is found.
    v.remove_file("/over").unwrap();
    let s = v.stats();
    assert_eq!((s.absent_names, s.negative_dentries), (1, 0));
    std::fs::write(h.path("over"), b"again").unwrap();
    assert_eq!(v.read("/over").unwrap(), b"again");
}

/// A walk that climbs with ".." out of a mount that needs no revalidation
/// (memfs) into the passthrough's, which does: the names it then looks up
/// are revalidated as in any other walk there (the RCU walk checked only
/// where it started and where it went down into a mount).
#[test]
fn dot_dot_into_a_revalidating_mount_revalidates() {
    let h = HostDir::new("dotdot");
    std::fs::create_dir(h.path("m")).unwrap();
    std::fs::write(h.path("x"), b"x").unwrap();
    let (v, _) = serve(&h.0, ttl_only());
    v.mount("/m", Arc::new(rcuvfs::fs::memfs::MemFs::default())).unwrap();
    let m = v.entry("/m").unwrap();
    for _ in 0..3 {
        assert_eq!(v.metadata_at(&m, "../x", true).unwrap().len(), 1);
    }
    std::fs::remove_file(h.path("x")).unwrap();
    eventually("the removal, through ..", || errno(&v.metadata_at(&m, "../x", true)) == libc::ENOENT);
}

#[test]
fn a_complete_directory_lists_without_getdents_until_it_changes() {
    let h = HostDir::new("complete");
    for i in 0..50 {
        std::fs::write(h.path(&format!("f{i}")), b"").unwrap();
    }
    let (v, stats) = serve(&h.0, watched());
    assert_eq!(v.read_dir("/").unwrap().count(), 50);
    let g = stats.getdents.load(Ordering::Relaxed);
    for _ in 0..5 {
        assert_eq!(v.read_dir("/").unwrap().count(), 50);
    }
    assert_eq!(stats.getdents.load(Ordering::Relaxed), g, "a complete directory called getdents");
    assert!(stats.cached_readdirs.load(Ordering::Relaxed) >= 5);
    // A miss in a complete directory needs no syscall either.
    let l = stats.lookups.load(Ordering::Relaxed);
    assert_eq!(errno(&v.metadata("/absent")), libc::ENOENT);
    assert_eq!(stats.lookups.load(Ordering::Relaxed), l);
    // A change outside clears the mark.
    std::fs::write(h.path("late"), b"").unwrap();
    eventually("the new name in a listing", || v.read_dir("/").unwrap().count() == 51);
    assert!(stats.getdents.load(Ordering::Relaxed) > g);
    // So does a change through the VFS.
    v.remove_file("/f0").unwrap();
    assert_eq!(v.read_dir("/").unwrap().count(), 50);
}

#[test]
fn the_dcache_holds_its_target_over_a_larger_host_tree() {
    let h = HostDir::new("tree");
    let (dirs, per) = (20, common::scaled(200));
    for d in 0..dirs {
        std::fs::create_dir(h.path(&format!("d{d}"))).unwrap();
        for f in 0..per {
            std::fs::write(h.path(&format!("d{d}/f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    let pt = Passthrough::new(&h.0, watched()).unwrap();
    let stats = pt.stats();
    let v = Vfs::builder().filesystem(Arc::new(pt)).dcache_target(500).build().unwrap();
    let live = v.live_counters();
    for d in 0..dirs {
        for f in 0..per {
            assert_eq!(v.read_to_string(format!("/d{d}/f{f}")).unwrap(), format!("{d}/{f}"));
        }
    }
    let s = v.stats();
    assert!(s.dentries <= 500 + 64 + 8, "{} dentries for a target of 500", s.dentries);
    // A hot set stays cached: repeated stats of a few files reach the host
    // no more.
    for _ in 0..3 {
        for f in 0..20 {
            v.metadata(format!("/d0/f{f}")).unwrap();
        }
    }
    let before = stats.lookups.load(Ordering::Relaxed);
    for _ in 0..100 {
        for f in 0..20 {
            v.metadata(format!("/d0/f{f}")).unwrap();
        }
    }
    assert_eq!(stats.lookups.load(Ordering::Relaxed), before, "a hot set was evicted");
    drop(v);
    assert_eq!((live.dentries(), live.inodes()), (0, 0));
}

#[test]
fn a_passthrough_mounted_inside_a_memfs_sees_outside_changes() {
    let h = HostDir::new("mounted");
    let v = Vfs::new();
    v.create_dir("/host").unwrap();
    v.mount("/host", Arc::new(Passthrough::new(&h.0, watched()).unwrap())).unwrap();
    assert_eq!(errno(&v.metadata("/host/x")), libc::ENOENT);
    std::fs::write(h.path("x"), b"x").unwrap();
    eventually("a file under a mount", || v.metadata("/host/x").is_ok());
    v.unmount("/host").unwrap();
    // Events after the unmount find no superblock and do nothing.
    std::fs::write(h.path("y"), b"y").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(errno(&v.metadata("/host/x")), libc::ENOENT);
}

/// A directory moved on the host while its old name is still trusted
/// (an hour's TTL) is found again under its new name by a rename between
/// two directories: the lookup moves the cached dentry of the directory
/// (one per directory) while the rename holds the rename mutex, and must
/// not answer ESTALE for a lock its own caller holds. Two clients of one
/// etcd tree met this in the racing test (1 run in 40).
#[test]
fn a_directory_moved_outside_is_renamed_from_its_new_name() {
    let h = HostDir::new("moved");
    std::fs::create_dir_all(h.path("x/d")).unwrap();
    std::fs::create_dir(h.path("y")).unwrap();
    std::fs::write(h.path("x/d/f"), b"kept").unwrap();
    let opts = PassthroughOptions { watch: false, ttl: Duration::from_secs(3600), ..Default::default() };
    let (vfs, _) = serve(&h.0, opts);
    let ino = vfs.metadata("/x/d").unwrap().ino();
    std::fs::rename(h.path("x/d"), h.path("y/d")).unwrap();
    // Cross-directory, and the source's directory dentry cached under /x.
    vfs.rename("/y/d", "/x/e").unwrap();
    assert_eq!(vfs.metadata("/x/e").unwrap().ino(), ino);
    assert_eq!(vfs.read("/x/e/f").unwrap(), b"kept");
    assert!(!h.path("y/d").exists());
    assert_eq!(std::fs::read(h.path("x/e/f")).unwrap(), b"kept");
}

/// An update shows on every inode it changed, at the next stat, whatever
/// else the cache may trust (no watch, an hour's TTL here): a create or
/// unlink moves its directory's times, a mkdir its link count, an unlink
/// an open file's link count, a rename the moved file's ctime. (The VFS
/// marks those inodes stale and reads them again at the next look, rather
/// than at once.)
#[test]
fn an_update_shows_on_every_inode_it_changed() {
    let host = HostDir::new("stale");
    let opts = PassthroughOptions { watch: false, ttl: Duration::from_secs(3600), ..Default::default() };
    let (v, _) = serve(&host.0, opts);
    v.create_dir("/d").unwrap();
    v.write("/d/kept", b"x").unwrap();
    let tick = || std::thread::sleep(Duration::from_millis(20));
    let m = |p: &str| v.metadata(p).unwrap();
    let d0 = m("/d");
    tick();
    v.write("/d/f", b"y").unwrap();
    let d1 = m("/d");
    assert!(d1.modified().unwrap() > d0.modified().unwrap(), "create: the directory's mtime");
    tick();
    v.create_dir("/d/sub").unwrap();
    let d2 = m("/d");
    assert_eq!(d2.nlink(), d1.nlink() + 1, "mkdir: the directory's link count");
    let k0 = m("/d/kept");
    tick();
    v.rename("/d/kept", "/d/moved").unwrap();
    assert!(m("/d/moved").changed() > k0.changed(), "rename: ctime");
    let f = v.open("/d/f", OpenOptions::new().read(true)).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 1);
    tick();
    v.remove_file("/d/f").unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 0, "unlink: the open file's link count");
    let d3 = m("/d");
    assert!(d3.modified().unwrap() > d2.modified().unwrap(), "unlink: the directory's mtime");
    tick();
    v.remove_dir("/d/sub").unwrap();
    assert_eq!(m("/d").nlink(), d2.nlink() - 1, "rmdir: the directory's link count");
}

/// A file created through the passthrough has the mode asked for: the
/// server's own umask does not apply, and the chown to the caller does
/// not drop set-user-ID or set-group-ID (xfstests generic/633).
#[test]
fn a_created_file_has_the_mode_asked_for() {
    let host = HostDir::new("mode");
    let pt = Passthrough::new(&host.0, watched()).unwrap();
    let v = Vfs::builder().umask(0).filesystem(Arc::new(pt)).build().unwrap();
    for mode in [0o666, 0o4755, 0o2710, 0o6777] {
        let p = format!("/f{mode:o}");
        drop(v.open(&p, OpenOptions::new().write(true).create_new(true).mode(mode)).unwrap());
        assert_eq!(v.metadata(&p).unwrap().mode() & 0o7777, mode, "through the mount");
        let host_mode = std::fs::metadata(host.path(&p[1..])).unwrap().permissions().mode();
        assert_eq!(host_mode & 0o7777, mode, "on the host");
    }
}
