#![deny(unsafe_op_in_unsafe_fn)]
//! rcuvfs: a userspace VFS core built on the scalability design of the Linux
//! dentry cache.

pub mod sync;

#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub mod fs;
#[cfg(not(loom))]
pub mod time;
