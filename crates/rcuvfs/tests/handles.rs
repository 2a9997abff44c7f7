//! A passthrough node whose descriptor was evicted holds only a file
//! handle, which, unlike a descriptor, does not keep the host from reusing
//! the inode number: a new file that gets the number of a deleted one still
//! held by the VFS must be served as itself, not as the dead one (ESTALE).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcuvfs::fs::passthrough::{Passthrough, PassthroughOptions};
use rcuvfs::{Entry, Vfs};

/// A deleted object the VFS still holds, and a new one on the host that
/// took its inode number.
struct Reused {
    dir: PathBuf,
    v: Vfs,
    /// The VFS's handle on the deleted object.
    held: Entry,
    /// The new object's name (`/newN`).
    name: String,
}

impl Drop for Reused {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serves a fresh host directory `tag` with a descriptor cache of 16, in
/// which `make_old` made `old`; holds it (`follow`: through a final
/// symlink or not), evicts its descriptors, deletes it on the host with
/// `remove_old`, and has `make_new` create `newN` on the host until one
/// takes its number (ext4 and xfs reuse a freed number at once; tmpfs
/// never does). `None`, said on stderr, where handles do not work or the
/// number was not reused: nothing to check there.
fn reused(
    tag: &str,
    make_old: impl Fn(&Path),
    follow: bool,
    remove_old: impl Fn(&Path),
    make_new: impl Fn(&Path, usize),
) -> Option<Reused> {
    let dir = std::env::temp_dir().join(format!("rcuvfs-handles-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("other")).unwrap();
    make_old(&dir.join("old"));
    let opts = PassthroughOptions { descriptor_cache: Some(16), ..Default::default() };
    let pt = Arc::new(Passthrough::new(&dir, opts).unwrap());
    if !pt.descriptors().0 {
        eprintln!("no file handles here: skipped");
        std::fs::remove_dir_all(&dir).unwrap();
        return None;
    }
    let v = Vfs::builder().filesystem(pt).build().unwrap();
    // Held (as an open directory or the kernel above a mount would).
    let held = if follow { v.entry("/old") } else { v.entry_nofollow("/old") }.unwrap();
    let old_ino = std::fs::symlink_metadata(dir.join("old")).unwrap().ino();
    // Evict its descriptors.
    for i in 0..64 {
        std::fs::write(dir.join(format!("other/{i}")), b"x").unwrap();
        v.read(format!("/other/{i}")).unwrap();
    }
    remove_old(&dir.join("old"));
    let taken = (0..64).find(|&i| {
        let p = dir.join(format!("new{i}"));
        make_new(&p, i);
        std::fs::symlink_metadata(&p).unwrap().ino() == old_ino
    });
    match taken {
        Some(i) => Some(Reused { dir, v, held, name: format!("/new{i}") }),
        None => {
            eprintln!("the host filesystem did not reuse the inode number: nothing to check");
            drop((held, v));
            std::fs::remove_dir_all(&dir).unwrap();
            None
        }
    }
}

#[test]
fn a_reused_inode_number_is_served_as_the_new_file() {
    let Some(r) = reused(
        "file",
        |p| std::fs::write(p, b"old").unwrap(),
        true,
        |p| std::fs::remove_file(p).unwrap(),
        |p, i| std::fs::write(p, format!("new{i}")).unwrap(),
    ) else {
        return;
    };
    let i = &r.name[4..];
    assert_eq!(r.v.read_to_string(&r.name).unwrap(), format!("new{i}"), "served as the deleted file");
    r.v.write(&r.name, b"written").unwrap();
    assert_eq!(std::fs::read(r.dir.join(&r.name[1..])).unwrap(), b"written");
}

/// The same, when the new object is of another type: a directory that
/// takes the number of a deleted symlink the VFS still holds is a
/// directory, under an inode number of its own (xfstests generic/011 saw
/// such a directory listed as the old symlink, and `rm -rf` fail on it).
#[test]
fn a_reused_inode_number_keeps_its_new_type() {
    let Some(r) = reused(
        "type",
        |p| std::os::unix::fs::symlink("target", p).unwrap(),
        false,
        |p| std::fs::remove_file(p).unwrap(),
        |p, _| std::fs::create_dir(p).unwrap(),
    ) else {
        return;
    };
    let m = r.v.symlink_metadata(&r.name).unwrap();
    assert!(m.is_dir(), "a directory served as the deleted symlink ({:?})", m.file_type());
    assert_ne!(m.ino(), r.held.ino(), "two objects under one inode number");
    r.v.write(format!("{}/inside", r.name), b"x").unwrap();
    r.v.remove_file(format!("{}/inside", r.name)).unwrap();
    r.v.remove_dir(&r.name).unwrap();
}

/// And again after the new object's own node is forgotten: its next lookup
/// must not take the number of the deleted object the VFS still holds
/// (xfstests generic/011 and generic/013 went on to fail this way: `rm -rf`
/// saw a symlink, a device or a file as the directory that had had its
/// number, and answered ENOTEMPTY or EISDIR).
#[test]
fn a_reused_inode_number_stays_apart_after_the_new_node_is_forgotten() {
    let Some(r) = reused(
        "forgotten",
        |p| std::fs::create_dir(p).unwrap(),
        true,
        |p| std::fs::remove_dir(p).unwrap(),
        |p, _| std::os::unix::fs::symlink("target", p).unwrap(),
    ) else {
        return;
    };
    for round in 0..3 {
        let m = r.v.symlink_metadata(&r.name).unwrap();
        assert!(m.is_symlink(), "round {round}: a symlink served as the deleted directory ({:?})", m.file_type());
        assert_ne!(m.ino(), r.held.ino(), "round {round}: two objects under one inode number");
        assert_eq!(r.v.read_link(&r.name).unwrap(), Path::new("target"));
        // Forget the new object's node (the held directory stays).
        r.v.drop_caches();
    }
    assert!(r.held.is_dir(), "the held directory changed type");
}
