//! Descriptors bounded whatever the number of nodes.
//!
//! A node kept an `O_PATH` descriptor for as long as anything cached it (the
//! VFS, or the kernel above a FUSE mount, which may cache hundreds of
//! thousands of names), and a data descriptor besides once read or
//! written: a copy of a tree of 10,876 entries reached a hard limit of
//! 20,000 descriptors. Now a node on the served filesystem holds a file
//! handle (`name_to_handle_at`: a few bytes, no descriptor), and its
//! descriptors are a cache: opened again with `open_by_handle_at` when an
//! operation needs them, and closed, oldest first, once more than
//! [`FdCache::budget`] nodes hold some. An operation holds the descriptor
//! it uses (an `Arc`), so an eviction never closes one in use.
//!
//! Handles need `CAP_DAC_READ_SEARCH` (`open_by_handle_at`) and a
//! filesystem that exports them; where either is missing, and for objects
//! on other filesystems mounted inside the tree, a node keeps its `O_PATH`
//! descriptor for life, as before (its data descriptor is still a cache).
//!
//! A node whose object was unlinked through this filesystem while the VFS
//! still holds it (an open file, as POSIX keeps readable) is pinned: its
//! descriptor is never evicted, since a handle to an unlinked inode may no
//! longer open. The pin is undone if the unlink fails or links remain.
//!
//! A handle, unlike a descriptor, does not keep the object's inode number
//! from being reused: a lookup that finds a node's (device, number) again
//! checks the handle (`same_object`) and, if it changed, makes a new node
//! with an inode number of its own for the new object.
//!
//! Descriptors are closed outside `Inner::nodes`: `opened` may close other
//! nodes' descriptors, waiting for their locks, so the callers that hold
//! `nodes` (making a node) call it after they release it. One unlinked by another program while held here may answer
//! ESTALE once its descriptors were evicted.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::{check, Node};
use crate::error::Result;

/// A `struct file_handle`, in 4-byte words (its header is two).
#[derive(PartialEq, Eq)]
pub(super) struct Handle(Box<[u32]>);

/// `MAX_HANDLE_SZ`.
const MAX_HANDLE: usize = 128;

impl Handle {
    /// The handle of what `fd` refers to, if it is on the mount `mount_id`
    /// and its filesystem exports handles.
    pub fn of(fd: RawFd, mount_id: libc::c_int) -> Option<Handle> {
        let (h, id) = name_to_handle(fd)?;
        (id == mount_id).then_some(h)
    }

    /// Opens what the handle refers to, `O_PATH`; ESTALE if it is gone.
    pub fn open(&self, mount_fd: RawFd) -> Result<OwnedFd> {
        let mut words = self.0.clone();
        // SAFETY: `words` is a well-formed file_handle (header, then
        // `handle_bytes` bytes), as name_to_handle_at wrote it.
        let fd = check(unsafe {
            libc::open_by_handle_at(
                mount_fd,
                words.as_mut_ptr().cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: just opened, owned here.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// `name_to_handle_at(fd, "", AT_EMPTY_PATH)`: the handle and mount id.
fn name_to_handle(fd: RawFd) -> Option<(Handle, libc::c_int)> {
    let mut words = vec![0u32; 2 + MAX_HANDLE / 4];
    words[0] = MAX_HANDLE as u32; // handle_bytes: the room there is
    let mut mount_id = 0;
    // SAFETY: a buffer of the header plus MAX_HANDLE bytes, as announced;
    // an empty path with AT_EMPTY_PATH.
    let r = unsafe {
        libc::name_to_handle_at(
            fd,
            c"".as_ptr(),
            words.as_mut_ptr().cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if r != 0 {
        return None;
    }
    let len = 2 + (words[0] as usize).div_ceil(4);
    words.truncate(len);
    Some((Handle(words.into_boxed_slice()), mount_id))
}

/// A node's path descriptor: for life, or cached and reopened from its
/// handle.
pub(super) struct PathFd {
    /// It has a handle (fixed at the node's making).
    evictable: bool,
    state: Mutex<PathState>,
}

struct PathState {
    open: Option<Arc<OwnedFd>>,
    handle: Option<Handle>,
}

impl PathFd {
    /// `fd` just opened for a new node; a handle is taken if `cache`
    /// allows it (then `fd` is the first cached descriptor).
    pub fn new(fd: OwnedFd, cache: &FdCache) -> PathFd {
        let handle = cache.mount.as_ref().and_then(|(_, id)| Handle::of(fd.as_raw_fd(), *id));
        PathFd { evictable: handle.is_some(), state: Mutex::new(PathState { open: Some(Arc::new(fd)), handle }) }
    }

    pub fn evictable(&self) -> bool {
        self.evictable
    }
}

/// The nodes holding cached descriptors, oldest first, and the bound.
pub(super) struct FdCache {
    /// The served filesystem's root (any descriptor on the mount will do
    /// for `open_by_handle_at`) and mount id; `None`: no handles here.
    mount: Option<(OwnedFd, libc::c_int)>,
    /// Nodes that may hold cached descriptors at once.
    pub budget: usize,
    queue: Mutex<VecDeque<Weak<Node>>>,
    /// Descriptors opened from a handle (for tests and reports; a
    /// statistic, so Relaxed).
    pub reopened: AtomicUsize,
}

impl FdCache {
    /// A cache for the tree under `root`, whose nodes may hold `budget`
    /// nodes' descriptors at once; handles only if they work here.
    pub fn new(root: RawFd, budget: usize) -> FdCache {
        // Probe: a handle of the root that opens again (EPERM without
        // CAP_DAC_READ_SEARCH; EOPNOTSUPP where the filesystem has none).
        // The mount descriptor may not be an `O_PATH` one (EBADF).
        let mount = name_to_handle(root).and_then(|(h, id)| {
            // SAFETY: a valid descriptor; "." is NUL-terminated.
            let fd = check(unsafe {
                libc::openat(root, c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)
            })
            .ok()?;
            // SAFETY: just opened, owned here.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            h.open(fd.as_raw_fd()).ok()?;
            Some((fd, id))
        });
        FdCache { mount, budget: budget.max(16), queue: Mutex::new(VecDeque::new()), reopened: AtomicUsize::new(0) }
    }

    /// Whether nodes here hold handles rather than descriptors.
    pub fn handles(&self) -> bool {
        self.mount.is_some()
    }

    /// The path descriptor of `node`, reopened from its handle if it was
    /// evicted.
    pub fn path_fd(&self, node: &Node) -> Result<Arc<OwnedFd>> {
        let mut st = node.fd.state.lock().unwrap();
        if let Some(fd) = &st.open {
            return Ok(fd.clone());
        }
        let (Some(h), Some((mount, _))) = (&st.handle, &self.mount) else {
            unreachable!("a node without a handle keeps its descriptor");
        };
        let fd = Arc::new(h.open(mount.as_raw_fd())?);
        self.reopened.fetch_add(1, Ordering::Relaxed);
        st.open = Some(fd.clone());
        drop(st);
        self.opened(node);
        Ok(fd)
    }

    /// A lookup found `node`'s (device, inode number) again, opened as
    /// `fd`: whether it is still the node's object. A descriptor the node
    /// holds pins the number, so while it is open the answer is yes; with
    /// only a handle, the object the handle names may have been deleted
    /// and another have taken its number: then the handles differ (they
    /// carry the generation). Without a handle to compare, yes.
    pub fn same_object(&self, node: &Node, fd: &OwnedFd) -> bool {
        if !node.fd.evictable {
            return true;
        }
        let st = node.fd.state.lock().unwrap();
        if st.open.is_some() {
            return true;
        }
        let Some(h) = self.mount.as_ref().and_then(|(_, id)| Handle::of(fd.as_raw_fd(), *id)) else { return true };
        st.handle.as_ref() == Some(&h)
    }

    /// `node` holds cached descriptors now: queue it (once), and evict the
    /// oldest past the budget.
    pub fn opened(&self, node: &Node) {
        // `pinned` is a hint here (`close` decides under the node's lock);
        // `queued` needs no ordering of its own: it only keeps a node from
        // being queued twice, and the queue's lock orders the rest.
        if node.pinned.load(Ordering::Relaxed) || node.queued.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut q = self.queue.lock().unwrap();
        q.push_back(node.me.clone());
        let mut evict = Vec::new();
        while q.len() > self.budget {
            match q.pop_front().and_then(|w| w.upgrade()) {
                Some(n) => evict.push(n),
                None => continue,
            }
        }
        drop(q);
        for n in evict {
            Self::close(&n);
        }
    }

    /// Closes a node's cached descriptors (those in use stay open with
    /// their users until they finish).
    fn close(n: &Node) {
        // Cleared first: a thread that opens a descriptor after the take
        // below queues the node again. (Relaxed: the node's lock, taken
        // next, orders it before the take for such a thread.)
        n.queued.store(false, Ordering::Relaxed);
        // Under the path descriptor's lock, which `pin` takes to set the
        // flag: a node pinned meanwhile keeps its descriptors. (Lock order:
        // `state`, then `data`; `data_fd` never holds `data` while it takes
        // `state`.) Relaxed: `pinned` is written and read under `state`.
        let mut st = n.fd.state.lock().unwrap();
        if n.pinned.load(Ordering::Relaxed) {
            return;
        }
        let data = n.data.lock().unwrap().take();
        let path = if n.fd.evictable { st.open.take() } else { None };
        drop(st);
        drop((data, path));
    }

    /// Keeps `node`'s descriptor for as long as the node lives (its object
    /// is being unlinked): opened now if it was evicted.
    pub fn pin(&self, node: &Node) -> Result<()> {
        let fd = self.path_fd(node)?;
        // Under the lock `close` decides under (see there).
        let mut st = node.fd.state.lock().unwrap();
        node.pinned.store(true, Ordering::Relaxed);
        // It may have been evicted between the open and the pin: put it
        // back; the node holds it from now on.
        if st.open.is_none() {
            st.open = Some(fd);
        }
        Ok(())
    }

    /// Undoes `pin`: the unlink failed, or the object has links left.
    pub fn unpin(&self, node: &Node) {
        // Under the lock `close` decides under (see there).
        let st = node.fd.state.lock().unwrap();
        node.pinned.store(false, Ordering::Relaxed);
        drop(st);
        self.opened(node);
    }

    /// Nodes holding cached descriptors now (at most the budget).
    pub fn queued(&self) -> usize {
        self.queue.lock().unwrap().len()
    }
}
