//! `rcuvfs etcd`: a local etcd cluster for trying the etcd backend on one
//! machine. Starts N members on free loopback ports (Debian's `etcd`
//! binary, or `RCUVFS_ETCD`), prints the `--backend` argument that reaches
//! them, and runs until SIGINT or SIGTERM, which stop the members and
//! remove their data.

use clap::Args;

#[derive(Args)]
pub struct EtcdArgs {
    /// Members of the cluster (1, or 3 to survive one member's death).
    #[arg(long, default_value_t = 1)]
    members: usize,
    /// The key prefix to print in the backend argument.
    #[arg(long, default_value = "rcuvfs")]
    prefix: String,
}

pub fn run(args: EtcdArgs) -> std::io::Result<()> {
    // Block the signals before any thread starts, then wait for one.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the calls only read and write it
    // and this thread's mask.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let cluster = rcuvfs::fs::etcd::LocalCluster::start(args.members)?;
    println!("--backend etcd:{}", cluster.spec(&args.prefix));
    eprintln!(
        "rcuvfs: {} etcd member(s) running, data in {}; Ctrl-C stops them",
        args.members,
        cluster.dir().display()
    );
    let mut sig = 0;
    // SAFETY: as above; sigwait writes the signal number into `sig`.
    unsafe { libc::sigwait(&set, &mut sig) };
    drop(cluster);
    Ok(())
}
