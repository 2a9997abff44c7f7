//! `memfs`: the embedded in-memory filesystem (tmpfs-like), the default under
//! a `Vfs`.
//!
//! It keeps its own directory tables, so the dcache above it is a true cache.
//!
//! # Locks
//!
//! | lock                 | protects                                         |
//! |----------------------|--------------------------------------------------|
//! | `MemFs::namespace`   | every change to any directory's entries, nlink   |
//! | `MemFs::inodes`      | the inode-number table                           |
//! | `MemInode::state`    | one inode's attributes, data and entries         |
//! | a file's page cache (`PageCache`'s writer and mode locks) | its pages; taken under `state` by a truncating `setattr`, and alone by the VFS's reads and writes |
//!
//! Order: `namespace`, then `inodes`, then one `state` at a time (never two
//! inode states at once, so no order among them is needed). Reads of the
//! namespace (lookup, readdir) take only the directory's `state`: a
//! directory's entries change only with both `namespace` and its `state`
//! held. Data and attribute operations take only the inode's `state`.
//!
//! Serializing namespace changes in one lock is memfs's choice, not the
//! VFS's: the scalable part of rcuvfs is the dcache above, which answers
//! lookups of cached names without calling the filesystem at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::{
    Attr, DirEntry, FileSystem, FileType, Ino, Owner, RenameFlags, SetAttr, SetTime, StatFs, Timespec, WritePos,
};
use crate::error::{fail, Result, EEXIST, EINVAL, EISDIR, ENOENT, ENOSPC, ENOTDIR, ENOTEMPTY, EPERM};
use crate::filemap::{Accounting, CacheMode, PageCache, PAGE};
use crate::time::now;

pub const ROOT_INO: Ino = 1;
const BLOCK: u64 = 4096;

/// When reads update atime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtimePolicy {
    /// Update atime only if it is not newer than mtime or ctime, or is more
    /// than a day old (Linux's default): a read of a hot file writes nothing.
    #[default]
    Relatime,
    /// Never update atime on read.
    Noatime,
    /// Update atime on every read (POSIX strict).
    Strict,
}

/// memfs limits and options.
#[derive(Clone, Copy, Debug)]
pub struct MemFsOptions {
    /// Bytes of file data (whole 4 KiB pages; holes take none) and symlink
    /// targets; ENOSPC past it.
    pub max_bytes: u64,
    /// Inodes, the root included; ENOSPC past it.
    pub max_inodes: u64,
    pub atime: AtimePolicy,
    /// How file data's page cache is locked (seed 001).
    pub cache: CacheMode,
}

impl Default for MemFsOptions {
    fn default() -> Self {
        Self {
            max_bytes: u64::MAX / 2,
            max_inodes: u64::MAX / 2,
            atime: AtimePolicy::Relatime,
            cache: CacheMode::default(),
        }
    }
}

enum Content {
    /// File data lives only in its page cache, as in tmpfs.
    File(Arc<PageCache>),
    Dir(Dir),
    Symlink(Vec<u8>),
    Special,
}

/// A directory: entries by name, and by insertion cookie for readdir, so
/// that a listing in several calls returns each stable entry once.
#[derive(Default)]
struct Dir {
    by_name: HashMap<Vec<u8>, (Ino, u64)>,
    by_cookie: BTreeMap<u64, (Vec<u8>, Ino, FileType)>,
    next_cookie: u64,
}

impl Dir {
    fn insert(&mut self, name: &[u8], ino: Ino, kind: FileType) {
        self.next_cookie += 1;
        let c = self.next_cookie;
        if let Some((_, old)) = self.by_name.insert(name.to_vec(), (ino, c)) {
            self.by_cookie.remove(&old);
        }
        self.by_cookie.insert(c, (name.to_vec(), ino, kind));
    }

    fn remove(&mut self, name: &[u8]) -> Option<Ino> {
        let (ino, c) = self.by_name.remove(name)?;
        self.by_cookie.remove(&c);
        Some(ino)
    }

    fn get(&self, name: &[u8]) -> Option<Ino> {
        self.by_name.get(name).map(|&(ino, _)| ino)
    }
}

struct State {
    kind: FileType,
    perm: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    rdev: u64,
    /// Lookup references the VFS holds.
    nlookup: u64,
    content: Content,
}

struct MemInode {
    ino: Ino,
    state: Mutex<State>,
}

impl State {
    fn size(&self) -> u64 {
        match &self.content {
            Content::File(pc) => pc.size(),
            Content::Symlink(d) => d.len() as u64,
            Content::Dir(d) => d.by_name.len() as u64,
            Content::Special => 0,
        }
    }

    /// Bytes charged against the space limit.
    fn data_bytes(&self) -> u64 {
        match &self.content {
            Content::File(pc) => pc.pages() * PAGE as u64,
            Content::Symlink(d) => d.len() as u64,
            _ => 0,
        }
    }

    fn attr(&self, ino: Ino) -> Attr {
        let size = self.size();
        Attr {
            ino,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size,
            blocks: self.data_bytes().div_ceil(BLOCK) * (BLOCK / 512),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            rdev: self.rdev,
        }
    }

    fn dir(&self) -> Result<&Dir> {
        match &self.content {
            Content::Dir(d) => Ok(d),
            _ => fail(ENOTDIR),
        }
    }

    fn dir_mut(&mut self) -> Result<&mut Dir> {
        match &mut self.content {
            Content::Dir(d) => Ok(d),
            _ => fail(ENOTDIR),
        }
    }

    fn touch_dir(&mut self, t: Timespec) {
        self.mtime = t;
        self.ctime = t;
    }
}

/// The in-memory filesystem.
pub struct MemFs {
    opts: MemFsOptions,
    namespace: Mutex<()>,
    inodes: RwLock<HashMap<Ino, Arc<MemInode>>>,
    next_ino: AtomicU64,
    used_bytes: Arc<AtomicU64>,
    used_inodes: AtomicU64,
}

/// Charges or refunds `bytes` against `limit`.
fn charge(used: &AtomicU64, limit: u64, bytes: i64) -> Result<()> {
    if bytes < 0 {
        used.fetch_sub(bytes.unsigned_abs(), Ordering::Relaxed);
        return Ok(());
    }
    let mut cur = used.load(Ordering::Relaxed);
    loop {
        let Some(new) = cur.checked_add(bytes as u64).filter(|&v| v <= limit) else { return fail(ENOSPC) };
        match used.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(c) => cur = c,
        }
    }
}

fn lock(inode: &MemInode) -> MutexGuard<'_, State> {
    inode.state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for MemFs {
    fn default() -> Self {
        Self::new(MemFsOptions::default())
    }
}

impl MemFs {
    pub fn new(opts: MemFsOptions) -> MemFs {
        let t = now();
        let root = State {
            kind: FileType::Dir,
            perm: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            atime: t,
            mtime: t,
            ctime: t,
            rdev: 0,
            nlookup: 1,
            content: Content::Dir(Dir::default()),
        };
        let mut table = HashMap::new();
        table.insert(ROOT_INO, Arc::new(MemInode { ino: ROOT_INO, state: Mutex::new(root) }));
        MemFs {
            opts,
            namespace: Mutex::new(()),
            inodes: RwLock::new(table),
            next_ino: AtomicU64::new(ROOT_INO + 1),
            used_bytes: Arc::new(AtomicU64::new(0)),
            used_inodes: AtomicU64::new(1),
        }
    }

    /// Inodes alive in memfs (linked or still referenced): for leak checks.
    pub fn live_inodes(&self) -> u64 {
        self.used_inodes.load(Ordering::Relaxed)
    }

    /// Bytes of data stored.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    fn get(&self, ino: Ino) -> Result<Arc<MemInode>> {
        match self.inodes.read().unwrap_or_else(|e| e.into_inner()).get(&ino) {
            Some(i) => Ok(i.clone()),
            None => fail(ENOENT),
        }
    }

    fn reserve_bytes(&self, n: u64) -> Result<()> {
        charge(&self.used_bytes, self.opts.max_bytes, n as i64)
    }

    fn release_bytes(&self, n: u64) {
        self.used_bytes.fetch_sub(n, Ordering::Relaxed);
    }

    /// A new, empty page cache whose pages are charged to this memfs.
    fn new_data(&self) -> Content {
        let (used, limit) = (self.used_bytes.clone(), self.opts.max_bytes);
        let acct: Accounting = Arc::new(move |pages: i64| charge(&used, limit, pages * PAGE as i64));
        Content::File(Arc::new(PageCache::with_accounting(self.opts.cache, Some(acct))))
    }

    /// Allocates a new inode (not yet linked anywhere) with one lookup
    /// reference.
    fn alloc(&self, kind: FileType, perm: u32, rdev: u64, owner: Owner, content: Content) -> Result<Arc<MemInode>> {
        let mut cur = self.used_inodes.load(Ordering::Relaxed);
        loop {
            if cur >= self.opts.max_inodes {
                return fail(ENOSPC);
            }
            match self.used_inodes.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
        let bytes = match &content {
            Content::Symlink(t) => t.len() as u64,
            _ => 0,
        };
        if let Err(e) = self.reserve_bytes(bytes) {
            self.used_inodes.fetch_sub(1, Ordering::Relaxed);
            return Err(e);
        }
        let t = now();
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let state = State {
            kind,
            perm: perm & 0o7777,
            nlink: if kind == FileType::Dir { 2 } else { 1 },
            uid: owner.uid,
            gid: owner.gid,
            atime: t,
            mtime: t,
            ctime: t,
            rdev,
            nlookup: 1,
            content,
        };
        let inode = Arc::new(MemInode { ino, state: Mutex::new(state) });
        self.inodes.write().unwrap_or_else(|e| e.into_inner()).insert(ino, inode.clone());
        Ok(inode)
    }

    /// Frees the content of an inode that has no links and no lookup
    /// references (`st`, its state, locked by the caller), and says whether
    /// it must leave the inode table: the caller does that with
    /// [`unlist`](Self::unlist) once it has released `st`, since `inodes`
    /// comes before any `state` in the lock order.
    fn maybe_free(&self, st: &mut State) -> bool {
        if st.nlink != 0 || st.nlookup != 0 {
            return false;
        }
        if let Content::Symlink(t) = &st.content {
            self.release_bytes(t.len() as u64);
        }
        // A page cache refunds its pages when its last user drops it.
        st.content = Content::Special;
        true
    }

    /// Removes a freed inode from the table (once: a second caller finds it
    /// gone). Nothing can reach it by name any more (no links), and the VFS
    /// holds no lookup reference, so nobody asks for it meanwhile.
    fn unlist(&self, ino: Ino) {
        if self.inodes.write().unwrap_or_else(|e| e.into_inner()).remove(&ino).is_some() {
            self.used_inodes.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Creates `name` in `parent` for a freshly made inode. Holds the
    /// namespace lock.
    fn add_entry(&self, parent: Ino, name: &[u8], make: impl FnOnce() -> Result<Arc<MemInode>>) -> Result<Attr> {
        let _ns = self.namespace.lock().unwrap_or_else(|e| e.into_inner());
        let dir = self.get(parent)?;
        {
            let st = lock(&dir);
            let d = st.dir()?;
            if st.nlink == 0 {
                return fail(ENOENT); // a removed directory takes no new entries
            }
            if d.get(name).is_some() {
                return fail(EEXIST);
            }
        }
        let inode = make()?;
        let (attr, kind) = {
            let st = lock(&inode);
            (st.attr(inode.ino), st.kind)
        };
        let mut st = lock(&dir);
        st.dir_mut()?.insert(name, inode.ino, kind);
        if kind == FileType::Dir {
            st.nlink += 1;
        }
        st.touch_dir(attr.ctime);
        Ok(attr)
    }

    fn entry_ino(&self, dir: &MemInode, name: &[u8]) -> Result<Ino> {
        lock(dir).dir()?.get(name).ok_or_else(|| crate::error::err(ENOENT))
    }

    fn kind_of(&self, ino: Ino) -> Result<FileType> {
        Ok(lock(&*self.get(ino)?).kind)
    }

    /// Drops one link of `ino` (a victim of unlink, rmdir or rename).
    fn drop_link(&self, ino: Ino, t: Timespec) -> Result<()> {
        let inode = self.get(ino)?;
        let mut st = lock(&inode);
        if st.kind == FileType::Dir {
            st.nlink = 0;
        } else {
            st.nlink = st.nlink.saturating_sub(1);
        }
        st.ctime = t;
        let free = self.maybe_free(&mut st);
        drop(st);
        if free {
            self.unlist(ino);
        }
        Ok(())
    }

    fn dir_is_empty(&self, ino: Ino) -> Result<bool> {
        Ok(lock(&*self.get(ino)?).dir()?.by_name.is_empty())
    }
}

fn set_time(t: SetTime, now: Timespec) -> Timespec {
    match t {
        SetTime::Now => now,
        SetTime::At(t) => t,
    }
}

impl FileSystem for MemFs {
    fn root(&self) -> Ino {
        ROOT_INO
    }

    fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        let dir = self.get(parent)?;
        let ino = self.entry_ino(&dir, name)?;
        let inode = self.get(ino)?;
        let mut st = lock(&inode);
        st.nlookup += 1;
        Ok(st.attr(ino))
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        if let Ok(inode) = self.get(ino) {
            let mut st = lock(&inode);
            st.nlookup = st.nlookup.saturating_sub(nlookup);
            let free = self.maybe_free(&mut st);
            drop(st);
            if free {
                self.unlist(ino);
            }
        }
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        let inode = self.get(ino)?;
        let st = lock(&inode);
        Ok(st.attr(ino))
    }

    fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let inode = self.get(ino)?;
        let mut st = lock(&inode);
        let t = now();
        if let Some(size) = set.size {
            let Content::File(pc) = &st.content else {
                return fail(if st.kind == FileType::Dir { EISDIR } else { EINVAL });
            };
            pc.set_len(size)?;
            st.mtime = t;
        }
        if let Some(perm) = set.perm {
            st.perm = perm & 0o7777;
        }
        if let Some(uid) = set.uid {
            st.uid = uid;
        }
        if let Some(gid) = set.gid {
            st.gid = gid;
        }
        if let Some(a) = set.atime {
            st.atime = set_time(a, t);
        }
        if let Some(m) = set.mtime {
            st.mtime = set_time(m, t);
        }
        st.ctime = t;
        Ok(st.attr(ino))
    }

    fn create(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        self.add_entry(parent, name, || self.alloc(FileType::File, perm, 0, owner, self.new_data()))
    }

    fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        self.add_entry(parent, name, || self.alloc(FileType::Dir, perm, 0, owner, Content::Dir(Dir::default())))
    }

    fn mknod(&self, parent: Ino, name: &[u8], kind: FileType, perm: u32, rdev: u64, owner: Owner) -> Result<Attr> {
        let content = match kind {
            FileType::File => self.new_data(),
            FileType::Dir => return fail(EINVAL),
            FileType::Symlink => return fail(EINVAL),
            _ => Content::Special,
        };
        self.add_entry(parent, name, || self.alloc(kind, perm, rdev, owner, content))
    }

    fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr> {
        self.add_entry(parent, name, || {
            self.alloc(FileType::Symlink, 0o777, 0, owner, Content::Symlink(target.to_vec()))
        })
    }

    fn link(&self, ino: Ino, parent: Ino, name: &[u8]) -> Result<Attr> {
        self.add_entry(parent, name, || {
            let inode = self.get(ino)?;
            let mut st = lock(&inode);
            if st.kind == FileType::Dir {
                return fail(EPERM);
            }
            if st.nlink == 0 {
                return fail(ENOENT);
            }
            st.nlink += 1;
            st.nlookup += 1;
            st.ctime = now();
            drop(st);
            Ok(inode)
        })
    }

    fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let _ns = self.namespace.lock().unwrap_or_else(|e| e.into_inner());
        let dir = self.get(parent)?;
        let ino = self.entry_ino(&dir, name)?;
        if self.kind_of(ino)? == FileType::Dir {
            return fail(EISDIR);
        }
        let t = now();
        {
            let mut st = lock(&dir);
            st.dir_mut()?.remove(name);
            st.touch_dir(t);
        }
        self.drop_link(ino, t)
    }

    fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let _ns = self.namespace.lock().unwrap_or_else(|e| e.into_inner());
        let dir = self.get(parent)?;
        let ino = self.entry_ino(&dir, name)?;
        if self.kind_of(ino)? != FileType::Dir {
            return fail(ENOTDIR);
        }
        if !self.dir_is_empty(ino)? {
            return fail(ENOTEMPTY);
        }
        let t = now();
        {
            let mut st = lock(&dir);
            st.dir_mut()?.remove(name);
            st.nlink -= 1;
            st.touch_dir(t);
        }
        self.drop_link(ino, t)
    }

    fn rename(&self, parent: Ino, name: &[u8], new_parent: Ino, new_name: &[u8], flags: RenameFlags) -> Result<()> {
        let _ns = self.namespace.lock().unwrap_or_else(|e| e.into_inner());
        let src_dir = self.get(parent)?;
        let dst_dir = self.get(new_parent)?;
        let src = self.entry_ino(&src_dir, name)?;
        let dst = lock(&dst_dir).dir()?.get(new_name);
        if lock(&dst_dir).nlink == 0 {
            return fail(ENOENT);
        }
        let src_kind = self.kind_of(src)?;
        let t = now();
        if flags.exchange {
            let Some(dst) = dst else { return fail(ENOENT) };
            let dst_kind = self.kind_of(dst)?;
            if src == dst {
                return Ok(());
            }
            lock(&src_dir).dir_mut()?.insert(name, dst, dst_kind);
            lock(&dst_dir).dir_mut()?.insert(new_name, src, src_kind);
            if parent != new_parent && (src_kind == FileType::Dir) != (dst_kind == FileType::Dir) {
                let (gain, lose) = if src_kind == FileType::Dir { (&dst_dir, &src_dir) } else { (&src_dir, &dst_dir) };
                lock(gain).nlink += 1;
                lock(lose).nlink -= 1;
            }
            for d in [&src_dir, &dst_dir] {
                lock(d).touch_dir(t);
            }
            for i in [src, dst] {
                lock(&*self.get(i)?).ctime = t;
            }
            return Ok(());
        }
        if let Some(dst) = dst {
            if flags.noreplace {
                return fail(EEXIST);
            }
            if dst == src {
                return Ok(()); // two links of one inode: rename does nothing
            }
            let dst_kind = self.kind_of(dst)?;
            match (src_kind == FileType::Dir, dst_kind == FileType::Dir) {
                (true, false) => return fail(ENOTDIR),
                (false, true) => return fail(EISDIR),
                (true, true) if !self.dir_is_empty(dst)? => return fail(ENOTEMPTY),
                _ => {}
            }
            {
                let mut d = lock(&dst_dir);
                d.dir_mut()?.remove(new_name);
                if dst_kind == FileType::Dir {
                    d.nlink -= 1;
                }
            }
            self.drop_link(dst, t)?;
        }
        lock(&src_dir).dir_mut()?.remove(name);
        lock(&dst_dir).dir_mut()?.insert(new_name, src, src_kind);
        if src_kind == FileType::Dir && parent != new_parent {
            lock(&src_dir).nlink -= 1;
            lock(&dst_dir).nlink += 1;
        }
        lock(&src_dir).touch_dir(t);
        lock(&dst_dir).touch_dir(t);
        lock(&*self.get(src)?).ctime = t;
        Ok(())
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let inode = self.get(ino)?;
        let st = lock(&inode);
        match &st.content {
            Content::Symlink(t) => Ok(t.clone()),
            _ => fail(EINVAL),
        }
    }

    fn readdir(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>> {
        let inode = self.get(ino)?;
        let mut st = lock(&inode);
        let out = st
            .dir()?
            .by_cookie
            .range(offset.saturating_add(1)..)
            .map(|(&c, (name, ino, kind))| DirEntry { ino: *ino, name: name.clone(), kind: *kind, offset: c })
            .collect();
        let t = now();
        if atime_due(self.opts.atime, &st, t) {
            st.atime = t;
        }
        Ok(out)
    }

    fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let pc = self.page_cache(ino).ok_or_else(|| self.not_a_file(ino))?;
        let n = pc.read(offset, buf);
        let inode = self.get(ino)?;
        let mut st = lock(&inode);
        let t = now();
        if atime_due(self.opts.atime, &st, t) {
            st.atime = t;
        }
        Ok(n)
    }

    fn write(&self, ino: Ino, pos: WritePos, data: &[u8]) -> Result<u64> {
        let pc = self.page_cache(ino).ok_or_else(|| self.not_a_file(ino))?;
        let at = pc.write(
            match pos {
                WritePos::At(o) => Some(o),
                WritePos::Append => None,
            },
            data,
        )?;
        if !data.is_empty() {
            let inode = self.get(ino)?;
            let mut st = lock(&inode);
            let t = now();
            st.mtime = t;
            st.ctime = t;
        }
        Ok(at)
    }

    fn note_access(&self, ino: Ino) {
        if let Ok(inode) = self.get(ino) {
            lock(&inode).atime = now();
        }
    }

    fn note_modify(&self, ino: Ino) {
        if let Ok(inode) = self.get(ino) {
            let mut st = lock(&inode);
            let t = now();
            st.mtime = t;
            st.ctime = t;
        }
    }

    fn page_cache(&self, ino: Ino) -> Option<Arc<PageCache>> {
        let inode = self.get(ino).ok()?;
        let st = lock(&inode);
        match &st.content {
            Content::File(pc) => Some(pc.clone()),
            _ => None,
        }
    }

    fn statfs(&self) -> Result<StatFs> {
        let used = self.used_bytes.load(Ordering::Relaxed).div_ceil(BLOCK);
        let blocks = self.opts.max_bytes / BLOCK;
        let files = self.opts.max_inodes;
        let ffree = files.saturating_sub(self.used_inodes.load(Ordering::Relaxed));
        Ok(StatFs {
            bsize: BLOCK as u32,
            blocks,
            bfree: blocks.saturating_sub(used),
            bavail: blocks.saturating_sub(used),
            files,
            ffree,
            namelen: 255,
        })
    }
}

impl MemFs {
    fn not_a_file(&self, ino: Ino) -> std::io::Error {
        match self.kind_of(ino) {
            Ok(FileType::Dir) => crate::error::err(EISDIR),
            Ok(_) => crate::error::err(EINVAL),
            Err(e) => e,
        }
    }
}

fn atime_due(policy: AtimePolicy, st: &State, now: Timespec) -> bool {
    match policy {
        AtimePolicy::Noatime => false,
        AtimePolicy::Strict => true,
        AtimePolicy::Relatime => {
            st.atime != now && (st.atime <= st.mtime || st.atime <= st.ctime || now.sec - st.atime.sec >= 24 * 3600)
        }
    }
}
