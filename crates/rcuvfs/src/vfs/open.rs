//! Opening files (`open`, `openat`, `O_CREAT`), whole-file reads and
//! writes, and the atime update after a read.

use std::io::{Read, Write};
use std::path::Path;

use super::create::Made;
use super::walk::{Found, IfUncached, Update};
use super::{bytes, Begun, DirPin, Entry, Named, Start, StateRef, Vfs, VfsState};
use crate::cred::{MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::dcache::DRef;
use crate::error::{errno_of, fail, Result, EACCES, EEXIST, EINVAL, EISDIR, ELOOP, ENOENT};
use crate::file::{File, OpenOptions};
use crate::fs::memfs::AtimePolicy;
use crate::fs::{FileType, NewNode, SetAttr};
use crate::inode::Inode;

/// Walks an open makes again when the file it found lost its data first
/// (see `open_once`).
const GONE_RETRIES: u32 = 8;
use crate::mount::Mount;
use crate::namei::{check_path, RefWalk};

/// `open_create`'s answer, with the file through its dentry.
fn found<'a>(r: (RefWalk<'a>, DRef<'a>, bool)) -> (RefWalk<'a>, Found<'a>, bool) {
    (r.0, Found::Dentry(r.1), r.2)
}

impl Vfs {
    // ---- files ----

    /// Opens `path` with `opts` (`open(2)`).
    pub fn open(&self, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File> {
        self.open_from(Start::Cwd, bytes(path.as_ref()), opts)
    }

    /// `openat`.
    pub fn open_at(&self, dir: &Entry, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File> {
        self.open_from(Start::At(dir), bytes(path.as_ref()), opts)
    }

    /// Opens the object behind `entry` (FUSE's open): the permission checks
    /// of `open`, without a path.
    pub fn open_entry(&self, entry: &Entry, opts: &OpenOptions) -> Result<File> {
        entry.check_same_vfs(&self.state)?;
        opts.validate()?;
        let _g = self.state.global();
        self.finish_open(entry.mount(), entry.inode(), opts, false, None)
    }

    fn open_from(&self, start: Start, path: &[u8], opts: &OpenOptions) -> Result<File> {
        self.retry_estale(|| self.open_once(start, path, opts))
    }

    fn open_once(&self, start: Start, path: &[u8], opts: &OpenOptions) -> Result<File> {
        self.open_once_with(start, path, opts, true, |mnt, inode, created, found| {
            self.finish_open(mnt, inode, opts, created, Some(found))
        })
    }

    /// An open's walk, create and checks, then `finish` (given the mount,
    /// the file, whether this call created it, and the answer it came in,
    /// whose own reference `finish` may take: [`Found::give_ref`]): making the open file,
    /// or only the checks and the truncation where no file is needed (an
    /// empty `write`). `keeps`: `finish` keeps the file (an open file
    /// takes its own reference); if not, a file this call creates gets no
    /// reference at all, and `finish` must not read it past its return.
    fn open_once_with<T>(
        &self,
        start: Start,
        path: &[u8],
        opts: &OpenOptions,
        keeps: bool,
        finish: impl Fn(&Mount, &Inode, bool, &mut Found<'_>) -> Result<T>,
    ) -> Result<T> {
        opts.validate()?;
        check_path(path)?;
        let _g = self.state.global();
        // The walk, the create and the open nest their read sections in
        // this one (`Dcache::hold_update`).
        let section = self.dc().hold_update();
        let mut tries = 0;
        loop {
            let (w, mut d, created) = if opts.create_any() {
                match self.begin_update(start, path, IfUncached::Create)? {
                    Update::Uncached(u) => {
                        let perm = opts.mode & 0o7777 & !self.umask;
                        // With no read section (a blocking filesystem is
                        // mounted), a file kept by nothing would be read
                        // by nothing that keeps its memory: it comes with
                        // a reference then.
                        match self.create_uncached(u, NewNode::File, perm, keeps || section.is_none())? {
                            Made::Born(w, f) => (w, f, true),
                            Made::Named(n) => found(self.open_create(Begun::Named(n), opts)?),
                        }
                    }
                    Update::Named(n) => found(self.open_create(Begun::Named(n), opts)?),
                    Update::Other(_) => found(self.open_create(Begun::Other, opts)?),
                }
            } else {
                if tries == 0 {
                    let (w, f) = self.begin_walk_file(start, path, !opts.nofollow)?;
                    (w, f, false)
                } else {
                    let (w, d) = self.begin_walk_locked(start, path, !opts.nofollow)?;
                    (w, Found::Dentry(d), false)
                }
            };
            let inode: *const Inode = d.inode();
            // SAFETY: kept by `d`'s reference; where there is none
            // (`Found::Made`), by this update's read section (`section`). Once
            // `finish` took `d`'s reference it succeeded, and its file holds
            // the inode: `inode` is read after `finish` only when it failed.
            let inode = unsafe { &*inode };
            match finish(w.mnt(), inode, created, &mut d) {
                // The file the walk found lost its last name and its data
                // (a large file's go at once) before the open counted
                // itself: renamed over or unlinked in between. The name is
                // another file now, or none: look it up again under its
                // lock, as the kernel's open walks again on ESTALE. Each
                // retry follows a completed unlink or rename; the bound is
                // for a name renamed over without end.
                // (Only its ENOENT: a check that failed first, EACCES or
                // EISDIR, is the answer whatever the data did meanwhile.)
                Err(e) if errno_of(&e) == ENOENT && inode.data_gone() && tries < GONE_RETRIES => {
                    tries += 1;
                }
                r => return r,
            }
        }
    }

    /// Finds or creates the file to open (`path_openat`'s walk).
    fn open_walk<'a>(
        &'a self,
        mut w: RefWalk<'a>,
        start: DRef<'a>,
        path: &[u8],
        opts: &OpenOptions,
    ) -> Result<(RefWalk<'a>, DRef<'a>, bool)> {
        let dc = self.dc();
        if !opts.create_any() {
            let d = dc.walk(&mut w, start, path, !opts.nofollow)?;
            return Ok((w, d, false));
        }
        let p = dc.walk_parent(&mut w, start, path)?;
        self.open_create(self.lock_last(w, p)?, opts)
    }

    /// The last component of an `O_CREAT` open: finds or creates it.
    /// Returns the walk (its mount), the file and whether it was created.
    fn open_create<'a>(&'a self, b: Begun<'a, '_>, opts: &OpenOptions) -> Result<(RefWalk<'a>, DRef<'a>, bool)> {
        let dc = self.dc();
        let Begun::Named(n) = b else {
            return fail(EISDIR);
        };
        if n.trailing {
            return fail(EISDIR);
        }
        if let Some(ei) = n.child.inode() {
            if opts.create_new {
                return fail(EEXIST);
            }
            if ei.kind == FileType::Symlink {
                if opts.nofollow {
                    return fail(ELOOP);
                }
                let Named { child, _lock, dir, mut w, .. } = n;
                let target = dc.link_target(&mut w, &child)?;
                // The walk goes on from the directory: a reference of its
                // own now (the link's keeps it until then).
                let dir = match dir {
                    DirPin::Held(d) => d,
                    DirPin::ByChild(p) => {
                        // SAFETY: pinned by `child` under the name lock,
                        // both still held.
                        let d = unsafe { &*p };
                        d.lockref().get();
                        // SAFETY: the reference just taken.
                        unsafe { DRef::adopt(dc, d) }
                    }
                };
                drop(child);
                drop(_lock);
                return self.open_walk(w, dir, &target, opts);
            }
            let Named { child, w, .. } = n;
            return Ok((w, child, false));
        }
        let dir = n.dir();
        let dir_attr = self.may_create(dir)?;
        let perm = opts.mode & 0o7777 & !self.umask;
        self.make_node(dir, &dir_attr, &n.child, n.name, NewNode::File, perm)?;
        let Named { child, w, .. } = n;
        Ok((w, child, true))
    }

    fn finish_open(
        &self,
        mnt: &Mount,
        inode: &Inode,
        opts: &OpenOptions,
        created: bool,
        found: Option<&mut Found<'_>>,
    ) -> Result<File> {
        let attr = self.check_open(inode, opts, created)?;
        if !inode.open_begin() {
            // Its last link went while nothing had it open, and its data
            // with it: as if this open came after the unlink.
            return fail(ENOENT);
        }
        // The file's reference: the one the walk or the create took, where
        // it took one of its own (a file with no dentry; `found`), rather than one
        // more taken here and that one put when the walk's answer drops
        // (two atomic RMWs on the inode's count, about 120 instructions).
        if !found.is_some_and(|f| f.give_ref()) {
            inode.hold();
        }
        let mnt = self.dc().mntget(mnt).into_raw();
        let (privileged, in_group) = (self.cred.is_root(), self.cred.in_group(attr.gid));
        Ok(File::new(StateRef::new(&self.state), mnt, inode, opts, privileged, in_group))
    }

    /// What an open checks of the file it found (`created`: made by this
    /// open, whose caller may not have the access its mode gives), and the
    /// truncation `opts` asks for. Returns the file's attributes.
    fn check_open(&self, inode: &Inode, opts: &OpenOptions, created: bool) -> Result<crate::fs::Attr> {
        let attr = inode.attr();
        if attr.kind == FileType::Symlink {
            return fail(ELOOP); // only reachable with nofollow
        }
        let writes = opts.writes();
        if attr.kind == FileType::Dir && (writes || opts.truncate) {
            return fail(EISDIR);
        }
        if !created {
            let mut mask = 0;
            if opts.exec {
                // execve: a regular file the caller may execute (read
                // permission is not needed; the loader's reads go through
                // this open file).
                if attr.kind != FileType::File {
                    return fail(EACCES);
                }
                mask |= MAY_EXEC;
            } else if opts.read {
                mask |= MAY_READ;
            }
            if writes || opts.truncate {
                mask |= MAY_WRITE;
            }
            if !self.cred.may(&attr, mask) {
                return fail(EACCES);
            }
        }
        if opts.truncate && attr.kind == FileType::File && !created {
            if !self.cred.is_root() {
                super::file::kill_priv(inode, self.cred.in_group(attr.gid))?;
            }
            let since = inode.attr_version();
            let a = inode.fs().setattr(attr.ino, &SetAttr { size: Some(0), ..SetAttr::default() })?;
            inode.set_attr_after(&a, since);
        }
        Ok(attr)
    }

    /// Reads a whole file.
    pub fn read(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let mut f = self.open(path, OpenOptions::new().read(true))?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Reads a whole file as UTF-8.
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> Result<String> {
        String::from_utf8(self.read(path)?).map_err(|_| crate::error::err(EINVAL))
    }

    /// Writes a whole file, creating or truncating it.
    pub fn write(&self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> Result<()> {
        let (path, contents) = (bytes(path.as_ref()), contents.as_ref());
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        if contents.is_empty() {
            // Nothing to write: the open's walk, create, checks and
            // truncation, and no open file (whose counts on the inode, the
            // mount and the Vfs an empty write would take and give back at
            // once: seven atomic RMWs and about 260 instructions of a
            // create's 4,700, by `scripts/count-ops`). A file the walk
            // found may lose its last name before the truncation: as an
            // open that came just before the unlink, it is truncated and
            // the name stays gone.
            return self.retry_estale(|| {
                self.open_once_with(Start::Cwd, path, &opts, false, |_, inode, created, _| {
                    // A file this open made passes every check (a regular
                    // file, empty, which its creator may write whatever
                    // its mode): its attributes are not read.
                    if created {
                        return Ok(());
                    }
                    self.check_open(inode, &opts, created).map(drop)
                })
            });
        }
        self.open_from(Start::Cwd, path, &opts)?.write_all(contents)
    }
}

/// After a read: if the atime policy says atime is due, update it (through
/// the filesystem for page-cache reads, which bypass it; the filesystem's
/// own `read` updated it otherwise) and refresh the cached attributes. A
/// read of a hot file under relatime stores nothing.
pub(crate) fn touch_atime(state: &VfsState, inode: &Inode) {
    let due = match state.atime {
        AtimePolicy::Noatime => false,
        AtimePolicy::Strict => true,
        AtimePolicy::Relatime => {
            let a = inode.attr();
            let now = crate::time::now();
            // As Linux's `atime_needs_update`: never when atime is already
            // now (else every read in the clock tick of a write would write).
            a.atime != now && (a.atime <= a.mtime || a.atime <= a.ctime || now.sec - a.atime.sec >= 24 * 3600)
        }
    };
    if due {
        // A page cache's reads never reach the filesystem, so it is told;
        // so is a filesystem whose inodes the VFS copies (a passthrough's
        // host sets atime itself and ignores it; a remote one, such as
        // etcd, records it, else every read would find atime due again).
        if inode.data_if_any().is_some() || !inode.is_owned() {
            inode.fs().note_access(inode.ino);
        }
        inode.refresh(inode.fs());
    }
}
