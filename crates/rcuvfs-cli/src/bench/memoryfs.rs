//! The `memoryfs` peer: the `vfs` crate's `MemoryFS`, an in-memory
//! filesystem a Rust program might embed instead of rcuvfs (one `RwLock`
//! over a map from full path to file; a listing scans the whole map). It
//! runs the workloads its API can express: stat, create and unlink, and
//! the tree walk (list a directory, then the metadata of each entry).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use vfs::{FileSystem, MemoryFS};

use super::workloads::{batches, Target};

fn io(e: vfs::VfsError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// A `MemoryFS` with `dirs` made (parents first) and `files` written.
pub fn build(dirs: &[String], files: &[String]) -> std::io::Result<MemoryFS> {
    let fs = MemoryFS::new();
    for d in dirs {
        let mut at = String::new();
        for part in d.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            if !fs.exists(&at).map_err(io)? {
                fs.create_dir(&at).map_err(io)?;
            }
        }
    }
    for f in files {
        drop(fs.create_file(f).map_err(io)?);
    }
    Ok(fs)
}

pub struct Stat {
    pub fs: MemoryFS,
    pub paths: Vec<String>,
}

impl Target for Stat {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let p = &self.paths[thread % self.paths.len()];
        batches(stop, count, || {
            std::hint::black_box(self.fs.metadata(p).expect("stat"));
        });
    }
}

pub struct Create {
    pub fs: MemoryFS,
    pub names: Vec<Vec<String>>,
}

impl Target for Create {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let names = &self.names[thread];
        let mut i = 0;
        batches(stop, count, || {
            let p = &names[i % names.len()];
            drop(self.fs.create_file(p).expect("create"));
            self.fs.remove_file(p).expect("unlink");
            i += 1;
        });
    }
}

pub struct Tree {
    pub fs: MemoryFS,
    pub dirs: Vec<String>,
}

impl Target for Tree {
    fn run(&self, thread: usize, stop: &AtomicBool, count: &AtomicU64) {
        let (mut n, mut i) = (0u64, thread);
        while !stop.load(Ordering::Relaxed) {
            let dir = &self.dirs[i % self.dirs.len()];
            for name in self.fs.read_dir(dir).expect("readdir") {
                std::hint::black_box(self.fs.metadata(&format!("{dir}/{name}")).expect("stat"));
                n += 1;
            }
            count.store(n, Ordering::Relaxed);
            i += 7;
        }
    }
}
