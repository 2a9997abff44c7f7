//! A passthrough node whose descriptor was evicted holds only a file
//! handle, which, unlike a descriptor, does not keep the host from reusing
//! the inode number: a new file that gets the number of a deleted one still
//! held by the VFS must be served as itself, not as the dead one (ESTALE).

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use rcuvfs::fs::passthrough::{Passthrough, PassthroughOptions};
use rcuvfs::Vfs;

#[test]
fn a_reused_inode_number_is_served_as_the_new_file() {
    let dir = std::env::temp_dir().join(format!("rcuvfs-handles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("other")).unwrap();
    std::fs::write(dir.join("old"), b"old").unwrap();
    let opts = PassthroughOptions { descriptor_cache: Some(16), ..Default::default() };
    let pt = Arc::new(Passthrough::new(&dir, opts).unwrap());
    if !pt.descriptors().0 {
        eprintln!("no file handles here: skipped");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let v = Vfs::builder().filesystem(pt.clone()).build().unwrap();
    // Held (as an open directory or the kernel above a mount would).
    let held = v.entry("/old").unwrap();
    assert_eq!(v.read("/old").unwrap(), b"old");
    let old_ino = std::fs::metadata(dir.join("old")).unwrap().ino();
    // Evict its descriptors.
    for i in 0..64 {
        std::fs::write(dir.join(format!("other/{i}")), b"x").unwrap();
        v.read(format!("/other/{i}")).unwrap();
    }
    std::fs::remove_file(dir.join("old")).unwrap();
    // Create files on the host until one takes the old number (ext4 and
    // xfs reuse a freed number at once; tmpfs never does).
    let mut reused = None;
    for i in 0..32 {
        let p = dir.join(format!("new{i}"));
        std::fs::write(&p, format!("new{i}")).unwrap();
        if std::fs::metadata(&p).unwrap().ino() == old_ino {
            reused = Some(i);
            break;
        }
    }
    match reused {
        Some(i) => {
            let name = format!("/new{i}");
            assert_eq!(v.read_to_string(&name).unwrap(), format!("new{i}"), "served as the deleted file");
            v.write(&name, b"written").unwrap();
            assert_eq!(std::fs::read(dir.join(&name[1..])).unwrap(), b"written");
        }
        None => eprintln!("the host filesystem did not reuse the inode number: nothing to check"),
    }
    drop((held, v));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same, when the new object is of another type: a directory that
/// takes the number of a deleted symlink the VFS still holds is a
/// directory, under an inode number of its own (xfstests generic/011 saw
/// such a directory listed as the old symlink, and `rm -rf` fail on it).
#[test]
fn a_reused_inode_number_keeps_its_new_type() {
    let dir = std::env::temp_dir().join(format!("rcuvfs-handles-type-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("other")).unwrap();
    std::os::unix::fs::symlink("target", dir.join("old")).unwrap();
    let opts = PassthroughOptions { descriptor_cache: Some(16), ..Default::default() };
    let pt = Arc::new(Passthrough::new(&dir, opts).unwrap());
    if !pt.descriptors().0 {
        eprintln!("no file handles here: skipped");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let v = Vfs::builder().filesystem(pt.clone()).build().unwrap();
    let held = v.entry_nofollow("/old").unwrap();
    let held_ino = v.symlink_metadata("/old").unwrap().ino();
    let old_ino = std::fs::symlink_metadata(dir.join("old")).unwrap().ino();
    for i in 0..64 {
        std::fs::write(dir.join(format!("other/{i}")), b"x").unwrap();
        v.read(format!("/other/{i}")).unwrap();
    }
    std::fs::remove_file(dir.join("old")).unwrap();
    let mut reused = None;
    for i in 0..64 {
        let p = dir.join(format!("new{i}"));
        std::fs::create_dir(&p).unwrap();
        if std::fs::metadata(&p).unwrap().ino() == old_ino {
            reused = Some(i);
            break;
        }
    }
    match reused {
        Some(i) => {
            let name = format!("/new{i}");
            let m = v.symlink_metadata(&name).unwrap();
            assert!(m.is_dir(), "a directory served as the deleted symlink ({:?})", m.file_type());
            assert_ne!(m.ino(), held_ino, "two objects under one inode number");
            v.write(format!("{name}/inside"), b"x").unwrap();
            v.remove_file(format!("{name}/inside")).unwrap();
            v.remove_dir(&name).unwrap();
        }
        None => eprintln!("the host filesystem did not reuse the inode number: nothing to check"),
    }
    drop((held, v));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// And again after the new object's own node is forgotten: its next lookup
/// must not take the number of the deleted object the VFS still holds
/// (xfstests generic/011 and generic/013 went on to fail this way: `rm -rf`
/// saw a symlink, a device or a file as the directory that had had its
/// number, and answered ENOTEMPTY or EISDIR).
#[test]
fn a_reused_inode_number_stays_apart_after_the_new_node_is_forgotten() {
    let dir = std::env::temp_dir().join(format!("rcuvfs-handles-forgotten-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("other")).unwrap();
    std::fs::create_dir(dir.join("old")).unwrap();
    let opts = PassthroughOptions { descriptor_cache: Some(16), ..Default::default() };
    let pt = Arc::new(Passthrough::new(&dir, opts).unwrap());
    if !pt.descriptors().0 {
        eprintln!("no file handles here: skipped");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let v = Vfs::builder().filesystem(pt.clone()).build().unwrap();
    let held = v.entry("/old").unwrap();
    let held_ino = held.ino();
    let old_ino = std::fs::metadata(dir.join("old")).unwrap().ino();
    for i in 0..64 {
        std::fs::write(dir.join(format!("other/{i}")), b"x").unwrap();
        v.read(format!("/other/{i}")).unwrap();
    }
    std::fs::remove_dir(dir.join("old")).unwrap();
    let mut reused = None;
    for i in 0..64 {
        let p = dir.join(format!("new{i}"));
        std::os::unix::fs::symlink("target", &p).unwrap();
        if std::fs::symlink_metadata(&p).unwrap().ino() == old_ino {
            reused = Some(i);
            break;
        }
    }
    match reused {
        Some(i) => {
            let name = format!("/new{i}");
            for round in 0..3 {
                let m = v.symlink_metadata(&name).unwrap();
                assert!(m.is_symlink(), "round {round}: a symlink served as the deleted directory ({:?})", m.file_type());
                assert_ne!(m.ino(), held_ino, "round {round}: two objects under one inode number");
                assert_eq!(v.read_link(&name).unwrap(), std::path::Path::new("target"));
                // Forget the new object's node (the held directory stays).
                v.drop_caches();
            }
            assert!(held.is_dir(), "the held directory changed type");
        }
        None => eprintln!("the host filesystem did not reuse the inode number: nothing to check"),
    }
    drop((held, v));
    std::fs::remove_dir_all(&dir).unwrap();
}
