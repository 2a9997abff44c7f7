//! The server's life: mount, serve on worker threads, take SIGINT and
//! SIGTERM, unmount.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};
use rcuvfs::Vfs;

use super::nodes::{DataCache, KernelNotify, Server};
use super::MountArgs;

/// Mounts and serves until unmounted (`umount`, `fusermount3 -u`) or until
/// SIGINT or SIGTERM, which unmount first.
pub fn run(args: MountArgs) -> io::Result<()> {
    // SIGINT and SIGTERM are blocked in every thread (blocked first, so
    // that every thread started later inherits the mask: the workers, the
    // passthrough's watcher) and taken by one thread with sigwait, which
    // unmounts; the session then ends as it does on an external umount.
    let signals = block_signals();
    match std::fs::metadata(&args.mountpoint) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(io::Error::other(format!("mountpoint {}: not a directory", args.mountpoint.display()))),
        Err(e) => return Err(io::Error::other(format!("mountpoint {}: {e}", args.mountpoint.display()))),
    }
    let mut b = Vfs::builder().umask(0);
    let what = if args.backend == "memfs" {
        "memfs".to_string()
    } else if let Some(dir) = args.backend.strip_prefix("passthrough:") {
        let (d, m) = (std::fs::canonicalize(dir)?, std::fs::canonicalize(&args.mountpoint)?);
        if m.starts_with(&d) {
            return Err(io::Error::other(format!(
                "mountpoint {} is inside the served directory {}",
                m.display(),
                d.display()
            )));
        }
        let pt = rcuvfs::fs::passthrough::Passthrough::new(&d, Default::default())
            .map_err(|e| io::Error::new(e.kind(), format!("backend {}: {e}", d.display())))?;
        b = b.filesystem(std::sync::Arc::new(pt));
        format!("{} (passthrough)", d.display())
    } else if let Some(spec) = args.backend.strip_prefix("etcd:") {
        let o = rcuvfs::fs::etcd::EtcdOptions::parse(spec)?;
        let what = format!("etcd {} under {}", o.endpoints.join(","), o.prefix);
        let fs =
            rcuvfs::fs::etcd::Etcd::connect(o).map_err(|e| io::Error::new(e.kind(), format!("backend {spec}: {e}")))?;
        b = b.filesystem(std::sync::Arc::new(fs));
        what
    } else {
        return Err(io::Error::other(format!(
            "unknown backend {:?} (memfs, passthrough:DIR, etcd:ENDPOINTS[/PREFIX])",
            args.backend
        )));
    };
    if let Some(n) = args.size {
        b = b.max_bytes(n);
    }
    if let Some(n) = args.inodes {
        b = b.max_inodes(n);
    }
    if let Some(n) = args.dcache_target {
        b = b.dcache_target(n);
    }
    // Changes a backend reports (the passthrough's watcher) go to the
    // kernel too, so that its caches do not wait out their timeouts.
    let kernel = Arc::new(KernelNotify::default());
    b = b.observer(kernel.clone());
    let vfs = b.build()?;
    let _ = kernel.root_ino.set(vfs.root_entry().ino());
    let ttl = if args.no_kernel_cache {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(args.cache_ttl)
            .map_err(|e| io::Error::other(format!("--cache-ttl {}: {e}", args.cache_ttl)))?
    };
    // memfs changes only through this mount, so the kernel's cached data
    // of a file stays true across opens (keep_cache); a passthrough file
    // may change on the host, so its data is read again at each open.
    let data = DataCache {
        keep: args.backend == "memfs",
        writeback: args.writeback_cache,
        // Host files only; the kernel refuses it with the writeback cache.
        passthrough: args.backend.starts_with("passthrough:") && !args.no_kernel_passthrough && !args.writeback_cache,
    };
    let server = Server::new(vfs, ttl, data);

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("rcuvfs".into()),
        MountOption::Subtype("rcuvfs".into()),
        MountOption::RW,
        MountOption::Dev,
        MountOption::Suid,
    ];
    config.acl = SessionACL::All; // allow_other: other users reach the mount
                                  // memfs never blocks inside a request, so a worker beyond the cores
                                  // only adds a context switch per request (measured: 2 clients got
                                  // 11-14k stats/s from 8 workers, 28-30k from 2, on 2 cores). The
                                  // passthrough blocks on the host's I/O, where more workers overlap it.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = if args.backend == "memfs" { args.threads.clamp(1, cores.max(2)) } else { args.threads.max(1) };
    config.n_threads = Some(workers);
    config.clone_fd = true;

    let mut session = fuser::Session::new(server, &args.mountpoint, &config)
        .map_err(|e| io::Error::new(e.kind(), format!("mount on {}: {e}", args.mountpoint.display())))?;
    let _ = kernel.notifier.set(session.notifier());
    if args.read_ahead_kb > 0 {
        if let Err(e) = set_read_ahead(&args.mountpoint, args.read_ahead_kb) {
            eprintln!("rcuvfs: readahead left as the kernel set it: {e}");
        }
    }
    let mut unmounter = session.unmount_callable();
    let mountpoint = args.mountpoint.clone();
    std::thread::spawn(move || {
        let sig = wait_signal(&signals);
        eprintln!("rcuvfs: signal {sig}: unmounting {}", mountpoint.display());
        if let Err(e) = unmounter.unmount() {
            eprintln!("rcuvfs: unmount: {e}");
            std::process::exit(1);
        }
    });
    eprintln!("rcuvfs: serving {what} on {} ({workers} threads)", args.mountpoint.display());
    session.run()?;
    eprintln!("rcuvfs: unmounted");
    Ok(())
}

/// Sets the mount's readahead (`/sys/class/bdi/MAJ:MIN/read_ahead_kb` of
/// the device the mount got). The device is read from
/// `/proc/self/mountinfo`, not by a stat of the mountpoint, which would
/// wait for this server to answer before it serves.
fn set_read_ahead(mountpoint: &Path, kb: u32) -> io::Result<()> {
    let mnt = std::fs::canonicalize(mountpoint.parent().unwrap_or(Path::new("/")))?
        .join(mountpoint.file_name().unwrap_or_default());
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    // Fields: id, parent, MAJ:MIN, root, mount point, ...; the last match
    // is the newest mount on that point.
    let dev = info
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = l.split(" - ").nth(1).unwrap_or("");
            (f.len() > 4 && Path::new(f[4]) == mnt && fstype.starts_with("fuse")).then(|| f[2].to_string())
        })
        .ok_or_else(|| io::Error::other(format!("{} is not in /proc/self/mountinfo", mnt.display())))?;
    std::fs::write(format!("/sys/class/bdi/{dev}/read_ahead_kb"), kb.to_string())
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: plain libc calls on a local, initialized signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: `set` is initialized; `sig` is a valid out pointer.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}
