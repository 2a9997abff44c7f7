#![deny(unsafe_op_in_unsafe_fn)]
//! rcuvfs: a userspace VFS core built on the scalability design of the Linux
//! dentry cache.
//!
//! ```
//! use rcuvfs::{Vfs, OpenOptions};
//! use std::io::Write;
//!
//! let vfs = Vfs::new();
//! vfs.create_dir_all("/src/lib")?;
//! vfs.write("/src/lib/a.rs", b"fn main() {}")?;
//! assert_eq!(vfs.metadata("/src/lib/a.rs")?.len(), 12);
//! let mut f = vfs.open("/src/log", OpenOptions::new().append(true).create(true))?;
//! f.write_all(b"built\n")?;
//! vfs.rename("/src/lib", "/src/core")?;
//! assert_eq!(vfs.read("/src/core/a.rs")?, b"fn main() {}");
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod sync;

#[cfg(not(loom))]
pub mod cred;
#[cfg(not(loom))]
pub mod dcache;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub mod file;
#[cfg(not(loom))]
pub mod fs;
#[cfg(not(loom))]
pub(crate) mod inode;
#[cfg(not(loom))]
pub mod modes;
#[cfg(not(loom))]
pub mod namei;
#[cfg(not(loom))]
pub mod time;
#[cfg(not(loom))]
pub mod vfs;

#[cfg(not(loom))]
pub use {
    cred::Cred,
    file::{File, OpenOptions},
    fs::{FileSystem, FileType, RenameFlags, SetAttr, SetTime},
    modes::RefMode,
    vfs::{DirEntry, Entry, Metadata, Permissions, ReadDir, Stats, Vfs, VfsBuilder},
};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
