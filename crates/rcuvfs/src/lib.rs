#![deny(unsafe_op_in_unsafe_fn)]
// Under loom only the lock-free core is built; the API above it is unused.
#![cfg_attr(loom, allow(dead_code))]
// Under loom a waiter parks without spinning (`SPIN_LIMIT` is 0 there).
#![cfg_attr(loom, allow(clippy::absurd_extreme_comparisons))]
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

pub mod counters;
pub mod cred;
pub mod dcache;
pub mod error;
pub mod filemap;
pub mod fs;
mod hash;
pub(crate) mod inode;
pub mod modes;
pub(crate) mod mount;
pub mod namei;
pub mod time;
#[cfg(not(loom))]
pub mod vfs;
/// [`File`] and [`OpenOptions`] (at `vfs::file`; this path is kept).
#[cfg(not(loom))]
pub use vfs::file;

#[cfg(not(loom))]
pub use {
    cred::Cred,
    file::{File, OpenOptions},
    fs::{FileSystem, FileType, RenameFlags, SetAttr, SetTime, XattrSet},
    modes::{AtimePolicy, CacheMode, Layout, ListMode, RefMode},
    vfs::{DirEntry, DirEntryPlus, Entry, Metadata, Permissions, ReadDir, Stats, TreeWalk, Vfs, VfsBuilder, WalkEntry},
};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
