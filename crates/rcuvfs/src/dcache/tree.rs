//! Finding, adding, moving, deleting and killing dentries.

use std::ptr;

use super::dentry::{name_hash, same_name, DRef, Dentry, Name, COMPLETE, HASHED};
use super::names::NameLocks;
use super::{Dcache, Spliced};
use crate::inode::Inode;
use crate::sync::atomic::{cell_get, cell_set, Ordering};
use crate::sync::index::{Index, InsertError, Probe};
use crate::sync::{LockrefGuard, MutexGuard, RcuGuard};

impl Dcache {
    /// [`lookup_rcu_h`](Self::lookup_rcu_h), hashing the name itself (the
    /// loom models').
    #[cfg(loom)]
    #[inline]
    pub fn lookup_rcu<'g>(
        &'g self,
        guard: &RcuGuard<'_>,
        parent: &'g Dentry,
        name: &[u8],
    ) -> Option<(&'g Dentry, u32)> {
        self.lookup_rcu_h(guard, parent, name, name_hash(parent, name), crate::hash::short_key(name))
    }

    /// Finds a hashed dentry for `name` under `parent` (`__d_lookup_rcu`),
    /// given the name's hash (`name_hash(parent, name)`: the walk computes
    /// it as it finds the name). Returns it with the sequence count read
    /// before its name was compared. `None`: not cached, or a writer was in
    /// progress on a candidate; the caller falls back to a locked lookup.
    /// The caller is in a read section and owes the checks in the module
    /// doc.
    ///
    /// `key`: the name's [`short_key`](crate::hash::short_key) (the walk's
    /// scan makes it with the hash), or 0: a candidate's name is then
    /// compared byte by byte.
    ///
    /// A candidate in a write section stops the probe: during a rename the
    /// moving dentry may sit, with its new name, in the slot of the name it
    /// leaves, and a probe that skipped it could miss a name that an
    /// exchange keeps present throughout.
    #[inline]
    pub fn lookup_rcu_h<'g>(
        &'g self,
        guard: &RcuGuard<'_>,
        parent: &'g Dentry,
        name: &[u8],
        hash: u64,
        key: u64,
    ) -> Option<(&'g Dentry, u32)> {
        parent.children.find(guard, hash, |d| Self::probe_rcu(d, parent, hash, name, key)).flatten()
    }

    /// Whether a probe for `name` misses cleanly: it meets no entry under
    /// the name's tag at all (not even one it could not use: in a write
    /// section, unhashed, moved, or another name with the same tag). A
    /// clean miss means that, at each slot's load, no entry of this name
    /// was there: if one had been dropped, the load read its removal (or a
    /// later write of that slot, all RMWs after it), Acquire against its
    /// Release, so what the dropper did before (clearing `COMPLETE`) is
    /// visible to the caller's next load. With an unusable candidate there
    /// is no such guarantee (its flags and name are read Relaxed), so only
    /// a clean miss in a `COMPLETE` directory is an answer. (By name, for
    /// the loom models; the walk has the hash.)
    #[cfg(loom)]
    pub(crate) fn misses_cleanly(&self, guard: &RcuGuard<'_>, parent: &Dentry, name: &[u8]) -> bool {
        self.misses_cleanly_h(guard, parent, name_hash(parent, name))
    }

    /// `misses_cleanly` (above) for a caller that has the
    /// name's hash (`name_hash(parent, name)`).
    pub(crate) fn misses_cleanly_h(&self, guard: &RcuGuard<'_>, parent: &Dentry, hash: u64) -> bool {
        // Any entry under the tag stops the probe: no clean miss.
        parent.children.find(guard, hash, |_| Probe::Stop(())).is_none()
    }

    #[inline(always)]
    fn probe_rcu<'g>(
        d: &Dentry,
        parent: &'g Dentry,
        hash: u64,
        name: &[u8],
        key: u64,
    ) -> Probe<Option<(&'g Dentry, u32)>> {
        // Acquire (in `raw`): pairs with the writer's Release of the
        // count, so the fields read below are at least that new.
        let seq = d.seq.raw();
        if seq & 1 != 0 {
            return Probe::Stop(None);
        }
        // A dentry reached through a slot loaded before it left the
        // index: if the count we read is the one its unhash
        // published (`seq.invalidate`, Release), the cleared flag is
        // visible too; skip it. Otherwise the caller's final check
        // fails instead.
        if d.flags.load(Ordering::Relaxed) & HASHED == 0 {
            return Probe::Skip;
        }
        if !ptr::eq(d.parent.load(Ordering::Relaxed), parent) {
            return Probe::Skip;
        }
        let n = d.name();
        if n.hash != hash {
            return Probe::Skip;
        }
        // A short name is one word (`Name::key`); with `key` 0 the bytes
        // are compared.
        debug_assert!(key == 0 || key == crate::hash::short_key(name));
        let same = if key != 0 { n.key() == key } else { same_name(&n.bytes, name) };
        if !same {
            return Probe::Skip;
        }
        // SAFETY: the walk's contract: the caller stays in its read
        // section while it uses what it found (entries are freed only
        // a grace period after they leave the index).
        Probe::Stop(Some((unsafe { &*(d as *const Dentry) }, seq)))
    }

    /// Whether the name whose hash (`name_hash(dir, name)`) is `hash` is
    /// certainly not in `dir`: `dir` is `COMPLETE` (and its superblock
    /// still trusts that) and a probe of its index met no entry under the
    /// name's tag (see [`misses_cleanly_h`](Self::misses_cleanly_h)). The RCU
    /// walk asks after a miss (so the walk of a cached path pays nothing);
    /// `lookup_fs` asks holding the name's lock, so that no create of it
    /// runs meanwhile.
    pub(crate) fn certainly_absent_h(&self, guard: &RcuGuard<'_>, dir: &Dentry, hash: u64) -> bool {
        // The flag again after the probe: that is the load its guarantee is
        // about.
        dir.is_complete() && dir.sb().dirs_complete() && self.misses_cleanly_h(guard, dir, hash) && dir.is_complete()
    }

    /// Finds and references a hashed dentry for `name` under `parent`
    /// (`d_lookup`). A miss means the name was not cached at some instant
    /// of the call: an index never hides a name present throughout, and a
    /// candidate that dies or moves under us is looked for again.
    pub fn d_lookup<'a>(&'a self, parent: &Dentry, name: &[u8]) -> Option<DRef<'a>> {
        self.d_lookup_h(parent, name, name_hash(parent, name))
    }

    /// [`d_lookup`](Self::d_lookup) for a caller that has the name's hash
    /// (`name_hash(parent, name)`: a name is hashed once per update).
    pub(crate) fn d_lookup_h<'a>(&'a self, parent: &Dentry, name: &[u8], hash: u64) -> Option<DRef<'a>> {
        loop {
            let g = self.rcu.read_lock();
            let found = parent.children.find(&g, hash, |d| {
                if d.flags.load(Ordering::Relaxed) & HASHED == 0 || !ptr::eq(d.parent.load(Ordering::Relaxed), parent) {
                    return Probe::Skip;
                }
                let n = d.name();
                if n.hash != hash || !same_name(&n.bytes, name) {
                    return Probe::Skip;
                }
                Probe::Stop(d as *const Dentry)
            })?;
            // SAFETY: found in the index inside our read section.
            let found = unsafe { &*found };
            let seq = found.seq.raw();
            if seq & 1 == 0 && found.lockref().get_not_dead() {
                // SAFETY: we just took this reference.
                let r = unsafe { DRef::adopt(self, found) };
                // Still this name, under this parent, in the index.
                let still = found.is_hashed() && ptr::eq(found.parent.load(Ordering::Acquire), parent) && {
                    let n = found.name();
                    n.hash == hash && same_name(&n.bytes, name)
                };
                if still && !found.seq.read_retry(seq) {
                    return Some(r);
                }
                drop(r);
            }
            // Dying, moving, or written under us: look again (a dead dentry
            // has left the index before it was marked dead).
            drop(g);
            crate::sync::atomic::spin_hint();
        }
    }

    /// Inserts `d` into `parent`'s index under `hash`, growing the index as
    /// needed. `false` if the index is closed (its directory left the tree).
    fn index_insert(&self, index: &Index<Dentry>, hash: u64, d: &Dentry) -> bool {
        loop {
            let mut l = index.lock(hash, &self.rcu);
            match l.insert(d, hash) {
                Ok(()) => return true,
                Err(InsertError::Full) => {
                    drop(l);
                    index.grow(&self.rcu);
                }
                Err(InsertError::Closed) => return false,
            }
        }
    }

    /// Allocates a dentry for `name` under `parent` with `inode` (null for
    /// negative), hashes it, and returns a reference to it (`d_alloc` +
    /// `d_add`). The caller holds the name's name lock, and a reference on
    /// `parent` and on `inode` (which passes to the dentry). A dentry being
    /// killed may still sit in the index under the same name: it leaves it
    /// soon, and until then both agree with the filesystem.
    ///
    /// Under a directory that has left the tree (its index closed), nothing
    /// is cached: the dentry stays unhashed and dies at its last put, as
    /// Linux caches nothing under a dead directory. So every hashed dentry's
    /// parent is hashed, or a root, and every hashed dentry is found from
    /// its superblock's root.
    pub fn d_add<'a>(&'a self, parent: &Dentry, name: &[u8], inode: *const Inode) -> DRef<'a> {
        self.d_add_h(parent, name, name_hash(parent, name), inode)
    }

    /// [`d_add`](Self::d_add) for a caller that has the name's hash
    /// (`name_hash(parent, name)`).
    pub(crate) fn d_add_h<'a>(&'a self, parent: &Dentry, name: &[u8], hash: u64, inode: *const Inode) -> DRef<'a> {
        debug_assert_eq!(hash, name_hash(parent, name));
        parent.lockref().get(); // the child's reference on its parent
        let d = Dentry::new(
            HASHED | self.layout,
            parent,
            hash,
            name,
            inode,
            parent.sb.load(Ordering::Relaxed),
            self.lockref_ctor(),
        );
        // SAFETY: just allocated; published by the insert.
        let dr = unsafe { &*d };
        if !inode.is_null() {
            // The name is present: no cached miss may say otherwise once
            // this dentry goes (`absent`).
            self.absent_forget(parent, name, hash);
        }
        self.counters.add_dentry(1, inode.is_null());
        Self::alias_add(inode, dr);
        if !self.index_insert(&parent.children, hash, dr) {
            // Not published: no lock needed to clear the flag.
            dr.flags.fetch_and(!HASHED, Ordering::Relaxed);
        }
        self.shrink_to_target();
        DRef { d: dr, dc: self }
    }

    /// The dentry for `name` in `dir` naming the inode `ip` that the
    /// filesystem just returned for it (`d_splice_alias`); the caller's
    /// reference on `ip` passes to the result, and the caller holds the
    /// name's name lock.
    ///
    /// A directory inode has at most one dentry (Linux's rule): if it
    /// already has a live one, hashed elsewhere or unhashed by an
    /// invalidation while a handle still holds it, that dentry moves here
    /// instead of a second one being made. Two dentries of one directory
    /// would cache two sets of children, and a create made through one
    /// would hide behind a miss cached under the other. A move to another
    /// parent changes the tree's shape, so it needs the rename mutex, which
    /// comes before name locks: a caller that holds it passes its guard
    /// (`renaming`); otherwise it is only tried, and on failure the answer
    /// is [`Spliced::RenameBusy`] (Linux's `__d_unalias` answers ESTALE).
    /// ELOOP if the move would put a directory under itself, or move a
    /// filesystem's root.
    pub fn d_splice_alias<'a>(
        &'a self,
        dir: &Dentry,
        name: &[u8],
        ip: *const Inode,
        renaming: Option<&MutexGuard<'_, ()>>,
    ) -> std::io::Result<Spliced<'a>> {
        // SAFETY: the caller's reference keeps the inode live.
        let inode = unsafe { &*ip };
        if inode.kind == crate::fs::FileType::Dir {
            if let Some(alias) = self.live_alias(inode) {
                // Moving a dentry needs its name's lock (a rename of its old
                // name may be in progress, and would move it too). The
                // caller holds the new name's; the old one is only tried
                // (name locks of two names come in stripe order), and the
                // dentry must still be under it once held.
                let old_hash = self.name_hash_of(&alias);
                let new_hash = name_hash(dir, name);
                let old_lock = if NameLocks::same_stripe(old_hash, new_hash) {
                    Ok(None)
                } else {
                    self.names.try_lock(old_hash).map(Some).ok_or(())
                };
                let result = if alias.is_root() {
                    crate::error::fail(crate::error::ELOOP)
                } else if old_lock.is_err() || self.name_hash_of(&alias) != old_hash {
                    Ok(Spliced::RenameBusy { wait: Some(old_hash) })
                } else if ptr::eq(alias.parent(), dir) {
                    // Back under the same parent: the shape does not change.
                    self.move_dentry(&alias, dir, name, None, false);
                    Ok(Spliced::Done(alias))
                } else {
                    let tried = if renaming.is_some() { None } else { self.rename_mutex.try_lock() };
                    if renaming.is_none() && tried.is_none() {
                        Ok(Spliced::RenameBusy { wait: None })
                    } else if self.is_ancestor(&alias, dir) {
                        crate::error::fail(crate::error::ELOOP)
                    } else {
                        self.move_dentry(&alias, dir, name, None, false);
                        Ok(Spliced::Done(alias))
                    }
                };
                drop(old_lock);
                // SAFETY: the caller's reference, not passed on: the alias
                // holds its own.
                unsafe { self.iput(ip) };
                return result;
            }
        }
        Ok(Spliced::Done(self.d_add(dir, name, ip)))
    }

    /// A referenced live dentry naming `inode`, if any.
    pub(super) fn live_alias(&self, inode: &Inode) -> Option<DRef<'_>> {
        let _g = self.rcu.read_lock();
        // Copied out first: the alias lock is a leaf, and a get may take
        // d_lock.
        let aliases = Self::aliases_of(inode);
        // SAFETY: on the alias list inside our read section, so freed only
        // after it ends; a dead one fails `get_not_dead`.
        let alias = |d: &usize| unsafe { &*(*d as *const Dentry) };
        // A name still in the tree first (an unlinked one of a file with
        // other links is still on the list while held).
        let hashed = aliases.iter().map(alias).filter(|d| d.is_hashed() || d.is_root());
        let rest = aliases.iter().map(alias);
        hashed.chain(rest).find_map(|d| d.lockref().get_not_dead().then(|| DRef { d, dc: self }))
    }

    /// The dentries on `inode`'s alias list, copied out under its lock
    /// (as addresses: the caller's read section keeps them allocated, and
    /// a dead one fails any reference it tries to take).
    pub(super) fn aliases_of(inode: &Inode) -> Vec<usize> {
        inode.with_aliases(|head| {
            let mut out = Vec::new();
            let mut d = *head;
            // SAFETY: under the alias lock, every dentry on the list is live
            // (it leaves the list under this lock before it is killed).
            while let Some(x) = unsafe { d.as_ref() } {
                out.push(d as usize);
                // SAFETY: under the alias lock (the link's lock).
                d = unsafe { cell_get(&x.alias_next) };
            }
            out
        })
    }

    /// Adds `d` to `inode`'s aliases.
    pub(super) fn alias_add(inode: *const Inode, d: &Dentry) {
        // SAFETY: the caller passes a live inode reference to `d`.
        if let Some(i) = unsafe { inode.as_ref() } {
            i.with_aliases(|head| {
                // SAFETY: under the alias lock; `d` is on no list.
                unsafe { cell_set(&d.alias_next, *head) };
                *head = d;
            });
        }
    }

    /// Removes `d` from `inode`'s aliases.
    pub(super) fn alias_del(inode: *const Inode, d: &Dentry) {
        // SAFETY: `d` still holds its inode reference (the caller drops it
        // after this).
        if let Some(i) = unsafe { inode.as_ref() } {
            i.with_aliases(|head| {
                // Find what points at `d`: the head or another alias
                // (lists are short: one dentry per name of the inode).
                // SAFETY: under the alias lock; every dentry on the list is
                // live.
                unsafe {
                    let next = cell_get(&d.alias_next);
                    if ptr::eq(*head, d) {
                        *head = next;
                    } else {
                        let mut x = *head;
                        while let Some(xr) = x.as_ref() {
                            let n = cell_get(&xr.alias_next);
                            if ptr::eq(n, d) {
                                cell_set(&xr.alias_next, next);
                                break;
                            }
                            x = n;
                        }
                    }
                    cell_set(&d.alias_next, ptr::null());
                }
            });
        }
    }

    /// Turns a negative dentry positive (`d_instantiate`). The caller holds
    /// the name's name lock and a reference on `inode`, which passes to the
    /// dentry.
    ///
    /// `complete`: a directory the filesystem just made, empty, in a
    /// filesystem that changes only through this cache (a bound memfs): a
    /// miss under it is an answer from the start (`COMPLETE`).
    pub fn d_instantiate(&self, d: &Dentry, inode: *const Inode, complete: bool) {
        let g = d.lockref().lock();
        debug_assert!(d.inode.load(Ordering::Relaxed).is_null());
        self.lru_flip_locked(d, &g, || {
            d.seq.write_begin();
            // Before the inode is published: a walk that sees the directory
            // sees the flag, and no child exists yet (a negative dentry has
            // none) that could have been dropped before it was set.
            if complete {
                d.flags.fetch_or(COMPLETE, Ordering::Relaxed);
            } else {
                d.set_incomplete();
            }
            // Release: publishes the inode's fields (see `Dentry::inode`).
            d.inode.store(inode as *mut Inode, Ordering::Release);
            d.seq.write_end();
        });
        self.counters.negative.add(-1);
        Self::alias_add(inode, d);
    }

    /// Records that `d`'s name was removed (`d_delete`): if the caller's
    /// reference is the only one, `d` becomes negative in place; otherwise it
    /// is unhashed and lives on, positive, for its other holders. The
    /// caller holds the name's name lock. Over a filesystem that answers
    /// misses itself, past the bound on negative dentries
    /// ([`kills_removed`](Self::kills_removed)), the only holder's `d` is
    /// unhashed instead of turned negative: it stays positive, holding its
    /// inode and its place on the inode's alias list, until the caller's
    /// last reference kills it. Where the parent caches misses in its set
    /// of absent names (`absent`), the only holder's file is unhashed too,
    /// and its name goes into the set: a removed file leaves 16 bytes, not
    /// a dentry. Where files have no dentry but where something needs one
    /// (`files_bare`), the only holder's file is unhashed, its name left
    /// nowhere.
    pub fn d_delete(&self, d: &Dentry) {
        let g = d.lockref().lock();
        // The caller's reference the only one: no child either (children
        // hold references).
        let sole = g.count() == 1 && !d.is_root();
        let file = d.inode().is_some_and(|i| i.kind != crate::fs::FileType::Dir);
        // Where a lookup's miss would be cached in the parent's set of
        // absent names, so is this one (16 bytes, not a dentry kept).
        let to_set = sole && file && self.caches_absent(d.parent());
        // Where files have no dentry (`files_bare`), a removed one leaves
        // none: memfs answers for its name.
        let kill = sole && (to_set || (file && self.files_bare(d.sb())) || self.kills_removed(d));
        if kill && file {
            // A file: out of the index under the lock we hold (the name is
            // gone, so its parent stays complete); the caller's last
            // reference kills it. A directory to kill takes the last branch,
            // `unhash_tree`, which also closes its index.
            self.unhash_locked(d, &g, true);
            drop(g);
            if to_set {
                let n = d.name();
                self.absent_add(d.parent(), &n.bytes, n.hash);
            }
        } else if sole && !kill {
            let inode = self.lru_flip_locked(d, &g, || {
                d.seq.write_begin();
                d.set_incomplete();
                let inode = d.inode.swap(ptr::null_mut(), Ordering::Relaxed);
                d.seq.write_end();
                inode
            });
            drop(g);
            Self::alias_del(inode, d);
            self.counters.negative.add(1);
            if !inode.is_null() {
                // SAFETY: the dentry owned this reference on the inode.
                unsafe { self.iput(inode) };
            }
        } else {
            drop(g);
            // The name is gone: its parent may stay complete.
            self.unhash_tree(d, true);
        }
    }

    /// Unhashes `d` (`__d_drop`) with its `d_lock` held: out of its parent's
    /// index, inside a write section of its sequence count, so that no
    /// reader sees it both hashed and gone from the index, and every
    /// reader's validation fails from here.
    /// A positive dentry leaving the index makes its parent incomplete
    /// unless `gone` (its name left the filesystem: an unlink, a rename).
    pub(super) fn unhash_locked(&self, d: &Dentry, _g: &LockrefGuard<'_>, gone: bool) {
        if d.flags.load(Ordering::Relaxed) & HASHED == 0 {
            return;
        }
        let hash = d.name().hash;
        if !gone && !d.inode.load(Ordering::Relaxed).is_null() {
            // Before the removal, whose Release store publishes it.
            d.parent().set_incomplete();
        }
        let index = &d.parent().children;
        d.seq.write_begin();
        let removed = index.lock(hash, &self.rcu).remove(d, hash);
        debug_assert!(removed, "a hashed dentry is in its parent's index");
        d.flags.fetch_and(!HASHED, Ordering::Relaxed);
        crate::sync::audit::shared_writes(1);
        d.seq.write_end();
        index.shrink_if_sparse(&self.rcu);
    }

    /// Unhashes `d` and everything under it (`d_invalidate`: a name a
    /// backend reports changed); see [`unhash_tree`](Self::unhash_tree).
    pub fn d_invalidate(&self, d: &Dentry) {
        self.unhash_tree(d, false);
    }

    /// Takes `top` and its whole subtree out of the tree: each dentry is
    /// unhashed and its index closed (nothing new is cached under it), top
    /// down; then the unused ones die, bottom up, and the ones in use die at
    /// their last put. This keeps the invariant that an unhashed dentry has
    /// no hashed child, which is what lets every hashed dentry be found from
    /// its root (teardown, `kill_super`, `drop_caches`). `gone`: `top`'s
    /// name left its filesystem (its parent may stay complete).
    pub fn unhash_tree(&self, top: &Dentry, gone: bool) {
        let g = self.rcu.read_lock();
        let mut stack = vec![top];
        let mut all: Vec<&Dentry> = Vec::new();
        while let Some(x) = stack.pop() {
            {
                let l = x.lockref().lock();
                if l.count() < 0 {
                    continue; // dead: out of the tree already
                }
                self.unhash_locked(x, &l, gone && ptr::eq(x, top));
                // Its cached misses may be stale too (`absent`).
                self.absent_drain(x);
            }
            // Nothing is cached under it from now on: no miss is an answer.
            x.set_incomplete();
            // Closed before it is read, and `close` waits for the inserts
            // in flight: no child is added behind us.
            x.children.close(&self.rcu);
            x.children.for_each(&g, |c| stack.push(c));
            all.push(x);
        }
        // Children before their parents: killing one drops its parent's
        // count, which may then be zero too.
        for x in all.into_iter().rev() {
            // Still in our read section: `x` is allocated even if its last
            // holder killed it meanwhile (then it is dead).
            let l = x.lockref().lock();
            if l.count() == 0 {
                self.unhash_and_mark_dead(x, l);
                self.kill(x);
            }
        }
        drop(g);
    }

    /// Kills `d` in the sense of `lockref_mark_dead`, with its `d_lock`
    /// held (`g`) and its count zero (or the caller's last reference): it
    /// leaves its parent's index (every RCU reader's validation fails from
    /// here), leaves the LRU, and is marked dead, so that no lookup, tree
    /// walk or shrinker finds it again and no `dput` touches its LRU
    /// state. Unlocks. The caller must then free it with `kill`. Every kill
    /// goes through here, so that "dead" always means "out of the index and
    /// off the LRU".
    pub(super) fn unhash_and_mark_dead(&self, d: &Dentry, g: LockrefGuard<'_>) {
        self.unhash_locked(d, &g, false);
        d.seq.invalidate();
        self.lru_del_locked(d, &g);
        g.unlock_dead();
    }

    /// Frees a dead dentry (`dentry_kill`): its inode reference returned,
    /// its (empty) index and its memory retired through RCU, and its
    /// reference on its parent dropped, which may kill the parent too. The
    /// caller marked it dead (`unhash_and_mark_dead`); nobody else can.
    pub(super) fn kill(&self, d: &Dentry) {
        let mut d = d as *const Dentry;
        loop {
            // SAFETY: `d` is dead but not yet retired: only we free it.
            let dr = unsafe { &*d };
            debug_assert!(dr.flags.load(Ordering::Relaxed) & (HASHED | super::dentry::ON_LRU) == 0);
            let inode = dr.inode.swap(ptr::null_mut(), Ordering::Relaxed);
            Self::alias_del(inode, dr);
            self.counters.add_dentry(-1, inode.is_null());
            if !inode.is_null() {
                // SAFETY: the dentry owned this reference.
                unsafe { self.iput(inode) };
            }
            // A dead directory has no children left (they held references);
            // RCU readers may still probe its tombstones.
            dr.children.retire(&self.rcu);
            // Empty: a set that is not holds its directory, which then is
            // not dead (`absent`); its table may be left.
            if dr.absent.has_table() {
                self.absent_drain(dr);
                dr.absent.retire(&self.rcu);
            }
            let parent = dr.parent.load(Ordering::Relaxed);
            let name = dr.name.load(Ordering::Relaxed);
            #[cfg(loom)]
            self.rcu.poison_after_grace_period(&dr.freed);
            // SAFETY: out of every index and list: only RCU readers that
            // found it earlier can see it, and they are waited out.
            unsafe {
                dr.retire_name(&self.rcu, name);
                self.rcu.retire_box(d as *mut Dentry);
            }
            // Drop the reference on the parent.
            // SAFETY: the child's reference kept the parent live.
            if !self.put_or_mark_dead(unsafe { &*parent }) {
                return;
            }
            d = parent;
        }
    }

    /// Records a rename the filesystem just made (`d_move`). `src` is the
    /// dentry of the old name; `dst` that of the new name (negative or not,
    /// possibly unhashed by an invalidation meanwhile). The caller holds
    /// both names' name locks, and the rename mutex for a move between
    /// directories, and references on both dentries.
    pub fn d_move(&self, src: &Dentry, new_parent: &Dentry, new_name: &[u8], dst: &Dentry, exchange: bool) {
        self.move_dentry(src, new_parent, new_name, Some(dst), exchange);
    }

    /// Moves `d` to `name` under `parent`. With `over` (a rename): the
    /// dentry hashed under the new name takes no part any more (it is
    /// unhashed, and dies at its last put), or, with `exchange`, moves to
    /// `d`'s old place. The new name's slot changes in one store, so a
    /// lookup of it finds the old dentry or the new one, never neither.
    /// The caller holds the names' name locks (and the rename mutex if the
    /// parent changes) and keeps both dentries alive.
    pub(super) fn move_dentry(&self, d: &Dentry, parent: &Dentry, name: &[u8], over: Option<&Dentry>, exchange: bool) {
        let over = over.filter(|o| !ptr::eq(*o, d));
        let exchange = exchange && over.is_some();
        let old_parent = d.parent();
        let cross = !ptr::eq(old_parent, parent);
        let new_hash = name_hash(parent, name);
        // The name is (or is about to be) present: a rename's destination
        // was looked up, which took its entry out already; a directory's
        // alias moved into place was not (`absent`).
        self.absent_forget(parent, name, new_hash);
        // Parent references first: a get may take a parent's d_lock, which
        // comes before its children's.
        if cross {
            parent.lockref().get();
            if exchange {
                old_parent.lockref().get();
            }
        }
        // The two dentries' d_locks, by address (neither is the other's
        // ancestor: the caller checked).
        let (g1, g2) = match over {
            Some(o) if o.order_key() < d.order_key() => {
                let a = o.lockref().lock();
                (d.lockref().lock(), Some(a))
            }
            Some(o) => {
                let a = d.lockref().lock();
                (a, Some(o.lockref().lock()))
            }
            None => (d.lockref().lock(), None),
        };
        let old_name = d.name.load(Ordering::Relaxed);
        // SAFETY: we hold d's d_lock; the name is replaced only under it.
        let old_hash = unsafe { Name::from_thin(old_name).hash };
        let was_hashed = d.is_hashed();
        let over_hashed = over.is_some_and(|o| o.is_hashed());
        loop {
            // The home locks of both keys; the old one only if `d` is in an
            // index.
            let (l_new, mut l_old) = if was_hashed {
                let (a, b) = Index::lock2(
                    (&parent.children, new_hash, parent.order_key()),
                    (&old_parent.children, old_hash, old_parent.order_key()),
                    &self.rcu,
                );
                (a, b)
            } else {
                (parent.children.lock(new_hash, &self.rcu), None)
            };
            let mut l_new = l_new;
            // When the old key shares the new key's lock, `l_old` is None
            // and `l_new` serves both.
            // Reserve the new slot before changing anything. A destination
            // directory that left the tree meanwhile (invalidated) caches
            // nothing: `d` then leaves the tree too, and dies at its last
            // put (`d_add`'s rule).
            let mut closed = false;
            if over.is_none() {
                // A directory's alias moved into place (`d_splice_alias`):
                // the filesystem moved it behind the cache's back, which a
                // complete directory does not allow; stop trusting both.
                old_parent.set_incomplete();
                parent.set_incomplete();
            }
            if exchange && !(was_hashed && over_hashed) {
                // `over` takes `d`'s old name but no slot: `d` was in no
                // index, or `over` was in none (invalidated while held), so
                // nothing is put back where `d` leaves. That name is not
                // cached.
                old_parent.set_incomplete();
            }
            if !over_hashed {
                match l_new.insert(d, new_hash) {
                    Ok(()) => {}
                    Err(InsertError::Full) => {
                        drop(l_old);
                        drop(l_new);
                        parent.children.grow(&self.rcu);
                        continue;
                    }
                    Err(InsertError::Closed) => {
                        // The new name is not cached (the directory left the
                        // tree; its close made it incomplete already).
                        parent.set_incomplete();
                        closed = true;
                    }
                }
            }
            d.seq.write_begin();
            let over_old_name = over.filter(|_| exchange).map(|o| o.name.load(Ordering::Relaxed));
            if let Some(o) = over {
                o.seq.write_begin();
            }
            // The new names, then the parents, then the slots.
            let new = Name::alloc(new_hash, name);
            d.name.store(new, Ordering::Release);
            if cross {
                d.parent.store(parent as *const Dentry as *mut Dentry, Ordering::Release);
            }
            if let Some(o) = over.filter(|_| exchange) {
                // SAFETY: we hold d's d_lock: its old name is live.
                let b = unsafe { &Name::from_thin(old_name).bytes };
                o.name.store(Name::alloc(old_hash, b), Ordering::Release);
                if cross {
                    o.parent.store(old_parent as *const Dentry as *mut Dentry, Ordering::Release);
                }
            }
            if over_hashed {
                let o = over.expect("hashed");
                assert!(l_new.replace(o, d, new_hash), "the name renamed over is in its index");
            }
            if was_hashed {
                let l = l_old.as_mut().unwrap_or(&mut l_new);
                if exchange && over_hashed {
                    assert!(l.replace(d, over.expect("exchange"), old_hash), "the source is in its index");
                } else {
                    assert!(l.remove(d, old_hash), "the source is in its index");
                }
            }
            if closed {
                d.flags.fetch_and(!HASHED, Ordering::Relaxed);
            } else {
                d.flags.fetch_or(HASHED, Ordering::Relaxed);
            }
            crate::sync::audit::shared_writes(1);
            if !was_hashed && !closed {
                // Back in the tree (an invalidated dentry renamed, or a
                // directory's alias moved into place): it may cache again.
                d.children.reopen(&self.rcu);
            }
            if let Some(o) = over {
                if !exchange || !was_hashed {
                    // Out of the index now: dies at its last put.
                    o.flags.fetch_and(!HASHED, Ordering::Relaxed);
                }
            }
            d.seq.write_end();
            if let Some(o) = over {
                o.seq.write_end();
            }
            drop(l_old);
            drop(l_new);
            if was_hashed && !(exchange && over_hashed) {
                old_parent.children.shrink_if_sparse(&self.rcu);
            }
            drop(g2);
            drop(g1);
            // SAFETY: no longer reachable from the dentries; readers that
            // loaded them are waited out.
            unsafe {
                d.retire_name(&self.rcu, old_name);
                if let (Some(o), Some(n)) = (over, over_old_name) {
                    o.retire_name(&self.rcu, n);
                }
            }
            break;
        }
        if cross {
            self.renames.write_begin();
            self.renames.write_end();
            // The references the old places held.
            self.dput(old_parent);
            if exchange {
                self.dput(parent);
            }
        }
        if let Some(o) = over.filter(|_| !exchange) {
            // The name renamed over left the tree (an empty directory may
            // still cache misses under it): its subtree goes too.
            self.unhash_tree(o, true);
        }
    }
}
