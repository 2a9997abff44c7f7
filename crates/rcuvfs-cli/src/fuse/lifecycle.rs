//! The server's life: mount, serve on worker threads, take SIGINT and
//! SIGTERM, unmount.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};
use rcuvfs::{AtimePolicy, Vfs};

use super::nodes::{DataCache, KernelNotify, Mounted, Server};
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
    let opts = MountOpts::parse(&args.options, &args.fsname)?;
    b = b.atime(opts.atime);
    if opts.fsname.is_empty() || opts.fsname.contains(|c: char| c == ',' || c.is_whitespace()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--fsname {:?}: must be non-empty, with no comma or space", opts.fsname),
        ));
    }
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
        passthrough: std::sync::atomic::AtomicBool::new(
            args.backend.starts_with("passthrough:")
                && !args.no_kernel_passthrough
                && !args.writeback_cache
                && !args.io_uring,
        ),
        // memfs never gives a number to a second object. The host does (a
        // passthrough would need the host's generation numbers in FUSE's),
        // and etcd's numbers are the cluster's.
        export: args.backend == "memfs",
    };
    if args.io_uring {
        super::uring::kernel_allows()?;
    }
    let server = Mounted(Arc::new(Server::new(vfs, ttl, data, kernel.clone())));

    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName(opts.fsname.clone()), MountOption::Subtype("rcuvfs".into())];
    config.mount_options.extend(opts.kernel.iter().cloned());
    config.acl = SessionACL::All; // allow_other: other users reach the mount
                                  // memfs never blocks inside a request, so a worker beyond the cores
                                  // only adds a context switch per request (measured: 2 clients got
                                  // 11-14k stats/s from 8 workers, 28-30k from 2, on 2 cores). The
                                  // passthrough blocks on the host's I/O, where more workers overlap it.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = if args.backend == "memfs" { args.threads.clamp(1, cores.max(2)) } else { args.threads.max(1) };
    config.n_threads = Some(workers);
    // Over io_uring fuser reads a socket, which has no clones.
    config.clone_fd = !args.io_uring;

    let on = |e: io::Error| io::Error::new(e.kind(), format!("mount on {}: {e}", args.mountpoint.display()));
    // As root, the mount is made here, typed fuse.rcuvfs (fuser's own
    // mount(2) types it plain `fuse`, so mount(8) would hand a later
    // `mount -o remount` to the wrong helper); otherwise through
    // fusermount3, which types it so too.
    let fd = mount_direct(&args.mountpoint, &opts, &args.fstype).map_err(on)?;
    let direct = fd.is_some();
    if args.io_uring && fd.is_none() {
        // Nothing is mounted yet: mount_direct could not open /dev/fuse.
        return Err(on(io::Error::other("--io-uring needs root (the server mounts itself)")));
    }
    let fd = match fd {
        Some(fd) if args.io_uring => match super::uring::start(fd, server.clone(), workers) {
            Ok(bridge) => Some(bridge),
            Err(e) => {
                let _ = unmount(&args.mountpoint);
                return Err(on(e));
            }
        },
        fd => fd,
    };
    let mut session = match fd {
        Some(fd) => match fuser::Session::from_fd(server, fd, SessionACL::All, config) {
            Ok(s) => s,
            Err(e) => {
                // Leave no dead mount behind.
                let _ = unmount(&args.mountpoint);
                return Err(on(e));
            }
        },
        None => fuser::Session::new(server, &args.mountpoint, &config).map_err(on)?,
    };
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
        let r = if direct { unmount(&mountpoint) } else { unmounter.unmount() };
        if let Err(e) = r {
            eprintln!("rcuvfs: unmount: {e}");
            std::process::exit(1);
        }
    });
    eprintln!("rcuvfs: serving {what} on {} ({workers} threads)", args.mountpoint.display());
    session.run()?;
    eprintln!("rcuvfs: unmounted");
    Ok(())
}

/// Mounts a FUSE filesystem typed `fstype` (`fuse.rcuvfs` or `fuse`) on
/// `mountpoint` with mount(2) and returns its /dev/fuse descriptor; `None`
/// when this process may not mount (not root: fusermount3 does it then).
fn mount_direct(mountpoint: &Path, opts: &MountOpts, fstype: &str) -> io::Result<Option<OwnedFd>> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let mode = std::fs::metadata(mountpoint)?.mode() & libc::S_IFMT;
    let dev = match std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(d) => d,
        // Not ours to open: fusermount3 (setuid) will.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut flags: libc::c_ulong = 0;
    let mut data = format!(
        "fd={},rootmode={mode:o},user_id={},group_id={},allow_other",
        dev.as_raw_fd(),
        // SAFETY: getuid and getgid cannot fail.
        unsafe { libc::getuid() },
        unsafe { libc::getgid() }
    );
    for o in &opts.kernel {
        match o {
            MountOption::RO => flags |= libc::MS_RDONLY,
            MountOption::NoSuid => flags |= libc::MS_NOSUID,
            MountOption::NoDev => flags |= libc::MS_NODEV,
            MountOption::NoExec => flags |= libc::MS_NOEXEC,
            MountOption::NoAtime => flags |= libc::MS_NOATIME,
            MountOption::Sync => flags |= libc::MS_SYNCHRONOUS,
            MountOption::DirSync => flags |= libc::MS_DIRSYNC,
            MountOption::DefaultPermissions => data.push_str(",default_permissions"),
            _ => {}
        }
    }
    if opts.atime == AtimePolicy::Strict {
        flags |= libc::MS_STRICTATIME;
    }
    let c = |s: &[u8]| std::ffi::CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let (src, target, fstype, data) =
        (c(opts.fsname.as_bytes())?, c(mountpoint.as_os_str().as_bytes())?, c(fstype.as_bytes())?, c(data.as_bytes())?);
    // SAFETY: every pointer is to a NUL-terminated string alive for the call.
    let r = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) };
    if r == 0 {
        return Ok(Some(dev.into()));
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::EPERM) => Ok(None),
        e => Err(e),
    }
}

/// Unmounts what `mount_direct` mounted; the session then ends as on an
/// external umount.
fn unmount(mountpoint: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path alive for the call.
    if unsafe { libc::umount(target.as_ptr()) } == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        // Not a mount point any more: someone unmounted it first (a
        // signal racing `umount -l`), or unmounted it and removed the
        // directory (ENOENT, seen in CI's etcd-mounts cleanup); the session
        // ends as on any umount.
        e if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => Ok(()),
        e => Err(e),
    }
}

/// What `-o` asked for: the kernel's mount flags, the atime policy, the
/// source's name.
#[derive(Debug)]
struct MountOpts {
    kernel: Vec<MountOption>,
    atime: AtimePolicy,
    fsname: String,
}

impl MountOpts {
    /// Later options win over earlier ones, as with mount(8). A mount is
    /// read-write, with devices and set-user-ID files, unless told.
    fn parse(words: &[String], fsname: &str) -> io::Result<MountOpts> {
        let (mut ro, mut suid, mut dev, mut exec) = (false, true, true, true);
        let mut sync = None;
        let mut atime = AtimePolicy::Relatime;
        let mut fsname = fsname.to_string();
        let mut extra = Vec::new();
        for w in words.iter().map(|w| w.trim()).filter(|w| !w.is_empty()) {
            match w {
                "ro" => ro = true,
                "rw" => ro = false,
                "suid" => suid = true,
                "nosuid" => suid = false,
                "dev" => dev = true,
                "nodev" => dev = false,
                "exec" => exec = true,
                "noexec" => exec = false,
                "sync" => sync = Some(MountOption::Sync),
                "async" => sync = Some(MountOption::Async),
                "dirsync" => extra.push(MountOption::DirSync),
                "noatime" => atime = AtimePolicy::Noatime,
                "relatime" => atime = AtimePolicy::Relatime,
                "strictatime" => atime = AtimePolicy::Strict,
                "default_permissions" => extra.push(MountOption::DefaultPermissions),
                "allow_other" => {}
                _ if w.starts_with("subtype=") => {}
                _ if w.starts_with("fsname=") => fsname = w["fsname=".len()..].to_string(),
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("-o {w}: unknown mount option (see rcuvfs mount --help)"),
                    ))
                }
            }
        }
        let mut kernel = vec![
            if ro { MountOption::RO } else { MountOption::RW },
            if suid { MountOption::Suid } else { MountOption::NoSuid },
            if dev { MountOption::Dev } else { MountOption::NoDev },
            if exec { MountOption::Exec } else { MountOption::NoExec },
        ];
        if atime == AtimePolicy::Noatime {
            kernel.push(MountOption::NoAtime);
        }
        kernel.extend(sync);
        kernel.extend(extra);
        Ok(MountOpts { kernel, atime, fsname })
    }
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
