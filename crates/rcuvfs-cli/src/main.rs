//! `rcuvfs`: the command-line front end.
//!
//! `rcuvfs bench` measures the library against the host kernel: the stat
//! workloads in each reference mode (global, lockref, rcuwalk, norefs) and
//! the `host` peer; the lab adds the other workloads to the same registry.
//! `rcuvfs mount` serves the library to real programs over FUSE.

mod bench;
mod fuse;

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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Bench(args) => bench::run(args),
        Cmd::Mount(args) => fuse::run(args),
    };
    if let Err(e) = result {
        eprintln!("rcuvfs: {e}");
        std::process::exit(1);
    }
}
