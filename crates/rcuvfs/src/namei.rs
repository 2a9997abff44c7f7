//! Path walk (Linux `fs/namei.c`, REF-walk under the global lock in this
//! version): name syntax, ".", "..", symlinks, and trailing slashes.
//!
//! Rules, as in Linux:
//! - an empty path is ENOENT; a path of `PATH_MAX` (4096) bytes or more, or a
//!   component over `NAME_MAX` (255), is ENAMETOOLONG; a NUL byte is EINVAL;
//! - searching a directory needs execute permission on it, checked before
//!   every component, the last one included;
//! - symlinks are followed in every component but the last, and in the last
//!   unless the caller asks not to (or a trailing slash forces it); more than
//!   [`MAX_SYMLINKS`] in one walk is ELOOP;
//! - ".." at the root stays at the root;
//! - a trailing slash requires the final object to be a directory.

use crate::cred::{Cred, MAY_EXEC};
use crate::dcache::{DentryId, Ns};
use crate::error::{fail, Result, EACCES, EINVAL, ELOOP, ENAMETOOLONG, ENOENT, ENOTDIR};
use crate::fs::{Attr, FileType};

pub const PATH_MAX: usize = 4096;
pub const NAME_MAX: usize = 255;
pub const MAX_SYMLINKS: u32 = 40;

/// Checks a path's syntax before any walk.
pub fn check_path(path: &[u8]) -> Result<()> {
    if path.is_empty() {
        return fail(ENOENT);
    }
    if path.len() >= PATH_MAX {
        return fail(ENAMETOOLONG);
    }
    if path.contains(&0) {
        return fail(EINVAL);
    }
    if path.split(|&b| b == b'/').any(|c| c.len() > NAME_MAX) {
        return fail(ENAMETOOLONG);
    }
    Ok(())
}

/// Checks a single name given to a handle-level call.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return fail(ENOENT);
    }
    if name.len() > NAME_MAX {
        return fail(ENAMETOOLONG);
    }
    if name.contains(&0) || name.contains(&b'/') {
        return fail(EINVAL);
    }
    Ok(())
}

/// The last component of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Last<'p> {
    Normal(&'p [u8]),
    Dot,
    DotDot,
    /// The path was "/" (or only slashes).
    Root,
}

/// A walk that stopped before the last component.
pub struct Parent<'p> {
    pub dir: DentryId,
    pub last: Last<'p>,
    /// The path ended in '/'.
    pub trailing: bool,
}

/// The state of one walk: the caller's credentials and the symlink budget.
pub struct Walk<'c> {
    pub cred: &'c Cred,
    pub links: u32,
}

impl<'c> Walk<'c> {
    pub fn new(cred: &'c Cred) -> Walk<'c> {
        Walk { cred, links: 0 }
    }
}

impl Ns<'_> {
    pub fn attr(&self, id: DentryId) -> Result<Attr> {
        self.fs.getattr(self.d(id).ino.expect("positive dentry"))
    }

    pub fn is_dir(&self, id: DentryId) -> bool {
        self.d(id).kind == Some(FileType::Dir)
    }

    /// Execute (search) permission on directory `dir`.
    pub fn may_exec(&self, w: &Walk, dir: DentryId) -> Result<()> {
        if w.cred.is_root() {
            return Ok(()); // root may search any directory
        }
        if w.cred.may(&self.attr(dir)?, MAY_EXEC) {
            Ok(())
        } else {
            fail(EACCES)
        }
    }

    /// Walks every component but the last, following symlinks, and checks
    /// that the last component's directory may be searched.
    pub fn walk_parent<'p>(
        &mut self,
        w: &mut Walk,
        start: DentryId,
        path: &'p [u8],
    ) -> Result<Parent<'p>> {
        let mut cur = if path.first() == Some(&b'/') {
            self.root()
        } else {
            start
        };
        let comps: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let Some((&last, inner)) = comps.split_last() else {
            return Ok(Parent {
                dir: cur,
                last: Last::Root,
                trailing: false,
            });
        };
        for &comp in inner {
            cur = self.step(w, cur, comp)?;
        }
        if !self.is_dir(cur) {
            return fail(ENOTDIR);
        }
        self.may_exec(w, cur)?;
        let last = match last {
            b"." => Last::Dot,
            b".." => Last::DotDot,
            name => Last::Normal(name),
        };
        Ok(Parent {
            dir: cur,
            last,
            trailing: path.last() == Some(&b'/'),
        })
    }

    /// One intermediate component: the result is a directory.
    fn step(&mut self, w: &mut Walk, dir: DentryId, comp: &[u8]) -> Result<DentryId> {
        if !self.is_dir(dir) {
            return fail(ENOTDIR);
        }
        self.may_exec(w, dir)?;
        let d = match comp {
            b"." => dir,
            b".." => self.parent(dir),
            name => {
                let d = self.lookup_positive(dir, name)?;
                if self.d(d).kind == Some(FileType::Symlink) {
                    self.follow_link(w, dir, d)?
                } else {
                    d
                }
            }
        };
        if !self.is_dir(d) {
            return fail(ENOTDIR);
        }
        Ok(d)
    }

    /// Looks `name` up in `dir`; ENOENT for a negative dentry.
    pub fn lookup_positive(&mut self, dir: DentryId, name: &[u8]) -> Result<DentryId> {
        let d = self.d_lookup(dir, name)?;
        if self.d(d).ino.is_none() {
            return fail(ENOENT);
        }
        Ok(d)
    }

    /// Resolves symlink `link` found in `dir`, following the target's last
    /// component too.
    pub fn follow_link(&mut self, w: &mut Walk, dir: DentryId, link: DentryId) -> Result<DentryId> {
        let target = self.link_target(w, link)?;
        self.walk(w, dir, &target, true)
    }

    /// Reads a symlink's target, counting it against the walk's budget.
    pub fn link_target(&mut self, w: &mut Walk, link: DentryId) -> Result<Vec<u8>> {
        w.links += 1;
        if w.links > MAX_SYMLINKS {
            return fail(ELOOP);
        }
        let target = self.fs.readlink(self.d(link).ino.expect("positive"))?;
        if target.is_empty() {
            return fail(ENOENT);
        }
        check_path(&target)?;
        Ok(target)
    }

    /// Walks a whole path to a positive dentry. `follow`: follow a symlink
    /// in the last component.
    pub fn walk(
        &mut self,
        w: &mut Walk,
        start: DentryId,
        path: &[u8],
        follow: bool,
    ) -> Result<DentryId> {
        let p = self.walk_parent(w, start, path)?;
        self.walk_last(w, &p, follow)
    }

    /// Resolves the last component of a parent walk.
    pub fn walk_last(&mut self, w: &mut Walk, p: &Parent, follow: bool) -> Result<DentryId> {
        match p.last {
            Last::Root | Last::Dot => Ok(p.dir),
            Last::DotDot => Ok(self.parent(p.dir)),
            Last::Normal(name) => {
                let mut d = self.lookup_positive(p.dir, name)?;
                if self.d(d).kind == Some(FileType::Symlink) && (follow || p.trailing) {
                    d = self.follow_link(w, p.dir, d)?;
                }
                if p.trailing && !self.is_dir(d) {
                    return fail(ENOTDIR);
                }
                Ok(d)
            }
        }
    }
}
