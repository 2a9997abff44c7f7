//! Creating names: mkdir, mknod, symlink, link (and `create_dir_all`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::walk::{Found, IRef, IfUncached, Named, Uncached, Update};
use super::{bytes, Begun, Entry, Start, Vfs};
use crate::cred::{MAY_EXEC, MAY_WRITE};
use crate::dcache::Dentry;
use crate::error::{errno_of, fail, Result, EACCES, EEXIST, EINVAL, ENOENT, EPERM, EXDEV};
use crate::fs::{Attr, FileType, NewNode, Owner};
use crate::inode::Inode;
use crate::mount::Mount;
use crate::namei::{check_name, check_path, RefWalk};

/// What a create of a name without a dentry came to
/// ([`Vfs::create_uncached`]).
pub(super) enum Made<'a, 'p> {
    /// memfs made it: the walk (its mount) and the new inode (with a
    /// reference where the caller asked to keep it, `Found::Inode`; else
    /// `Found::Made`).
    Born(RefWalk<'a>, Found<'a>),
    /// The name, looked up after all (with its dentry, negative if absent):
    /// the caller goes on as for a name the dcache held.
    Named(Named<'a, 'p>),
}

impl Vfs {
    // ---- creating names ----

    /// The owner and permission bits of a new inode in `dir` (BSD group
    /// semantics under a set-group-id directory).
    pub(super) fn new_owner(&self, dir_attr: &Attr, kind: FileType, perm: u32) -> (Owner, u32) {
        let cred = &*self.cred;
        if dir_attr.perm & libc::S_ISGID != 0 {
            let mut perm = if kind == FileType::Dir { perm | libc::S_ISGID } else { perm };
            // Linux's mode_strip_sgid: a group-executable set-group-ID file
            // in the directory's group, made by someone outside that group,
            // would hand them the group's privileges.
            if kind != FileType::Dir
                && perm & libc::S_ISGID != 0
                && perm & 0o010 != 0
                && !cred.is_root()
                && !cred.in_group(dir_attr.gid)
            {
                perm &= !libc::S_ISGID;
            }
            (Owner { uid: cred.uid, gid: dir_attr.gid }, perm)
        } else {
            (Owner { uid: cred.uid, gid: cred.gid }, perm)
        }
    }

    /// Write and search permission on a directory (`may_create`).
    pub(super) fn may_create(&self, dir: &Dentry) -> Result<Attr> {
        let a = dir.inode().expect("positive directory").access_attr();
        if !self.cred.may(&a, MAY_WRITE | MAY_EXEC) {
            return fail(EACCES);
        }
        Ok(a)
    }

    /// Records a name the filesystem just created in `dir` for the negative
    /// dentry `d`, and marks the directory's cached attributes stale.
    pub(super) fn instantiate(&self, dir: &Dentry, d: &Dentry, attr: &Attr) -> Result<()> {
        let ip = dir.dir_sb().iget(attr, true, &self.dc().counters)?;
        self.instantiate_inode(dir, d, ip, false);
        Ok(())
    }

    /// As [`instantiate`](Self::instantiate), with the new name's in-core
    /// inode (one reference, which `d` takes over).
    /// `new_dir`: the filesystem just made it, an empty directory (then it
    /// starts complete where its superblock allows: `COMPLETE`).
    fn instantiate_inode(&self, dir: &Dentry, d: &Dentry, ip: *const Inode, new_dir: bool) {
        let dc = self.dc();
        dc.d_instantiate(d, ip, new_dir && dc.dirs_can_be_complete(dir.dir_sb()));
        dir.inode().expect("positive directory").mark_stale();
    }

    /// Makes `name` in `dir` (attributes `dir_attr`) with permissions
    /// `perm` (less what `new_owner` takes off) through its filesystem,
    /// and records it for the negative dentry `d`: a memfs
    /// bound to this superblock hands back its new inode at once
    /// ([`MemFs::create_bound`](crate::fs::memfs::MemFs::create_bound)), any
    /// other filesystem answers attributes that `iget` finds or makes an
    /// inode for.
    pub(super) fn make_node(
        &self,
        dir: &Dentry,
        dir_attr: &Attr,
        d: &Dentry,
        name: &[u8],
        node: NewNode<'_>,
        perm: u32,
    ) -> Result<()> {
        let (owner, perm) = self.new_owner(dir_attr, node.kind(), perm);
        let dir_inode = dir.inode().expect("positive directory");
        let sb = dir_inode.sb();
        if let Some(m) = sb.fs.as_memfs() {
            if let Some(r) = m.create_bound(sb, dir_inode, name, &node, perm, owner, true, &self.dc().counters) {
                self.instantiate_inode(dir, d, r?, node.kind() == FileType::Dir);
                return Ok(());
            }
        }
        let attr = node.make(sb.fs.as_ref(), dir_attr.ino, name, perm, owner)?;
        self.instantiate(dir, d, &attr)
    }

    /// Creates `u`'s name (not a directory) through the bound memfs with
    /// no dentry (see [`Uncached`]). Where a create with a dentry would
    /// answer otherwise than by making the name (a trailing slash, a
    /// directory the caller may not write, a name memfs has), the name is
    /// looked up instead and the caller goes on as with a dentry, so that
    /// each error comes where it does there (EEXIST before EACCES).
    /// `keep`: the caller keeps the new inode (an open file), or holds no
    /// update's read section (`Dcache::hold_update` gave none: a blocking
    /// filesystem is mounted), and the inode then comes with a reference;
    /// else it comes with none, to be read only while the caller's update
    /// and its read section last (`Found::Made`).
    pub(super) fn create_uncached<'a, 'p>(
        &'a self,
        u: Uncached<'a, 'p>,
        node: NewNode<'_>,
        perm: u32,
        keep: bool,
    ) -> Result<Made<'a, 'p>> {
        debug_assert!(node.kind() != FileType::Dir);
        let dc = self.dc();
        let dir_attr = match self.may_create(&u.dir) {
            Ok(a) if !u.trailing => a,
            _ => return Ok(Made::Named(u.look_up(dc)?)),
        };
        let (owner, perm) = self.new_owner(&dir_attr, node.kind(), perm);
        let dir_inode = u.dir.inode().expect("positive directory");
        let sb = dir_inode.sb();
        let m = sb.fs.as_memfs().expect("a directory of the bound memfs");
        let made = m.create_bound(sb, dir_inode, u.name, &node, perm, owner, keep, &dc.counters);
        match made.expect("bound for the superblock's life") {
            Ok(inode) => {
                dir_inode.mark_stale();
                let Uncached { _w: w, .. } = u;
                let f = if keep {
                    // SAFETY: the reference the inode was born with, ours.
                    Found::Inode(unsafe { IRef::adopt(dc, inode) })
                } else {
                    Found::Made(inode)
                };
                Ok(Made::Born(w, f))
            }
            Err(e) if errno_of(&e) == EEXIST => Ok(Made::Named(u.look_up(dc)?)),
            Err(e) => Err(e),
        }
    }

    /// The common path of mkdir, mknod, symlink: the name must not exist.
    fn create_node(&self, start: Start, path: &[u8], node: NewNode<'_>, perm: u32) -> Result<()> {
        self.retry_estale(|| self.create_node_once(start, path, node, perm))
    }

    fn create_node_once(&self, start: Start, path: &[u8], node: NewNode<'_>, perm: u32) -> Result<()> {
        let kind = node.kind();
        check_path(path)?;
        let _g = self.state.global();
        // One read section for the whole update (`Dcache::hold_update`).
        let section = self.dc().hold_update();
        let uncached = if kind == FileType::Dir { IfUncached::LookUp } else { IfUncached::Create };
        let n = match self.begin_update(start, path, uncached)? {
            Update::Named(n) => n,
            // A reference where no read section keeps the new inode's
            // memory (`create_uncached`'s `keep`).
            Update::Uncached(u) => match self.create_uncached(u, node, perm, section.is_none())? {
                Made::Born(..) => return Ok(()),
                Made::Named(n) => n,
            },
            Update::Other(_) => return fail(EEXIST),
        };
        if n.child.inode().is_some() {
            return fail(EEXIST);
        }
        if n.trailing && kind != FileType::Dir {
            return fail(ENOENT);
        }
        let dir = n.dir();
        let dir_attr = self.may_create(dir)?;
        self.make_node(dir, &dir_attr, &n.child, n.name, node, perm)
    }

    /// `mkdir` with mode 0o777 less the umask.
    pub fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.create_dir_mode(path, 0o777)
    }

    /// `mkdir` with `mode` (less the umask).
    pub fn create_dir_mode(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.mkdir_from(Start::Cwd, bytes(path.as_ref()), mode)
    }

    /// `mkdirat`.
    pub fn create_dir_at(&self, dir: &Entry, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.mkdir_from(Start::At(dir), bytes(path.as_ref()), mode)
    }

    fn mkdir_from(&self, start: Start, path: &[u8], mode: u32) -> Result<()> {
        let perm = mode & 0o7777 & !self.umask;
        self.create_node(start, path, NewNode::Dir, perm)
    }

    /// Creates `path` and every missing ancestor. May stop partway, leaving
    /// the directories it made (as `std::fs::create_dir_all`).
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        if path.as_os_str().is_empty() {
            return Ok(());
        }
        match self.create_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if errno_of(&e) == ENOENT => {}
            Err(e) => {
                return if self.metadata(path).map(|m| m.is_dir()).unwrap_or(false) { Ok(()) } else { Err(e) };
            }
        }
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => self.create_dir_all(p)?,
            _ => return fail(ENOENT),
        }
        match self.create_dir(path) {
            Ok(()) => Ok(()),
            Err(_) if self.metadata(path).map(|m| m.is_dir()).unwrap_or(false) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `mknodat` for a regular file, FIFO, socket or device (devices need
    /// root: EPERM).
    pub fn mknod_at(&self, dir: &Entry, path: impl AsRef<Path>, kind: FileType, mode: u32, rdev: u64) -> Result<()> {
        if matches!(kind, FileType::Dir | FileType::Symlink) {
            return fail(EINVAL);
        }
        if matches!(kind, FileType::CharDevice | FileType::BlockDevice) && !self.cred.is_root() {
            return fail(EPERM);
        }
        let perm = mode & 0o7777 & !self.umask;
        self.create_node(Start::At(dir), bytes(path.as_ref()), NewNode::Special(kind, rdev), perm)
    }

    /// `symlink(target, link)`: creates `link` pointing at `target`.
    pub fn symlink(&self, target: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        self.symlink_from(bytes(target.as_ref()), Start::Cwd, bytes(link.as_ref()))
    }

    /// `symlinkat`.
    pub fn symlink_at(&self, target: impl AsRef<Path>, dir: &Entry, link: impl AsRef<Path>) -> Result<()> {
        self.symlink_from(bytes(target.as_ref()), Start::At(dir), bytes(link.as_ref()))
    }

    fn symlink_from(&self, target: &[u8], start: Start, link: &[u8]) -> Result<()> {
        check_path(target)?;
        self.create_node(start, link, NewNode::Symlink(target), 0o777)
    }

    /// `link(src, dst)`: a new name for `src` (not followed if a symlink).
    pub fn hard_link(&self, src: impl AsRef<Path>, dst: impl AsRef<Path>) -> Result<()> {
        self.link_from(Start::Cwd, bytes(src.as_ref()), Start::Cwd, bytes(dst.as_ref()))
    }

    /// `linkat`.
    pub fn hard_link_at(
        &self,
        src_dir: &Entry,
        src: impl AsRef<Path>,
        dst_dir: &Entry,
        dst: impl AsRef<Path>,
    ) -> Result<()> {
        self.link_from(Start::At(src_dir), bytes(src.as_ref()), Start::At(dst_dir), bytes(dst.as_ref()))
    }

    /// `linkat(fd, "", dir, name, AT_EMPTY_PATH)`: a new name in `dir` for
    /// the object behind `src` (FUSE's link).
    pub fn link_entry(&self, src: &Entry, dir: &Entry, name: impl AsRef<OsStr>) -> Result<()> {
        src.check_same_vfs(&self.state)?;
        let name = name.as_ref().as_bytes();
        check_name(name)?;
        let _g = self.state.global();
        let _rcu = self.dc().hold_update();
        self.link_to(src.mount(), src.dentry(), Start::At(dir), name)
    }

    fn link_from(&self, src_start: Start, src: &[u8], dst_start: Start, dst: &[u8]) -> Result<()> {
        check_path(src)?;
        check_path(dst)?;
        let _g = self.state.global();
        // One read section for the whole link (`Dcache::hold_update`).
        let _rcu = self.dc().hold_update();
        let (w, src_d) = self.begin_walk(src_start, src, false)?;
        self.link_to(w.mnt(), &src_d, dst_start, dst)
    }

    fn link_to(&self, src_mnt: &Mount, src_d: &Dentry, dst_start: Start, dst: &[u8]) -> Result<()> {
        self.retry_estale(|| self.link_to_once(src_mnt, src_d, dst_start, dst))
    }

    fn link_to_once(&self, src_mnt: &Mount, src_d: &Dentry, dst_start: Start, dst: &[u8]) -> Result<()> {
        let n = match self.begin_named(dst_start, dst)? {
            Begun::Named(n) if std::ptr::eq(src_mnt, n.w.mnt()) => n,
            Begun::Named(_) => return fail(EXDEV),
            Begun::Other => {
                // "." or ".." or "/": the walk's mount decides EXDEV first,
                // as before.
                let (w, _) = self.begin_parent(dst_start, dst)?;
                return fail(if std::ptr::eq(src_mnt, w.mnt()) { EEXIST } else { EXDEV });
            }
        };
        if n.child.inode().is_some() {
            return fail(EEXIST);
        }
        if n.trailing {
            return fail(ENOENT);
        }
        let (name, dir) = (n.name, n.dir());
        let dir_attr = self.may_create(dir)?;
        let src_inode = src_d.inode().expect("positive");
        if src_inode.kind == FileType::Dir {
            return fail(EPERM);
        }
        if src_inode.attr().nlink == 0 {
            return fail(ENOENT); // linkat of an unlinked file (not O_TMPFILE)
        }
        let attr = src_inode.fs().link(src_inode.ino, dir_attr.ino, name)?;
        self.instantiate(dir, &n.child, &attr)
    }

    /// `faccessat` on a handle (FUSE's access): `mask` is a sum of
    /// `libc::R_OK`, `W_OK` and `X_OK` (`F_OK`, 0, checks existence only).
    pub fn access(&self, entry: &Entry, mask: u32) -> Result<()> {
        entry.check_same_vfs(&self.state)?;
        // R_OK, W_OK and X_OK are 4, 2 and 1, as MAY_READ, MAY_WRITE, MAY_EXEC.
        if self.cred.may(&entry.inode().access_attr(), mask & 7) {
            Ok(())
        } else {
            fail(EACCES)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cred::Cred;
    use crate::file::OpenOptions;
    use crate::vfs::Permissions;
    use std::io::Write;

    /// Four caches, each a reference mode and a size target:
    /// (`rcuwalk`, far) makes a dentry for every create; the three others
    /// make none for a file, a symlink or a node in a directory of the
    /// bound memfs: the default mode (`norefs`, `Dcache::files_bare`) at
    /// any size, the others at the size target where the directory is not
    /// complete (a dentry would only make the shrinker free another). Each
    /// answers as the first does: the same errors in the same order
    /// (EEXIST before EACCES, a trailing slash), the same attributes, and
    /// the file found, listed, read and opened afterwards. Without the
    /// change, the new names have dentries.
    #[test]
    fn creates_without_dentries_answer_as_creates_with_them() {
        use crate::RefMode::{NoRefs, RcuWalk};
        // Past a target of 64 either way; fewer under Miri.
        let n: usize = if cfg!(miri) { 100 } else { 200 };
        let mut answers = Vec::new();
        for (target, mode) in [(1 << 20, RcuWalk), (64, RcuWalk), (64, NoRefs), (1 << 20, NoRefs)] {
            let v = Vfs::builder().dcache_target(target).mode(mode).build().unwrap();
            let alice = v.with_cred(Cred::new(1000, 1000, &[]));
            v.create_dir("/d").unwrap();
            v.create_dir("/ro").unwrap();
            v.write("/ro/there", b"").unwrap();
            // Past the target the shrinker frees the oldest names: their
            // directory is no longer complete.
            for i in 0..n {
                v.write(format!("/d/old{i}"), b"").unwrap();
            }
            v.create_dir("/d/sub").unwrap();
            // A cached name removed: in a directory that is not complete
            // and whose files have dentries, its name goes to the
            // directory's set of absent names, which the create of it
            // again must take out.
            let again = format!("/d/old{}", n - 1);
            drop(v.entry(&again).unwrap());
            v.remove_file(&again).unwrap();
            v.write(&again, b"again").unwrap();
            let made = ["empty", "data", "opened", "link", "fifo"];
            v.write("/d/empty", b"").unwrap();
            v.write("/d/data", b"data").unwrap();
            let mut o = OpenOptions::new();
            o.write(true).create_new(true).mode(0o600);
            v.open("/d/opened", &o).unwrap().write_all(b"x").unwrap();
            v.symlink("data", "/d/link").unwrap();
            let d = v.entry("/d").unwrap();
            v.mknod_at(&d, "fifo", FileType::Fifo, 0o640, 0).unwrap();
            let dc = v.dc();
            for name in made {
                let cached = dc.d_lookup(d.dentry(), name.as_bytes()).is_some();
                assert_eq!(cached, (target, mode) == (1 << 20, RcuWalk), "{name} in {} at {target}", mode.name());
            }
            assert_eq!(d.dentry().is_complete(), (target, mode) == (1 << 20, RcuWalk));
            let err = |r: Result<()>| r.err().map_or(0, |e| errno_of(&e));
            let mut got = vec![
                err(v.write("/d/data", b"new")),
                err(v.write("/d/x/", b"")),
                err(v.symlink("t", "/d/empty")),
                err(v.symlink("t", "/d/y/")),
                err(v.open("/d/data", &o).map(drop)),
                err(v.open("/d/sub", &o).map(drop)),
                err(alice.write("/ro/new", b"")),
                err(alice.symlink("t", "/ro/there")),
                err(alice.write("/ro/there", b"")),
                err(v.metadata(&again).map(drop)),
            ];
            let meta = |p: &str| {
                let m = v.metadata(p).unwrap();
                (m.file_type(), m.permissions().mode(), m.uid(), m.len())
            };
            assert_eq!(meta("/d/empty"), (FileType::File, 0o644, 0, 0));
            assert_eq!(meta("/d/opened"), (FileType::File, 0o600, 0, 1));
            assert_eq!(meta("/d/fifo"), (FileType::Fifo, 0o640, 0, 0));
            assert_eq!(v.read("/d/data").unwrap(), b"new");
            assert_eq!(v.read_link("/d/link").unwrap(), std::path::Path::new("data"));
            let mut names: Vec<_> = v.read_dir("/d").unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            assert_eq!(names.len(), n + 6);
            assert_eq!(v.read(&again).unwrap(), b"again");
            v.remove_file("/d/empty").unwrap();
            got.push(err(v.metadata("/d/empty").map(drop)));
            v.set_permissions("/d", Permissions::from_mode(0o777)).unwrap();
            alice.write("/d/alices", b"").unwrap();
            got.push(v.metadata("/d/alices").unwrap().uid() as i32);
            v.check_invariants().unwrap();
            answers.push(got);
        }
        for a in &answers[1..] {
            assert_eq!(&answers[0], a, "with dentries / without");
        }
        assert_eq!(answers[0][..4], [0, libc::EISDIR, libc::EEXIST, libc::ENOENT]);
    }

    /// In the default mode, a miss that goes on to REF-walk in a directory
    /// whose files have no dentry caches nothing: memfs answers the next
    /// one in the RCU walk as it would have. A handle's lookup of a name
    /// whose lock another thread holds goes on to REF-walk (`fs_probe`
    /// trusts no miss then) and waits there. Fails (a negative dentry per
    /// miss) when `lookup_fs` makes one there.
    #[test]
    fn a_miss_among_files_without_dentries_caches_nothing() {
        let v = Vfs::new();
        v.create_dir("/d").unwrap();
        v.write("/d/f", b"").unwrap();
        let counts = |v: &Vfs| {
            let s = v.stats();
            (s.dentries, s.negative_dentries, s.absent_names)
        };
        let before = counts(&v);
        let d = v.entry("/d").unwrap();
        for i in 0..4 {
            let name = format!("m{i}");
            let lock = v.dc().names.lock(crate::dcache::name_hash(d.dentry(), name.as_bytes()));
            std::thread::scope(|s| {
                let looker = s.spawn(|| v.entry(format!("/d/{name}")).err().map(|e| errno_of(&e)));
                std::thread::sleep(std::time::Duration::from_millis(20));
                drop(lock);
                assert_eq!(looker.join().unwrap(), Some(libc::ENOENT));
            });
        }
        assert_eq!(counts(&v), before);
        assert!(v.metadata("/d/f").is_ok());
    }

    /// A create whose caller keeps nothing of the new inode (an empty
    /// `write`, a mknod, a symlink) makes it with no reference
    /// (`Keeper::Link`): the in-core count does not move, the inode lives
    /// by its link alone, and goes with it. One that gets no name (its
    /// directory removed under it) is freed at once. Fails (one live inode
    /// too many at the end) when `unalloc` keeps such an inode.
    #[test]
    fn a_create_that_keeps_nothing_takes_no_reference() {
        use crate::fs::memfs::{MemFs, MemFsOptions};
        let fs = std::sync::Arc::new(MemFs::new(MemFsOptions::default()));
        let v = Vfs::builder().filesystem(fs.clone()).build().unwrap();
        v.create_dir("/d").unwrap();
        let (live, in_core) = (fs.live_inodes(), v.stats().inodes);
        v.write("/d/f", b"").unwrap();
        v.symlink("f", "/d/l").unwrap();
        assert_eq!(v.stats().inodes, in_core, "no reference was kept");
        assert_eq!(fs.live_inodes(), live + 2);
        assert_eq!(v.metadata("/d/f").unwrap().len(), 0);
        assert_eq!(v.read_link("/d/l").unwrap().as_os_str(), "f");
        v.remove_file("/d/f").unwrap();
        v.remove_file("/d/l").unwrap();
        assert_eq!(fs.live_inodes(), live);
        // A create into a directory removed meanwhile: memfs's index of it
        // is closed, and the inode made for the name is taken back.
        let d = v.entry("/d").unwrap();
        v.remove_dir("/d").unwrap();
        let dir = d.inode();
        let owner = crate::fs::Owner { uid: 0, gid: 0 };
        let update = v.dc().hold_update();
        let made = fs.create_bound(dir.sb(), dir, b"x", &NewNode::File, 0o644, owner, false, &v.dc().counters);
        assert_eq!(made.map(|r| r.map(drop).map_err(|e| errno_of(&e))), Some(Err(ENOENT)));
        drop(update);
        drop(d);
        v.synchronize();
        assert_eq!(fs.live_inodes(), live - 1, "the directory and the inode for x are gone");
        v.check_invariants().unwrap();
    }

    /// An open that made its file hands the open file its create's
    /// reference (no dentry holds one): one reference while it is open,
    /// none after the close, and the inode goes with its name. Fails (the
    /// in-core count stays up after the close) if the open takes a
    /// reference of its own as well.
    #[test]
    fn an_open_that_made_its_file_hands_it_the_creates_reference() {
        use crate::fs::memfs::{MemFs, MemFsOptions};
        let fs = std::sync::Arc::new(MemFs::new(MemFsOptions::default()));
        let v = Vfs::builder().filesystem(fs.clone()).build().unwrap();
        v.create_dir("/d").unwrap();
        let (live, in_core) = (fs.live_inodes(), v.stats().inodes);
        let make = OpenOptions::new().write(true).create(true).truncate(true).clone();
        for i in 0..3 {
            let p = format!("/d/f{i}");
            let f = v.open(&p, &make).unwrap();
            assert_eq!(v.stats().inodes, in_core + 1, "the open file holds its inode");
            drop(f);
            assert_eq!(v.stats().inodes, in_core, "the close gave the one reference back");
            // Opened again: found with no dentry, or through the one the
            // second use makes.
            let f = v.open(&p, OpenOptions::new().read(true)).unwrap();
            assert_eq!(v.stats().inodes, in_core + 1);
            drop(f);
            assert_eq!(v.stats().inodes, in_core);
        }
        for i in 0..3 {
            v.remove_file(format!("/d/f{i}")).unwrap();
        }
        v.synchronize();
        assert_eq!(fs.live_inodes(), live, "the files went with their names");
        v.check_invariants().unwrap();
    }

    /// A file made with no dentry gets one at its second stat or open below
    /// the cache's size target (a name used over and over walks as any
    /// cached path does), none at its first, and none at the target (here
    /// handles' lookups fill the cache to it). Fails (no dentry after the
    /// second) without `Dcache::stays_bare`'s mark.
    #[test]
    fn a_file_stated_or_opened_twice_gets_its_dentry_below_the_target() {
        let read = OpenOptions::new().read(true).clone();
        for (target, want) in [(1 << 20, true), (64, false)] {
            let v = Vfs::builder().dcache_target(target).build().unwrap();
            v.create_dir("/d").unwrap();
            for i in 0..100 {
                v.write(format!("/d/pad{i}"), b"").unwrap();
                drop(v.entry(format!("/d/pad{i}")).unwrap());
            }
            v.write("/d/f", b"x").unwrap();
            v.write("/d/g", b"x").unwrap();
            let d = v.entry("/d").unwrap();
            let cached = |n: &str| v.dc().d_lookup(d.dentry(), n.as_bytes()).is_some();
            v.metadata("/d/f").unwrap();
            assert!(!cached("f"), "a first stat at {target}");
            assert_eq!(v.metadata("/d/f").unwrap().len(), 1);
            assert_eq!(cached("f"), want, "a second stat at {target}");
            drop(v.open("/d/g", &read).unwrap());
            assert!(!cached("g"), "a first open at {target}");
            drop(v.open("/d/g", &read).unwrap());
            assert_eq!(cached("g"), want, "a second open at {target}");
            drop(d);
            v.check_invariants().unwrap();
        }
    }

    /// An open of a name the dcache does not hold in a directory of the
    /// bound memfs makes no dentry in the default mode (`norefs`), and in
    /// the others at the cache's size target: the open file holds the
    /// inode memfs has for the name. Every answer (data, errors, a symlink
    /// followed or refused, a directory, a trailing slash, another user's
    /// access) is compared with a cache that makes the dentries (`rcuwalk`
    /// far from its target). Without the change, the names opened have
    /// dentries.
    #[test]
    fn opens_without_dentries_answer_as_opens_with_them() {
        use crate::RefMode::{NoRefs, RcuWalk};
        use std::io::Read;
        // Past a target of 64 either way; fewer under Miri (minutes).
        let n: usize = if cfg!(miri) { 80 } else { 200 };
        let mut answers = Vec::new();
        for (target, mode) in [(1 << 20, RcuWalk), (64, RcuWalk), (64, NoRefs), (1 << 20, NoRefs)] {
            let v = Vfs::builder().dcache_target(target).mode(mode).build().unwrap();
            let alice = v.with_cred(Cred::new(1000, 1000, &[]));
            v.create_dir("/d").unwrap();
            v.write("/d/secret", b"s").unwrap();
            v.set_permissions("/d/secret", Permissions::from_mode(0o600)).unwrap();
            v.create_dir("/d/sub").unwrap();
            v.symlink("f0", "/d/link").unwrap();
            for i in 0..n {
                v.write(format!("/d/f{i}"), format!("{i}").as_bytes()).unwrap();
            }
            // Not cached: dropped, and the cache refilled to its target.
            v.drop_caches();
            for i in 0..n {
                v.write(format!("/d/g{i}"), b"").unwrap();
            }
            let d = v.entry("/d").unwrap();
            let mut got = Vec::new();
            for i in (0..n).step_by(7) {
                got.push(v.read(format!("/d/f{i}")).unwrap());
            }
            let mut f = v.open("/d/f5", OpenOptions::new().read(true).write(true)).unwrap();
            f.write_all(b"55").unwrap();
            drop(f);
            let mut s = String::new();
            v.open("/d/f5", OpenOptions::new().read(true)).unwrap().read_to_string(&mut s).unwrap();
            got.push(s.into_bytes());
            for i in (0..n).step_by(7) {
                let cached = v.dc().d_lookup(d.dentry(), format!("f{i}").as_bytes()).is_some();
                assert_eq!(cached, (target, mode) == (1 << 20, RcuWalk), "f{i} in {} at {target}", mode.name());
            }
            let err = |r: Result<crate::file::File>| r.err().map_or(0, |e| errno_of(&e)).to_string().into_bytes();
            let read = OpenOptions::new().read(true).clone();
            let mut nofollow = read.clone();
            nofollow.no_follow(true);
            got.extend([
                v.read("/d/link").unwrap(),
                err(v.open("/d/link", &nofollow)),
                err(v.open("/d/f1/", &read)),
                err(v.open("/d/sub", &read)),
                err(v.open("/d/missing", &read)),
                err(alice.open("/d/secret", &read)),
                err(alice.open("/d/f2", OpenOptions::new().write(true))),
            ]);
            drop(d);
            v.check_invariants().unwrap();
            answers.push(got);
        }
        for a in &answers[1..] {
            assert_eq!(&answers[0], a, "with dentries / without");
        }
        let k = n.div_ceil(7);
        assert_eq!((&answers[0][k][..], &answers[0][k + 1][..]), (&b"55"[..], &b"0"[..]));
    }
}
