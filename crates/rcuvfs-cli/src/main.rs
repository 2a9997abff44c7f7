//! `rcuvfs`: the command-line front end.
//!
//! `rcuvfs bench` measures the library against the host kernel: the stat
//! workloads in each reference mode (global, lockref, rcuwalk, norefs) and
//! the `host` peer; the lab adds the other workloads to the same registry.
//! `rcuvfs mount` serves the library to real programs over FUSE.
//! `rcuvfs etcd` runs a local etcd cluster for the etcd backend.

mod bench;
mod cluster;
mod fuse;

/// mimalloc, not glibc's malloc: an update frees through RCU, on whichever
/// thread ends the grace period, and glibc takes the allocating arena's
/// lock for such a cross-thread free (a create on one core then waits for
/// a free on another, which no lock of ours causes). The library itself
/// leaves the allocator to the program that embeds it.
///
/// mimalloc 2 (the crate's `v2`), not 3: version 3 serves a 64-byte-aligned
/// allocation whose size is not a power of two (the 192-byte in-core
/// inode) from a block of size + alignment - 1 unless the next free block
/// happens to be aligned, so most inodes took 256-byte blocks. Measured
/// (`bench files --files 1M --modes norefs`, 3 runs each, alternating, this
/// 2-vCPU VM): 539 -> 472 bytes per file, creates no slower (1,736-2,948
/// -> 1,654-1,749 ns), stats and unlinks the same.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "rcuvfs", version, about = "A userspace VFS with the Linux dcache's scalability design")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the lab's workloads and print ops/s per mode and thread count.
    Bench(bench::BenchArgs),
    /// Serve an rcuvfs filesystem over FUSE at MOUNTPOINT until unmounted,
    /// SIGINT or SIGTERM.
    Mount(fuse::MountArgs),
    /// Run a local etcd cluster (for `--backend etcd:...`) until SIGINT or
    /// SIGTERM; prints the backend argument that reaches it.
    Etcd(cluster::EtcdArgs),
}

/// mimalloc's `purge_delay` option (its enum's position in mimalloc 2's
/// `mimalloc.h`; the crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps a freed page of small objects before handing it
/// back to the system (`MADV_DONTNEED`), in milliseconds: 1,000, not its 10.
/// With more threads than cores a thread's pages sit unused for longer
/// than 10 ms between its time slices (the objects it allocated come back
/// a grace period late, freed by other threads), so they were purged and
/// faulted in again: 16 threads of `bench short` on 2 cores made 100,000
/// page faults and 6,500 `madvise` calls in 2 seconds, and the kernel's
/// page zeroing took a tenth of the run. File data does not live there
/// (`filemap::pool` returns it on its own terms). For `bench` only:
/// mimalloc purges when it is called, so a page whose delay ends while the
/// process is idle stays resident until the next allocation or free, and
/// a mount server that deleted 20,000 small files kept 53.5 MiB with the
/// 1 s delay against 35 MiB with mimalloc's own (the pool's 16 MiB and
/// the start's 19 MiB). The server runs two workers on two cores: no
/// oversubscription to pay for. `MIMALLOC_PURGE_DELAY` in the environment
/// still wins.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Bench(args) => {
            if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
                // SAFETY: sets an option of the allocator this binary
                // links; any value is valid for this option, and setting it
                // at any time is allowed (mimalloc reads it at each purge).
                unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
            }
            bench::run(args)
        }
        Cmd::Mount(args) => fuse::run(args),
        Cmd::Etcd(args) => cluster::run(args),
    };
    if let Err(e) = result {
        eprintln!("rcuvfs: {e}");
        std::process::exit(1);
    }
}
