//! Removing names: unlink, rmdir, `remove_dir_all`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::walk::{IfUncached, Uncached, Update};
use super::{bytes, Entry, Start, Vfs};
use crate::cred::{MAY_EXEC, MAY_WRITE};
use crate::dcache::Dentry;
use crate::error::{fail, Result, EACCES, EBUSY, EINVAL, EISDIR, ENOENT, ENOTDIR, ENOTEMPTY, EPERM};
use crate::fs::{Attr, FileType};
use crate::inode::Inode;
use crate::namei::{check_path, Last};

impl Vfs {
    // ---- removing names ----

    /// May this view remove the entry `victim` from `dir` (`may_delete`)?
    pub(super) fn may_delete(&self, dir: &Dentry, victim: &Dentry, want_dir: bool) -> Result<()> {
        let dir_attr = dir.inode().expect("positive directory").access_attr();
        let victim_attr = victim.inode().expect("positive").access_attr();
        self.may_delete_attrs(&dir_attr, &victim_attr, want_dir)
    }

    /// [`may_delete`](Self::may_delete) by the attributes of the directory
    /// and of the victim.
    fn may_delete_attrs(&self, dir_attr: &Attr, victim_attr: &Attr, want_dir: bool) -> Result<()> {
        if !self.cred.may(dir_attr, MAY_WRITE | MAY_EXEC) {
            return fail(EACCES);
        }
        if self.cred.sticky_blocks(dir_attr, victim_attr) {
            return fail(EPERM);
        }
        match (want_dir, victim_attr.kind == FileType::Dir) {
            (true, false) => fail(ENOTDIR),
            (false, true) => fail(EISDIR),
            _ => Ok(()),
        }
    }

    /// `unlink`.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> Result<()> {
        self.unlink_from(Start::Cwd, bytes(path.as_ref()))
    }

    /// `unlinkat(dir, path, 0)`.
    pub fn remove_file_at(&self, dir: &Entry, path: impl AsRef<Path>) -> Result<()> {
        self.unlink_from(Start::At(dir), bytes(path.as_ref()))
    }

    fn unlink_from(&self, start: Start, path: &[u8]) -> Result<()> {
        self.retry_estale(|| self.unlink_from_once(start, path))
    }

    fn unlink_from_once(&self, start: Start, path: &[u8]) -> Result<()> {
        check_path(path)?;
        let _g = self.state.global();
        let dc = self.dc();
        // One read section for the whole update (`Dcache::hold_update`).
        let _rcu = dc.hold_update();
        let n = match self.begin_update(start, path, IfUncached::Remove)? {
            Update::Named(n) => n,
            Update::Uncached(u) => return self.remove_uncached(u, false),
            Update::Other(_) => return fail(EISDIR),
        };
        let (dir, victim) = (n.dir(), &n.child);
        let dir_inode = dir.inode().expect("positive directory");
        let Some(vi) = victim.inode() else {
            return fail(ENOENT);
        };
        if n.trailing {
            return fail(if vi.kind == FileType::Dir { EISDIR } else { ENOTDIR });
        }
        self.may_delete(dir, victim, false)?;
        let sb = dir_inode.sb();
        let bound = sb.fs.as_memfs().and_then(|m| m.unlink_bound(sb, dir_inode, n.name, vi));
        match bound {
            Some(r) => r?,
            None => sb.fs.unlink(dir_inode.ino, n.name)?,
        }
        vi.mark_stale();
        dir_inode.mark_stale();
        dc.d_delete(victim);
        Ok(())
    }

    /// An unlink (or, `want_dir`, an rmdir) of a name the dcache has no
    /// dentry for, in a directory of the memfs bound to this Vfs (see
    /// [`Uncached`]): memfs finds the file, the checks of a removal with a
    /// dentry run on it under memfs's lock, in the same order (ENOENT, an
    /// unlink's trailing slash, then `may_delete`), and memfs removes it.
    /// No dentry is made, so there is none to kill; and with none, the
    /// name is no mount point and no cached name is under it.
    fn remove_uncached(&self, u: Uncached, want_dir: bool) -> Result<()> {
        let dir_inode = u.dir.inode().expect("positive directory");
        let sb = dir_inode.sb();
        let m = sb.fs.as_memfs().expect("a directory of the bound memfs");
        let dir_attr = dir_inode.access_attr();
        let check = |vi: &Inode| {
            if u.trailing && !want_dir {
                return fail(if vi.kind == FileType::Dir { EISDIR } else { ENOTDIR });
            }
            self.may_delete_attrs(&dir_attr, &vi.access_attr(), want_dir)
        };
        let done = if want_dir {
            m.rmdir_bound_checked(sb, dir_inode, u.name, check)
        } else {
            m.unlink_bound_checked(sb, dir_inode, u.name, check)
        };
        done.expect("bound for the superblock's life")
    }

    /// `rmdir`.
    pub fn remove_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.rmdir_from(Start::Cwd, bytes(path.as_ref()))
    }

    /// `unlinkat(dir, path, AT_REMOVEDIR)`.
    pub fn remove_dir_at(&self, dir: &Entry, path: impl AsRef<Path>) -> Result<()> {
        self.rmdir_from(Start::At(dir), bytes(path.as_ref()))
    }

    fn rmdir_from(&self, start: Start, path: &[u8]) -> Result<()> {
        self.retry_estale(|| self.rmdir_from_once(start, path))
    }

    fn rmdir_from_once(&self, start: Start, path: &[u8]) -> Result<()> {
        check_path(path)?;
        let _g = self.state.global();
        let dc = self.dc();
        // One read section for the whole update (`Dcache::hold_update`).
        let _rcu = dc.hold_update();
        // The victim's name is locked: nothing is mounted on it meanwhile
        // (`mount_on` takes it too). Names created in the victim meanwhile
        // are the filesystem's to refuse: its rmdir checks emptiness and
        // marks the directory removed in one step.
        let n = match self.begin_update(start, path, IfUncached::Remove)? {
            Update::Named(n) => n,
            Update::Uncached(u) => return self.remove_uncached(u, true),
            Update::Other(Last::Dot) => return fail(EINVAL),
            Update::Other(Last::DotDot) => return fail(ENOTEMPTY),
            Update::Other(_) => return fail(EBUSY),
        };
        let (name, dir, victim) = (n.name, n.dir(), &n.child);
        let dir_inode = dir.inode().expect("positive directory");
        let Some(vi) = victim.inode() else {
            return fail(ENOENT);
        };
        self.may_delete(dir, victim, true)?;
        if victim.is_root() || victim.is_mountpoint() {
            return fail(EBUSY);
        }
        let fs = dir_inode.fs();
        fs.rmdir(dir_inode.ino, name)?;
        vi.mark_stale();
        dir_inode.mark_stale();
        // Its cached misses go with it (`shrink_dcache_parent`).
        dc.shrink_tree(victim);
        dc.d_delete(victim);
        Ok(())
    }

    /// Removes `path` and everything under it; does not follow symlinks.
    /// May stop partway, leaving what it did not yet remove (as
    /// `std::fs::remove_dir_all`).
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let m = self.symlink_metadata(path)?;
        if !m.is_dir() {
            return fail(ENOTDIR);
        }
        let dir = self.entry_nofollow(path)?;
        self.remove_tree_at(&dir)?;
        drop(dir);
        self.remove_dir(path)
    }

    fn remove_tree_at(&self, dir: &Entry) -> Result<()> {
        for e in self.read_dir_of(dir)? {
            let e = e?;
            let name = OsStr::from_bytes(e.name_bytes());
            if e.file_type()? == FileType::Dir {
                let sub = self.lookup_at(dir, name)?;
                self.remove_tree_at(&sub)?;
                drop(sub);
                self.remove_dir_at(dir, name)?;
            } else {
                self.remove_file_at(dir, name)?;
            }
        }
        Ok(())
    }
}
