//! Path parsing and walking: any byte string as a path, against a small
//! tree with symlinks (one of them a loop) and mounts (a fresh memfs, and a
//! bind mount of a directory that contains it). Never a panic; every error
//! carries an errno; a path that stats also resolves to an entry whose
//! metadata agrees.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rcuvfs::Vfs;

fn vfs() -> &'static Vfs {
    static V: OnceLock<Vfs> = OnceLock::new();
    V.get_or_init(|| {
        let v = Vfs::new();
        v.create_dir_all("/a/b/c").unwrap();
        v.write("/a/f", b"f").unwrap();
        v.symlink("/a/b", "/a/up").unwrap();
        v.symlink("../..", "/a/b/c/rel").unwrap();
        v.symlink("/loop", "/loop").unwrap();
        v.create_dir("/a/b/m").unwrap();
        v.mount("/a/b/m", std::sync::Arc::new(rcuvfs::fs::memfs::MemFs::default())).unwrap();
        v.create_dir("/a/b/m/in").unwrap();
        v.symlink("../..", "/a/b/m/in/up").unwrap();
        v.create_dir("/bind").unwrap();
        v.rbind_mount("/a", "/bind").unwrap();
        v
    })
}

fuzz_target!(|data: &[u8]| {
    let v = vfs();
    let p = OsStr::from_bytes(data);
    for r in [v.metadata(p).map(drop), v.symlink_metadata(p).map(drop), v.read_link(p).map(drop)] {
        if let Err(e) = r {
            assert!(e.raw_os_error().is_some(), "error without errno: {e}");
        }
    }
    if let Ok(m) = v.metadata(p) {
        let e = v.entry(p).expect("a path that stats resolves to an entry");
        assert_eq!(e.metadata().unwrap().ino(), m.ino());
    }
    // Creating and removing under the fuzzed name changes nothing else.
    if v.create_dir(p).is_ok() {
        v.remove_dir(p).expect("a directory just made can be removed");
    }
});
