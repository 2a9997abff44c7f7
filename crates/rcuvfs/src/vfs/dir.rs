//! Directory listings and tree walks.
//!
//! [`ReadDir`] reads its directory lazily, a batch of entries at a time, from
//! a cookie: memory stays bounded whatever the directory's size, each entry
//! costs the same wherever the listing stands, and a listing resumes from any
//! entry's cookie ([`ReadDir::seek`], as `seekdir`). The filesystem's
//! `readdir` promises what POSIX asks of a listing that runs while names come
//! and go: an entry present for the whole listing is returned exactly once.
//! On memfs the listing is the in-core directory itself (its RCU index, read
//! without a lock), as Linux's `dcache_readdir` lists tmpfs from the dcache.
//!
//! [`DirEntry::metadata`] is `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)`:
//! one lookup in the listed directory, from its handle, never a walk of the
//! whole path (std's `DirEntry` does the same with the directory's fd). It
//! crosses a mount on the name, as `fstatat` does.
//!
//! [`Vfs::walk`] walks a tree depth-first as `find` or the walkdir crate do;
//! [`Vfs::walk_parallel`] hands its directories out to threads.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use super::touch_atime;
use super::{Entry, Metadata, Vfs};
use crate::cred::{MAY_EXEC, MAY_READ};
use crate::error::{errno_of, Result, ENOENT};
use crate::error::{fail, EACCES, ENOTDIR};
use crate::fs::FileSystem;
use crate::fs::{self, Attr, FileType, Ino};
use crate::inode::Inode;

/// What every entry of one listing shares: the view that opened it (its
/// credentials decide what `metadata` may see), the directory's handle and
/// the path it was opened by.
struct Listing {
    vfs: Vfs,
    dir: Entry,
    path: PathBuf,
}

/// A directory listing in progress (`opendir`); see the module doc. Entries
/// come in the filesystem's order, without "." and "..".
pub struct ReadDir {
    listing: Arc<Listing>,
    batch: std::vec::IntoIter<(fs::DirEntry, Option<Attr>)>,
    /// The cookie of the last entry returned (0: none yet).
    cookie: u64,
    done: bool,
}

impl ReadDir {
    /// The position (`telldir`): the cookie of the last entry returned, 0
    /// before the first.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// Continues after the entry whose cookie is `cookie` (`seekdir`); 0
    /// rewinds. A cookie is valid for as long as its name exists.
    pub fn seek(&mut self, cookie: u64) {
        self.cookie = cookie;
        self.batch = Vec::new().into_iter();
        self.done = false;
    }

    /// The listed directory's handle.
    pub fn dir(&self) -> &Entry {
        &self.listing.dir
    }
}

impl Iterator for ReadDir {
    type Item = Result<DirEntry>;

    fn next(&mut self) -> Option<Result<DirEntry>> {
        loop {
            if let Some((e, attr)) = self.batch.next() {
                self.cookie = e.offset;
                let listing = self.listing.clone();
                return Some(Ok(DirEntry { listing, name: e.name, ino: e.ino, kind: e.kind, cookie: e.offset, attr }));
            }
            if self.done {
                return None;
            }
            let l = &self.listing;
            match l.vfs.readdir_batch_plus(l.dir.inode(), self.cookie) {
                Ok(b) if b.is_empty() => self.done = true,
                Ok(b) => self.batch = b.into_iter(),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// One entry of a directory listing, as `std::fs::DirEntry`.
#[derive(Clone)]
pub struct DirEntry {
    listing: Arc<Listing>,
    name: Vec<u8>,
    ino: Ino,
    kind: FileType,
    cookie: u64,
    /// The attributes as the listing read them, where the filesystem lists
    /// them (memfs).
    attr: Option<Attr>,
}

impl DirEntry {
    pub fn file_name(&self) -> OsString {
        OsString::from_vec(self.name.clone())
    }
    pub fn name_bytes(&self) -> &[u8] {
        &self.name
    }
    /// The listed directory's path joined with the name.
    pub fn path(&self) -> PathBuf {
        self.listing.path.join(OsStr::from_bytes(&self.name))
    }
    /// The type the directory records for the name (no lookup).
    pub fn file_type(&self) -> Result<FileType> {
        Ok(self.kind)
    }
    /// The inode number the directory records for the name (`d_ino`): on a
    /// mountpoint, the covered directory's, as `getdents` reports it.
    pub fn ino(&self) -> Ino {
        self.ino
    }
    /// The cookie to resume the listing after this entry ([`ReadDir::seek`]).
    pub fn cookie(&self) -> u64 {
        self.cookie
    }
    /// The attributes of the name, not following a symlink: as of the
    /// listing where the filesystem lists them with its entries (memfs: read
    /// from the inode when the batch holding this entry was read), as
    /// readdirplus and std's `DirEntry` on Windows give them; else, and on
    /// a name something may be mounted on, [`metadata_now`](Self::metadata_now).
    /// Either way, no walk of the path.
    pub fn metadata(&self) -> Result<Metadata> {
        match &self.attr {
            Some(a) if a.kind != FileType::Dir || !self.listing.vfs.dc().ns.any_mountpoint() => Ok(Metadata(a.clone())),
            _ => self.metadata_now(),
        }
    }

    /// `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)` now: one lookup in the
    /// listed directory, crossing a mount on the name. ENOENT if the name
    /// went away since it was listed.
    pub fn metadata_now(&self) -> Result<Metadata> {
        let l = &self.listing;
        l.vfs.metadata_at(&l.dir, OsStr::from_bytes(&self.name), false)
    }
    /// A handle on the name (not following a symlink), as `openat(dirfd,
    /// name, O_PATH | O_NOFOLLOW)`.
    pub fn entry(&self) -> Result<Entry> {
        let l = &self.listing;
        l.vfs.lookup_at(&l.dir, OsStr::from_bytes(&self.name))
    }
}

impl std::fmt::Debug for DirEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirEntry")
            .field("path", &self.path())
            .field("ino", &self.ino)
            .field("kind", &self.kind)
            .field("cookie", &self.cookie)
            .finish()
    }
}

/// An entry of a directory listing with a handle on it and its attributes
/// (FUSE's readdirplus): see [`Vfs::read_dir_plus`].
pub struct DirEntryPlus {
    pub entry: fs::DirEntry,
    pub child: Entry,
    pub metadata: Metadata,
}

/// One entry of a tree walk ([`Vfs::walk`]).
#[derive(Clone, Debug)]
pub struct WalkEntry {
    path: PathBuf,
    depth: usize,
    metadata: Metadata,
}

impl WalkEntry {
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn file_name(&self) -> &OsStr {
        self.path.file_name().unwrap_or(self.path.as_os_str())
    }
    /// 0 for the root of the walk, 1 for its entries, and so on.
    pub fn depth(&self) -> usize {
        self.depth
    }
    /// The attributes (`lstat`: a symlink's own).
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    pub fn file_type(&self) -> FileType {
        self.metadata.file_type()
    }
}

/// A depth-first tree walk in progress; see [`Vfs::walk`].
pub struct TreeWalk<'a> {
    vfs: &'a Vfs,
    /// The root, before it is yielded.
    first: Option<Result<(WalkEntry, Option<Entry>)>>,
    /// The listings open, innermost last, with the depth of their entries.
    stack: Vec<(ReadDir, usize)>,
    /// An error to yield next (a directory just yielded could not be read).
    pending: Option<std::io::Error>,
}

impl<'a> TreeWalk<'a> {
    /// Yields `w` and makes its directory's listing the innermost; an
    /// error opening it comes next.
    fn descend(&mut self, w: WalkEntry, dir: Entry, depth: usize) -> WalkEntry {
        match self.vfs.read_dir_of_at(dir, w.path.clone()) {
            Ok(rd) => self.stack.push((rd, depth)),
            Err(e) => self.pending = Some(e),
        }
        w
    }
}

impl Iterator for TreeWalk<'_> {
    type Item = Result<WalkEntry>;

    fn next(&mut self) -> Option<Result<WalkEntry>> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        if let Some(first) = self.first.take() {
            return Some(first.map(|(w, dir)| match dir {
                Some(dir) => self.descend(w, dir, 1),
                None => w,
            }));
        }
        loop {
            let (rd, depth) = self.stack.last_mut()?;
            let depth = *depth;
            let Some(e) = rd.next() else {
                self.stack.pop();
                continue;
            };
            return Some(match visit(e, depth) {
                Visit::Skip => continue,
                Visit::Err(e) => Err(e),
                Visit::Leaf(w) => Ok(w),
                Visit::Dir(w, dir) => Ok(self.descend(w, dir, depth + 1)),
            });
        }
    }
}

enum Visit {
    /// Gone since it was listed: not present for the whole listing.
    Skip,
    Err(std::io::Error),
    Leaf(WalkEntry),
    /// A directory to descend into (never through a symlink).
    Dir(WalkEntry, Entry),
}

/// An entry's attributes (and, for a directory, its handle).
fn visit(e: Result<DirEntry>, depth: usize) -> Visit {
    let e = match e {
        Ok(e) => e,
        Err(e) => return Visit::Err(e),
    };
    let r = if e.kind == FileType::Dir {
        e.entry().and_then(|h| {
            let m = h.metadata()?;
            Ok((m, Some(h)))
        })
    } else {
        e.metadata().map(|m| (m, None))
    };
    match r {
        Ok((metadata, h)) => {
            let w = WalkEntry { path: e.path(), depth, metadata };
            match h {
                // A name listed as a directory may have been replaced by
                // something else since: descend only into directories.
                Some(h) if h.is_dir() => Visit::Dir(w, h),
                _ => Visit::Leaf(w),
            }
        }
        Err(err) if errno_of(&err) == ENOENT => Visit::Skip,
        Err(err) => Visit::Err(err),
    }
}

impl Vfs {
    /// Lists a directory (`opendir`), lazily: see [`ReadDir`]. Read
    /// permission is checked here, once, as `opendir` does.
    pub fn read_dir(&self, path: impl AsRef<Path>) -> Result<ReadDir> {
        let path = path.as_ref();
        self.read_dir_of_at(self.entry(path)?, path.to_path_buf())
    }

    /// Lists the directory behind a handle (`fdopendir`); entries' paths
    /// start from `dir`'s name as the listing found it.
    pub fn read_dir_of(&self, dir: &Entry) -> Result<ReadDir> {
        dir.check_same_vfs(&self.state)?;
        self.read_dir_of_at(dir.clone(), PathBuf::new())
    }

    fn read_dir_of_at(&self, dir: Entry, path: PathBuf) -> Result<ReadDir> {
        dir.check_same_vfs(&self.state)?;
        self.check_listable(dir.inode())?;
        let vfs = Vfs { state: self.state.clone(), cred: self.cred.clone(), cwd: None, umask: self.umask };
        Ok(ReadDir {
            listing: Arc::new(Listing { vfs, dir, path }),
            batch: Vec::new().into_iter(),
            cookie: 0,
            done: false,
        })
    }

    /// Lists directory `dir` from cookie `offset` with a handle on each
    /// entry and its attributes (FUSE's readdirplus), in one call. A name
    /// removed between the listing and its lookup is left out.
    pub fn read_dir_plus(&self, dir: &Entry, offset: u64) -> Result<Vec<DirEntryPlus>> {
        let listed = self.read_dir_at(dir, offset)?;
        let mut out = Vec::with_capacity(listed.len());
        for entry in listed {
            let child = match self.lookup_at(dir, OsStr::from_bytes(&entry.name)) {
                Ok(c) => c,
                Err(e) if errno_of(&e) == ENOENT => continue,
                Err(e) => return Err(e),
            };
            let metadata = child.metadata()?;
            out.push(DirEntryPlus { entry, child, metadata });
        }
        Ok(out)
    }

    /// Walks the tree under `root` depth-first, in pre-order: `root` first,
    /// then each entry, a directory's entries right after it. Symlinks are
    /// not followed; a mount on a directory is crossed. Entries removed while
    /// the walk runs are left out; other errors (a directory that may not be
    /// read) are yielded and the walk goes on.
    pub fn walk(&self, root: impl AsRef<Path>) -> TreeWalk<'_> {
        let root = root.as_ref();
        let first = self.entry_nofollow(root).and_then(|h| {
            let metadata = h.metadata()?;
            let w = WalkEntry { path: root.to_path_buf(), depth: 0, metadata };
            Ok((w, h.is_dir().then_some(h)))
        });
        TreeWalk { vfs: self, first: Some(first), stack: Vec::new(), pending: None }
    }

    /// [`Vfs::walk`] over `threads` threads: each directory is listed by one
    /// thread, and `f` is called, from any of them, once per entry (or
    /// error) in no particular order. Returns when the whole tree is done.
    pub fn walk_parallel<F>(&self, root: impl AsRef<Path>, threads: usize, f: F)
    where
        F: Fn(Result<WalkEntry>) + Sync,
    {
        let mut first = self.walk(root);
        let Some(r) = first.next() else { return };
        f(r);
        if let Some(e) = first.pending.take() {
            f(Err(e));
        }
        let queue = Queue::new(first.stack);
        std::thread::scope(|s| {
            for _ in 0..threads.max(1) {
                s.spawn(|| self.walk_worker(&queue, &f));
            }
        });
    }

    fn walk_worker<F: Fn(Result<WalkEntry>)>(&self, queue: &Queue, f: &F) {
        loop {
            let Some((mut rd, depth)) = queue.next() else { return };
            // Counted as being listed until dropped, a panic in `f` included.
            let _listing = InProgress(queue);
            for e in rd.by_ref() {
                match visit(e, depth) {
                    Visit::Skip => {}
                    Visit::Err(e) => f(Err(e)),
                    Visit::Leaf(w) => f(Ok(w)),
                    Visit::Dir(w, dir) => {
                        let sub = self.read_dir_of_at(dir, w.path.clone());
                        f(Ok(w));
                        match sub {
                            Ok(sub) => queue.push(sub, depth + 1),
                            Err(e) => f(Err(e)),
                        }
                    }
                }
            }
        }
    }
}

/// The directories a parallel walk has yet to list, and how many threads
/// are listing one: the walk is over when both are none, or when a thread
/// panicked (the others stop, and the scope hands the panic on).
struct Queue {
    state: Mutex<Pending>,
    more: Condvar,
}

struct Pending {
    dirs: Vec<(ReadDir, usize)>,
    listing: usize,
    abandoned: bool,
}

impl Queue {
    fn new(dirs: Vec<(ReadDir, usize)>) -> Queue {
        Queue { state: Mutex::new(Pending { dirs, listing: 0, abandoned: false }), more: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next directory to list, counted as being listed; `None` when
    /// the walk is over.
    fn next(&self) -> Option<(ReadDir, usize)> {
        let mut p = self.lock();
        loop {
            if p.abandoned {
                return None;
            }
            if let Some(d) = p.dirs.pop() {
                p.listing += 1;
                return Some(d);
            }
            if p.listing == 0 {
                self.more.notify_all();
                return None;
            }
            p = self.more.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn push(&self, rd: ReadDir, depth: usize) {
        self.lock().dirs.push((rd, depth));
        self.more.notify_one();
    }
}

/// One directory being listed by a worker of a parallel walk; its end,
/// normal or by a panic, wakes the workers waiting for more.
struct InProgress<'q>(&'q Queue);

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        let mut p = self.0.lock();
        p.listing -= 1;
        p.abandoned |= std::thread::panicking();
        if p.abandoned || (p.listing == 0 && p.dirs.is_empty()) {
            self.0.more.notify_all();
        }
    }
}

impl Vfs {
    /// Lists directory `dir` from cookie `offset` (FUSE's readdir).
    pub fn read_dir_at(&self, dir: &Entry, offset: u64) -> Result<Vec<crate::fs::DirEntry>> {
        dir.check_same_vfs(&self.state)?;
        self.check_listable(dir.inode())?;
        self.readdir_batch_with(dir.inode(), |fs| fs.readdir(dir.inode().ino, offset))
    }

    /// May this view list `inode` (`opendir`'s checks)?
    fn check_listable(&self, inode: &Inode) -> Result<()> {
        if inode.kind != FileType::Dir {
            return fail(ENOTDIR);
        }
        if !self.cred.may(&inode.access_attr(), MAY_READ) {
            return fail(EACCES);
        }
        Ok(())
    }

    /// The entries after `offset` of a directory already checked, with
    /// the attributes the filesystem lists (`getdents`; it updates the
    /// directory's atime). The attributes are kept only where this view
    /// may look the names up (search permission, as `fstatat` needs).
    fn readdir_batch_plus(&self, inode: &Inode, offset: u64) -> Result<Vec<(crate::fs::DirEntry, Option<Attr>)>> {
        let mut out = self.readdir_batch_with(inode, |fs| fs.readdir_plus(inode.ino, offset))?;
        if out.iter().any(|(_, a)| a.is_some()) && !self.cred.may(&inode.access_attr(), MAY_EXEC) {
            out.iter_mut().for_each(|(_, a)| *a = None);
        }
        Ok(out)
    }

    /// One `getdents` of a directory already checked, by `read`: in the
    /// `global` mode under the global lock; it updates the atime.
    fn readdir_batch_with<T>(&self, inode: &Inode, read: impl FnOnce(&dyn FileSystem) -> Result<T>) -> Result<T> {
        let _g = self.state.global();
        let out = read(inode.fs())?;
        touch_atime(&self.state, inode);
        Ok(out)
    }
}
