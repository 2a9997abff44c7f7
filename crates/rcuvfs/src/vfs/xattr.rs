//! Extended attributes: `getxattr`, `setxattr`, `listxattr`, `removexattr`.
//!
//! The VFS checks what Linux's `fs/xattr.c` and the capability module check,
//! so that every filesystem answers alike; the filesystem only stores:
//! - the name: 1 to 255 bytes (ERANGE), in a namespace: `user.`, `trusted.`
//!   or `security.` with something after the prefix (EINVAL); any other
//!   prefix, `system.` (POSIX ACLs) included, is EOPNOTSUPP;
//! - the value: at most 64 KiB (E2BIG);
//! - `trusted.`: root only (others: EPERM to change, ENODATA to read, and
//!   not listed);
//! - `security.`: anyone reads, root changes (EPERM), as with no security
//!   module loaded;
//! - `user.`: only on regular files and directories (others: EPERM to
//!   change, ENODATA to read); reading needs read permission and changing
//!   write permission (EACCES); in a sticky directory only its owner or
//!   root changes the directory's own (EPERM).
//!
//! The path forms follow a final symlink (`getxattr`); for `lgetxattr`, take
//! the link's own handle with [`Vfs::entry_nofollow`] and use the handle
//! forms, which are also what a server needs (`fgetxattr`).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::{Entry, Vfs};
use crate::cred::{MAY_READ, MAY_WRITE};
use crate::error::{fail, Result, E2BIG, EACCES, EINVAL, ENODATA, EOPNOTSUPP, EPERM, ERANGE};
use crate::fs::{Attr, FileType, XattrSet, XATTR_LIST_MAX, XATTR_NAME_MAX, XATTR_SIZE_MAX};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Namespace {
    User,
    Trusted,
    Security,
}

/// The namespace of a name, or the error Linux gives it.
fn namespace(name: &[u8]) -> Result<Namespace> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return fail(ERANGE);
    }
    if name.contains(&0) {
        return fail(EINVAL);
    }
    for (prefix, ns) in
        [(&b"user."[..], Namespace::User), (b"trusted.", Namespace::Trusted), (b"security.", Namespace::Security)]
    {
        if let Some(rest) = name.strip_prefix(prefix) {
            return if rest.is_empty() { fail(EINVAL) } else { Ok(ns) };
        }
    }
    fail(EOPNOTSUPP)
}

impl Vfs {
    /// `xattr_permission` for `mask` (`MAY_READ` or `MAY_WRITE`).
    fn xattr_permission(&self, ns: Namespace, attr: &Attr, mask: u32) -> Result<()> {
        let cred = &*self.cred;
        let write = mask & MAY_WRITE != 0;
        match ns {
            Namespace::Trusted if !cred.is_root() => fail(if write { EPERM } else { ENODATA }),
            Namespace::Trusted => Ok(()),
            Namespace::Security if write && !cred.is_root() => fail(EPERM),
            Namespace::Security => Ok(()),
            Namespace::User => {
                if attr.kind != FileType::File && attr.kind != FileType::Dir {
                    return fail(if write { EPERM } else { ENODATA });
                }
                if attr.kind == FileType::Dir && attr.perm & libc::S_ISVTX != 0 && write && !cred.owns(attr) {
                    return fail(EPERM);
                }
                if cred.may(attr, mask) {
                    Ok(())
                } else {
                    fail(EACCES)
                }
            }
        }
    }

    /// `getxattr`: the value of `name` on what `path` names (following a
    /// final symlink). ENODATA if it has none.
    pub fn get_xattr(&self, path: impl AsRef<Path>, name: impl AsRef<OsStr>) -> Result<Vec<u8>> {
        self.get_xattr_entry(&self.entry(path)?, name)
    }

    /// `setxattr`: sets `name` to `value`.
    pub fn set_xattr(
        &self,
        path: impl AsRef<Path>,
        name: impl AsRef<OsStr>,
        value: impl AsRef<[u8]>,
        how: XattrSet,
    ) -> Result<()> {
        self.set_xattr_entry(&self.entry(path)?, name, value, how)
    }

    /// `listxattr`: the names this view may see.
    pub fn list_xattr(&self, path: impl AsRef<Path>) -> Result<Vec<OsString>> {
        self.list_xattr_entry(&self.entry(path)?)
    }

    /// `removexattr`.
    pub fn remove_xattr(&self, path: impl AsRef<Path>, name: impl AsRef<OsStr>) -> Result<()> {
        self.remove_xattr_entry(&self.entry(path)?, name)
    }

    /// `fgetxattr` on a handle.
    pub fn get_xattr_entry(&self, entry: &Entry, name: impl AsRef<OsStr>) -> Result<Vec<u8>> {
        entry.check_same_vfs(&self.state)?;
        let name = name.as_ref().as_bytes();
        let ns = namespace(name)?;
        let inode = entry.inode();
        self.xattr_permission(ns, &inode.attr(), MAY_READ)?;
        inode.fs().getxattr(inode.ino, name)
    }

    /// `fsetxattr` on a handle.
    pub fn set_xattr_entry(
        &self,
        entry: &Entry,
        name: impl AsRef<OsStr>,
        value: impl AsRef<[u8]>,
        how: XattrSet,
    ) -> Result<()> {
        entry.check_same_vfs(&self.state)?;
        let (name, value) = (name.as_ref().as_bytes(), value.as_ref());
        let ns = namespace(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return fail(E2BIG);
        }
        let _g = self.state.global();
        let inode = entry.inode();
        self.xattr_permission(ns, &inode.attr(), MAY_WRITE)?;
        let fs = inode.fs();
        fs.setxattr(inode.ino, name, value, how)?;
        inode.refresh(fs);
        Ok(())
    }

    /// `flistxattr` on a handle: the names this view may see (`trusted.`
    /// only for root), in the filesystem's order. E2BIG if they do not fit
    /// in `XATTR_LIST_MAX` bytes.
    pub fn list_xattr_entry(&self, entry: &Entry) -> Result<Vec<OsString>> {
        entry.check_same_vfs(&self.state)?;
        let inode = entry.inode();
        let root = self.cred.is_root();
        let names: Vec<OsString> = inode
            .fs()
            .listxattr(inode.ino)?
            .into_iter()
            .filter(|n| match namespace(n) {
                Ok(Namespace::Trusted) => root,
                Ok(_) => true,
                Err(_) => false, // system.* and the like: not served
            })
            .map(OsString::from_vec)
            .collect();
        if names.iter().map(|n| n.len() + 1).sum::<usize>() > XATTR_LIST_MAX {
            return fail(E2BIG);
        }
        Ok(names)
    }

    /// `fremovexattr` on a handle.
    pub fn remove_xattr_entry(&self, entry: &Entry, name: impl AsRef<OsStr>) -> Result<()> {
        entry.check_same_vfs(&self.state)?;
        let name = name.as_ref().as_bytes();
        let ns = namespace(name)?;
        let _g = self.state.global();
        let inode = entry.inode();
        let attr = inode.attr();
        // A write drops a file's capabilities (Linux's killpriv), and over
        // FUSE the kernel removes them with the writer's credentials: who
        // may write a regular file may remove its security.capability
        // (xfstests generic/688: fallocate by a user answered EPERM).
        let killpriv = name == b"security.capability" && attr.kind == FileType::File && self.cred.may(&attr, MAY_WRITE);
        if !killpriv {
            self.xattr_permission(ns, &attr, MAY_WRITE)?;
        }
        let fs = inode.fs();
        fs.removexattr(inode.ino, name)?;
        inode.refresh(fs);
        Ok(())
    }
}
