//! Open files: [`File`] (Read, Write, Seek, positional I/O) and
//! [`OpenOptions`].
//!
//! A `File` holds a reference on its in-core inode, so an unlinked file that
//! is still open keeps its data until its last handle closes. File data goes
//! straight to the filesystem: no namespace lock is taken. `metadata` reads
//! the cached attributes; writes refresh them.

use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::error::{fail, Result, EBADF, EINVAL, EISDIR};
use crate::fs::{FileType, Ino, SetAttr, WritePos};
use crate::inode::Inode;
use crate::mount::Mount;
use crate::vfs::{touch_atime, Metadata, StateRef};

/// How to open a file, as `std::fs::OpenOptions` (plus `mode` and
/// `nofollow`).
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) append: bool,
    pub(crate) truncate: bool,
    pub(crate) create: bool,
    pub(crate) create_new: bool,
    pub(crate) nofollow: bool,
    pub(crate) mode: u32,
    /// Built from `open(2)` flags: POSIX rules, not `std`'s.
    pub(crate) posix: bool,
    /// The kernel's open for execve (`__FMODE_EXEC` in a FUSE OPEN): needs
    /// execute permission, not read.
    pub(crate) exec: bool,
}

/// The kernel's `__FMODE_EXEC`, which FUSE passes in the flags of the OPEN
/// that `execve` makes (with `O_RDONLY`); no `open(2)` flag has this value.
pub const FMODE_EXEC: i32 = 0x20;

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            nofollow: false,
            mode: 0o666,
            posix: false,
            exec: false,
        }
    }

    /// Options from `open(2)` flags (`O_ACCMODE`, `O_APPEND`, `O_TRUNC`,
    /// `O_CREAT`, `O_EXCL`, `O_NOFOLLOW`, and [`FMODE_EXEC`] as FUSE sends
    /// it for an exec), with POSIX's rules rather than
    /// `std`'s: `O_RDONLY | O_CREAT` creates, `O_TRUNC` needs only write
    /// permission on the file. For servers such as FUSE.
    pub fn from_flags(flags: i32) -> OpenOptions {
        let mut o = OpenOptions::new();
        match flags & libc::O_ACCMODE {
            libc::O_RDONLY => o.read = true,
            libc::O_WRONLY => o.write = true,
            _ => (o.read, o.write) = (true, true),
        }
        o.append = flags & libc::O_APPEND != 0;
        o.truncate = flags & libc::O_TRUNC != 0;
        o.create = flags & libc::O_CREAT != 0;
        o.create_new = o.create && flags & libc::O_EXCL != 0;
        o.nofollow = flags & libc::O_NOFOLLOW != 0;
        o.exec = flags & FMODE_EXEC != 0 && flags & libc::O_ACCMODE == libc::O_RDONLY;
        o.posix = true;
        o
    }
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    /// Every write goes to the end, atomically with respect to other
    /// appenders. Implies write.
    pub fn append(&mut self, v: bool) -> &mut Self {
        self.append = v;
        self
    }
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    /// Create, failing with EEXIST if the name exists (`O_CREAT|O_EXCL`);
    /// a symlink in the last component is not followed.
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    /// Fail with ELOOP if the last component is a symlink (`O_NOFOLLOW`).
    pub fn no_follow(&mut self, v: bool) -> &mut Self {
        self.nofollow = v;
        self
    }
    /// Permission bits for a created file (less the view's umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    pub(crate) fn writes(&self) -> bool {
        self.write || self.append
    }

    pub(crate) fn create_any(&self) -> bool {
        self.create || self.create_new
    }

    /// The combinations `std` rejects with EINVAL.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.posix {
            return Ok(());
        }
        if !self.read && !self.writes() {
            return fail(EINVAL);
        }
        if (self.truncate || self.create_any()) && !self.writes() {
            return fail(EINVAL);
        }
        if self.truncate && self.append {
            return fail(EINVAL);
        }
        Ok(())
    }
}

/// An open file.
pub struct File {
    state: StateRef,
    /// Counted: `File::new` is handed a reference, `Drop` returns it.
    inode: *const Inode,
    /// The mount the file was opened in (counted, like `inode`): an open
    /// file keeps its filesystem mounted (umount answers EBUSY).
    mnt: *const Mount,
    ino: Ino,
    kind: FileType,
    readable: bool,
    writable: bool,
    append: bool,
    pos: u64,
    /// Opened by root (who has CAP_FSETID): its writes keep set-ID bits
    /// and file capabilities (see `kill_priv`).
    privileged: bool,
    /// The opener was in the file's group at open: its writes keep a
    /// set-group-ID bit that is not group-executable (see `kill_priv`).
    in_group: bool,
}

impl File {
    /// The caller passes one reference on `inode` to the file.
    pub(crate) fn new(
        state: StateRef,
        mnt: *const Mount,
        inode: &Inode,
        opts: &OpenOptions,
        privileged: bool,
        in_group: bool,
    ) -> File {
        File {
            privileged,
            in_group,
            state,
            inode,
            mnt,
            ino: inode.ino,
            kind: inode.kind,
            readable: opts.read,
            writable: opts.writes(),
            append: opts.append,
            pos: 0,
        }
    }

    /// Writes through the page cache when there is one, else through the
    /// filesystem. mtime and ctime follow from the coarse clock: the
    /// filesystem is told only when the clock has moved since the last
    /// change (as Linux's `file_update_time`), so a stream of small writes
    /// costs one page-cache write each.
    fn write_data(&self, offset: Option<u64>, buf: &[u8]) -> Result<u64> {
        let inode = self.inode();
        let fs = self.inode().fs();
        if !buf.is_empty() && !self.privileged {
            kill_priv(inode, self.in_group)?;
        }
        let at = match inode.data() {
            Some(pc) => {
                let at = pc.write(offset, buf)?;
                if !buf.is_empty() && inode.attr().mtime != crate::time::now() {
                    fs.note_modify(self.ino);
                    inode.refresh(fs);
                }
                at
            }
            None => {
                let at = fs.write(self.ino, offset.map_or(WritePos::Append, WritePos::At), buf)?;
                inode.refresh(fs);
                at
            }
        };
        Ok(at)
    }

    fn inode(&self) -> &Inode {
        // SAFETY: the file owns a reference on its inode.
        unsafe { &*self.inode }
    }

    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// `pread`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if !self.readable {
            return fail(EBADF);
        }
        if self.kind == FileType::Dir {
            return fail(EISDIR);
        }
        let n = match self.inode().data_for_read() {
            Some(pc) => pc.read(offset, buf),
            None => self.inode().fs().read(self.ino, offset, buf)?,
        };
        touch_atime(&self.state, self.inode());
        Ok(n)
    }

    /// `pwrite`. (Unlike Linux, an append-mode file writes at `offset`.)
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        if !self.writable {
            return fail(EBADF);
        }
        self.write_data(Some(offset), buf)?;
        Ok(buf.len())
    }

    /// `ftruncate`: EINVAL unless open for writing.
    pub fn set_len(&self, size: u64) -> Result<()> {
        if !self.writable {
            return fail(EINVAL);
        }
        if !self.privileged {
            kill_priv(self.inode(), self.in_group)?;
        }
        let since = self.inode().attr_version();
        let a = self.inode().fs().setattr(self.ino, &SetAttr { size: Some(size), ..SetAttr::default() })?;
        self.inode().set_attr_after(&a, since);
        Ok(())
    }

    /// `fallocate` (mode 0, or `FALLOC_FL_KEEP_SIZE` with `keep_size`):
    /// allocates `[offset, offset + len)` so that writes there do not fail
    /// for space (ENOSPC if there is none); the size grows to the end
    /// unless `keep_size`, and never shrinks. EBADF unless open for
    /// writing, EINVAL for an empty range, EOPNOTSUPP where the filesystem
    /// cannot.
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        if !self.writable {
            return fail(EBADF);
        }
        if len == 0 {
            return fail(EINVAL);
        }
        let inode = self.inode();
        if !self.privileged {
            kill_priv(inode, self.in_group)?;
        }
        inode.fs().fallocate(self.ino, offset, len, keep_size)?;
        inode.refresh(inode.fs());
        Ok(())
    }

    /// `fstat`.
    pub fn metadata(&self) -> Result<Metadata> {
        Ok(Metadata(self.inode().attr()))
    }

    /// `fsync`.
    pub fn sync_all(&self) -> Result<()> {
        self.inode().fs().fsync(self.ino)
    }

    /// Writes `buf` at the end of the file, atomically with respect to
    /// other appenders; returns the offset it landed at.
    pub fn append_at_end(&self, buf: &[u8]) -> Result<u64> {
        if !self.writable {
            return fail(EBADF);
        }
        self.write_data(None, buf)
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.append {
            let at = self.append_at_end(buf)?;
            self.pos = at + buf.len() as u64;
        } else {
            self.write_at(buf, self.pos)?;
            self.pos += buf.len() as u64;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let new = match pos {
            SeekFrom::Start(o) => Some(o),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.metadata()?.len().checked_add_signed(d),
        };
        match new {
            Some(p) if p <= i64::MAX as u64 => {
                self.pos = p;
                Ok(p)
            }
            _ => fail(EINVAL),
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let dc = &self.state.dc;
        // SAFETY: the file's reference keeps the inode.
        unsafe { (*self.inode).open_end() };
        // SAFETY: the file owns these references; the inode's goes first,
        // as the mount's may be the last that keeps its filesystem.
        unsafe {
            dc.iput(self.inode);
            dc.mntput(&*self.mnt);
        }
    }
}

// SAFETY: the inode pointer is a counted reference to a Sync object; the
// rest of the file is plain data.
unsafe impl Send for File {}
// SAFETY: `&File` only reads through the inode, whose fields are atomics or
// behind locks.
unsafe impl Sync for File {}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("ino", &self.ino).field("pos", &self.pos).finish()
    }
}

/// What a write, truncate or fallocate by a caller without CAP_FSETID (not
/// root) does first, as Linux's `file_remove_privs`: set-user-ID goes, and
/// set-group-ID where the group may execute or the caller is not in the
/// file's group (`in_group`); and the file's capabilities
/// (`security.capability`). The check costs nothing shared when there is
/// nothing to remove: the attributes are cached, and whether an owned
/// inode has extended attributes is a pointer on it. A copied inode
/// (passthrough, etcd) is only asked to drop capabilities along with
/// set-ID bits, to keep a call off every write.
pub(crate) fn kill_priv(inode: &Inode, in_group: bool) -> Result<()> {
    let a = inode.attr();
    if a.kind != FileType::File {
        return Ok(());
    }
    let mut perm = a.perm & !libc::S_ISUID;
    if perm & 0o010 != 0 || !in_group {
        perm &= !libc::S_ISGID;
    }
    let fs = inode.fs();
    if perm != a.perm {
        let since = inode.attr_version();
        let new = fs.setattr(inode.ino, &SetAttr { perm: Some(perm), ..SetAttr::default() })?;
        inode.set_attr_after(&new, since);
    }
    if if inode.is_owned() { inode.has_xattrs() } else { perm != a.perm } {
        match fs.removexattr(inode.ino, b"security.capability") {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::ENOTSUP)) => {}
            r => r?,
        }
    }
    Ok(())
}
