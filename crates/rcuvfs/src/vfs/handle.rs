//! [`Entry`]: a handle on a cached name, and the lookups that give one.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use super::{bytes, Metadata, Start, StateRef, Vfs, VfsState};
use crate::dcache::{DRef, Dentry};
use crate::error::{fail, Result, EXDEV};
use crate::fs::{FileType, Ino};
use crate::inode::Inode;
use crate::mount::{MntRef, Mount};
use crate::namei::check_name;

/// A handle on a cached name (a dentry reference), like an `O_PATH` file
/// descriptor. It follows its name through renames; after the name is
/// removed it still refers to the (unlinked) object. Released on drop.
pub struct Entry {
    pub(super) state: StateRef,
    /// The mount the name was found in (counted).
    pub(super) mnt: *const Mount,
    pub(super) d: *const Dentry,
}

// SAFETY: the dentry is reference-counted and all its shared fields are
// atomics; the reference this handle owns may be dropped from any thread.
unsafe impl Send for Entry {}
// SAFETY: as above; `&Entry` only reads.
unsafe impl Sync for Entry {}

impl Entry {
    pub(super) fn from_ref(state: &Arc<VfsState>, mnt: MntRef<'_>, d: DRef<'_>) -> Entry {
        Entry { state: StateRef::new(state), mnt: mnt.into_raw(), d: d.into_raw() }
    }

    pub(super) fn mount(&self) -> &Mount {
        // SAFETY: this handle owns a reference.
        unsafe { &*self.mnt }
    }

    pub(super) fn dentry(&self) -> &Dentry {
        // SAFETY: this handle owns a reference.
        unsafe { &*self.d }
    }

    pub(super) fn inode(&self) -> &Inode {
        self.dentry().inode().expect("handles refer to positive dentries")
    }

    pub fn ino(&self) -> Ino {
        self.inode().ino
    }

    pub fn file_type(&self) -> FileType {
        self.inode().kind
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Dir
    }

    /// The attributes of the object (`fstat`), from the cache.
    pub fn metadata(&self) -> Result<Metadata> {
        Ok(Metadata(self.inode().attr()))
    }

    /// Reads the attributes again from the filesystem and returns them:
    /// for a server whose clients change a file behind the VFS (FUSE
    /// passthrough, where the kernel writes the host file itself). On
    /// memfs the cache is the truth, and this is `metadata`.
    pub fn refresh(&self) -> Result<Metadata> {
        let inode = self.inode();
        let a = inode.reread(inode.fs())?;
        if !inode.is_owned() && inode.data_if_any().is_none() {
            // Its own answer: what is in core is the same or newer (a read
            // begun after this one, or one with a newer ctime), unless this
            // read was refused for its age; this answer was read after the
            // call began in any case.
            return Ok(Metadata(a));
        }
        Ok(Metadata(inode.attr()))
    }

    /// A descriptor of the host file holding this file's data, read-write
    /// if `write` (see [`FileSystem::open_host_file`](crate::fs::FileSystem::open_host_file)); `None` where there
    /// is none. For servers only: it bypasses the VFS, which checks no
    /// permission here (check them with an open first).
    pub fn open_host_file(&self, write: bool) -> Option<Result<std::os::fd::OwnedFd>> {
        let inode = self.inode();
        inode.fs().open_host_file(inode.ino, write)
    }

    /// Releases the reference now (the same as dropping it).
    pub fn forget(self) {}

    pub(super) fn check_same_vfs(&self, state: &Arc<VfsState>) -> Result<()> {
        if std::ptr::eq(&*self.state, &**state) {
            Ok(())
        } else {
            fail(EXDEV)
        }
    }
}

impl Clone for Entry {
    fn clone(&self) -> Entry {
        self.dentry().lockref().get();
        self.state.dc.mntget(self.mount()).into_raw();
        Entry { state: self.state.clone(), mnt: self.mnt, d: self.d }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // The dentry first: the mount's reference may be the last that
        // keeps its filesystem.
        self.state.dc.dput(self.dentry());
        self.state.dc.mntput(self.mount());
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("ino", &self.ino()).field("kind", &self.file_type()).finish()
    }
}

impl Vfs {
    // ---- handles ----

    /// The root directory's handle.
    pub fn root_entry(&self) -> Entry {
        Entry::from_ref(&self.state, self.dc().root_mnt(), self.dc().root_ref())
    }

    /// A handle on `path`, following a final symlink.
    pub fn entry(&self, path: impl AsRef<Path>) -> Result<Entry> {
        self.entry_from(Start::Cwd, bytes(path.as_ref()), true)
    }

    /// A handle on `path` itself, not following a final symlink.
    pub fn entry_nofollow(&self, path: impl AsRef<Path>) -> Result<Entry> {
        self.entry_from(Start::Cwd, bytes(path.as_ref()), false)
    }

    /// A handle on `path` relative to directory `dir`.
    pub fn entry_at(&self, dir: &Entry, path: impl AsRef<Path>, follow: bool) -> Result<Entry> {
        self.entry_from(Start::At(dir), bytes(path.as_ref()), follow)
    }

    /// A handle on the object numbered `ino` in the root filesystem, found
    /// by number rather than by path, as `open_by_handle_at` finds a file
    /// (FUSE's export support: the kernel looks a node up by number once
    /// it has forgotten it). It is found through a name the dcache holds
    /// for it: ESTALE if there is none (the object is gone, or only
    /// unlinked names of it are held, or its names were pruned from the
    /// cache).
    pub fn entry_by_ino(&self, ino: Ino) -> Result<Entry> {
        let dc = self.dc();
        let sb = dc.root_sb();
        match dc.alias_ref(sb, ino) {
            Some(d) if d.is_hashed() || d.is_root() => Ok(Entry::from_ref(&self.state, dc.root_mnt(), d)),
            _ => fail(libc::ESTALE),
        }
    }

    /// Looks up one name in directory `dir` (FUSE's lookup): no symlink is
    /// followed; "." and ".." work.
    pub fn lookup_at(&self, dir: &Entry, name: impl AsRef<OsStr>) -> Result<Entry> {
        let name = name.as_ref().as_bytes();
        if name != b"." && name != b".." {
            check_name(name)?;
        }
        self.entry_from(Start::At(dir), name, false)
    }
}
