//! `rename` and `renameat2` (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`).

use std::path::Path;

use super::{bytes, Entry, Start, Vfs};
use crate::cred::MAY_WRITE;
use crate::dcache::name_hash;
use crate::error::{fail, Result, EACCES, EBUSY, EEXIST, EINVAL, ENOENT, ENOTDIR, ENOTEMPTY, EXDEV};
use crate::fs::{FileType, RenameFlags};
use crate::namei::{check_path, Last};

impl Vfs {
    // ---- rename ----

    /// `rename(from, to)`.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        self.rename_from(Start::Cwd, bytes(from.as_ref()), Start::Cwd, bytes(to.as_ref()), RenameFlags::NONE)
    }

    /// `renameat2(from, to, flags)` relative to the working directory.
    pub fn rename_with(&self, from: impl AsRef<Path>, to: impl AsRef<Path>, flags: RenameFlags) -> Result<()> {
        self.rename_from(Start::Cwd, bytes(from.as_ref()), Start::Cwd, bytes(to.as_ref()), flags)
    }

    /// `renameat2`.
    pub fn rename_at(
        &self,
        from_dir: &Entry,
        from: impl AsRef<Path>,
        to_dir: &Entry,
        to: impl AsRef<Path>,
        flags: RenameFlags,
    ) -> Result<()> {
        self.rename_from(Start::At(from_dir), bytes(from.as_ref()), Start::At(to_dir), bytes(to.as_ref()), flags)
    }

    fn rename_from(&self, s1: Start, from: &[u8], s2: Start, to: &[u8], flags: RenameFlags) -> Result<()> {
        self.retry_estale(|| self.rename_once(s1, from, s2, to, flags))
    }

    fn rename_once(&self, s1: Start, from: &[u8], s2: Start, to: &[u8], flags: RenameFlags) -> Result<()> {
        if flags.noreplace && flags.exchange {
            return fail(EINVAL);
        }
        check_path(from)?;
        check_path(to)?;
        let _g = self.state.global();
        let dc = self.dc();
        // One read section for the whole update (`Dcache::hold_update`).
        let _rcu = dc.hold_update();
        let (w1, op) = self.begin_parent(s1, from)?;
        let (w2, np) = self.begin_parent(s2, to)?;
        if !std::ptr::eq(w1.mnt(), w2.mnt()) {
            return fail(EXDEV);
        }
        let Last::Normal(old_name) = op.last else {
            return fail(EBUSY);
        };
        let Last::Normal(new_name) = np.last else {
            return fail(if flags.noreplace { EEXIST } else { EBUSY });
        };
        let cross = !std::ptr::eq(op.dir.ptr(), np.dir.ptr());
        let _rm = cross.then(|| dc.rename_mutex.lock());
        let _locks = dc.names.lock2(name_hash(op.dir.ptr(), old_name), name_hash(np.dir.ptr(), new_name));
        let src = dc.lookup_locked(&op.dir, old_name, _rm.as_ref())?;
        let Some(si) = src.inode() else {
            return fail(ENOENT);
        };
        let dst = dc.lookup_locked(&np.dir, new_name, _rm.as_ref())?;
        let di = dst.inode();
        if flags.exchange && di.is_none() {
            return fail(ENOENT);
        }
        if flags.noreplace && di.is_some() {
            return fail(EEXIST);
        }
        let src_dir = si.kind == FileType::Dir;
        let dst_dir = di.is_some_and(|i| i.kind == FileType::Dir);
        if flags.exchange && !dst_dir && np.trailing {
            return fail(ENOTDIR);
        }
        if !src_dir && (op.trailing || (np.trailing && !flags.exchange)) {
            return fail(ENOTDIR);
        }
        if dc.is_ancestor(&src, &np.dir) {
            return fail(EINVAL);
        }
        if di.is_some() && dc.is_ancestor(&dst, &op.dir) {
            return fail(if flags.exchange { EINVAL } else { ENOTEMPTY });
        }
        if di.is_some_and(|i| std::ptr::eq(i, si)) {
            return Ok(());
        }
        self.may_delete(&op.dir, &src, src_dir)?;
        if di.is_some() {
            self.may_delete(&np.dir, &dst, if flags.exchange { dst_dir } else { src_dir })?;
        } else {
            self.may_create(&np.dir)?;
        }
        if cross {
            // Moving a directory rewrites its "..": write permission on it.
            let moved = [(Some(si), src_dir), (di, flags.exchange && dst_dir)];
            for (i, is_dir) in moved {
                if let (Some(i), true) = (i, is_dir) {
                    if !self.cred.may(&i.access_attr(), MAY_WRITE) {
                        return fail(EACCES);
                    }
                }
            }
        }
        if src.is_root() || dst.is_root() || src.is_mountpoint() || dst.is_mountpoint() {
            return fail(EBUSY);
        }
        let fs = op.dir.dir_sb().fs.as_ref();
        let (odi, ndi) = (op.dir.inode().expect("dir"), np.dir.inode().expect("dir"));
        fs.rename(odi.ino, old_name, ndi.ino, new_name, flags)?;
        for i in [Some(odi), Some(ndi), Some(si), di].into_iter().flatten() {
            i.mark_stale();
        }
        dc.d_move(&src, &np.dir, new_name, &dst, flags.exchange);
        Ok(())
    }
}
