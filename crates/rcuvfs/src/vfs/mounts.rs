//! Mounts: `mount`, bind mounts, unmount (lazy or not).

use std::path::Path;
use std::sync::Arc;

use super::{bytes, install_notify, Entry, Start, Vfs};
use crate::dcache::{Dcache, Dentry};
use crate::error::{fail, Result, EBUSY, EINVAL, ENOENT, ENOTDIR, EPERM};
use crate::fs::FileSystem;
use crate::mount::Mount;
use crate::namei::check_path;

/// What `mount_on` attaches.
enum Mounted<'e> {
    Fresh(*const crate::inode::Super),
    Bind(&'e Entry, bool),
}

impl Vfs {
    // ---- mounts ----

    /// Mounts `fs` on the directory `path` (`mount(2)` of a new filesystem
    /// instance; for a fresh in-memory one, pass
    /// `Arc::new(MemFs::new(MemFsOptions::default()))`). The directory's
    /// own content is hidden until the unmount. Needs root (`EPERM`); a
    /// filesystem instance already mounted (or serving the root) is
    /// `EBUSY`: bind-mount it instead.
    pub fn mount(&self, path: impl AsRef<Path>, fs: Arc<dyn FileSystem>) -> Result<()> {
        // One superblock per filesystem instance: a second one over the
        // same instance would cache it twice, incoherently. `bind_mount`
        // shows a mounted filesystem at a second place.
        if self.dc().with_super(Arc::as_ptr(&fs) as *const (), |_| ()).is_some() {
            return fail(EBUSY);
        }
        if !self.cred.is_root() {
            return fail(EPERM);
        }
        // The superblock first, holding no lock: making one takes the
        // superblock list, which comes before the rename mutex and the name
        // locks `mount_on` takes (a notification holds the list while it
        // waits for a name lock).
        let sb = self.dc().new_super(fs.clone())?;
        if let Err(e) = self.mount_on(path.as_ref(), |_, _, _| Ok(Mounted::Fresh(sb))) {
            self.dc().kill_super(sb);
            return Err(e);
        }
        if let Some(b) = fs.inode_budget() {
            self.dc().cap_target(b);
        }
        install_notify(&self.state, &fs);
        Ok(())
    }

    /// Bind-mounts the directory `source` on the directory `target`: the
    /// same files, seen at a second place (`mount --bind`). Mounts under
    /// `source` are not carried along.
    pub fn bind_mount(&self, source: impl AsRef<Path>, target: impl AsRef<Path>) -> Result<()> {
        self.bind_from(source.as_ref(), target.as_ref(), false)
    }

    /// Like [`bind_mount`](Self::bind_mount), carrying along every mount
    /// under `source` (`mount --rbind`, `copy_tree`).
    pub fn rbind_mount(&self, source: impl AsRef<Path>, target: impl AsRef<Path>) -> Result<()> {
        self.bind_from(source.as_ref(), target.as_ref(), true)
    }

    fn bind_from(&self, source: &Path, target: &Path, recursive: bool) -> Result<()> {
        let src = self.entry(source)?;
        if !src.is_dir() {
            return fail(ENOTDIR);
        }
        self.mount_on(target, |_, _, _| Ok(Mounted::Bind(&src, recursive)))
    }

    /// The common part of mounting: root only; the target is a directory
    /// that is still linked, held locked while the mount is attached so
    /// that an rmdir cannot slip in between (`lock_mount`).
    fn mount_on<'e>(
        &self,
        target: &Path,
        what: impl FnOnce(&Dcache, &Mount, &Dentry) -> Result<Mounted<'e>>,
    ) -> Result<()> {
        if !self.cred.is_root() {
            return fail(EPERM);
        }
        let path = bytes(target);
        check_path(path)?;
        let _g = self.state.global();
        let dc = self.dc();
        let (mut w, s) = self.begin(Start::Cwd, path)?;
        let d = dc.walk(&mut w, s, path, true)?;
        if !d.is_dir() {
            return fail(ENOTDIR);
        }
        // The rename mutex before the name lock (the lock order): a
        // recursive bind asks which mounts lie under its source
        // (`is_ancestor`), which needs the tree's shape to hold still.
        let _rm = dc.rename_mutex.lock();
        // The mountpoint's name, so that an rmdir cannot slip in between
        // (`lock_mount`). A same-directory rename may still move it before
        // we hold it: look again after locking.
        let _l = loop {
            if d.is_root() {
                break None;
            }
            let h = dc.name_hash_of(&d);
            let l = dc.names.lock(h);
            if dc.name_hash_of(&d) == h {
                break Some(l);
            }
        };
        if !d.is_hashed() && !d.is_root() {
            return fail(ENOENT); // removed since the walk
        }
        match what(dc, w.mnt(), &d)? {
            Mounted::Fresh(sb) => dc.do_mount(w.mnt(), &d, sb),
            Mounted::Bind(src, recursive) => {
                src.check_same_vfs(&self.state)?;
                dc.do_bind(src.mount(), src.dentry(), w.mnt(), &d, recursive)
            }
        }
        Ok(())
    }

    /// Unmounts the filesystem mounted at `path`: `EBUSY` while a handle,
    /// an open file, a working directory or another mount uses it; `EINVAL`
    /// if `path` is not a mount's root. Needs root (`EPERM`).
    pub fn unmount(&self, path: impl AsRef<Path>) -> Result<()> {
        self.umount_from(bytes(path.as_ref()), false)
    }

    /// Detaches the mount at `path` and every mount under it at once
    /// (`umount -l`, `MNT_DETACH`): new walks no longer see them; each is
    /// freed, with its filesystem, when its last user lets go.
    pub fn unmount_lazy(&self, path: impl AsRef<Path>) -> Result<()> {
        self.umount_from(bytes(path.as_ref()), true)
    }

    fn umount_from(&self, path: &[u8], lazy: bool) -> Result<()> {
        if !self.cred.is_root() {
            return fail(EPERM);
        }
        check_path(path)?;
        let _g = self.state.global();
        let dc = self.dc();
        let (mut w, s) = self.begin(Start::Cwd, path)?;
        let d = dc.walk(&mut w, s, path, true)?;
        if !std::ptr::eq(&*d, w.mnt().root()) {
            return fail(EINVAL);
        }
        let m = dc.mntget(w.mnt());
        // Only `m` may remain: the dentry, then the walk's mounts go first.
        drop(d);
        drop(w);
        dc.do_umount(m, lazy)
    }
}
