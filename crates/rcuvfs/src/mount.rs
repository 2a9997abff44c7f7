//! Mounts (Linux `fs/namespace.c`; seed 003, figures 7 and 8): the mount
//! tree, the mount hash that path walks read without locks, bind mounts
//! (recursive too), and umount with `EBUSY` or a lazy detach. Written here
//! by hand: it is part of the path walk.
//!
//! A place in the namespace is a (mount, dentry) pair. A mount shows a
//! dentry of a superblock (its root: the superblock's root for a fresh
//! mount, any directory for a bind mount) on top of a dentry of its parent
//! mount (its mountpoint). The hash maps (parent mount, mountpoint dentry)
//! to the mount on top; the mountpoint carries the `MOUNTED` flag, so a walk
//! looks in the hash only where something is mounted.
//!
//! # Locks
//!
//! | lock / protocol   | protects                                                   |
//! |-------------------|------------------------------------------------------------|
//! | `Namespace::lock` | every change to the mount tree (`namespace_sem`): the hash chains, each mount's parent, mountpoint and children, `MOUNTED` flags, `Super::mounts` increments |
//! | `Namespace::seq`  | written around every change a walker can see (the count of `mount_lock`): an RCU-walk that crossed a mount, or read the tree, validates it at its end |
//!
//! `lock` comes after directory locks and before the dcache's locks.
//!
//! # Lifetime
//!
//! `refs` counts: one for being attached (held by the parent, or for the
//! root mount by the namespace), one for each child mount attached on it,
//! and one for each user: an `Entry`, a `File`, a working directory, a
//! REF-walk in progress (none for the root mount, which is never freed
//! before the namespace). RCU-walk takes none. While attached, a mount holds
//! a reference on its mountpoint dentry and on its parent; a detach (umount)
//! drops them at once, so ".." at the root of a detached mount stays there.
//! The last reference frees the mount: its root dentry reference goes, and
//! the last mount of a superblock tears the superblock down
//! (`Dcache::kill_super`). The `Mount` itself is freed after a grace period.
//!
//! `umount` answers `EBUSY` when the mount has any reference but the
//! attachment and the caller's walk (a user, or a child mount). The lazy
//! form (`MNT_DETACH`) detaches the mount and every mount under it at once,
//! and each is freed when its last user leaves. A REF-walk that is inside
//! a mount when it is detached goes on in the detached tree, where ".." at
//! the root stays put (as in Linux); an RCU-walk sees the namespace count
//! move and starts again.

use std::collections::HashMap;
use std::ptr;

use crate::dcache::{DRef, Dcache, Dentry, MOUNTED};
use crate::error::{fail, Result, EBUSY, EINVAL};
use crate::inode::Super;
use crate::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::sync::{Mutex, RcuGuard, SeqCount};

const BUCKETS: usize = 64;

/// A mount: a superblock's dentry shown at a place in the tree.
///
/// Every field is an atomic, though most never change: the last `mntput`
/// frees the mount through a pointer derived from a shared reference, and
/// under Stacked Borrows that may write only interior-mutable bytes (Miri
/// caught the plain fields; the dentry's padding taught the same lesson).
pub(crate) struct Mount {
    sb: AtomicPtr<Super>,
    /// The dentry shown at the mountpoint (a counted reference).
    root: AtomicPtr<Dentry>,
    /// The mount below; null for the namespace root and once detached.
    parent: AtomicPtr<Mount>,
    /// Where in `parent` this mount sits (a counted reference while
    /// attached); null as for `parent`.
    mountpoint: AtomicPtr<Dentry>,
    refs: AtomicUsize,
    /// The root mount: it lives as long as the namespace, so references on
    /// it are not counted and a walk in it stores nothing for its mount
    /// (Linux counts per CPU for the same reason). 1 or 0: a full word, so
    /// the struct has no padding.
    pinned: AtomicUsize,
    /// The next mount in this hash chain.
    next: AtomicPtr<Mount>,
}

// SAFETY: the pointers are counted references or RCU-protected; every
// mutable field is atomic.
unsafe impl Send for Mount {}
// SAFETY: as above.
unsafe impl Sync for Mount {}

impl Mount {
    /// The mount below and the mountpoint in it, if attached to one. RCU
    /// readers must validate `Namespace::seq` afterwards.
    #[inline]
    pub fn parent(&self) -> Option<(&Mount, &Dentry)> {
        // Acquire: the walker reads the parent mount and the mountpoint
        // next; both were set before this mount was published, so this only
        // keeps those reads after the loads. A detach's null, or a stale
        // value, is caught by the caller's `Namespace::seq` check.
        let p = self.parent.load(Ordering::Acquire);
        let mp = self.mountpoint.load(Ordering::Acquire);
        if p.is_null() || mp.is_null() {
            return None;
        }
        // SAFETY: mounts and dentries are freed only after a grace period,
        // and a detach clears these pointers before dropping its references.
        unsafe { Some((&*p, &*mp)) }
    }

    #[inline]
    pub fn root(&self) -> &Dentry {
        // SAFETY: the mount holds a reference on its root.
        unsafe { &*self.root.load(Ordering::Relaxed) }
    }

    /// The superblock shown.
    #[inline]
    pub fn sb(&self) -> *const Super {
        self.sb.load(Ordering::Relaxed)
    }

    #[inline]
    fn pinned(&self) -> bool {
        self.pinned.load(Ordering::Relaxed) != 0
    }

    fn get(&self) {
        if self.pinned() {
            return;
        }
        crate::sync::audit::shared_writes(1);
        // Relaxed: the caller holds a reference already (as `Arc::clone`);
        // the count cannot reach zero meanwhile.
        self.refs.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the namespace lock protects beyond the hash chains.
struct NsState {
    /// Mounts on each mountpoint dentry (`struct mountpoint`'s count):
    /// `MOUNTED` is set while it is not zero.
    mountpoints: HashMap<usize, usize>,
    /// The children of each mount (`mnt_mounts`), by address.
    children: HashMap<usize, Vec<usize>>,
}

/// The mount table of one Vfs.
pub(crate) struct Namespace {
    lock: Mutex<NsState>,
    pub seq: SeqCount,
    /// Dentries with something mounted on them (`NsState::mountpoints`'
    /// size, kept under the lock): while 0, no name is a mountpoint.
    mountpoints: AtomicUsize,
    buckets: Box<[AtomicPtr<Mount>]>,
    root: AtomicPtr<Mount>,
}

#[inline]
fn mount_hash(parent: *const Mount, d: *const Dentry) -> usize {
    let h = (parent as usize).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (d as usize >> 6);
    (h ^ (h >> 32)) % BUCKETS
}

impl Namespace {
    /// Is anything mounted anywhere? (One load; exact for a caller that
    /// mounted or unmounted itself, a hint for racing ones.)
    pub fn any_mountpoint(&self) -> bool {
        // Acquire: pairs with the Release under the lock.
        self.mountpoints.load(Ordering::Acquire) != 0
    }

    pub fn new() -> Namespace {
        Namespace {
            lock: Mutex::new(NsState { mountpoints: HashMap::new(), children: HashMap::new() }),
            seq: SeqCount::new(),
            mountpoints: AtomicUsize::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
            root: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Creates the root mount over `sb`'s root dentry (`root`, whose count
    /// gains the mount's reference).
    pub fn init_root(&self, sb: *const Super, root: *const Dentry) {
        // SAFETY: the caller just created both.
        unsafe {
            (*root).lockref().get();
            (*sb).mounts.fetch_add(1, Ordering::Relaxed);
        }
        let m = Box::into_raw(Box::new(Mount {
            sb: AtomicPtr::new(sb as *mut Super),
            root: AtomicPtr::new(root as *mut Dentry),
            parent: AtomicPtr::new(ptr::null_mut()),
            mountpoint: AtomicPtr::new(ptr::null_mut()),
            refs: AtomicUsize::new(1),
            pinned: AtomicUsize::new(1),
            next: AtomicPtr::new(ptr::null_mut()),
        }));
        self.root.store(m, Ordering::Release);
    }

    /// The root mount.
    #[inline]
    pub fn root(&self) -> &Mount {
        // SAFETY: the root mount lives as long as the namespace.
        unsafe { &*self.root.load(Ordering::Acquire) }
    }

    /// The mount on top of `d` in `parent` (`__lookup_mnt`): atomic loads
    /// only. The caller is in a read section and validates `seq`.
    #[inline]
    pub fn lookup<'g>(&'g self, _guard: &RcuGuard<'_>, parent: &Mount, d: &Dentry) -> Option<&'g Mount> {
        let mut p = self.buckets[mount_hash(parent, d)].load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: mounts reachable from a chain are freed only after a
            // grace period.
            let m = unsafe { &*p };
            // Relaxed: a stale key is caught by the caller's `seq` check.
            if ptr::eq(m.parent.load(Ordering::Relaxed), parent) && ptr::eq(m.mountpoint.load(Ordering::Relaxed), d) {
                return Some(m);
            }
            p = m.next.load(Ordering::Acquire);
        }
        None
    }

    fn hash_insert(&self, m: &Mount, parent: *const Mount, d: *const Dentry) {
        let b = &self.buckets[mount_hash(parent, d)];
        m.next.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
        // Release: publishes the mount's fields to readers' Acquire loads.
        b.store(m as *const Mount as *mut Mount, Ordering::Release);
    }

    fn hash_remove(&self, m: &Mount, parent: *const Mount, d: *const Dentry) {
        let mut link = &self.buckets[mount_hash(parent, d)];
        loop {
            let cur = link.load(Ordering::Relaxed);
            assert!(!cur.is_null(), "an attached mount is in the hash");
            if ptr::eq(cur, m) {
                // The removed mount keeps its `next`, so a reader on it
                // goes on down the chain.
                link.store(m.next.load(Ordering::Relaxed), Ordering::Release);
                return;
            }
            // SAFETY: chain members are live under the namespace lock.
            link = unsafe { &(*cur).next };
        }
    }
}

/// A counted reference to a mount (`mntget`); `mntput` on drop.
pub(crate) struct MntRef<'a> {
    m: &'a Mount,
    dc: &'a Dcache,
}

impl<'a> MntRef<'a> {
    pub fn into_raw(self) -> *const Mount {
        let p = self.m as *const Mount;
        std::mem::forget(self);
        p
    }

    pub fn mount(&self) -> &'a Mount {
        self.m
    }
}

impl std::ops::Deref for MntRef<'_> {
    type Target = Mount;
    fn deref(&self) -> &Mount {
        self.m
    }
}

impl Drop for MntRef<'_> {
    fn drop(&mut self) {
        self.dc.mntput(self.m);
    }
}

impl Dcache {
    /// A new reference to `m`, which the caller keeps alive by one of its own.
    pub fn mntget<'a>(&'a self, m: &'a Mount) -> MntRef<'a> {
        m.get();
        MntRef { m, dc: self }
    }

    /// A reference to `m`, found by an RCU walker, unless it is being freed
    /// (`legitimize_mnt`). The root mount, which lives as long as the
    /// namespace, needs none: `Some(None)`, and no store.
    pub fn mnt_get_rcu<'a>(&'a self, m: &'a Mount) -> Option<Option<MntRef<'a>>> {
        if m.pinned() {
            return Some(None);
        }
        let mut n = m.refs.load(Ordering::Relaxed);
        loop {
            if n == 0 {
                return None;
            }
            // Acquire: orders our reads of the mount after we hold it, as
            // `lockref_get_not_dead` does.
            match m.refs.compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Some(MntRef { m, dc: self })),
                Err(x) => n = x,
            }
        }
    }

    /// [`mnt_get_rcu`](Self::mnt_get_rcu) for a walker that will act on
    /// what it pins (an update, an open, a handle): after counting itself,
    /// it checks that the namespace did not change since `ms`, its walk's
    /// sequence read, so that a plain umount that did not see its reference
    /// (`do_umount`) cannot have succeeded. `None`: fall back.
    pub fn mnt_get_rcu_checked<'a>(&'a self, m: &'a Mount, ms: u32) -> Option<MntRef<'a>> {
        match self.mnt_get_rcu(m)? {
            None => Some(self.mntget(m)), // the root mount: pinned, no store
            Some(r) => {
                if self.ns_changed_since(ms) {
                    return None; // dropping `r` puts it back
                }
                Some(r)
            }
        }
    }

    /// Whether the namespace changed since `ms`, a walk's read of its
    /// count, for a walker that has just counted itself on what it found:
    /// the SeqCst fence orders that count before this read, against an
    /// umount's bump of the count, fence, and read of the references
    /// (`do_umount`, Linux's `legitimize_mnt`).
    pub(crate) fn ns_changed_since(&self, ms: u32) -> bool {
        crate::sync::atomic::fence(Ordering::SeqCst);
        self.ns.seq.read_retry(ms)
    }

    /// A reference to the root mount.
    pub fn root_mnt(&self) -> MntRef<'_> {
        self.mntget(self.ns.root())
    }

    /// Drops a reference; the last one frees the mount.
    pub fn mntput(&self, m: &Mount) {
        if m.pinned() {
            return;
        }
        crate::sync::audit::shared_writes(1);
        // Release, then an Acquire fence for the last one (as `Arc`): every
        // user's accesses happen before the free.
        if m.refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        crate::sync::atomic::fence(Ordering::Acquire);
        debug_assert!(m.parent.load(Ordering::Relaxed).is_null(), "an attached mount holds a reference");
        let sb = m.sb();
        self.dput(m.root());
        // SAFETY: the mount keeps its superblock alive until here.
        // AcqRel: the last mount's teardown sees every other mount's use.
        if unsafe { (*sb).mounts.fetch_sub(1, Ordering::AcqRel) } == 1 {
            self.kill_super(sb);
        }
        self.counters.add_mount(-1);
        // SAFETY: refs reached zero: only RCU walkers that loaded it from
        // the hash or a parent pointer can still see it.
        unsafe { self.rcu.retire_box(m as *const Mount as *mut Mount) };
    }

    /// Follows mounts on top of `(mnt, d)` in a REF-walk: the topmost mount
    /// there and its root, or `None` if nothing is mounted on `d`.
    pub fn follow_mount_ref<'a>(&'a self, mnt: &'a Mount, d: &Dentry) -> Option<(MntRef<'a>, DRef<'a>)> {
        if !d.is_mountpoint() {
            return None;
        }
        let _l = self.ns.lock.lock();
        let g = self.rcu.read_lock();
        let mut top = self.ns.lookup(&g, mnt, d)?;
        while top.root().is_mountpoint() {
            match self.ns.lookup(&g, top, top.root()) {
                Some(m) => top = m,
                None => break,
            }
        }
        // Attached mounts have refs >= 1, and the lock keeps them attached.
        Some((self.mntget(top), self.dget(top.root())))
    }

    /// The mount below `mnt` and its mountpoint, referenced, for ".." at a
    /// mount root in a REF-walk; `None` for the namespace root or a
    /// detached mount.
    pub fn mount_parent_ref<'a>(&'a self, mnt: &'a Mount) -> Option<(MntRef<'a>, DRef<'a>)> {
        let _l = self.ns.lock.lock();
        let (p, mp) = mnt.parent()?;
        // The child holds references on both while attached, which the
        // lock keeps it.
        Some((self.mntget(p), self.dget(mp)))
    }

    /// Attaches a new mount of `sb`'s dentry `root` on `(parent, mp)`.
    /// `mp` must be the top of its stack (the caller walked there).
    fn attach_locked(
        &self,
        st: &mut NsState,
        sb: *const Super,
        root: &Dentry,
        parent: &Mount,
        mp: &Dentry,
    ) -> *const Mount {
        root.lockref().get();
        mp.lockref().get();
        parent.get();
        // SAFETY: `sb` is alive: a new one, or one a held mount keeps.
        // Relaxed: a held mount of `sb` (or its creation) keeps the count
        // above zero, so this is never a resurrection.
        unsafe { (*sb).mounts.fetch_add(1, Ordering::Relaxed) };
        let m = Box::into_raw(Box::new(Mount {
            sb: AtomicPtr::new(sb as *mut Super),
            root: AtomicPtr::new(root as *const Dentry as *mut Dentry),
            parent: AtomicPtr::new(parent as *const Mount as *mut Mount),
            mountpoint: AtomicPtr::new(mp as *const Dentry as *mut Dentry),
            refs: AtomicUsize::new(1),
            pinned: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
        }));
        self.counters.add_mount(1);
        // SAFETY: just allocated.
        self.ns.hash_insert(unsafe { &*m }, parent, mp);
        let n = st.mountpoints.entry(mp as *const Dentry as usize).or_insert(0);
        *n += 1;
        if *n == 1 {
            // Relaxed: inside the `seq` write section, which orders it for
            // walkers (they validate `seq`).
            mp.flags.fetch_or(MOUNTED, Ordering::Relaxed);
            self.ns.mountpoints.store(st.mountpoints.len(), Ordering::Release);
        }
        st.children.entry(parent as *const Mount as usize).or_default().push(m as usize);
        m
    }

    /// Mounts `sb`'s root on `(mnt, mp)`; the superblock was just created
    /// and has no mount yet.
    pub fn do_mount(&self, mnt: &Mount, mp: &Dentry, sb: *const Super) {
        let mut st = self.ns.lock.lock();
        self.ns.seq.write_begin();
        // SAFETY: a new superblock; its root lives as long as it.
        let root = unsafe { &*(*sb).root.load(std::sync::atomic::Ordering::Relaxed) };
        self.attach_locked(&mut st, sb, root, mnt, mp);
        self.ns.seq.write_end();
        // The superblock's creation reference: its mount now holds it.
        drop(st);
    }

    /// Bind-mounts `(src_mnt, src)` on `(mnt, mp)`; with `recursive`, the
    /// mounts under `src` come along (`copy_tree`). The caller holds the
    /// rename mutex (for `is_ancestor`).
    pub fn do_bind(&self, src_mnt: &Mount, src: &Dentry, mnt: &Mount, mp: &Dentry, recursive: bool) {
        let mut st = self.ns.lock.lock();
        self.ns.seq.write_begin();
        let top = self.attach_locked(&mut st, src_mnt.sb(), src, mnt, mp);
        if recursive {
            // (source mount, its copy) pairs whose children are still to copy.
            let mut todo = vec![(src_mnt as *const Mount, top)];
            while let Some((from, to)) = todo.pop() {
                let kids = st.children.get(&(from as usize)).cloned().unwrap_or_default();
                for k in kids {
                    // SAFETY: children are attached (the lock is held).
                    let km = unsafe { &*(k as *const Mount) };
                    if ptr::eq(km, top) {
                        continue; // the new mount itself, when binding a tree onto itself
                    }
                    let (_, kmp) = km.parent().expect("attached");
                    // Only mounts under the bound subtree come along.
                    if ptr::eq(from, src_mnt) && !self.is_ancestor(src, kmp) {
                        continue;
                    }
                    // SAFETY: `to` was attached above, under this lock.
                    let copy = self.attach_locked(&mut st, km.sb(), km.root(), unsafe { &*to }, kmp);
                    todo.push((km as *const Mount, copy));
                }
            }
        }
        self.ns.seq.write_end();
    }

    /// Unmounts `mnt`, which the caller's walk holds (`walk_ref`, consumed).
    /// `lazy`: detach it and every mount under it now, free each at its
    /// last user; otherwise `EBUSY` while anything but the caller uses it.
    pub fn do_umount(&self, walk_ref: MntRef<'_>, lazy: bool) -> Result<()> {
        let m = walk_ref.mount();
        let mut st = self.ns.lock.lock();
        if ptr::eq(m, self.ns.root()) {
            return fail(EBUSY);
        }
        if m.parent().is_none() {
            return fail(EINVAL); // already detached
        }
        // Attached (1) and the caller's walk (1): nothing else. New
        // references come from walks that take the lock
        // (`follow_mount_ref`), from holders of one, and from RCU walks
        // that pin what they found (`mnt_get_rcu_checked`): those count
        // first, then re-read the namespace's sequence count. We bump the
        // count first, then read the references, each side with a SeqCst
        // fence between (as Linux's `legitimize_mnt` against umount): either
        // we see the walker's reference (EBUSY), or it sees our write and
        // lets go. (An rcuwalk stat pins with `mnt_get_rcu` unchecked: it
        // may finish on the detached mount, reading only, and its put then
        // frees it.)
        self.ns.seq.write_begin();
        crate::sync::atomic::fence(Ordering::SeqCst);
        if !lazy && m.refs.load(Ordering::Acquire) != 2 {
            self.ns.seq.write_end();
            return fail(EBUSY);
        }
        // Detach the tree, children first.
        let mut order = vec![m as *const Mount];
        let mut i = 0;
        while i < order.len() {
            if let Some(kids) = st.children.get(&(order[i] as usize)) {
                order.extend(kids.iter().map(|&k| k as *const Mount));
            }
            i += 1;
        }
        let mut puts = Vec::with_capacity(order.len());
        for &x in order.iter().rev() {
            // SAFETY: attached mounts, under the lock.
            let x = unsafe { &*x };
            let (p, mp) = x.parent().expect("attached");
            self.ns.hash_remove(x, p, mp);
            // Relaxed: a null publishes nothing; walkers that read either
            // value validate `seq`.
            x.parent.store(ptr::null_mut(), Ordering::Relaxed);
            x.mountpoint.store(ptr::null_mut(), Ordering::Relaxed);
            let n = st.mountpoints.get_mut(&(mp as *const Dentry as usize)).expect("counted mountpoint");
            *n -= 1;
            if *n == 0 {
                st.mountpoints.remove(&(mp as *const Dentry as usize));
                mp.flags.fetch_and(!MOUNTED, Ordering::Relaxed);
                self.ns.mountpoints.store(st.mountpoints.len(), Ordering::Release);
            }
            if let Some(v) = st.children.get_mut(&(p as *const Mount as usize)) {
                v.retain(|&k| k != x as *const Mount as usize);
            }
            st.children.remove(&(x as *const Mount as usize));
            puts.push((x as *const Mount, p as *const Mount, mp as *const Dentry));
        }
        self.ns.seq.write_end();
        drop(st);
        // The references the attachments held: the mountpoint, the parent,
        // and the attachment itself.
        for (x, p, mp) in puts {
            // SAFETY: each is a reference the attachment owned.
            unsafe {
                self.dput(&*mp);
                self.mntput(&*p);
                self.mntput(&*x);
            }
        }
        drop(walk_ref);
        Ok(())
    }

    /// Teardown of the namespace: detaches every mount under the root,
    /// then frees the root mount. Nothing else uses the cache any more.
    pub fn umount_all(&self) {
        let root = self.ns.root();
        loop {
            let kid = {
                let st = self.ns.lock.lock();
                st.children.get(&(root as *const Mount as usize)).and_then(|v| v.first().copied())
            };
            let Some(k) = kid else { break };
            // SAFETY: attached, hence live; the walk reference we make up
            // is consumed by the umount.
            let r = self.mntget(unsafe { &*(k as *const Mount) });
            self.do_umount(r, true).expect("an attached mount detaches");
        }
        // The root mount: its reference on the root dentry goes with it.
        let m = self.ns.root.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: created by `init_root`; no user is left.
        let m = unsafe { Box::from_raw(m) };
        debug_assert_eq!(m.refs.load(Ordering::Relaxed), 1, "a user of the root mount outlived the Vfs");
        // Its reference on the root dentry goes with the tree's teardown.
    }
}
