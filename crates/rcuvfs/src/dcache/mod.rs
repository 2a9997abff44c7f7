//! The dentry cache, first version: everything under one global lock, as in
//! Linux 2.4's `dcache_lock`. This is the lab's `global` baseline; the
//! scalable dcache replaces it behind the same boundary (the methods of
//! [`Ns`], which the path walk and the `Vfs` operations call).
//!
//! # Locks
//!
//! | lock            | protects                                                  |
//! |-----------------|-----------------------------------------------------------|
//! | `Dcache::state` | every dentry, the (parent, name) hash, the in-core inode table, and the namespace operation in progress |
//!
//! Order: `Dcache::state`, then the filesystem's own locks (filesystem calls
//! are made with it held). File data (`File::read`, `File::write`) does not
//! take it.
//!
//! # Dentry states
//!
//! | state     | hashed | inode  | refcount | meaning                                  |
//! |-----------|--------|--------|----------|------------------------------------------|
//! | in use    | yes    | some   | > 0      | a handle holds it                        |
//! | unused    | yes    | some   | 0        | cached; may be dropped at any time       |
//! | negative  | yes    | none   | 0        | a cached miss                            |
//! | unhashed  | no     | some   | > 0      | removed or replaced while a handle held it; freed at its last put |
//!
//! A dentry pins its parent (the parent's `children` count), so the parent
//! chain of any cached dentry is cached. Each positive dentry holds one
//! reference on its in-core inode; an open file holds another. When an
//! in-core inode's references reach zero its filesystem lookup count is
//! returned with `FileSystem::forget`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::error::{errno_of, Result, ENOENT};
use crate::fs::{Attr, FileSystem, FileType, Ino};
use crate::sync::{Mutex, MutexGuard};

pub type DentryId = u32;
const NONE: DentryId = u32::MAX;

/// Live-object counters of one `Vfs`, kept past its end so that tests can
/// check that teardown freed everything.
#[derive(Debug, Default)]
pub struct LiveCounters {
    dentries: AtomicI64,
    negative: AtomicI64,
    inodes: AtomicI64,
}

impl LiveCounters {
    pub fn dentries(&self) -> i64 {
        self.dentries.load(Ordering::Relaxed)
    }
    pub fn negative_dentries(&self) -> i64 {
        self.negative.load(Ordering::Relaxed)
    }
    pub fn inodes(&self) -> i64 {
        self.inodes.load(Ordering::Relaxed)
    }
}

pub(crate) struct Dentry {
    pub parent: DentryId,
    pub name: Box<[u8]>,
    pub ino: Option<Ino>,
    pub kind: Option<FileType>,
    pub refcount: u32,
    pub hashed: bool,
    first_child: DentryId,
    next_sibling: DentryId,
    prev_sibling: DentryId,
}

struct InodeRec {
    refs: u32,
    nlookup: u64,
}

pub(crate) struct State {
    slots: Vec<Option<Dentry>>,
    free: Vec<DentryId>,
    hash: HashMap<(DentryId, Box<[u8]>), DentryId>,
    inodes: HashMap<Ino, InodeRec>,
    pub root: DentryId,
}

pub(crate) struct Dcache {
    state: Mutex<State>,
    pub counters: Arc<LiveCounters>,
}

/// The dcache with its lock held, and the filesystem under it: the context
/// of one namespace operation.
pub(crate) struct Ns<'a> {
    pub st: MutexGuard<'a, State>,
    pub fs: &'a dyn FileSystem,
    counters: &'a LiveCounters,
}

impl Dcache {
    pub fn new(fs: &dyn FileSystem) -> Result<Dcache> {
        let counters = Arc::new(LiveCounters::default());
        let root_ino = fs.root();
        let attr = fs.getattr(root_ino)?;
        let mut st = State {
            slots: Vec::new(),
            free: Vec::new(),
            hash: HashMap::new(),
            inodes: HashMap::new(),
            root: NONE,
        };
        // The root's implicit lookup reference is not ours to forget.
        st.inodes.insert(
            root_ino,
            InodeRec {
                refs: 0,
                nlookup: 0,
            },
        );
        counters.inodes.fetch_add(1, Ordering::Relaxed);
        let d = Dentry {
            parent: NONE,
            name: Box::new([]),
            ino: Some(root_ino),
            kind: Some(attr.kind),
            refcount: 1, // the root is pinned for the Vfs's life
            hashed: true,
            first_child: NONE,
            next_sibling: NONE,
            prev_sibling: NONE,
        };
        st.inodes.get_mut(&root_ino).unwrap().refs += 1;
        st.slots.push(Some(d));
        st.root = 0;
        st.slots[0].as_mut().unwrap().parent = 0;
        counters.dentries.fetch_add(1, Ordering::Relaxed);
        Ok(Dcache {
            state: Mutex::new(st),
            counters,
        })
    }

    pub fn lock<'a>(&'a self, fs: &'a dyn FileSystem) -> Ns<'a> {
        Ns {
            st: self.state.lock(),
            fs,
            counters: &self.counters,
        }
    }
}

impl Ns<'_> {
    pub fn d(&self, id: DentryId) -> &Dentry {
        self.st.slots[id as usize].as_ref().expect("live dentry")
    }

    fn d_mut(&mut self, id: DentryId) -> &mut Dentry {
        self.st.slots[id as usize].as_mut().expect("live dentry")
    }

    pub fn root(&self) -> DentryId {
        self.st.root
    }

    pub fn parent(&self, id: DentryId) -> DentryId {
        self.d(id).parent
    }

    pub fn is_root(&self, id: DentryId) -> bool {
        id == self.st.root
    }

    /// Takes a reference on a dentry (`dget`).
    pub fn dget(&mut self, id: DentryId) {
        self.d_mut(id).refcount += 1;
    }

    /// Drops a reference (`dput`). An unhashed dentry is freed at its last
    /// put; a hashed one stays cached, unused.
    pub fn dput(&mut self, id: DentryId) {
        let d = self.d_mut(id);
        debug_assert!(d.refcount > 0);
        d.refcount -= 1;
        self.maybe_free(id);
    }

    /// Takes a reference on an in-core inode (an open file).
    pub fn iget(&mut self, ino: Ino) {
        self.st.inodes.get_mut(&ino).expect("in-core inode").refs += 1;
    }

    /// Drops a reference on an in-core inode; the last one returns the
    /// filesystem's lookup count.
    pub fn iput(&mut self, ino: Ino) {
        let rec = self.st.inodes.get_mut(&ino).expect("in-core inode");
        rec.refs -= 1;
        if rec.refs == 0 {
            let nlookup = rec.nlookup;
            self.st.inodes.remove(&ino);
            self.counters.inodes.fetch_sub(1, Ordering::Relaxed);
            if nlookup > 0 {
                self.fs.forget(ino, nlookup);
            }
        }
    }

    /// Records a lookup reference the filesystem just counted for `attr.ino`
    /// and takes an in-core reference for a new dentry.
    fn inode_from_fs(&mut self, ino: Ino) {
        let counters = self.counters;
        let rec = self.st.inodes.entry(ino).or_insert_with(|| {
            counters.inodes.fetch_add(1, Ordering::Relaxed);
            InodeRec {
                refs: 0,
                nlookup: 0,
            }
        });
        rec.nlookup += 1;
        rec.refs += 1;
    }

    fn alloc(&mut self, parent: DentryId, name: &[u8], attr: Option<&Attr>) -> DentryId {
        if let Some(a) = attr {
            self.inode_from_fs(a.ino);
        }
        let first = self.d(parent).first_child;
        let d = Dentry {
            parent,
            name: name.into(),
            ino: attr.map(|a| a.ino),
            kind: attr.map(|a| a.kind),
            refcount: 0,
            hashed: true,
            first_child: NONE,
            next_sibling: first,
            prev_sibling: NONE,
        };
        let id = match self.st.free.pop() {
            Some(id) => {
                self.st.slots[id as usize] = Some(d);
                id
            }
            None => {
                self.st.slots.push(Some(d));
                (self.st.slots.len() - 1) as DentryId
            }
        };
        if first != NONE {
            self.d_mut(first).prev_sibling = id;
        }
        self.d_mut(parent).first_child = id;
        self.st.hash.insert((parent, name.into()), id);
        self.counters.dentries.fetch_add(1, Ordering::Relaxed);
        if attr.is_none() {
            self.counters.negative.fetch_add(1, Ordering::Relaxed);
        }
        id
    }

    fn unlink_child(&mut self, id: DentryId) {
        let (parent, prev, next) = {
            let d = self.d(id);
            (d.parent, d.prev_sibling, d.next_sibling)
        };
        if prev != NONE {
            self.d_mut(prev).next_sibling = next;
        } else {
            self.d_mut(parent).first_child = next;
        }
        if next != NONE {
            self.d_mut(next).prev_sibling = prev;
        }
        let d = self.d_mut(id);
        d.prev_sibling = NONE;
        d.next_sibling = NONE;
    }

    fn link_child(&mut self, parent: DentryId, id: DentryId) {
        let first = self.d(parent).first_child;
        {
            let d = self.d_mut(id);
            d.parent = parent;
            d.next_sibling = first;
            d.prev_sibling = NONE;
        }
        if first != NONE {
            self.d_mut(first).prev_sibling = id;
        }
        self.d_mut(parent).first_child = id;
    }

    /// Frees `id` if nothing holds it: unused and unhashed, or a cached
    /// negative or unused dentry whose removal the caller asked for by
    /// unhashing it. Freeing a child may free its unhashed parent in turn.
    fn maybe_free(&mut self, mut id: DentryId) {
        loop {
            let d = self.d(id);
            if d.refcount > 0 || d.hashed || d.first_child != NONE || id == self.st.root {
                return;
            }
            let parent = d.parent;
            self.unlink_child(id);
            let d = self.st.slots[id as usize].take().expect("live dentry");
            self.st.free.push(id);
            self.counters.dentries.fetch_sub(1, Ordering::Relaxed);
            match d.ino {
                Some(ino) => self.iput(ino),
                None => {
                    self.counters.negative.fetch_sub(1, Ordering::Relaxed);
                }
            }
            id = parent;
        }
    }

    /// Removes `id` from the hash (`d_drop`); frees it if unused.
    pub fn d_drop(&mut self, id: DentryId) {
        let d = self.d_mut(id);
        if !d.hashed {
            return;
        }
        d.hashed = false;
        let key = (d.parent, d.name.clone());
        self.st.hash.remove(&key);
        self.maybe_free(id);
    }

    /// Unhashes `id` and every cached descendant (`d_invalidate`), freeing
    /// whatever is unused. Used when a directory is removed or replaced.
    pub fn d_invalidate(&mut self, id: DentryId) {
        let mut stack = vec![id];
        let mut order = Vec::new();
        while let Some(x) = stack.pop() {
            order.push(x);
            let mut c = self.d(x).first_child;
            while c != NONE {
                stack.push(c);
                c = self.d(c).next_sibling;
            }
        }
        // Children first, so each parent sees its children gone.
        for x in order.into_iter().rev() {
            if self.st.slots[x as usize].is_some() {
                self.d_drop(x);
            }
        }
    }

    /// The cached dentry for `name` in `parent`, if any.
    pub fn d_lookup_cached(&self, parent: DentryId, name: &[u8]) -> Option<DentryId> {
        // One allocation per probe: the global mode is the baseline, not the
        // fast path.
        self.st
            .hash
            .get(&(parent, Box::<[u8]>::from(name)))
            .copied()
    }

    /// Looks `name` up in `parent`: from the cache (revalidated by the
    /// filesystem's hook), else from the filesystem, caching the answer,
    /// a miss included. Returns a possibly negative dentry.
    pub fn d_lookup(&mut self, parent: DentryId, name: &[u8]) -> Result<DentryId> {
        if let Some(id) = self.d_lookup_cached(parent, name) {
            let d = self.d(id);
            let pino = self.d(parent).ino.expect("positive parent");
            let valid = match d.ino {
                Some(ino) => self.fs.revalidate(pino, name, ino)?,
                None => true,
            };
            if valid {
                return Ok(id);
            }
            self.d_invalidate(id);
        }
        let pino = self.d(parent).ino.expect("positive parent");
        match self.fs.lookup(pino, name) {
            Ok(attr) => Ok(self.alloc(parent, name, Some(&attr))),
            Err(e) if errno_of(&e) == ENOENT => Ok(self.alloc(parent, name, None)),
            Err(e) => Err(e),
        }
    }

    /// Records a name the filesystem just created (`d_instantiate`):
    /// replaces any negative dentry for it.
    pub fn d_instantiate(&mut self, parent: DentryId, name: &[u8], attr: &Attr) -> DentryId {
        if let Some(old) = self.d_lookup_cached(parent, name) {
            if self.d(old).ino.is_none() && self.d(old).refcount == 0 {
                // Turn the negative dentry positive in place.
                self.inode_from_fs(attr.ino);
                self.counters.negative.fetch_sub(1, Ordering::Relaxed);
                let d = self.d_mut(old);
                d.ino = Some(attr.ino);
                d.kind = Some(attr.kind);
                return old;
            }
            self.d_drop(old);
        }
        self.alloc(parent, name, Some(attr))
    }

    /// Records that `id`'s name was removed (`d_delete`): an unused dentry
    /// becomes negative; one in use is unhashed and lives on for its holders.
    pub fn d_delete(&mut self, id: DentryId) {
        let d = self.d(id);
        if d.refcount == 0 && d.first_child == NONE {
            let ino = d.ino;
            let d = self.d_mut(id);
            d.ino = None;
            d.kind = None;
            self.counters.negative.fetch_add(1, Ordering::Relaxed);
            if let Some(ino) = ino {
                self.iput(ino);
            }
        } else {
            self.d_invalidate(id);
        }
    }

    /// Records a rename the filesystem just made (`d_move`). `src` is the
    /// cached dentry of the old name, `dst` that of the new name, if cached.
    pub fn d_move(
        &mut self,
        src: DentryId,
        new_parent: DentryId,
        new_name: &[u8],
        dst: Option<DentryId>,
        exchange: bool,
    ) {
        if exchange {
            let dst = dst.expect("exchange target is cached");
            let (sp, sn) = (self.d(src).parent, self.d(src).name.clone());
            self.rehash(src, new_parent, new_name);
            self.rehash_over(dst, sp, &sn);
            return;
        }
        if let Some(dst) = dst {
            if dst != src {
                self.d_invalidate(dst);
            }
        }
        self.rehash(src, new_parent, new_name);
    }

    fn rehash(&mut self, id: DentryId, parent: DentryId, name: &[u8]) {
        let d = self.d(id);
        let key = (d.parent, d.name.clone());
        if d.hashed && self.st.hash.get(&key) == Some(&id) {
            self.st.hash.remove(&key);
        }
        self.rehash_over(id, parent, name);
    }

    fn rehash_over(&mut self, id: DentryId, parent: DentryId, name: &[u8]) {
        let old_parent = self.d(id).parent;
        if old_parent != parent {
            self.unlink_child(id);
            self.link_child(parent, id);
        }
        let d = self.d_mut(id);
        d.name = name.into();
        d.hashed = true;
        self.st.hash.insert((parent, name.into()), id);
        if old_parent != parent {
            self.maybe_free(old_parent);
        }
    }

    /// Is `anc` an ancestor of `id` (or `id` itself)?
    pub fn is_ancestor(&self, anc: DentryId, mut id: DentryId) -> bool {
        loop {
            if id == anc {
                return true;
            }
            if id == self.st.root {
                return false;
            }
            id = self.d(id).parent;
        }
    }

    /// Drops every unused dentry (`shrink_dcache_sb` / "drop caches").
    pub fn shrink_all(&mut self) {
        loop {
            let before = self.len();
            self.shrink_pass();
            if self.len() == before {
                return;
            }
        }
    }

    fn shrink_pass(&mut self) {
        let ids: Vec<DentryId> = (0..self.st.slots.len() as DentryId)
            .filter(|&i| self.st.slots[i as usize].is_some())
            .collect();
        for id in ids {
            if self.st.slots[id as usize].is_some()
                && self.d(id).refcount == 0
                && self.d(id).first_child == NONE
            {
                self.d_drop(id);
            }
        }
    }

    /// Dentries cached now (`nr_dentry`).
    pub fn len(&self) -> usize {
        self.st.slots.len() - self.st.free.len()
    }
}

impl Drop for Dcache {
    /// Teardown (`shrink_dcache_for_umount`): nothing else can reach the
    /// cache, so every dentry and in-core inode goes; the filesystem drops
    /// its own tables with itself.
    fn drop(&mut self) {
        let st = &mut *self.state.lock();
        let live = st.slots.iter().filter(|s| s.is_some()).count() as i64;
        let negative = st
            .slots
            .iter()
            .flatten()
            .filter(|d| d.ino.is_none())
            .count() as i64;
        self.counters.dentries.fetch_sub(live, Ordering::Relaxed);
        self.counters
            .negative
            .fetch_sub(negative, Ordering::Relaxed);
        self.counters
            .inodes
            .fetch_sub(st.inodes.len() as i64, Ordering::Relaxed);
        st.slots.clear();
        st.hash.clear();
        st.inodes.clear();
    }
}
