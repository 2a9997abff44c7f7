//! `inode-exit` (seed 004): T threads each create M files and keep them
//! open; then, released together, they unlink and close every file and
//! exit, so every inode is evicted and deleted from the superblock's inode
//! list. Reports the exit phase's elapsed time and CPU time (user + system,
//! from getrusage) per mode, like the seed's table.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use rcuvfs::{ListMode, OpenOptions, Vfs};

pub const MODES: &[&str] = &["locked", "batch", "percpu", "host"];

pub struct ExitRun {
    pub files: u64,
    pub create_seconds: f64,
    pub exit_seconds: f64,
    pub exit_cpu_seconds: f64,
}

/// One thread's files: a Vfs handle or a host file, by name.
enum Files {
    Vfs(Vfs, Vec<(String, rcuvfs::File)>),
    Host(Vec<(PathBuf, std::fs::File)>),
}

/// Raises the open-file limit to its hard maximum (the host peer keeps
/// every file open, as the Vfs modes do) and returns it.
fn raise_nofile() -> u64 {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
        r.rlim_cur
    }
}

pub fn run(mode: &str, threads: usize, per_thread: usize, host_dir: &std::path::Path) -> std::io::Result<ExitRun> {
    if mode == "host" {
        let limit = raise_nofile();
        let need = (threads * per_thread) as u64 + 64;
        if need > limit {
            return Err(std::io::Error::other(format!("needs {need} open files, RLIMIT_NOFILE allows {limit}")));
        }
    }
    let vfs = match mode {
        "host" => None,
        m => {
            let list = ListMode::from_name(m).ok_or_else(|| std::io::Error::other(format!("unknown mode {m}")))?;
            Some(Vfs::builder().inode_list(list).build()?)
        }
    };
    let host_root = host_dir.join(format!("rcuvfs-exit-{}", std::process::id()));
    let created = Arc::new(Barrier::new(threads + 1));
    let go = Arc::new(Barrier::new(threads + 1));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (vfs, created, go, host_root) = (vfs.clone(), created.clone(), go.clone(), host_root.clone());
            std::thread::spawn(move || -> std::io::Result<()> {
                // Whatever happens, reach both barriers, so that an error
                // is reported instead of leaving the others waiting.
                let setup = || -> std::io::Result<Files> {
                    Ok(match vfs {
                        Some(v) => {
                            let dir = format!("/x/t{t}");
                            v.create_dir_all(&dir)?;
                            let mut fs = Vec::with_capacity(per_thread);
                            for i in 0..per_thread {
                                let p = format!("{dir}/f{i}");
                                let f = v.open(&p, OpenOptions::new().write(true).create(true))?;
                                fs.push((p, f));
                            }
                            Files::Vfs(v, fs)
                        }
                        None => {
                            let dir = host_root.join(format!("t{t}"));
                            std::fs::create_dir_all(&dir)?;
                            let mut fs = Vec::with_capacity(per_thread);
                            for i in 0..per_thread {
                                let p = dir.join(format!("f{i}"));
                                let f = std::fs::File::create(&p)?;
                                fs.push((p, f));
                            }
                            Files::Host(fs)
                        }
                    })
                };
                let files = setup();
                created.wait();
                go.wait();
                let mut files = files?;
                match &mut files {
                    Files::Vfs(v, fs) => {
                        for (p, _) in fs.iter() {
                            v.remove_file(p)?;
                        }
                        fs.clear(); // close: the last reference evicts the inode
                    }
                    Files::Host(fs) => {
                        for (p, _) in fs.iter() {
                            std::fs::remove_file(p)?;
                        }
                        fs.clear();
                    }
                }
                Ok(())
            })
        })
        .collect();
    created.wait();
    let create_seconds = t0.elapsed().as_secs_f64();
    let cpu0 = super::cpu_time();
    let t1 = Instant::now();
    go.wait();
    let mut result = Ok(());
    for h in handles {
        if let Err(e) = h.join().expect("exit thread") {
            result = Err(e);
        }
    }
    let exit_seconds = t1.elapsed().as_secs_f64();
    let exit_cpu_seconds = super::cpu_time() - cpu0;
    let _ = std::fs::remove_dir_all(&host_root);
    if let Some(v) = &vfs {
        // Every file's inode left the superblock list; the root, /x and the
        // threads' directories remain.
        let mut left = 0;
        v.for_each_inode(|_| left += 1);
        if left != 2 + threads {
            return Err(std::io::Error::other(format!("{left} inodes left on the superblock list")));
        }
    }
    result?;
    Ok(ExitRun { files: (threads * per_thread) as u64, create_seconds, exit_seconds, exit_cpu_seconds })
}
