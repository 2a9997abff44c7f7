//! `rcuvfs mount`: serves a [`Vfs`] over FUSE (the fuser crate: its pure
//! Rust mount, several worker threads, each with its own cloned
//! `/dev/fuse` descriptor).
//!
//! The server sits on the library's handle level, as the kernel sits on its
//! own dcache:
//! - a FUSE node id is an inode number (the root's is swapped with FUSE's
//!   fixed 1), and the node table holds one [`Entry`] per node with the
//!   kernel's lookup count: every reply that creates a kernel dentry (lookup,
//!   create, mkdir, mknod, symlink, link, each readdirplus entry) counts
//!   one, and `forget` drops them; the entry handle goes at zero;
//! - an open file is a [`File`] in the handle table; directories need none;
//! - every request runs in a view with the caller's uid, gid and
//!   supplementary groups (read from `/proc/PID/status`, as libfuse's
//!   `fuse_req_getgroups` does) and umask 0, since the kernel has applied
//!   the caller's umask already; the library does every permission check
//!   (no `default_permissions`);
//! - entry and attribute timeouts are 1 s (`--cache-ttl`), or 0 with
//!   `--no-kernel-cache`, when every lookup reaches rcuvfs's own dcache; a
//!   passthrough backend's watcher drops changed names and attributes from
//!   the kernel's caches at once (`KernelNotify`);
//! - a passthrough backend's open files use the kernel's FUSE passthrough
//!   where it is offered: the kernel reads and writes the host file itself
//!   (one backing file per inode, registered while an open file uses it),
//!   and a regular file's attributes are read from the host at each
//!   getattr, since the kernel's writes bypass rcuvfs;
//! - extended attributes are the library's (`user.`, `trusted.`,
//!   `security.`; `system.` answers EOPNOTSUPP: no POSIX ACLs).
//!
//! The node and handle tables are sharded maps, so requests on different
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | the command's arguments ([`MountArgs`]) |
//! | `lifecycle.rs` | mounting, signals, readahead, unmounting |
//! | `nodes.rs` | the server's state: the node table (FUSE node ids to handles, with the kernel's lookup counts), the open-file table, backing files, and [`KernelNotify`](nodes::KernelNotify) |
//! | `ops.rs` | the FUSE operations, each on the library's handle level |

use std::path::PathBuf;

mod lifecycle;
mod nodes;
mod ops;
mod uring;

pub use lifecycle::run;

#[derive(clap::Args)]
pub struct MountArgs {
    /// Where to mount: an existing directory.
    mountpoint: PathBuf,
    /// Worker threads reading requests, each on its own cloned /dev/fuse
    /// descriptor (at most one per core for memfs, whose requests never
    /// block: more would only add context switches).
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// memfs: bytes of file data before ENOSPC.
    #[arg(long)]
    size: Option<u64>,
    /// memfs: inodes before ENOSPC.
    #[arg(long)]
    inodes: Option<u64>,
    /// Entry and attribute timeouts of 0, so that every lookup and stat
    /// reaches rcuvfs instead of the kernel's dcache.
    #[arg(long)]
    no_kernel_cache: bool,
    /// Entry and attribute timeouts, in seconds: how long the kernel trusts
    /// what it cached. A passthrough backend's watcher drops what changes
    /// on the host from the kernel's caches at once, whatever the timeout.
    #[arg(long, default_value_t = 1.0)]
    cache_ttl: f64,
    /// The mount's readahead, in KiB (its bdi's `read_ahead_kb`; 0 leaves
    /// the kernel's 128). The kernel proposes no more than 128 KiB at
    /// init, so sequential reads would arrive in 128 KiB requests; 1024
    /// makes them as large as a request may be (measured: 1.9-2.3 GB/s at
    /// 128, 2.9-3.4 GB/s at 1024, reading 1 GiB from memfs).
    #[arg(long, default_value_t = 1024)]
    read_ahead_kb: u32,
    /// What to serve: `memfs` (an empty in-memory filesystem),
    /// `passthrough:DIR` (a host directory, kept coherent with changes
    /// made there directly), or `etcd:HOST:PORT[,HOST:PORT...][/PREFIX]`
    /// (a tree in an etcd cluster, shared with every other client of it;
    /// PREFIX defaults to `rcuvfs`).
    #[arg(long, default_value = "memfs")]
    backend: String,
    /// The kernel's writeback cache: writes land in the kernel's page
    /// cache and reach rcuvfs in large batches (at fsync, close or under
    /// memory pressure), as on a local filesystem. Off by default: with it
    /// a write's errors (ENOSPC) show at fsync or close, not at write.
    #[arg(long)]
    writeback_cache: bool,
    /// passthrough: leave file reads and writes to the server instead of
    /// the kernel's FUSE passthrough (by default, where the kernel offers
    /// it, an open file's I/O goes straight to the host file).
    #[arg(long)]
    no_kernel_passthrough: bool,
    /// Dentries the cache holds itself to before the shrinker prunes
    /// (default: the library's, 1,048,576, or less for a backend with an
    /// inode budget).
    #[arg(long)]
    dcache_target: Option<usize>,
    /// The mount's source, as /proc/mounts and findmnt show it (default
    /// `rcuvfs`). A mount helper passes the device argument of `mount -t
    /// fuse.rcuvfs SOURCE DIR` here, so that two mounts can be told apart
    /// by their source, as xfstests does with TEST_DEV and SCRATCH_DEV.
    #[arg(long, default_value = "rcuvfs")]
    fsname: String,
    /// Mount options, comma-separated, as `mount -o` takes them: `ro`,
    /// `rw`, `nosuid`, `suid`, `nodev`, `dev`, `noexec`, `exec`, `sync`,
    /// `dirsync`, `async` (the kernel enforces them); `noatime`,
    /// `relatime` (the default), `strictatime` (when a read updates
    /// atime, applied by rcuvfs); `default_permissions` (the kernel checks
    /// permissions too; rcuvfs always does); `fsname=NAME` (as
    /// --fsname); `allow_other`, `subtype=...` (accepted: the mount always
    /// lets other users in, and names its type fuse.rcuvfs). Anything else
    /// is refused (EINVAL), not ignored.
    #[arg(short = 'o', long = "options", value_delimiter = ',')]
    options: Vec<String>,
    /// The mount's type as root mounts it: `fuse.rcuvfs` (the default:
    /// mount(8) hands `-o remount` to mount.fuse.rcuvfs) or `fuse` (what
    /// tools that expect a plain FUSE mount look for, such as xfstests'
    /// FSTYP=fuse; mount(8) then hands a remount to fuse3's mount.fuse).
    #[arg(long, default_value = "fuse.rcuvfs", value_parser = ["fuse.rcuvfs", "fuse"])]
    fstype: String,
    /// Serve requests over io_uring (Linux 6.14+, as root, with the fuse
    /// module's `enable_uring` parameter on): a thread per CPU answers the
    /// requests of callers on that CPU, with no cross-CPU wake-up per
    /// request. Not with the kernel's FUSE passthrough.
    #[arg(long)]
    io_uring: bool,
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 16)
}
