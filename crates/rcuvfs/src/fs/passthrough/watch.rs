//! Coherence with the host: inotify watches on the directories the VFS
//! has looked up, and the thread that reads their events and tells the
//! VFS (see the guarantee in the module above).

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Weak;

use inotify::{EventMask, Inotify, WatchMask};

use super::node::{Inner, Node, Nodes};

impl Inner {
    /// Watches directory `node`; on failure, the TTL covers it. Returns
    /// `false` if this is the first directory left unwatched: the caller
    /// then turns revalidation on, once it holds no lock.
    pub(super) fn watch(&self, nodes: &mut Nodes, node: &Node) -> bool {
        let Some(w) = &self.watches else {
            self.unwatched.store(true, Ordering::Relaxed);
            return true; // `attach` turned revalidation on already
        };
        let mask = WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::ATTRIB
            | WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR;
        let Ok(fd) = self.fds.path_fd(node) else {
            return self.unwatched.swap(true, Ordering::Relaxed);
        };
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        // `watches` is released before `wd` is taken (the lock table).
        let added = w.lock().unwrap().add(Path::new(&path), mask);
        match added {
            Ok(wd) => {
                nodes.by_wd.insert(wd.get_watch_descriptor_id(), node.ino);
                *node.wd.lock().unwrap() = Some(wd);
                true
            }
            // Most often ENOSPC: the watch limit is exhausted.
            Err(_) => self.unwatched.swap(true, Ordering::Relaxed),
        }
    }

    /// A change through the VFS in directory `dir`: its listing is no
    /// longer known to be complete.
    pub(super) fn touched(&self, dir: &Node) {
        // Relaxed: `readdir` compares the generation under the listing's
        // lock, which orders it after this increment when it follows the
        // clear below, and the clear undoes its store when it precedes it.
        dir.generation.fetch_add(1, Ordering::Relaxed);
        *dir.listing.lock().unwrap() = None;
    }
}

/// The watcher: reads inotify events and tells the VFS. Ends when the
/// filesystem is dropped (it polls with a timeout to notice).
pub(super) fn watcher(mut inotify: Inotify, inner: Weak<Inner>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut pfd = libc::pollfd { fd: inotify.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, 200) };
        let Some(inner) = inner.upgrade() else { return };
        if r <= 0 {
            continue;
        }
        let events = match inotify.read_events(&mut buf) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        };
        let Some(notify) = inner.notify.get().cloned() else { continue };
        for ev in events {
            inner.stats.events.fetch_add(1, Ordering::Relaxed);
            if ev.mask.contains(EventMask::Q_OVERFLOW) {
                let nodes = inner.nodes.read().unwrap();
                for n in nodes.by_ino.values() {
                    inner.touched(n);
                }
                drop(nodes);
                notify.all_changed();
                continue;
            }
            let dir = {
                let nodes = inner.nodes.read().unwrap();
                nodes.by_wd.get(&ev.wd.get_watch_descriptor_id()).and_then(|i| nodes.by_ino.get(i).cloned())
            };
            let Some(dir) = dir else { continue };
            match ev.name {
                Some(name) => {
                    let name = name.as_bytes();
                    if ev
                        .mask
                        .intersects(EventMask::CREATE | EventMask::DELETE | EventMask::MOVED_FROM | EventMask::MOVED_TO)
                    {
                        inner.touched(&dir);
                        notify.entry_changed(dir.ino, name);
                        notify.inode_changed(dir.ino);
                    } else {
                        notify.attr_changed(dir.ino, name);
                    }
                }
                None => {
                    if ev.mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                        inner.touched(&dir);
                    }
                    if ev.mask.contains(EventMask::IGNORED) {
                        let mut nodes = inner.nodes.write().unwrap();
                        nodes.by_wd.remove(&ev.wd.get_watch_descriptor_id());
                        continue;
                    }
                    notify.inode_changed(dir.ino);
                }
            }
        }
    }
}
