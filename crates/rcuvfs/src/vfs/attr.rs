//! Attributes: stat (RCU-walk), chmod, chown, utimens, truncate with
//! `setattr_prepare`'s checks; and readlink.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::{bytes, Entry, Metadata, Permissions, Start, Vfs};
use crate::cred::MAY_WRITE;
use crate::dcache::DRef;
use crate::error::{errno_of, fail, Result, EACCES, EINVAL, EISDIR, ENOENT, ENOTDIR, EPERM};
use crate::fs::{Attr, FileType, SetAttr, SetTime};
use crate::inode::Inode;
use crate::namei::{check_path, RcuWalk, Unlazied};

impl Vfs {
    // ---- attributes ----

    /// `stat`, following symlinks.
    #[inline]
    pub fn metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        self.metadata_from(Start::Cwd, bytes(path.as_ref()), true)
    }

    /// `lstat`.
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        self.metadata_from(Start::Cwd, bytes(path.as_ref()), false)
    }

    /// `fstatat`.
    pub fn metadata_at(&self, dir: &Entry, path: impl AsRef<Path>, follow: bool) -> Result<Metadata> {
        self.metadata_from(Start::At(dir), bytes(path.as_ref()), follow)
    }

    /// The stat of a path: RCU-walk and a read of the attributes under the
    /// inode's sequence count; REF-walk when that cannot finish.
    #[inline]
    fn metadata_from(&self, start: Start, path: &[u8], follow: bool) -> Result<Metadata> {
        check_path(path)?;
        let mode = self.state.mode;
        let mut from = None;
        if mode.tries_rcu_walk() {
            if let Some(r) = self.stat_rcu(start, path, follow, mode.stat_pins_final(), &mut from) {
                return r.map(Metadata);
            }
        }
        let _g = self.state.global();
        // REF-walk: at a name not cached, from the directory the RCU walk
        // reached, which it pinned (nothing above it is touched); else from
        // the start.
        let (mut w, s, rest) = match from {
            Some(x) => x,
            None => {
                let (w, s) = self.begin(start, path)?;
                (w, s, path)
            }
        };
        let d = self.dc().walk(&mut w, s, rest, follow)?;
        let attr = d.inode().expect("positive").attr();
        Ok(Metadata(attr))
    }

    /// `None`: fall back to REF-walk, from the place in `from` if the walk
    /// stopped at a name not cached, else from the start.
    #[inline]
    fn stat_rcu<'a, 'p>(
        &'a self,
        start: Start<'a>,
        path: &'p [u8],
        follow: bool,
        pin: bool,
        from: &mut Option<Unlazied<'a, 'p>>,
    ) -> Option<Result<Attr>> {
        let dc = self.dc();
        let (m, s) = match self.start_place(start) {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        // No update holds a section around a stat.
        let guard = dc.rcu.read_lock_unheld();
        let sseq = s.seq.read_begin()?;
        let mut w = RcuWalk::new(&self.cred);
        let Some(r) = dc.walk_rcu(&guard, &mut w, m, s, sseq, path, follow) else {
            // A last name the dcache does not hold but a bound memfs does:
            // its inode's attributes, with no dentry made (unless the mode
            // pins the final dentry).
            if !pin {
                if let Some(a) = dc.stat_found(&guard, &w) {
                    return Some(Ok(a));
                }
            }
            *from = dc.unlazy(&guard, &w, path);
            return None;
        };
        let (m, d, seq) = match r {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        if pin {
            // The mount first (none for the root mount): a dentry reference
            // must not outlive its filesystem's last mount.
            let _m = dc.mnt_get_rcu(m)?;
            // `rcuwalk`: legitimize the final dentry with a reference
            // (`lockref_get_not_dead`) and drop it after the read, as
            // Linux's stat does.
            if !d.lockref().get_not_dead() {
                return None;
            }
            // SAFETY: we just took this reference.
            let r = unsafe { DRef::adopt(dc, d) };
            if d.seq.read_retry(seq) {
                return None;
            }
            return Some(Ok(r.inode()?.attr()));
        }
        let attr = d.inode()?.attr();
        if d.seq.read_retry(seq) {
            return None;
        }
        // Second chance for the LRU: a store only if the bit is clear.
        crate::dcache::mark_referenced(d);
        Some(Ok(attr))
    }

    /// Does `path` exist (following symlinks)? Errors other than ENOENT
    /// and ENOTDIR are returned.
    pub fn try_exists(&self, path: impl AsRef<Path>) -> Result<bool> {
        match self.metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if matches!(errno_of(&e), ENOENT | ENOTDIR) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `chmod`.
    pub fn set_permissions(&self, path: impl AsRef<Path>, perm: Permissions) -> Result<()> {
        let set = SetAttr { perm: Some(perm.mode()), ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// `chown` (following symlinks); `None` leaves that id unchanged.
    pub fn chown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let set = SetAttr { uid, gid, ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// `lchown`.
    pub fn lchown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let set = SetAttr { uid, gid, ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), false, &set).map(drop)
    }

    /// `utimensat`: `None` leaves a time unchanged.
    pub fn set_times(&self, path: impl AsRef<Path>, atime: Option<SetTime>, mtime: Option<SetTime>) -> Result<()> {
        let set = SetAttr { atime, mtime, ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// `truncate`.
    pub fn truncate(&self, path: impl AsRef<Path>, size: u64) -> Result<()> {
        let set = SetAttr { size: Some(size), ..SetAttr::default() };
        self.setattr_from(Start::Cwd, bytes(path.as_ref()), true, &set).map(drop)
    }

    /// Changes the attributes of the object behind `entry` with every POSIX
    /// check (FUSE's setattr): chmod and chown rules, utimens rules, and
    /// write permission for a size change.
    pub fn set_attr(&self, entry: &Entry, set: &SetAttr) -> Result<Metadata> {
        entry.check_same_vfs(&self.state)?;
        let _g = self.state.global();
        let _rcu = self.dc().hold_update();
        self.setattr_checked(entry.inode(), set).map(Metadata)
    }

    fn setattr_from(&self, start: Start, path: &[u8], follow: bool, set: &SetAttr) -> Result<Attr> {
        check_path(path)?;
        let _g = self.state.global();
        // One read section for the whole change (`Dcache::hold_update`).
        let _rcu = self.dc().hold_update();
        // RCU-walk, pinning only the object (as `open` does): nothing is
        // stored on the directories on the way.
        let (_w, d) = self.begin_walk(start, path, follow)?;
        self.setattr_checked(d.inode().expect("positive"), set)
    }

    /// `notify_change` with `setattr_prepare`'s checks.
    fn setattr_checked(&self, inode: &Inode, set: &SetAttr) -> Result<Attr> {
        let fs = inode.fs();
        let cred = &*self.cred;
        let attr = inode.attr();
        let mut set = set.clone();
        if set.size.is_some() {
            if attr.kind == FileType::Dir {
                return fail(EISDIR);
            }
            if attr.kind != FileType::File {
                return fail(EINVAL);
            }
            if !cred.may(&attr, MAY_WRITE) {
                return fail(EACCES);
            }
            if !cred.is_root() && set.perm.is_none() {
                super::file::kill_priv(inode, cred.in_group(attr.gid))?;
            }
        }
        if let Some(uid) = set.uid {
            if !cred.is_root() && (uid != attr.uid || cred.uid != attr.uid) {
                return fail(EPERM);
            }
        }
        if let Some(gid) = set.gid {
            if !cred.is_root() && (cred.uid != attr.uid || !cred.in_group(gid)) {
                return fail(EPERM);
            }
        }
        if let Some(mut perm) = set.perm {
            // Only clearing set-user-ID or set-group-ID, by whoever may write
            // the file: what Linux's killpriv does before a write by a caller
            // without CAP_FSETID, and what the kernel sends over FUSE as that
            // writer (xfstests generic/683: the write answered EPERM).
            let set_id = libc::S_ISUID | libc::S_ISGID;
            let kill = perm != attr.perm
                && perm & !set_id == attr.perm & !set_id
                && perm & !attr.perm == 0
                && attr.kind == FileType::File
                && cred.may(&attr, MAY_WRITE);
            if !cred.owns(&attr) && !kill {
                return fail(EPERM);
            }
            let gid = set.gid.unwrap_or(attr.gid);
            if !cred.is_root() && !cred.in_group(gid) {
                perm &= !libc::S_ISGID;
            }
            set.perm = Some(perm);
        }
        match (set.atime, set.mtime) {
            (None, None) => {}
            (a, m) if a.unwrap_or(SetTime::Now) == SetTime::Now && m.unwrap_or(SetTime::Now) == SetTime::Now => {
                if !cred.owns(&attr) && !cred.may(&attr, MAY_WRITE) {
                    return fail(EACCES);
                }
            }
            _ => {
                if !cred.owns(&attr) {
                    return fail(EPERM);
                }
            }
        }
        if (set.uid.is_some() || set.gid.is_some()) && attr.kind != FileType::Dir && set.perm.is_none() {
            // chown clears set-user-id, and set-group-id when group-executable.
            let mut perm = attr.perm & !libc::S_ISUID;
            if perm & 0o010 != 0 {
                perm &= !libc::S_ISGID;
            }
            if perm != attr.perm {
                set.perm = Some(perm);
            }
        }
        let since = inode.attr_version();
        let new = fs.setattr(inode.ino, &set)?;
        inode.set_attr_after(&new, since);
        Ok(new)
    }

    // ---- reading names ----

    /// `readlink`.
    pub fn read_link(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        self.read_link_from(Start::Cwd, bytes(path.as_ref()))
    }

    /// `readlinkat`.
    pub fn read_link_at(&self, dir: &Entry, path: impl AsRef<Path>) -> Result<PathBuf> {
        self.read_link_from(Start::At(dir), bytes(path.as_ref()))
    }

    fn read_link_from(&self, start: Start, path: &[u8]) -> Result<PathBuf> {
        check_path(path)?;
        let _g = self.state.global();
        let (_w, d) = self.begin_walk(start, path, false)?;
        link_target(d.inode().expect("positive"))
    }

    /// `readlinkat(fd, "")` on a symlink handle (FUSE's readlink).
    pub fn read_link_entry(&self, entry: &Entry) -> Result<PathBuf> {
        entry.check_same_vfs(&self.state)?;
        link_target(entry.inode())
    }
}

/// A symlink's target: cached in the inode, else the filesystem's
/// `readlink`; EINVAL if `inode` is not a symlink.
fn link_target(inode: &Inode) -> Result<PathBuf> {
    if inode.kind != FileType::Symlink {
        return fail(EINVAL);
    }
    let t = match inode.link() {
        Some(t) => t.to_vec(),
        None => inode.fs().readlink(inode.ino)?,
    };
    Ok(PathBuf::from(OsString::from_vec(t)))
}
