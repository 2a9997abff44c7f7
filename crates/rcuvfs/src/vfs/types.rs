//! The public value types: [`Metadata`], [`Permissions`], [`Stats`].

use crate::error::Result;
use crate::fs::{Attr, FileType, Ino, Timespec};

/// Permission bits, as `std::fs::Permissions` (which cannot be built here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permissions(u32);

impl Permissions {
    pub fn from_mode(mode: u32) -> Permissions {
        Permissions(mode & 0o7777)
    }
    pub fn mode(&self) -> u32 {
        self.0
    }
    pub fn readonly(&self) -> bool {
        self.0 & 0o222 == 0
    }
}

/// The attributes of a file, as `std::fs::Metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata(pub Attr);

impl Metadata {
    pub fn file_type(&self) -> FileType {
        self.0.kind
    }
    pub fn is_dir(&self) -> bool {
        self.0.kind == FileType::Dir
    }
    pub fn is_file(&self) -> bool {
        self.0.kind == FileType::File
    }
    pub fn is_symlink(&self) -> bool {
        self.0.kind == FileType::Symlink
    }
    pub fn len(&self) -> u64 {
        self.0.size
    }
    pub fn is_empty(&self) -> bool {
        self.0.size == 0
    }
    pub fn permissions(&self) -> Permissions {
        Permissions(self.0.perm)
    }
    /// `st_mode`: type and permission bits.
    pub fn mode(&self) -> u32 {
        self.0.mode()
    }
    pub fn ino(&self) -> Ino {
        self.0.ino
    }
    pub fn nlink(&self) -> u32 {
        self.0.nlink
    }
    pub fn uid(&self) -> u32 {
        self.0.uid
    }
    pub fn gid(&self) -> u32 {
        self.0.gid
    }
    pub fn blocks(&self) -> u64 {
        self.0.blocks
    }
    pub fn rdev(&self) -> u64 {
        self.0.rdev
    }
    pub fn modified(&self) -> Result<std::time::SystemTime> {
        Ok(self.0.mtime.to_system_time())
    }
    pub fn accessed(&self) -> Result<std::time::SystemTime> {
        Ok(self.0.atime.to_system_time())
    }
    /// The status-change time (ctime).
    pub fn changed(&self) -> Timespec {
        self.0.ctime
    }
    pub fn attr(&self) -> &Attr {
        &self.0
    }
}

/// Live-object counts of one `Vfs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Dentries cached, negative ones included.
    pub dentries: i64,
    pub negative_dentries: i64,
    /// Misses cached without a dentry: names a directory's set of absent
    /// names holds (what a lookup's miss leaves outside complete
    /// directories; an update's miss still makes a negative dentry).
    pub absent_names: i64,
    /// In-core inodes (held by dentries or open files).
    pub inodes: i64,
    /// Mounts besides the root: attached, or detached and still in use.
    pub mounts: i64,
}
