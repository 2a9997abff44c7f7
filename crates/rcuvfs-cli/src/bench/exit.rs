//! `inode-exit` (seed 004): T threads each create M files and keep them
//! open; then, released together, they unlink and close every file and
//! exit, so every inode is evicted and deleted from the superblock's inode
//! list. Reports the exit phase's elapsed time and CPU time (user + system,
//! from getrusage) per mode, like the seed's table.

use std::sync::Arc;

use super::Gate;
use std::time::Instant;

use rcuvfs::{ListMode, Vfs};

use super::subject::{HostSubject, Subject, VfsSubject};

pub const MODES: &[&str] = &["locked", "batch", "percpu", "host"];

pub struct ExitRun {
    pub files: u64,
    pub create_seconds: f64,
    pub exit_seconds: f64,
    pub exit_cpu_seconds: f64,
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
        return run_on(Arc::new(HostSubject::scratch(host_dir, "exit")?), threads, per_thread);
    }
    let list = ListMode::from_name(mode).ok_or_else(|| std::io::Error::other(format!("unknown mode {mode}")))?;
    let vfs = Vfs::builder().inode_list(list).build()?;
    let r = run_on(Arc::new(VfsSubject { vfs: vfs.clone(), stats: None }), threads, per_thread)?;
    // Every file's inode left the superblock list; the root, /x and the
    // threads' directories remain.
    let mut left = 0;
    vfs.for_each_inode(|_| left += 1);
    if left != 2 + threads {
        return Err(std::io::Error::other(format!("{left} inodes left on the superblock list")));
    }
    Ok(r)
}

/// The run on `s`: each thread creates its files and keeps them open;
/// once all have and the gate opens, it unlinks each and closes them all.
fn run_on<S: Subject>(s: Arc<S>, threads: usize, per_thread: usize) -> std::io::Result<ExitRun> {
    let go = Arc::new(Gate::new());
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (s, go) = (s.clone(), go.clone());
            std::thread::spawn(move || -> std::io::Result<()> {
                // Whatever happens, reach the gate, so that an error
                // is reported instead of leaving the others waiting.
                let setup = || -> std::io::Result<Vec<(S::Path, S::File)>> {
                    let dir = format!("/x/t{t}");
                    s.mkdir_all(&dir)?;
                    (0..per_thread)
                        .map(|i| {
                            let p = format!("{dir}/f{i}");
                            Ok((s.path(&p), s.create_open(&p)?))
                        })
                        .collect()
                };
                let files = setup();
                go.arrive();
                let mut files = files?;
                for (p, _) in &files {
                    s.unlink(p)?;
                }
                files.clear(); // close: the last reference evicts the inode
                Ok(())
            })
        })
        .collect();
    go.wait_for(threads);
    let create_seconds = t0.elapsed().as_secs_f64();
    let cpu0 = super::cpu_time();
    let t1 = Instant::now();
    go.open();
    let mut result = Ok(());
    for h in handles {
        if let Err(e) = h.join().expect("exit thread") {
            result = Err(e);
        }
    }
    let exit_seconds = t1.elapsed().as_secs_f64();
    let exit_cpu_seconds = super::cpu_time() - cpu0;
    result?;
    Ok(ExitRun { files: (threads * per_thread) as u64, create_seconds, exit_seconds, exit_cpu_seconds })
}
