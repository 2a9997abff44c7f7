//! Credentials and the permission checks of `generic_permission`.

use crate::fs::{Attr, FileType};

pub const MAY_EXEC: u32 = 1;
pub const MAY_WRITE: u32 = 2;
pub const MAY_READ: u32 = 4;

/// Who performs an operation: a uid, a primary gid and supplementary groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred { uid: 0, gid: 0, groups: Vec::new() }
    }

    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred { uid, gid, groups: groups.to_vec() }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// May this caller access `attr` for `mask` (`MAY_*` bits)? Root may do
    /// anything except execute a non-directory with no execute bit at all.
    pub fn may(&self, attr: &Attr, mask: u32) -> bool {
        if self.is_root() {
            return mask & MAY_EXEC == 0 || attr.kind == FileType::Dir || attr.perm & 0o111 != 0;
        }
        let bits = if self.uid == attr.uid {
            attr.perm >> 6
        } else if self.in_group(attr.gid) {
            attr.perm >> 3
        } else {
            attr.perm
        } & 7;
        bits & mask == mask
    }

    /// Owner or root (`inode_owner_or_capable`).
    pub fn owns(&self, attr: &Attr) -> bool {
        self.is_root() || self.uid == attr.uid
    }

    /// The sticky-bit rule: in a sticky directory only the owner of the
    /// entry, the owner of the directory, or root may remove or rename it.
    pub fn sticky_blocks(&self, dir: &Attr, victim: &Attr) -> bool {
        dir.perm & libc::S_ISVTX != 0 && !self.is_root() && self.uid != dir.uid && self.uid != victim.uid
    }
}
