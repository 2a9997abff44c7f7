//! How a filesystem reports changes made behind the cache ([`Notify`]),
//! and what the cache does with them.

use std::sync::Arc;

use super::{lock_name, VfsState};
use crate::dcache::Dcache;
use crate::fs::{FileSystem, Ino, Notify};

/// Gives `fs`, served by `state`, its way to report outside changes.
pub(super) fn install_notify(state: &Arc<VfsState>, fs: &Arc<dyn FileSystem>) {
    fs.attach(Arc::new(VfsNotify {
        state: Arc::downgrade(state),
        fs: FsKey(Arc::as_ptr(fs) as *const ()),
        observer: state.observer.clone(),
    }));
}

/// A filesystem's [`Notify`]: finds its superblock by the filesystem's
/// address (under the superblock list's lock, so it cannot be torn down
/// meanwhile) and acts on the cache. Does nothing once the Vfs is gone.
struct VfsNotify {
    state: std::sync::Weak<VfsState>,
    fs: FsKey,
    /// The builder's observer, told after the cache acted.
    observer: Option<Arc<dyn Notify>>,
}

/// A filesystem's address, as a key to find its superblock by: compared,
/// never dereferenced (the filesystem may be gone when it is used).
struct FsKey(*const ());

// SAFETY: only compared, never dereferenced.
unsafe impl Send for FsKey {}
// SAFETY: as above.
unsafe impl Sync for FsKey {}

impl VfsNotify {
    fn with(&self, f: impl FnOnce(&Dcache, &crate::inode::Super)) {
        if let Some(state) = self.state.upgrade() {
            state.dc.with_super(self.fs.0, |sb| f(&state.dc, sb));
        }
    }
}

impl Notify for VfsNotify {
    fn entry_changed(&self, parent: Ino, name: &[u8]) {
        self.with(|dc, sb| {
            if let Some(dir) = dc.alias_ref(sb, parent) {
                // A lookup of this name in flight holds its name lock
                // across the filesystem's answer and the dcache's record
                // of it: wait for it, then drop what it cached, which may
                // predate the change (a miss read just before a create).
                let _name = lock_name(dc, &dir, name);
                dc.absent_forget(&dir, name, crate::dcache::name_hash(&*dir, name));
                if let Some(d) = dc.d_lookup(&dir, name) {
                    dc.d_invalidate(&d);
                }
            }
        });
        if let Some(o) = &self.observer {
            o.entry_changed(parent, name);
        }
    }

    fn entry_is(&self, parent: Ino, name: &[u8], ino: Option<Ino>) {
        self.with(|dc, sb| {
            if let Some(dir) = dc.alias_ref(sb, parent) {
                // The change's own update holds the name lock until its
                // result is cached: compare with that result.
                let _name = lock_name(dc, &dir, name);
                if ino.is_some() {
                    // A cached miss, if any, is wrong now.
                    dc.absent_forget(&dir, name, crate::dcache::name_hash(&*dir, name));
                }
                if let Some(d) = dc.d_lookup(&dir, name) {
                    if d.inode().map(|i| i.ino) != ino {
                        dc.d_invalidate(&d);
                    }
                }
            }
        });
        // The observer (the kernel, through FUSE) is told in any case: it
        // applied the change to its own belief, which may be behind where
        // this cache's was not (a kernel rename of a name whose
        // invalidation was still waiting for the directory's lock).
        if let Some(o) = &self.observer {
            o.entry_changed(parent, name);
        }
    }

    fn attr_changed(&self, parent: Ino, name: &[u8]) {
        let mut child = None;
        self.with(|dc, sb| {
            if let Some(d) = dc.cached_child(sb, parent, name) {
                if let Some(i) = d.inode() {
                    i.refresh(&*sb.fs);
                    child = Some(i.ino);
                }
            }
        });
        if let Some(o) = &self.observer {
            o.attr_changed(parent, name);
            // The object itself too: an observer may cache by inode (the
            // kernel's attributes and pages of an open file).
            if let Some(ino) = child {
                o.inode_changed(ino);
            }
        }
    }

    fn inode_changed(&self, ino: Ino) {
        self.with(|dc, sb| dc.refresh_inode(sb, ino));
        if let Some(o) = &self.observer {
            o.inode_changed(ino);
        }
    }

    fn all_changed(&self) {
        self.with(|dc, sb| dc.invalidate_super(sb));
        if let Some(o) = &self.observer {
            o.all_changed();
        }
    }

    fn set_revalidate(&self, on: bool) {
        // Misses cached in sets are revalidated from then on too, as
        // negative dentries are (`absent`): nothing to let go of.
        self.with(|_, sb| sb.revalidates.store(on, std::sync::atomic::Ordering::Relaxed));
    }
}
