//! How an operation begins: the walk to its start, the walk of an update
//! to its last name (found and locked), and the retry of an update that a
//! moved directory made stale.

use super::{Entry, Start, Vfs};
use crate::dcache::names::NameGuard;
use crate::dcache::{name_hash, DRef, Dcache, Dentry};
use crate::error::{errno_of, Result};
use crate::inode::Inode;
use crate::mount::Mount;
use crate::namei::{check_path, Last, NameWalk, Parent, Pinned, RefWalk};

/// How many times an update that answered ESTALE (a busy rename mutex or
/// name lock) is tried again. Each try first waits for what was busy, so
/// this bounds only a run of renames that keep winning the race: 4 lost
/// 1 racing test in 100 (two clients renaming directories without pause);
/// a try that still holds the rename mutex from the start would need no
/// bound (not done).
const ESTALE_RETRIES: usize = 64;

/// The name lock of `name` in `dir`.
pub(super) fn lock_name<'a>(dc: &'a Dcache, dir: &Dentry, name: &[u8]) -> NameGuard<'a> {
    dc.names.lock(name_hash(dir as *const Dentry, name))
}

/// Whether `dir` is a directory of a memfs bound to its superblock, which
/// answers for its names itself (`MemFs::unlink_bound_checked`).
fn bound_memfs_dir(dir: &Dentry) -> bool {
    dir.inode().is_some_and(|i| {
        let sb = i.sb();
        i.kind == crate::fs::FileType::Dir && sb.fs.as_memfs().is_some_and(|m| m.bound_to(sb))
    })
}

/// A VFS reference on an in-core inode that no dentry of the caller's
/// holds: one memfs made for a name left without a dentry ([`Uncached`]),
/// or one an open found in memfs with no dentry made
/// (`Dcache::pin_found`). Put when this drops: then, unless something
/// else holds it, only its names in memfs keep it.
pub(super) struct IRef<'a> {
    dc: &'a Dcache,
    inode: *const Inode,
}

impl<'a> IRef<'a> {
    /// # Safety
    /// The caller owns one VFS reference on `inode`, which this takes.
    pub(super) unsafe fn adopt(dc: &'a Dcache, inode: *const Inode) -> IRef<'a> {
        IRef { dc, inode }
    }

    pub(super) fn inode(&self) -> &Inode {
        // SAFETY: our reference keeps it.
        unsafe { &*self.inode }
    }
}

impl Drop for IRef<'_> {
    fn drop(&mut self) {
        // SAFETY: the reference this holds.
        unsafe { self.dc.iput(self.inode) }
    }
}

/// The file a walk found or an open made: through its dentry, or, where
/// none was made, the inode itself.
pub(super) enum Found<'a> {
    Dentry(DRef<'a>),
    Inode(IRef<'a>),
    /// A file the caller's update just made through the bound memfs and
    /// holds no reference on, as it keeps nothing of it
    /// ([`Vfs::create_uncached`](super::Vfs::create_uncached)): the
    /// update's read section (`Dcache::hold_update`, held from its walk to
    /// its end, as long as this) keeps its memory, even if a caller that
    /// bypasses the VFS unlinks it meanwhile.
    Made(*const Inode),
}

impl Found<'_> {
    /// Hands this answer's own reference on its inode (an [`IRef`]'s: not
    /// a dentry's) to the caller, who then owns it: true if there was one.
    /// The answer holds nothing after that: only the caller's reference
    /// keeps the inode (the update's read section may be none, where a
    /// blocking filesystem is mounted: `Dcache::hold_update`).
    pub(super) fn give_ref(&mut self) -> bool {
        let Found::Inode(i) = self else { return false };
        let p = i.inode;
        // The reference is the caller's now: not put on drop.
        std::mem::forget(std::mem::replace(self, Found::Made(p)));
        true
    }

    pub(super) fn inode(&self) -> &Inode {
        match self {
            Found::Dentry(d) => d.inode().expect("positive"),
            Found::Inode(i) => i.inode(),
            // SAFETY: see `Found::Made`.
            Found::Made(p) => unsafe { &**p },
        }
    }
}

/// How an update holds the directory it works in.
pub(super) enum DirPin<'a> {
    /// By a reference of its own (the walk pinned the directory).
    Held(DRef<'a>),
    /// Through the name's dentry, whose reference on its parent keeps the
    /// directory while the name is locked and the dentry held (see
    /// `Dcache::walk_name_rcu`): no store on the directory's dentry.
    ByChild(*const Dentry),
}

/// An update's last name, found and locked (the state `filename_create`
/// and `do_unlinkat` reach in Linux): the name's dentry, positive or
/// negative, with a reference; the name's lock; the directory; the walk.
/// Fields drop in this order: the dentry, the lock, then the directory.
pub(super) struct Named<'a, 'p> {
    pub(super) child: DRef<'a>,
    pub(super) _lock: NameGuard<'a>,
    pub(super) dir: DirPin<'a>,
    pub(super) name: &'p [u8],
    /// The path ended in '/'.
    pub(super) trailing: bool,
    pub(super) w: RefWalk<'a>,
}

impl Named<'_, '_> {
    pub(super) fn dir(&self) -> &Dentry {
        match &self.dir {
            DirPin::Held(d) => d,
            // SAFETY: `child` is a child of this directory (checked under
            // the name lock, which keeps it so) and holds a reference on
            // it; both live as long as `self`.
            DirPin::ByChild(p) => unsafe { &**p },
        }
    }
}

/// Where an update's walk ends: a name, locked, or ".", ".." or "/"
/// (`Other`: which one, [`Update::Other`] says).
pub(super) enum Begun<'a, 'p> {
    Named(Named<'a, 'p>),
    Other,
}

/// The last name of an update, locked, that the dcache holds no dentry
/// for, in a directory of the memfs bound to this Vfs ([`IfUncached`]):
/// the update asks memfs alone and makes no dentry. An unlink's would only
/// be killed again at once; a create's would be the name's second copy
/// (memfs's index answers for it in the RCU walk: the default mode), or,
/// made while the cache is at its size target, would make the shrinker
/// free another, older one (the other modes). With no
/// dentry, the name is no mount point and has no cached children. The
/// name's lock keeps the dcache without one: every dentry of a name is
/// made, or moved to it, under that name's lock.
/// Fields drop in this order: the lock, then the directory.
pub(super) struct Uncached<'a, 'p> {
    pub(super) _lock: NameGuard<'a>,
    pub(super) dir: DRef<'a>,
    pub(super) name: &'p [u8],
    /// `name_hash(dir, name)`.
    pub(super) hash: u64,
    /// The path ended in '/'.
    pub(super) trailing: bool,
    pub(super) _w: RefWalk<'a>,
}

impl<'a, 'p> Uncached<'a, 'p> {
    /// Looks the name up after all, under the lock still held: the
    /// dentry, negative if the name is absent. For a create that finds
    /// the name present, or must answer as a create with a dentry would.
    pub(super) fn look_up(self, dc: &'a Dcache) -> Result<Named<'a, 'p>> {
        let child = dc.lookup_missed_h(&self.dir, self.name, self.hash, None)?;
        let Uncached { _lock, dir, name, trailing, _w: w, .. } = self;
        Ok(Named { child, _lock, dir: DirPin::Held(dir), name, trailing, w })
    }
}

/// What the walk of an update makes of a last name the dcache holds no
/// dentry for, in a directory of the memfs bound to this Vfs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum IfUncached {
    /// Looks it up: a dentry, negative if the name is absent.
    LookUp,
    /// An unlink or rmdir: [`Update::Uncached`], unless the directory
    /// knows the name absent (complete), where the miss is the answer.
    Remove,
    /// A create of a name that is not a directory: [`Update::Uncached`]
    /// where [`Dcache::creates_bare`] says so: in the default mode always
    /// (the directory stops being complete), in the others while the cache
    /// is at its size target, in a directory that is not complete (a
    /// complete one answers its misses itself, and stays complete only
    /// while every name in it has a dentry). Directories are made with
    /// their dentries: a walk into one follows.
    Create,
}

/// Where the walk of an update ends ([`Vfs::begin_update`]).
pub(super) enum Update<'a, 'p> {
    Named(Named<'a, 'p>),
    Uncached(Uncached<'a, 'p>),
    Other(Last<'p>),
}

impl<'a, 'p> Update<'a, 'p> {
    /// As a `Begun`, for a walk that did not ask for `Uncached`.
    fn begun(self) -> Begun<'a, 'p> {
        match self {
            Update::Named(n) => Begun::Named(n),
            Update::Other(_) => Begun::Other,
            Update::Uncached(_) => unreachable!("a name without its dentry where none was asked for"),
        }
    }
}

impl Vfs {
    /// The place a walk starts from (not counted).
    pub(super) fn start_place<'a>(&'a self, start: Start<'a>) -> Result<(&'a Mount, &'a Dentry)> {
        match start {
            Start::Cwd => Ok(match &self.cwd {
                Some(e) => (e.mount(), e.dentry()),
                None => (self.dc().ns.root(), self.dc().root()),
            }),
            Start::At(e) => {
                e.check_same_vfs(&self.state)?;
                Ok((e.mount(), e.dentry()))
            }
        }
    }

    /// A REF-walk of `path` from `start`: the walk, holding its mount, and
    /// a counted reference on its first dentry (the root for an absolute
    /// path, else the start directory).
    pub(super) fn begin<'a>(&'a self, start: Start<'a>, path: &[u8]) -> Result<(RefWalk<'a>, DRef<'a>)> {
        let dc = self.dc();
        if path.first() == Some(&b'/') {
            return Ok((RefWalk::new(&self.cred, dc.root_mnt()), dc.root_ref()));
        }
        let (m, d) = self.start_place(start)?;
        Ok((RefWalk::new(&self.cred, dc.mntget(m)), dc.dget(d)))
    }

    /// The walk of an update (create, unlink, rmdir, link, open with
    /// `O_CREAT`) to its last name, locked: in RCU-walk with a reference
    /// on the name's dentry alone where it is cached (`walk_name_rcu`),
    /// else to the directory, pinned, then the name's lookup under its
    /// lock.
    pub(super) fn begin_named<'a, 'p>(&'a self, start: Start<'a>, path: &'p [u8]) -> Result<Begun<'a, 'p>> {
        self.begin_update(start, path, IfUncached::LookUp).map(Update::begun)
    }

    /// [`begin_named`](Self::begin_named) for an update that may leave its
    /// last name without a dentry ([`Uncached`], as `uncached` says).
    pub(super) fn begin_update<'a, 'p>(
        &'a self,
        start: Start<'a>,
        path: &'p [u8],
        uncached: IfUncached,
    ) -> Result<Update<'a, 'p>> {
        let dc = self.dc();
        if self.state.mode.tries_rcu_walk() {
            let (m, d) = self.start_place(start)?;
            match dc.walk_name_rcu(&self.cred, m, d, path) {
                Some(Err(e)) => return Err(e),
                Some(Ok(NameWalk::Cached { w, dir, child, cseq, name, hash, trailing })) => {
                    let lock = dc.names.lock(hash);
                    // Still the dentry the walk found under `dir` (name,
                    // parent and inode unchanged): then `dir` is pinned.
                    if !child.seq.read_retry(cseq) {
                        let dir = DirPin::ByChild(dir);
                        return Ok(Update::Named(Named { child, _lock: lock, dir, name, trailing, w }));
                    }
                }
                Some(Ok(NameWalk::Missing(w, p, hash))) => return self.lock_last_as(w, p, hash, uncached),
                None => {}
            }
        }
        let (w, p) = self.begin_parent(start, path)?;
        self.lock_last_as(w, p, None, uncached)
    }

    /// Locks the last name of a walk that pinned its directory, and looks
    /// it up.
    pub(super) fn lock_last<'a, 'p>(&'a self, w: RefWalk<'a>, p: Parent<'a, 'p>) -> Result<Begun<'a, 'p>> {
        self.lock_last_as(w, p, None, IfUncached::LookUp).map(Update::begun)
    }

    /// [`lock_last`](Self::lock_last); a name the dcache does not hold in
    /// a directory of the bound memfs is left without a dentry
    /// ([`Uncached`]) as `uncached` says.
    /// `hash`: the last name's under `p.dir`, if the walk computed it.
    fn lock_last_as<'a, 'p>(
        &'a self,
        w: RefWalk<'a>,
        p: Parent<'a, 'p>,
        hash: Option<u64>,
        uncached: IfUncached,
    ) -> Result<Update<'a, 'p>> {
        let dc = self.dc();
        let Last::Normal(name) = p.last else {
            return Ok(Update::Other(p.last));
        };
        // Hashed once: the name's lock, the lookup, and the dentry a miss
        // makes use the same hash.
        let hash = hash.unwrap_or_else(|| name_hash(&*p.dir as *const Dentry, name));
        debug_assert_eq!(hash, name_hash(&*p.dir as *const Dentry, name));
        let lock = dc.names.lock(hash);
        let child = match dc.lookup_cached_h(&p.dir, name, hash)? {
            Some(d) => d,
            // In a complete directory the miss is the answer (ENOENT, with a
            // negative dentry, below), as for a lookup: a name added behind
            // the cache is not seen there.
            None if match uncached {
                IfUncached::LookUp => false,
                IfUncached::Remove => {
                    bound_memfs_dir(&p.dir) && !dc.certainly_absent_h(&dc.rcu.read_lock(), &p.dir, hash)
                }
                IfUncached::Create => dc.creates_bare(&p.dir, bound_memfs_dir),
            } =>
            {
                if uncached == IfUncached::Create {
                    // A cached miss of the name goes before memfs has it,
                    // as `lookup_fs` takes it out before a create with a
                    // dentry: a reader that finds it read it before.
                    dc.absent_forget(&p.dir, name, hash);
                }
                let (dir, trailing) = (p.dir, p.trailing);
                return Ok(Update::Uncached(Uncached { _lock: lock, dir, name, hash, trailing, _w: w }));
            }
            None => dc.lookup_missed_h(&p.dir, name, hash, None)?,
        };
        Ok(Update::Named(Named { child, _lock: lock, dir: DirPin::Held(p.dir), name, trailing: p.trailing, w }))
    }

    /// The parent walk of an update: RCU-walk, pinning only the directory
    /// it ends in (in the modes that walk in RCU), else REF-walk.
    pub(super) fn begin_parent<'a, 'p>(
        &'a self,
        start: Start<'a>,
        path: &'p [u8],
    ) -> Result<(RefWalk<'a>, Parent<'a, 'p>)> {
        let dc = self.dc();
        if self.state.mode.tries_rcu_walk() {
            let (m, d) = self.start_place(start)?;
            if let Some(r) = dc.walk_parent_rcu(&self.cred, m, d, path) {
                return r;
            }
        }
        let (mut w, s) = self.begin(start, path)?;
        let p = dc.walk_parent(&mut w, s, path)?;
        Ok((w, p))
    }

    /// A walk to a positive dentry that the caller keeps: RCU-walk, pinning
    /// only what it finds (in the modes that walk in RCU), else REF-walk.
    pub(super) fn begin_walk<'a>(
        &'a self,
        start: Start<'a>,
        path: &[u8],
        follow: bool,
    ) -> Result<(RefWalk<'a>, DRef<'a>)> {
        match self.begin_walk_as(start, path, follow, false)? {
            (w, Found::Dentry(d)) => Ok((w, d)),
            (_, Found::Inode(_) | Found::Made(_)) => unreachable!("no inode alone was asked for"),
        }
    }

    /// [`begin_walk`](Self::begin_walk) for an open, which holds its
    /// file's inode and no dentry: in the default mode, and at the cache's
    /// size target in the others (`Dcache::opens_bare`), a last name the
    /// dcache does not hold and the bound memfs does ends with that inode
    /// alone, no dentry made (it would be the name's second copy, or make
    /// the shrinker free another).
    pub(super) fn begin_walk_file<'a>(
        &'a self,
        start: Start<'a>,
        path: &[u8],
        follow: bool,
    ) -> Result<(RefWalk<'a>, Found<'a>)> {
        self.begin_walk_as(start, path, follow, true)
    }

    #[inline(always)]
    fn begin_walk_as<'a>(
        &'a self,
        start: Start<'a>,
        path: &[u8],
        follow: bool,
        inode_alone: bool,
    ) -> Result<(RefWalk<'a>, Found<'a>)> {
        let dc = self.dc();
        if self.state.mode.tries_rcu_walk() {
            let (m, d) = self.start_place(start)?;
            if let Some(r) = dc.walk_rcu_pinned_as(&self.cred, m, d, path, follow, inode_alone) {
                return r.map(|(w, p)| match p {
                    Pinned::Dentry(d) => (w, Found::Dentry(d)),
                    // SAFETY: the walk's reference, ours.
                    Pinned::Inode(ip) => (w, Found::Inode(unsafe { IRef::adopt(dc, ip) })),
                });
            }
        }
        let (mut w, s) = self.begin(start, path)?;
        let d = dc.walk(&mut w, s, path, follow)?;
        Ok((w, Found::Dentry(d)))
    }

    pub(super) fn entry_from(&self, start: Start, path: &[u8], follow: bool) -> Result<Entry> {
        check_path(path)?;
        let _g = self.state.global();
        let (w, d) = match self.begin_walk(start, path, follow)? {
            // A file that lost its last name and its data while the walk
            // found it (a rename over the name, or an unlink, in progress):
            // no handle of it could be opened (FUSE opens what it looked
            // up).
            (w, d) if d.inode().is_some_and(|i| i.data_gone()) => {
                drop((w, d));
                self.begin_walk_locked(start, path, follow)?
            }
            wd => wd,
        };
        Ok(Entry::from_ref(&self.state, self.dc().mntget(w.mnt()), d))
    }

    /// `begin_walk` again, for a caller whose file lost its last name and
    /// its data between its walk and its use: the last name is looked up
    /// under its lock, which a rename over it or an unlink holds until the
    /// name shows its new file, or none (ENOENT). A last component that is
    /// a symlink to follow, or one with a trailing slash, is walked as
    /// usual.
    pub(super) fn begin_walk_locked<'a>(
        &'a self,
        start: Start<'a>,
        path: &[u8],
        follow: bool,
    ) -> Result<(RefWalk<'a>, DRef<'a>)> {
        if let Begun::Named(n) = self.begin_named(start, path)? {
            match n.child.inode() {
                _ if n.trailing => {}
                None => return crate::error::fail(libc::ENOENT),
                Some(i) if !follow || i.kind != crate::fs::FileType::Symlink => {
                    let Named { child, w, .. } = n;
                    return Ok((w, child));
                }
                Some(_) => {}
            }
        }
        self.begin_walk(start, path, follow)
    }

    /// Runs an update again, a few times, while it answers ESTALE because
    /// a lookup found a directory's dentry under another parent (moved
    /// behind the cache, by another machine or on the host) and could not
    /// move it: that needs the rename mutex and the old name's lock, which
    /// a lookup holding name locks may only try. Each time, it first waits
    /// for them (Linux's `retry_estale`). A filesystem's own ESTALE is
    /// answered at once: nothing here would make a second try different,
    /// and the first may have changed something.
    pub(super) fn retry_estale<T>(&self, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        for _ in 0..ESTALE_RETRIES {
            match op() {
                Err(e) if errno_of(&e) == libc::ESTALE => match crate::namei::took_rename_busy() {
                    Some(wait) => self.dc().wait_for_move(wait),
                    None => return Err(e),
                },
                r => return r,
            }
        }
        op()
    }
}
