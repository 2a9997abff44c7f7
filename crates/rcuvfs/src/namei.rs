//! Path walk (Linux `fs/namei.c`): RCU-walk first, REF-walk as the
//! fallback; name syntax, ".", "..", symlinks and trailing slashes.
//!
//! Rules, as in Linux:
//! - an empty path is ENOENT; a path of `PATH_MAX` (4096) bytes or more, or a
//!   component over `NAME_MAX` (255), is ENAMETOOLONG; a NUL byte is EINVAL;
//! - searching a directory needs execute permission on it, checked before
//!   every component, the last one included;
//! - symlinks are followed in every component but the last, and in the last
//!   unless the caller asks not to (or a trailing slash forces it); more than
//!   [`MAX_SYMLINKS`] in one walk is ELOOP;
//! - ".." at the root stays at the root, and ".." at the root of any other
//!   mount climbs to its mountpoint first (`follow_dotdot`);
//! - a component with a mount on it crosses to the root of the topmost
//!   mount there (`follow_mount`);
//! - a trailing slash requires the final object to be a directory.
//!
//! A walk's place is a (mount, dentry) pair. RCU-walk holds the mount with
//! no reference and validates the namespace's sequence count at its end;
//! REF-walk holds a reference on the mount in `RefWalk`.
//!
//! # RCU-walk
//!
//! [`Dcache::walk_rcu`] takes no lock, no reference, and stores nothing. It
//! holds a (dentry, sequence count) pair and steps hand over hand: it finds
//! the child with [`Dcache::lookup_rcu`], then checks that the parent's count
//! has not moved, so the child was found under a parent that was at that
//! place all along; the child's count then guards the next step. The caller
//! validates the final pair after reading what it needs. On anything it
//! cannot finish without the filesystem or a lock (a name not cached, a
//! writer in progress, a failed check, a symlink whose target is not cached)
//! it gives up. Where it gave up at a name that is not cached (the common
//! case: a cold name, or one the shrinker dropped), it records the place it
//! had reached ([`RcuWalk`]'s stop), and the caller legitimizes that place
//! ([`Dcache::unlazy`], Linux's `try_to_unlazy`): a reference on the
//! directory and its mount, checked against the counts the walk read, and
//! the REF-walk goes on from there with the rest of the path. So a lookup
//! that must ask the filesystem stores nothing on the directories above the
//! one it asks about, and does not walk them twice. On anything else (a
//! writer in progress, a failed check, a name inside a symlink's target)
//! the caller walks again in REF mode from the start.
//!
//! # REF-walk
//!
//! Holds a counted reference on each component in turn. A cached name is
//! found with `d_lookup` (retried while a rename runs, so a rename never
//! hides a stable name); a miss takes the directory's lock and asks the
//! filesystem, caching the answer, a negative one included.

use crate::cred::{Cred, MAY_EXEC};
use crate::dcache::{DRef, Dcache, Dentry, Spliced};
use crate::error::{errno_of, fail, Result, EACCES, EINVAL, ELOOP, ENAMETOOLONG, ENOENT, ENOTDIR};
use crate::fs::{FileType, Ino};
use crate::hash::PathScan;
use crate::inode::Inode;
use crate::mount::{MntRef, Mount};
use crate::sync::{MutexGuard, RcuGuard};

std::thread_local! {
    /// Set when `lookup_locked` answered ESTALE because the rename mutex was
    /// busy, so that `Vfs::retry_estale` tells that ESTALE from a
    /// filesystem's own.
    static RENAME_BUSY: std::cell::Cell<Option<Option<u64>>> = const { std::cell::Cell::new(None) };
}

/// Whether this thread's last ESTALE came from a busy rename mutex or a
/// busy name lock (`Some`, with that name's hash), and forgets it.
pub(crate) fn took_rename_busy() -> Option<Option<u64>> {
    RENAME_BUSY.with(|b| b.replace(None))
}

pub const PATH_MAX: usize = 4096;
pub const NAME_MAX: usize = 255;
pub const MAX_SYMLINKS: u32 = 40;

/// Checks a path's syntax before any walk, in one pass.
#[inline]
pub fn check_path(path: &[u8]) -> Result<()> {
    if path.is_empty() {
        return fail(ENOENT);
    }
    if path.len() >= PATH_MAX {
        return fail(ENAMETOOLONG);
    }
    if path.len() <= NAME_MAX {
        // No name in it can be too long: a NUL is all there is to find, a
        // word at a time (the loop below, a byte at a time, was a tenth of
        // a warm stat; `contains`, memchr, also goes a byte at a time
        // through a path shorter than 16 bytes).
        return if crate::hash::has_nul(path) { fail(EINVAL) } else { Ok(()) };
    }
    let (mut comp, mut too_long, mut nul) = (0usize, false, false);
    for &b in path {
        nul |= b == 0;
        comp = if b == b'/' { 0 } else { comp + 1 };
        too_long |= comp > NAME_MAX;
    }
    if nul {
        return fail(EINVAL);
    }
    if too_long {
        return fail(ENAMETOOLONG);
    }
    Ok(())
}

/// Checks a single name given to a handle-level call.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return fail(ENOENT);
    }
    if name.len() > NAME_MAX {
        return fail(ENAMETOOLONG);
    }
    if name.contains(&0) || name.contains(&b'/') {
        return fail(EINVAL);
    }
    Ok(())
}

/// The last component of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Last<'p> {
    Normal(&'p [u8]),
    Dot,
    DotDot,
    /// The path was "/" (or only slashes).
    Root,
}

/// A walk that stopped before the last component.
pub(crate) struct Parent<'a, 'p> {
    pub dir: DRef<'a>,
    pub last: Last<'p>,
    /// The path ended in '/'.
    pub trailing: bool,
}

/// The state of one RCU-walk: the caller's credentials, the symlink
/// budget, and where the walk stopped at a name that is not cached.
pub struct RcuWalk<'c> {
    pub cred: &'c Cred,
    pub links: u32,
    pub(crate) stop: Option<Stop>,
}

impl<'c> RcuWalk<'c> {
    pub fn new(cred: &'c Cred) -> RcuWalk<'c> {
        RcuWalk { cred, links: 0, stop: None }
    }
}

/// A walk legitimized where its RCU-walk stopped ([`Dcache::unlazy`]): the
/// walk in REF mode, the directory (with a reference), and the rest of the
/// path from the name that was not cached.
pub(crate) type Unlazied<'a, 'p> = (RefWalk<'a>, DRef<'a>, &'p [u8]);

/// The place an RCU-walk had reached when it gave up at a name that is not
/// cached, in the path it was given (not in a symlink's target): the mount
/// and directory, the directory's count as the walk read it, the
/// namespace's count, and where the name starts in the path. The pointers
/// are valid only in the walk's read section ([`Dcache::unlazy`]).
#[derive(Clone, Copy)]
pub(crate) struct Stop {
    mnt: *const Mount,
    dir: *const Dentry,
    seq: u32,
    ms: u32,
    at: usize,
    /// Where the name is the path's last, with no trailing slash and no
    /// symlink to follow: its inode, if a bound memfs has it (see
    /// [`Dcache::fs_probe`]); else null.
    found: *const crate::inode::Inode,
}

#[cfg(loom)]
impl Stop {
    /// Whether memfs had the last name (`found`), for the loom models: a
    /// stat would read it there, unless the name was stat'ed before
    /// (`Dcache::stays_bare`), which the models do not want to depend on.
    pub(crate) fn found(&self) -> bool {
        !self.found.is_null()
    }
}

/// What a pinned RCU walk ended with ([`Dcache::walk_rcu_pinned_as`]):
/// a dentry with a reference, or an inode with a VFS reference (the
/// caller's to put) where no dentry was made.
pub(crate) enum Pinned<'a> {
    Dentry(DRef<'a>),
    Inode(*const Inode),
}

/// What a bound memfs says of a name the dcache does not hold
/// ([`Dcache::fs_probe`]).
pub(crate) enum FsAnswer<'g> {
    Absent,
    Found(&'g crate::inode::Inode),
    /// Not a bound memfs, or the dcache is changing the name: ask through
    /// the VFS.
    Ask,
}

/// The name [`RcuWalk`] had before (beside `RefWalk` it did not say which
/// walk it was).
#[deprecated(note = "renamed RcuWalk")]
pub type Walk<'c> = RcuWalk<'c>;

/// The state of one REF-walk: as [`RcuWalk`], plus a reference on the mount
/// the walk is in.
pub(crate) struct RefWalk<'c> {
    pub cred: &'c Cred,
    pub links: u32,
    mnt: MntRef<'c>,
    /// Mounts the walk has left: held to its end, since the dentries it
    /// still holds may belong to them (a `path_put` drops the dentry, then
    /// the mount).
    left: Vec<MntRef<'c>>,
}

impl<'c> RefWalk<'c> {
    pub fn new(cred: &'c Cred, mnt: MntRef<'c>) -> RefWalk<'c> {
        RefWalk { cred, links: 0, mnt, left: Vec::new() }
    }

    /// Moves the walk into mount `m`.
    pub fn set_mnt(&mut self, m: MntRef<'c>) {
        let old = std::mem::replace(&mut self.mnt, m);
        self.left.push(old);
    }

    /// The mount the walk is in.
    pub fn mnt(&self) -> &'c Mount {
        self.mnt.mount()
    }
}

fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

/// Outcome of an RCU-walk step: `None` means "fall back to REF-walk"
/// (`-ECHILD` in Linux's `namei.c`).
type RcuStep<T> = Option<Result<T>>;

/// Where [`Dcache::walk_name_rcu`] ends.
pub(crate) enum NameWalk<'a, 'p> {
    /// The name's dentry is cached: the walk; the directory (not
    /// referenced: the caller may use its address at once, and anything
    /// else only after checking that `child`'s count is still `cseq`
    /// under the name's lock); the dentry, with a reference; the name;
    /// whether the path ended in '/'.
    /// `hash`: the name's (`name_hash(dir, name)`).
    Cached { w: RefWalk<'a>, dir: *const Dentry, child: DRef<'a>, cseq: u32, name: &'p [u8], hash: u64, trailing: bool },
    /// It is not: the walk and the directory, pinned, as
    /// [`Dcache::walk_parent_rcu`] returns them, and the name's hash under
    /// that directory if the walk computed it.
    Missing(RefWalk<'a>, Parent<'a, 'p>, Option<u64>),
}

impl Dcache {
    /// Execute (search) permission on directory `dir`, from the cached
    /// attributes (no store).
    pub fn may_exec(&self, cred: &Cred, dir: &Dentry) -> Result<()> {
        if cred.is_root() {
            return Ok(()); // root may search any directory
        }
        match dir.inode() {
            Some(i) if cred.may(&i.access_attr(), MAY_EXEC) => Ok(()),
            Some(_) => fail(EACCES),
            None => fail(ENOENT),
        }
    }

    // ---------------------------------------------------------------- RCU

    /// Starts loading what a bound memfs will read to look `name` up in
    /// the directory whose inode is `di` (the one the walk read: its dentry
    /// may turn negative meanwhile): for a walk that is about to ask it (an
    /// update, or a lookup that missed in the dcache), so that the miss
    /// overlaps the caller's own work. Cold: the walk of a cached path
    /// never calls it.
    #[cold]
    #[inline(never)]
    fn prefetch_fs_name(guard: &RcuGuard<'_>, dir: &Dentry, di: &crate::inode::Inode, name: &[u8]) {
        // The dentry's superblock, not the inode's owner: a teardown of the
        // superblock (the last umount) unbinds memfs's inodes without
        // waiting for readers, and `bound_to` then says no.
        let sb = dir.sb();
        if let Some(m) = sb.fs.as_memfs() {
            m.prefetch_bound(sb, guard, di, name);
        }
    }

    /// What the filesystem says, read in this walk's read section, of
    /// `name` in directory `dir` (inode `di`), which the dcache does not
    /// hold: a memfs bound to this cache, whose index is the truth and
    /// RCU-readable, for a miss in a directory that is not complete (the
    /// shrinker dropped some of its names). A name absent there is ENOENT
    /// at the cost of one probe of memfs's index, with no negative dentry;
    /// a name present there can be stat'ed from its inode with no dentry
    /// made ([`stat_found`](Self::stat_found)). Only with the builder's
    /// `complete_dirs` (the default): without it, a miss asks through the
    /// VFS and caches what it finds, a negative dentry included, as with
    /// any other filesystem.
    ///
    /// Why the answer is true. A name's changes reach memfs while the
    /// dcache holds a dentry for it, put in the index before: a create's
    /// negative dentry (its placeholder, hashed before memfs's insert and
    /// positive after), an unlink's, rmdir's or rename's positive dentry
    /// (held by the remover until it is negative or moved, after memfs's
    /// removal); or, for an unlink or rmdir of a name the dcache does not
    /// hold, and for a create of a file that makes it no dentry
    /// (`Update::Uncached`: in the default mode, where the directory
    /// stops being complete first, and in the others at the cache's size
    /// target in a directory that is not complete), no dentry at all, which
    /// leaves nothing in the dcache to disagree with memfs: none can be
    /// made for the name until the change is done and the name's lock let
    /// go, and it is made from memfs's answer. (Such a create takes the
    /// name's cached miss out of the directory's set first, as a create's
    /// lookup does: a reader that finds it read it before the change.) So
    /// memfs's answer alone could disagree with what another reader,
    /// later, finds in the dcache. Hence a second,
    /// clean probe of the dcache after memfs's: the changer put its dentry
    /// in the index before its memfs change, which this walk's memfs probe
    /// read (Acquire against the change's Release), so the second probe
    /// sees that dentry (no clean miss: ask) or a later state of its slot.
    ///
    /// Why a miss is true when no change of the name runs: memfs's index
    /// may hide a name while it is being inserted. An insert that claimed
    /// a slot past one another writer was vacating takes its entry back
    /// out and claims again (`sync::index`'s module doc), so a reader may
    /// see the name, then miss it, until the insert returns. A create
    /// holds the name's lock across that insert. So the lock's word is
    /// loaded (Acquire) before memfs's probe, and a miss read while it was
    /// held is asked about under the lock instead (REF-walk). A miss read
    /// after it was free is true: a reader that saw the name before (in
    /// this thread, or in one this thread heard from) saw the create's
    /// lock taken, so now it loads that lock held, or free again after the
    /// insert, whose final slot its probe then reads (`hash`: the name's,
    /// `name_hash(dir, name)`).
    #[cold]
    #[inline(never)]
    pub(crate) fn fs_probe<'g>(
        &self,
        guard: &'g RcuGuard<'_>,
        dir: &Dentry,
        di: &'g crate::inode::Inode,
        name: &[u8],
        hash: u64,
    ) -> FsAnswer<'g> {
        // The dentry's superblock, not the inode's owner (see
        // `prefetch_fs_name`); and only while this cache is the only one
        // that changes memfs (`dirs_can_be_complete`): a second `Vfs`'s
        // changes put no dentry in this index first.
        let sb = dir.sb();
        if !self.dirs_can_be_complete(sb) {
            return FsAnswer::Ask;
        }
        let busy = self.names.held(hash);
        let Some(found) = sb.fs.as_memfs().and_then(|m| m.find_bound(sb, guard, di, name)) else {
            return FsAnswer::Ask;
        };
        if !self.misses_cleanly_h(guard, dir, hash) {
            return FsAnswer::Ask;
        }
        match found {
            None if busy => FsAnswer::Ask,
            None => FsAnswer::Absent,
            Some(i) => FsAnswer::Found(i),
        }
    }

    /// The attributes of the inode a bound memfs found for the last name
    /// of RCU-walk `w` ([`Stop`]'s `found`), if the place the walk found it
    /// in still holds: read under the inode's count, then the directory's
    /// and the namespace's counts checked. No dentry is made: a stat of a
    /// name the cache dropped costs a probe of memfs's index and one of its
    /// inode. (`None` for a name stat'ed before, below the cache's target:
    /// the walk that follows makes its dentry, [`stays_bare`](Self::stays_bare).)
    /// `_guard` must be the read section the walk ran in.
    #[cold]
    pub(crate) fn stat_found(&self, _guard: &RcuGuard<'_>, w: &RcuWalk) -> Option<crate::fs::Attr> {
        let s = w.stop?;
        if s.found.is_null() {
            return None;
        }
        // SAFETY: the walk reached both in `_guard`'s read section, which the
        // caller still holds (memfs, bound, frees through the same RCU).
        let (i, d) = unsafe { (&*s.found, &*s.dir) };
        let a = i.attr();
        if d.seq.read_retry(s.seq) || self.ns_changed_since(s.ms) || !self.stays_bare(i) {
            return None;
        }
        Some(a)
    }

    /// The inode a bound memfs found for the last name of RCU-walk `w`
    /// ([`Stop`]'s `found`), with a VFS reference, and the walk in REF mode
    /// holding its mount, if the place the walk found it in still holds:
    /// no dentry made. For an open in the default mode, where files have
    /// no dentry (`files_bare`), and at the cache's size target in the
    /// others, where a dentry would only make the shrinker free another
    /// (the open file holds its inode, not a dentry). The inode was the name's when the
    /// walk probed memfs (`fs_probe`, with its clean second probe of the
    /// dcache), so the open is of the file the path named then, as a
    /// stat's `stat_found` reads it. `None`: fall back (not found so, a
    /// dying inode, the directory or the namespace changed, or a name
    /// opened before, below the target: [`stays_bare`](Self::stays_bare)).
    /// `_guard` must be the read section the walk ran in.
    #[cold]
    pub(crate) fn pin_found<'a>(
        &'a self,
        _guard: &RcuGuard<'_>,
        w: &RcuWalk<'a>,
    ) -> Option<(RefWalk<'a>, *const Inode)> {
        let s = w.stop?;
        if s.found.is_null() {
            return None;
        }
        // SAFETY: the walk reached all three in `_guard`'s read section,
        // which the caller still holds (memfs, bound, frees through the
        // same RCU).
        let (i, d, m) = unsafe { (&*s.found, &*s.dir, &*s.mnt) };
        // The mount first: nothing of its filesystem may outlive it.
        let mref = self.mnt_get_rcu_checked(m, s.ms)?;
        let ip = i.sb().itable.hold(i, &self.counters)?;
        // Marked only once the place is confirmed, as `stat_found` does; a
        // name opened again falls back, and the walk makes its dentry.
        if d.seq.read_retry(s.seq) || self.ns_changed_since(s.ms) || !self.stays_bare(i) {
            // SAFETY: the reference just taken.
            unsafe { self.iput(ip) };
            return None;
        }
        let mut rw = RefWalk::new(w.cred, mref);
        rw.links = w.links;
        Some((rw, ip))
    }

    /// Walks `path` from `(mnt, start, seq)` in RCU mode. Returns the final
    /// place (a positive dentry) with the sequence count the caller must
    /// validate after reading it, a validated error, or `None` to fall back.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn walk_rcu<'g>(
        &'g self,
        guard: &RcuGuard<'_>,
        w: &mut RcuWalk,
        mnt: &'g Mount,
        start: &'g Dentry,
        start_seq: u32,
        path: &[u8],
        follow: bool,
    ) -> RcuStep<(&'g Mount, &'g Dentry, u32)> {
        let ms = self.ns.seq.read_begin()?;
        let r = self.walk_rcu_inner::<true>(guard, w, mnt, start, start_seq, path, follow, ms);
        if self.ns.seq.read_retry(ms) {
            w.stop = None;
            return None; // the mount tree changed under the walk
        }
        r
    }

    /// `TOP`: `path` is the walk's own path (not a symlink's target), so a
    /// name not cached in it may be recorded as the walk's stop (`ms`: the
    /// namespace's count that `walk_rcu` read).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn walk_rcu_inner<'g, const TOP: bool>(
        &'g self,
        guard: &RcuGuard<'_>,
        w: &mut RcuWalk,
        mnt: &'g Mount,
        start: &'g Dentry,
        start_seq: u32,
        path: &[u8],
        follow: bool,
        ms: u32,
    ) -> RcuStep<(&'g Mount, &'g Dentry, u32)> {
        let (mut mnt, mut cur, mut seq) = if path.first() == Some(&b'/') {
            let m = self.ns.root();
            (m, m.root(), m.root().seq.read_begin()?)
        } else {
            (mnt, start, start_seq)
        };
        if cur.sb().revalidates.load(std::sync::atomic::Ordering::Relaxed) {
            return None; // every cached entry must be asked about: REF-walk
        }
        let trailing = path.last() == Some(&b'/');
        // Each name is hashed under the directory it is looked up in as it
        // is found (`..` and `.` are hashed too, for nothing: rare).
        let mut comps = PathScan::new(path);
        while let Some((c, hash, key)) = comps.next_hashed(crate::dcache::name_seed(cur)) {
            debug_assert_eq!(hash, crate::dcache::name_hash(cur, c));
            let last = comps.at_end();
            let ci = cur.inode()?;
            if ci.kind != FileType::Dir {
                return validated(cur, seq, ENOTDIR);
            }
            if !w.cred.is_root() && !w.cred.may(&ci.access_attr(), MAY_EXEC) {
                return validated(cur, seq, EACCES);
            }
            match c {
                b"." => {}
                b".." => {
                    let below = mnt;
                    (mnt, cur, seq) = self.dotdot_rcu(mnt, cur, seq)?;
                    // Up into another mount: its names may need asking
                    // about, as where the walk starts or goes down.
                    if !std::ptr::eq(below, mnt) && cur.sb().revalidates.load(std::sync::atomic::Ordering::Relaxed) {
                        return None;
                    }
                }
                name => {
                    let Some((child, cseq)) = self.lookup_rcu_h(guard, cur, name, hash, key) else {
                        // Every name the directory has is cached: a clean
                        // miss is the answer (probed again to tell it from a
                        // candidate in the middle of a change).
                        if self.certainly_absent_h(guard, cur, hash) || self.absent_known(guard, cur, name, hash) {
                            return validated(cur, seq, ENOENT);
                        }
                        let found = match self.fs_probe(guard, cur, ci, name, hash) {
                            FsAnswer::Absent => return validated(cur, seq, ENOENT),
                            FsAnswer::Found(i) if last && !trailing && !(follow && i.kind == FileType::Symlink) => {
                                i as *const crate::inode::Inode
                            }
                            FsAnswer::Found(_) => std::ptr::null(),
                            FsAnswer::Ask => {
                                // REF-walk asks the filesystem next, from
                                // here (memfs's line is loaded already
                                // where it answered).
                                Self::prefetch_fs_name(guard, cur, ci, name);
                                std::ptr::null()
                            }
                        };
                        if TOP {
                            let at = name.as_ptr() as usize - path.as_ptr() as usize;
                            w.stop = Some(Stop { mnt, dir: cur, seq, ms, at, found });
                        }
                        return None;
                    };
                    if cur.seq.read_retry(seq) {
                        return None;
                    }
                    let Some(inode) = child.inode() else {
                        return validated(child, cseq, ENOENT);
                    };
                    if inode.kind == FileType::Symlink && (!last || follow || trailing) {
                        // `None` also for a target that is not a valid
                        // path: REF-walk's `link_target` says which error.
                        let target = inode.walkable_link()?;
                        if child.seq.read_retry(cseq) {
                            return None;
                        }
                        w.links += 1;
                        if w.links > MAX_SYMLINKS {
                            return Some(fail(ELOOP));
                        }
                        match self.walk_rcu_link(guard, w, mnt, cur, seq, target)? {
                            Ok(r) => (mnt, cur, seq) = r,
                            Err(e) => return Some(Err(e)),
                        }
                    } else {
                        (mnt, cur, seq) = (mnt, child, cseq);
                        while cur.is_mountpoint() {
                            let Some(m) = self.ns.lookup(guard, mnt, cur) else { break };
                            if cur.seq.read_retry(seq) {
                                return None;
                            }
                            (mnt, cur) = (m, m.root());
                            seq = cur.seq.read_begin()?;
                            if cur.sb().revalidates.load(std::sync::atomic::Ordering::Relaxed) {
                                return None;
                            }
                        }
                    }
                }
            }
        }
        if trailing && !cur.is_dir() {
            return validated(cur, seq, ENOTDIR);
        }
        Some(Ok((mnt, cur, seq)))
    }

    /// A symlink's target, walked from `(mnt, dir, seq)`: out of line, so
    /// that the walk's loop inlines into its caller.
    #[inline(never)]
    fn walk_rcu_link<'g>(
        &'g self,
        guard: &RcuGuard<'_>,
        w: &mut RcuWalk,
        mnt: &'g Mount,
        dir: &'g Dentry,
        seq: u32,
        target: &[u8],
    ) -> RcuStep<(&'g Mount, &'g Dentry, u32)> {
        self.walk_rcu_inner::<false>(guard, w, mnt, dir, seq, target, true, 0)
    }

    /// ".." in RCU mode: at a mount's root, first down to its mountpoint
    /// (repeatedly, for mounts on mount roots); at the namespace root, or
    /// the root of a detached mount, stay.
    #[inline]
    fn dotdot_rcu<'g>(
        &'g self,
        mut mnt: &'g Mount,
        mut cur: &'g Dentry,
        mut seq: u32,
    ) -> Option<(&'g Mount, &'g Dentry, u32)> {
        while std::ptr::eq(cur, mnt.root()) {
            let Some((p, mp)) = mnt.parent() else {
                return Some((mnt, cur, seq));
            };
            (mnt, cur) = (p, mp);
            seq = cur.seq.read_begin()?;
        }
        if cur.is_root() {
            return Some((mnt, cur, seq));
        }
        let p = cur.parent();
        let ps = p.seq.raw();
        if ps & 1 != 0 || cur.seq.read_retry(seq) {
            return None;
        }
        Some((mnt, p, ps))
    }

    /// An RCU-walk of `path` from `(mnt, start)` that ends holding what it
    /// found (`legitimize_path`): a reference on the final dentry and on its
    /// mount (none for the root mount), then a check that the dentry's
    /// count has not moved since the walk read it. The only shared stores
    /// are on the final dentry: an update in `/a/b/c` leaves `/`, `/a` and
    /// `/a/b` untouched. `None`: fall back to REF-walk.
    pub(crate) fn walk_rcu_pinned<'a>(
        &'a self,
        cred: &'a Cred,
        mnt: &'a Mount,
        start: &'a Dentry,
        path: &[u8],
        follow: bool,
    ) -> RcuStep<(RefWalk<'a>, DRef<'a>)> {
        match self.walk_rcu_pinned_as(cred, mnt, start, path, follow, false)? {
            Ok((w, Pinned::Dentry(d))) => Some(Ok((w, d))),
            Ok((_, Pinned::Inode(_))) => unreachable!("no inode alone was asked for"),
            Err(e) => Some(Err(e)),
        }
    }

    /// [`walk_rcu_pinned`](Self::walk_rcu_pinned); with `inode_alone`,
    /// where opens make no dentry ([`opens_bare`](Self::opens_bare): in the
    /// default mode, else at the cache's size target), a last name the
    /// dcache does not hold and a bound memfs does ends with its inode and
    /// no dentry ([`pin_found`](Self::pin_found)). The target is looked at
    /// only then: a walk of cached names reads nothing more.
    pub(crate) fn walk_rcu_pinned_as<'a>(
        &'a self,
        cred: &'a Cred,
        mnt: &'a Mount,
        start: &'a Dentry,
        path: &[u8],
        follow: bool,
        inode_alone: bool,
    ) -> RcuStep<(RefWalk<'a>, Pinned<'a>)> {
        let guard = self.rcu.read_lock();
        let ms = self.ns.seq.read_begin()?;
        let sseq = start.seq.read_begin()?;
        let mut w = RcuWalk::new(cred);
        let Some(r) = self.walk_rcu(&guard, &mut w, mnt, start, sseq, path, follow) else {
            if inode_alone && self.opens_bare() {
                if let Some((rw, ip)) = self.pin_found(&guard, &w) {
                    return Some(Ok((rw, Pinned::Inode(ip))));
                }
            }
            let (mut rw, dir, rest) = self.unlazy(&guard, &w, path)?;
            drop(guard);
            return Some(self.walk(&mut rw, dir, rest, follow).map(|d| (rw, Pinned::Dentry(d))));
        };
        let (m, d, seq) = match r {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        self.pin_rcu(cred, &w, m, ms, d, seq).map(|(rw, d)| Ok((rw, Pinned::Dentry(d))))
    }

    /// Legitimizes the place where RCU-walk `w` stopped at a name that is
    /// not cached (Linux's `try_to_unlazy`): a reference on its mount and
    /// on its directory, then a check that neither changed since the walk
    /// read them. Returns the walk in REF mode, the directory, and the rest
    /// of `path` (the walk's own path) from that name on. `None`: the walk
    /// did not stop so, or the place changed; the caller walks again from
    /// the start. `_guard` must be the read section the walk ran in.
    #[cold]
    pub(crate) fn unlazy<'a, 'p>(
        &'a self,
        _guard: &RcuGuard<'_>,
        w: &RcuWalk<'a>,
        path: &'p [u8],
    ) -> Option<Unlazied<'a, 'p>> {
        let s = w.stop?;
        // SAFETY: the walk reached both in `_guard`'s read section, which the
        // caller still holds: neither has been freed.
        let (m, d) = unsafe { (&*s.mnt, &*s.dir) };
        let (rw, r) = self.pin_rcu(w.cred, w, m, s.ms, d, s.seq)?;
        // The namespace too, whatever the mount (`pin_rcu` checks it only
        // for a mount it counts): a mount on the directory since the walk
        // would hide the directory the rest is looked up in (Linux's
        // `legitimize_mnt` checks `mount_lock` the same way).
        if self.ns_changed_since(s.ms) {
            return None;
        }
        Some((rw, r, &path[s.at..]))
    }

    /// Ends an RCU walk on `d`, which it read at `seq` under mount `m`
    /// (the namespace at `ms`): takes the mount, then a reference on `d`,
    /// then checks that `d` did not change since the walk read it.
    /// `None`: a race; the caller falls back.
    #[inline(always)]
    fn pin_rcu<'a>(
        &'a self,
        cred: &'a Cred,
        w: &RcuWalk,
        m: &'a Mount,
        ms: u32,
        d: &Dentry,
        seq: u32,
    ) -> Option<(RefWalk<'a>, DRef<'a>)> {
        // The mount first: a dentry reference must not outlive its
        // filesystem's last mount; and no umount may succeed under us.
        let mref = self.mnt_get_rcu_checked(m, ms)?;
        if !d.lockref().get_not_dead() {
            return None;
        }
        // SAFETY: we just took this reference.
        let r = unsafe { DRef::adopt(self, d) };
        if d.seq.read_retry(seq) {
            return None; // moved, filled, emptied or killed after the walk read it
        }
        let mut rw = RefWalk::new(cred, mref);
        rw.links = w.links;
        Some((rw, r))
    }

    /// The parent walk of an update in RCU-walk: every component but the
    /// last, then the pin of [`walk_rcu_pinned`](Self::walk_rcu_pinned) on
    /// the directory alone. Only for a last component that is a name (".",
    /// "..", and "/" fall back).
    pub(crate) fn walk_parent_rcu<'a, 'p>(
        &'a self,
        cred: &'a Cred,
        mnt: &'a Mount,
        start: &'a Dentry,
        path: &'p [u8],
    ) -> RcuStep<(RefWalk<'a>, Parent<'a, 'p>)> {
        let end = path.iter().rposition(|&b| b != b'/')? + 1;
        let trimmed = &path[..end];
        let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(0) => (&path[..1], &trimmed[1..]),
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&trimmed[..0], trimmed),
        };
        if name == b"." || name == b".." {
            return None;
        }
        let (w, d) = match self.walk_rcu_pinned(cred, mnt, start, dir, true)? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        Some(self.parent_of(cred, w, d, name, end < path.len()))
    }

    /// The parent of an update's last name `name`, walked to and pinned
    /// (`d`), checked: a directory the caller may search.
    fn parent_of<'a, 'p>(
        &'a self,
        cred: &Cred,
        w: RefWalk<'a>,
        d: DRef<'a>,
        name: &'p [u8],
        trailing: bool,
    ) -> Result<(RefWalk<'a>, Parent<'a, 'p>)> {
        if !d.is_dir() {
            return fail(ENOTDIR);
        }
        self.may_exec(cred, &d)?;
        Ok((w, Parent { dir: d, last: Last::Normal(name), trailing }))
    }

    /// The walk of an update to its last name, in RCU-walk, ending with a
    /// reference on that name's dentry (positive or negative) and none on
    /// its directory: the dentry's own reference on its parent pins the
    /// directory once the caller holds the name's lock and has checked the
    /// dentry's count (a rename of it takes that lock). So an update of a
    /// cached name stores nothing on its directory's dentry, and two
    /// updates of different names in one directory share no line there.
    ///
    /// A name that is not cached ends the walk as `walk_parent_rcu` does,
    /// with its directory pinned ([`NameWalk::Missing`]), so that a create
    /// does not walk its path twice; so does a directory on the way that
    /// is not cached, from which the walk goes on in REF-walk. `None` when
    /// the name is "." or "..", or on any race: the caller walks to the
    /// directory and pins it instead.
    pub(crate) fn walk_name_rcu<'a, 'p>(
        &'a self,
        cred: &'a Cred,
        mnt: &'a Mount,
        start: &'a Dentry,
        path: &'p [u8],
    ) -> RcuStep<NameWalk<'a, 'p>> {
        let end = path.iter().rposition(|&b| b != b'/')? + 1;
        let trimmed = &path[..end];
        let (dir_path, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(0) => (&path[..1], &trimmed[1..]),
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&trimmed[..0], trimmed),
        };
        if name == b"." || name == b".." {
            return None;
        }
        let guard = self.rcu.read_lock();
        let ms = self.ns.seq.read_begin()?;
        let sseq = start.seq.read_begin()?;
        let mut w = RcuWalk::new(cred);
        let Some(r) = self.walk_rcu(&guard, &mut w, mnt, start, sseq, dir_path, true) else {
            // A directory on the way is not cached: on from there in
            // REF-walk, as `walk_rcu_pinned` goes on, not from the start
            // again (the caller's `walk_parent_rcu` walked the whole path
            // a second time in RCU-walk before it went on).
            let (mut rw, d, rest) = self.unlazy(&guard, &w, dir_path)?;
            drop(guard);
            let r = self.walk(&mut rw, d, rest, true).and_then(|d| self.parent_of(cred, rw, d, name, end < path.len()));
            return Some(r.map(|(rw, p)| NameWalk::Missing(rw, p, None)));
        };
        let (m, dir, dseq) = match r {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let di = dir.inode()?;
        if di.kind != FileType::Dir {
            return validated(dir, dseq, ENOTDIR);
        }
        if !cred.is_root() && !cred.may(&di.access_attr(), MAY_EXEC) {
            return validated(dir, dseq, EACCES);
        }
        // The update will ask memfs about this name: its index line loads
        // while ours does.
        Self::prefetch_fs_name(&guard, dir, di, name);
        let trailing = end < path.len();
        // Hashed once for the whole update (its lookups, its name lock, the
        // dentry a create makes).
        let hash = crate::dcache::name_hash(dir, name);
        let Some((child, cseq)) = self.lookup_rcu_h(&guard, dir, name, hash, crate::hash::short_key(name)) else {
            // Not cached (or changing): the directory, pinned as
            // `walk_parent_rcu` would pin it, with no second walk.
            let (rw, r) = self.pin_rcu(cred, &w, m, ms, dir, dseq)?;
            let p = Parent { dir: r, last: Last::Normal(name), trailing };
            return Some(Ok(NameWalk::Missing(rw, p, Some(hash))));
        };
        // The child was found in `dir` as the walk read it.
        if dir.seq.read_retry(dseq) {
            return None;
        }
        let (rw, r) = self.pin_rcu(cred, &w, m, ms, child, cseq)?;
        Some(Ok(NameWalk::Cached { w: rw, dir, child: r, cseq, name, hash, trailing }))
    }

    // ---------------------------------------------------------------- REF

    /// Looks `name` up in `dir` and returns a reference to its dentry,
    /// positive or negative, consulting the filesystem on a miss.
    #[cfg(loom)]
    pub(crate) fn lookup_ref<'a>(&'a self, dir: &Dentry, name: &[u8]) -> Result<DRef<'a>> {
        let hash = crate::dcache::name_hash(dir, name);
        loop {
            if let Some(d) = self.lookup_cached_h(dir, name, hash)? {
                return Ok(d);
            }
            // A miss: the name's lock, so that parallel lookups of one
            // missing name make one filesystem call (the others find its
            // result).
            let n = self.names.lock(hash);
            if let Some(d) = self.lookup_cached_h(dir, name, hash)? {
                return Ok(d);
            }
            match self.lookup_fs(dir, name, hash, None, true)? {
                Spliced::Done(d) => return Ok(d),
                Spliced::Absent => unreachable!("a dentry was wanted"),
                // A directory's dentry must move here from another parent
                // while a rename runs: let go, wait for it, look again.
                Spliced::RenameBusy { wait } => {
                    drop(n);
                    self.wait_for_move(wait);
                }
            }
        }
    }

    /// A cached, revalidated dentry for `name` in `dir`, if any.
    pub(crate) fn lookup_cached<'a>(&'a self, dir: &Dentry, name: &[u8]) -> Result<Option<DRef<'a>>> {
        self.lookup_cached_h(dir, name, crate::dcache::name_hash(dir, name))
    }

    /// [`lookup_cached`](Self::lookup_cached) for a caller that has the
    /// name's hash (`name_hash(dir, name)`).
    pub(crate) fn lookup_cached_h<'a>(&'a self, dir: &Dentry, name: &[u8], hash: u64) -> Result<Option<DRef<'a>>> {
        let Some(d) = self.d_lookup_h(dir, name, hash) else {
            return Ok(None);
        };
        let sb = dir.dir_sb();
        if sb.revalidates.load(std::sync::atomic::Ordering::Relaxed) {
            let dino = dir.inode().expect("positive directory").ino;
            // A cached miss is asked about as inode 0 (FUSE's negative entry).
            let ino = d.inode().map_or(0, |i| i.ino);
            if !sb.fs.revalidate(dino, name, ino)? {
                self.d_invalidate(&d);
                return Ok(None);
            }
        }
        Ok(Some(d))
    }

    /// Like [`lookup_ref`](Self::lookup_ref), for a caller that holds the
    /// name's name lock: the answer cannot change until it lets go.
    /// `renaming` is the caller's hold on the rename mutex, if it has one.
    /// ESTALE if the name is a directory whose dentry must move here from
    /// another parent while another thread holds the rename mutex: the
    /// caller lets go of its locks and tries again (`Vfs::retry_estale`).
    pub(crate) fn lookup_locked<'a>(
        &'a self,
        dir: &Dentry,
        name: &[u8],
        renaming: Option<&MutexGuard<'_, ()>>,
    ) -> Result<DRef<'a>> {
        if let Some(d) = self.lookup_cached(dir, name)? {
            return Ok(d);
        }
        self.lookup_missed(dir, name, renaming)
    }

    /// [`lookup_locked`](Self::lookup_locked) after its cached lookup
    /// missed (`lookup_cached`): asks the filesystem and caches its
    /// answer.
    pub(crate) fn lookup_missed<'a>(
        &'a self,
        dir: &Dentry,
        name: &[u8],
        renaming: Option<&MutexGuard<'_, ()>>,
    ) -> Result<DRef<'a>> {
        self.lookup_missed_h(dir, name, crate::dcache::name_hash(dir, name), renaming)
    }

    /// [`lookup_missed`](Self::lookup_missed) for a caller that has the
    /// name's hash (`name_hash(dir, name)`).
    pub(crate) fn lookup_missed_h<'a>(
        &'a self,
        dir: &Dentry,
        name: &[u8],
        hash: u64,
        renaming: Option<&MutexGuard<'_, ()>>,
    ) -> Result<DRef<'a>> {
        match self.lookup_fs(dir, name, hash, renaming, true)? {
            Spliced::Done(d) => Ok(d),
            Spliced::Absent => unreachable!("a dentry was wanted"),
            Spliced::RenameBusy { wait } => {
                RENAME_BUSY.with(|b| b.set(Some(wait)));
                fail(libc::ESTALE)
            }
        }
    }

    /// Waits, holding no lock, for the rename mutex and the name lock
    /// (hash `wait`) that a lookup found busy when it had to move a
    /// directory's dentry.
    pub(crate) fn wait_for_move(&self, wait: Option<u64>) {
        if let Some(h) = wait {
            drop(self.names.lock(h));
        }
        drop(self.rename_mutex.lock());
    }

    /// Asks the filesystem about `name` and caches its answer. The caller
    /// holds the name's lock. With `dentry`, the answer is a dentry,
    /// negative for an absent name (what an update works on): a cached
    /// miss in the directory's set is taken out first, and answers without
    /// the filesystem (`absent`: this is what keeps the set true). Without,
    /// an absent name is [`Spliced::Absent`], cached in the set rather than
    /// as a negative dentry.
    fn lookup_fs<'a>(
        &'a self,
        dir: &Dentry,
        name: &[u8],
        hash: u64,
        renaming: Option<&MutexGuard<'_, ()>>,
        dentry: bool,
    ) -> Result<Spliced<'a>> {
        let dir_inode = dir.inode().expect("positive directory");
        let sb = dir.dir_sb();
        let absent = |known: bool| {
            // A negative dentry where one is wanted, or where the set may
            // not cache the miss (a complete directory: see `absent`); none
            // where memfs answers for files' names (`files_bare`: the RCU
            // walk asks it).
            if dentry || (!known && !self.caches_absent(dir) && !self.files_bare(sb)) {
                Spliced::Done(self.d_add_h(dir, name, hash, std::ptr::null()))
            } else {
                if !known {
                    self.absent_add(dir, name, hash);
                }
                Spliced::Absent
            }
        };
        let mut known = if dentry {
            self.absent_forget(dir, name, hash)
        } else {
            self.absent_known(&self.rcu.read_lock(), dir, name, hash)
        };
        // Over a filesystem whose entries are revalidated, a cached miss is
        // asked about as a negative dentry is (inode 0); one it no longer
        // confirms is taken out (under our name lock), and the name looked up.
        if known
            && sb.revalidates.load(std::sync::atomic::Ordering::Relaxed)
            && !sb.fs.revalidate(dir_inode.ino, name, 0)?
        {
            if !dentry {
                self.absent_forget(dir, name, hash);
            }
            known = false;
        }
        if known || self.certainly_absent_h(&self.rcu.read_lock(), dir, hash) {
            // Cached as absent, or every name the directory has is cached
            // and this one is not (nothing to add to the set then).
            return Ok(absent(true));
        }
        if let Some(m) = sb.fs.as_memfs() {
            match m.lookup_bound(sb, dir_inode, name, &self.counters) {
                Some(Some(ip)) => return self.d_splice_alias(dir, name, ip, renaming),
                Some(None) => return Ok(absent(false)),
                None => {}
            }
        }
        let dir_ino: Ino = dir_inode.ino;
        match sb.fs.lookup(dir_ino, name) {
            Ok(attr) => {
                let ip = sb.iget(&attr, true, &self.counters)?;
                self.d_splice_alias(dir, name, ip, renaming)
            }
            Err(e) if errno_of(&e) == ENOENT => Ok(absent(false)),
            Err(e) => Err(e),
        }
    }

    /// Looks `name` up in `dir`: ENOENT for an absent name, for which no
    /// dentry is made; a miss the filesystem answers is cached in the
    /// directory's set of absent names (`absent`) instead.
    pub(crate) fn lookup_positive<'a>(&'a self, dir: &Dentry, name: &[u8]) -> Result<DRef<'a>> {
        let hash = crate::dcache::name_hash(dir, name);
        let positive = |d: DRef<'a>| if d.inode().is_some() { Ok(d) } else { fail(ENOENT) };
        loop {
            if let Some(d) = self.lookup_cached_h(dir, name, hash)? {
                return positive(d);
            }
            // (Where entries are revalidated, the name lock's lookup asks.)
            if !dir.dir_sb().revalidates.load(std::sync::atomic::Ordering::Relaxed)
                && self.absent_known(&self.rcu.read_lock(), dir, name, hash)
            {
                return fail(ENOENT);
            }
            // As `lookup_ref`: parallel lookups of one missing name make one
            // filesystem call.
            let n = self.names.lock(hash);
            if let Some(d) = self.lookup_cached_h(dir, name, hash)? {
                return positive(d);
            }
            match self.lookup_fs(dir, name, hash, None, false)? {
                Spliced::Done(d) => return positive(d),
                Spliced::Absent => return fail(ENOENT),
                Spliced::RenameBusy { wait } => {
                    drop(n);
                    self.wait_for_move(wait);
                }
            }
        }
    }

    /// Walks every component but the last, following symlinks, and checks
    /// that the last component's directory may be searched.
    pub(crate) fn walk_parent<'a, 'p>(
        &'a self,
        w: &mut RefWalk<'a>,
        start: DRef<'a>,
        path: &'p [u8],
    ) -> Result<Parent<'a, 'p>> {
        // An absolute path restarts at the root, unless the caller (the Vfs,
        // for its own absolute paths) already started there.
        let at_root = std::ptr::eq(w.mnt(), self.ns.root()) && std::ptr::eq(&*start, self.root());
        let mut cur = if path.first() == Some(&b'/') && !at_root {
            w.set_mnt(self.root_mnt());
            self.root_ref()
        } else {
            start
        };
        let mut comps = components(path);
        let Some(mut last) = comps.next() else {
            return Ok(Parent { dir: cur, last: Last::Root, trailing: false });
        };
        for next in comps {
            cur = self.step(w, cur, last)?;
            last = next;
        }
        if !cur.is_dir() {
            return fail(ENOTDIR);
        }
        self.may_exec(w.cred, &cur)?;
        let last = match last {
            b"." => Last::Dot,
            b".." => Last::DotDot,
            name => Last::Normal(name),
        };
        Ok(Parent { dir: cur, last, trailing: path.last() == Some(&b'/') })
    }

    /// One intermediate component: the result is a directory.
    fn step<'a>(&'a self, w: &mut RefWalk<'a>, dir: DRef<'a>, comp: &[u8]) -> Result<DRef<'a>> {
        if !dir.is_dir() {
            return fail(ENOTDIR);
        }
        self.may_exec(w.cred, &dir)?;
        let d = match comp {
            b"." => dir,
            b".." => self.parent_ref(w, &dir),
            name => {
                let d = self.lookup_positive(&dir, name)?;
                if d.inode().is_some_and(|i| i.kind == FileType::Symlink) {
                    self.follow_link(w, dir, &d)?
                } else {
                    self.follow_mount(w, d)
                }
            }
        };
        if !d.is_dir() {
            return fail(ENOTDIR);
        }
        Ok(d)
    }

    /// Crosses to the root of the topmost mount on `d`, if any
    /// (`follow_managed`), moving the walk's mount reference along.
    pub(crate) fn follow_mount<'a>(&'a self, w: &mut RefWalk<'a>, d: DRef<'a>) -> DRef<'a> {
        match self.follow_mount_ref(w.mnt(), &d) {
            Some((m, root)) => {
                w.set_mnt(m);
                root
            }
            None => d,
        }
    }

    /// ".." from `d` (`follow_dotdot`): at a mount's root, first down to
    /// its mountpoint; then `d`'s parent (`dget_parent`, lockless: the
    /// parent is pinned by `d`, which the caller holds). At the namespace
    /// root, or a detached mount's root, `d` itself.
    pub(crate) fn parent_ref<'a>(&'a self, w: &mut RefWalk<'a>, d: &DRef<'a>) -> DRef<'a> {
        let mut below: Option<DRef<'a>> = None;
        loop {
            let cur: &Dentry = below.as_deref().unwrap_or(d);
            if !std::ptr::eq(cur, w.mnt().root()) {
                break;
            }
            let Some((m, mp)) = self.mount_parent_ref(w.mnt()) else { break };
            w.set_mnt(m);
            below = Some(mp);
        }
        let d = below.as_ref().unwrap_or(d);
        if d.is_root() {
            return d.clone_ref();
        }
        self.dget_parent(d)
    }

    /// Resolves symlink `link` found in `dir`, following the target's last
    /// component too.
    pub(crate) fn follow_link<'a>(&'a self, w: &mut RefWalk<'a>, dir: DRef<'a>, link: &Dentry) -> Result<DRef<'a>> {
        let target = self.link_target(w, link)?;
        self.walk(w, dir, &target, true)
    }

    /// Reads a symlink's target, counting it against the walk's budget.
    pub(crate) fn link_target(&self, w: &mut RefWalk, link: &Dentry) -> Result<Vec<u8>> {
        w.links += 1;
        if w.links > MAX_SYMLINKS {
            return fail(ELOOP);
        }
        let inode = link.inode().expect("positive symlink");
        let target = match inode.link() {
            Some(t) => t.to_vec(),
            None => inode.fs().readlink(inode.ino)?,
        };
        if target.is_empty() {
            return fail(ENOENT);
        }
        check_path(&target)?;
        Ok(target)
    }

    /// Walks a whole path to a positive dentry. `follow`: follow a symlink
    /// in the last component.
    pub(crate) fn walk<'a>(
        &'a self,
        w: &mut RefWalk<'a>,
        start: DRef<'a>,
        path: &[u8],
        follow: bool,
    ) -> Result<DRef<'a>> {
        let p = self.walk_parent(w, start, path)?;
        self.walk_last(w, p, follow)
    }

    /// Resolves the last component of a parent walk.
    pub(crate) fn walk_last<'a>(&'a self, w: &mut RefWalk<'a>, p: Parent<'a, '_>, follow: bool) -> Result<DRef<'a>> {
        match p.last {
            Last::Root | Last::Dot => Ok(p.dir),
            Last::DotDot => Ok(self.parent_ref(w, &p.dir)),
            Last::Normal(name) => {
                let mut d = self.lookup_positive(&p.dir, name)?;
                if d.inode().is_some_and(|i| i.kind == FileType::Symlink) && (follow || p.trailing) {
                    d = self.follow_link(w, p.dir, &d)?;
                } else {
                    d = self.follow_mount(w, d);
                }
                if p.trailing && !d.is_dir() {
                    return fail(ENOTDIR);
                }
                Ok(d)
            }
        }
    }
}

/// Returns `errno` if `d`'s count still reads `seq` (the observation that
/// led to the error was consistent), else falls back.
#[inline]
fn validated<T>(d: &Dentry, seq: u32, errno: i32) -> RcuStep<T> {
    if d.seq.read_retry(seq) {
        None
    } else {
        Some(fail(errno))
    }
}
