//! The `FileSystem` trait: what a filesystem under the VFS provides, and the
//! types that cross the boundary.
//!
//! A filesystem keeps its own truth. The dcache above it is a cache: it may
//! drop any unused entry and find it again through [`FileSystem::lookup`].
//!
//! # Lookup counts
//!
//! As in FUSE, every call that hands the VFS an inode it may keep (lookup,
//! create, mkdir, mknod, symlink, link) counts one reference on that inode;
//! the VFS returns them with [`FileSystem::forget`] when it lets the inode go.
//! An inode with no links and no lookup references is freed. That is how an
//! unlinked file that is still open keeps its data until its last close.
//!
//! # What the VFS checks, and what the filesystem checks
//!
//! The VFS checks permissions, name syntax (length, NUL, "." and ".."), and
//! rename into a subtree. The filesystem checks what its own tables decide:
//! existence, emptiness, file type (EISDIR/ENOTDIR), and space (ENOSPC).

#[cfg(all(feature = "etcd", not(loom)))]
pub mod etcd;
pub mod memfs;
#[cfg(not(loom))]
pub mod passthrough;

use crate::error::Result;

pub type Ino = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    File,
    Dir,
    Symlink,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
}

impl FileType {
    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::File => libc::S_IFREG,
            FileType::Dir => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::File,
            libc::S_IFDIR => FileType::Dir,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }
}

pub use crate::time::Timespec;

/// The attributes of an inode, as `stat` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub kind: FileType,
    /// Permission bits and set-id/sticky bits (`07777`).
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub rdev: u64,
}

impl Attr {
    /// `st_mode`: file type bits and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }
}

/// A time to set with [`SetAttr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Now,
    At(Timespec),
}

impl SetTime {
    /// The time this stands for, `now` being the time of the change.
    pub fn at(self, now: Timespec) -> Timespec {
        match self {
            SetTime::Now => now,
            SetTime::At(t) => t,
        }
    }
}

/// The changes of a `setattr` (chmod, chown, truncate, utimens). Fields left
/// `None` are unchanged. The filesystem updates ctime whenever it changes
/// anything, and mtime on a size change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// One directory entry. `offset` is the cookie to pass to `readdir` to
/// continue after this entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    pub name: Vec<u8>,
    pub kind: FileType,
    pub offset: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub bsize: u32,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub namelen: u32,
}

/// `renameat2` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// `RENAME_NOREPLACE`: fail with EEXIST if the target exists.
    pub noreplace: bool,
    /// `RENAME_EXCHANGE`: swap the two names atomically; both must exist.
    pub exchange: bool,
}

impl RenameFlags {
    pub const NONE: RenameFlags = RenameFlags { noreplace: false, exchange: false };
    pub const NOREPLACE: RenameFlags = RenameFlags { noreplace: true, exchange: false };
    pub const EXCHANGE: RenameFlags = RenameFlags { noreplace: false, exchange: true };

    /// From the `RENAME_*` bits of `renameat2`; EINVAL on unknown bits or on
    /// NOREPLACE together with EXCHANGE.
    pub fn from_bits(bits: u32) -> Result<RenameFlags> {
        const NOREPLACE: u32 = 1;
        const EXCHANGE: u32 = 2;
        if bits & !(NOREPLACE | EXCHANGE) != 0 || bits == NOREPLACE | EXCHANGE {
            return crate::error::fail(libc::EINVAL);
        }
        Ok(RenameFlags { noreplace: bits & NOREPLACE != 0, exchange: bits & EXCHANGE != 0 })
    }
}

/// The longest extended attribute name (`XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;
/// The largest extended attribute value (`XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;
/// The largest list of names, NUL-terminated (`XATTR_LIST_MAX`).
pub const XATTR_LIST_MAX: usize = 65536;

/// How `setxattr` treats an existing attribute (`XATTR_CREATE`,
/// `XATTR_REPLACE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XattrSet {
    /// Create it or replace it (flags 0).
    #[default]
    Either,
    /// EEXIST if it exists (`XATTR_CREATE`).
    Create,
    /// ENODATA if it does not (`XATTR_REPLACE`).
    Replace,
}

impl XattrSet {
    /// From `setxattr`'s flags; EINVAL on unknown bits or both.
    pub fn from_bits(flags: i32) -> Result<XattrSet> {
        match flags {
            0 => Ok(XattrSet::Either),
            libc::XATTR_CREATE => Ok(XattrSet::Create),
            libc::XATTR_REPLACE => Ok(XattrSet::Replace),
            _ => crate::error::fail(libc::EINVAL),
        }
    }
}

/// The owner of a new inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// Where a write goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritePos {
    At(u64),
    /// At the end of the file, atomically with respect to other appenders.
    Append,
}

/// A filesystem under the VFS. All methods may be called from many threads
/// at once. Names are single components: never empty, never "." or "..",
/// never containing '/' or NUL, at most 255 bytes (the VFS checks).
pub trait FileSystem: Send + Sync + 'static {
    /// The root directory's inode. It holds one implicit lookup reference.
    fn root(&self) -> Ino;

    /// Finds `name` in directory `parent`: ENOENT if absent, ENOTDIR if
    /// `parent` is not a directory. Counts one lookup reference.
    fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr>;

    /// Returns `nlookup` lookup references on `ino`.
    fn forget(&self, ino: Ino, nlookup: u64);

    fn getattr(&self, ino: Ino) -> Result<Attr>;
    fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr>;

    /// Creates a regular file; EEXIST if the name exists. Counts a lookup.
    fn create(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr>;
    fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr>;
    fn mknod(&self, parent: Ino, name: &[u8], kind: FileType, perm: u32, rdev: u64, owner: Owner) -> Result<Attr>;
    fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr>;
    /// A new name for `ino` (not a directory: EPERM). Counts a lookup.
    fn link(&self, ino: Ino, parent: Ino, name: &[u8]) -> Result<Attr>;

    /// Removes a non-directory name: EISDIR for a directory.
    fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()>;
    /// Removes an empty directory: ENOTDIR, ENOTEMPTY.
    fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()>;
    /// `renameat2`. Replacing a directory needs an empty directory, and a
    /// directory and a non-directory never replace each other (EISDIR,
    /// ENOTDIR). Renaming a name onto another name of the same inode does
    /// nothing and succeeds.
    fn rename(&self, parent: Ino, name: &[u8], new_parent: Ino, new_name: &[u8], flags: RenameFlags) -> Result<()>;

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>>;
    /// Entries after cookie `offset` (0 starts at the beginning), without
    /// "." and "..". An entry present for the whole listing is returned once.
    fn readdir(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>>;

    /// [`readdir`](Self::readdir) with the attributes of each entry where
    /// the filesystem has them at hand while it lists (as FUSE's and NFS's
    /// readdirplus): `None` where it has not. A listing then needs no
    /// lookup per entry for its attributes. The default has none.
    fn readdir_plus(&self, ino: Ino, offset: u64) -> Result<Vec<(DirEntry, Option<Attr>)>> {
        Ok(self.readdir(ino, offset)?.into_iter().map(|e| (e, None)).collect())
    }

    /// The value of the extended attribute `name` of `ino`: ENODATA if it
    /// has none. The VFS has checked the name (its namespace and length)
    /// and the caller's permission. The default: EOPNOTSUPP, as a Linux
    /// filesystem without xattr handlers.
    fn getxattr(&self, _ino: Ino, _name: &[u8]) -> Result<Vec<u8>> {
        crate::error::fail(libc::EOPNOTSUPP)
    }

    /// Sets the extended attribute `name` (value at most 64 KiB, checked by
    /// the VFS), and ctime. ENOSPC where the filesystem has no room.
    fn setxattr(&self, _ino: Ino, _name: &[u8], _value: &[u8], _how: XattrSet) -> Result<()> {
        crate::error::fail(libc::EOPNOTSUPP)
    }

    /// The names of `ino`'s extended attributes (all namespaces; the VFS
    /// hides what the caller may not see). The default has none.
    fn listxattr(&self, _ino: Ino) -> Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }

    /// Removes the extended attribute `name`: ENODATA if absent.
    fn removexattr(&self, _ino: Ino, _name: &[u8]) -> Result<()> {
        crate::error::fail(libc::EOPNOTSUPP)
    }

    /// A descriptor of the host file holding `ino`'s data, read-write if
    /// `write`, for a server that hands file I/O to the kernel (FUSE
    /// passthrough: reads and writes then never reach the server). `None`
    /// where the data is not in a host file (memfs, the default).
    fn open_host_file(&self, _ino: Ino, _write: bool) -> Option<Result<std::os::fd::OwnedFd>> {
        None
    }

    /// Reads at `offset`; returns 0 at or past the end.
    fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// Writes `data`; returns the offset it was written at.
    fn write(&self, ino: Ino, pos: WritePos, data: &[u8]) -> Result<u64>;
    /// `fallocate(2)` modes 0 and `FALLOC_FL_KEEP_SIZE` on the regular
    /// file `ino`: space for `[offset, offset + len)` is allocated, so
    /// that writes in the range do not fail for lack of it (ENOSPC here if
    /// there is none), and the size becomes at least the end unless
    /// `keep_size`. Never shrinks the file, whatever writes run at once.
    /// The default answers EOPNOTSUPP (glibc's `posix_fallocate` then
    /// writes the range's blocks itself).
    fn fallocate(&self, _ino: Ino, _offset: u64, _len: u64, _keep_size: bool) -> Result<()> {
        crate::error::fail(libc::EOPNOTSUPP)
    }
    fn fsync(&self, _ino: Ino) -> Result<()> {
        Ok(())
    }

    fn statfs(&self) -> Result<StatFs>;

    /// The page cache holding a regular file's data, for filesystems whose
    /// data lives in one (memfs: its only copy, as in tmpfs). The VFS then
    /// reads and writes it directly, with no call into the filesystem; it
    /// reports changes of mtime through `setattr`. `None`: data goes
    /// through `read` and `write`.
    fn page_cache(&self, _ino: Ino) -> Option<std::sync::Arc<crate::filemap::PageCache>> {
        None
    }

    /// The VFS read a file's page cache and its atime policy says atime is
    /// due: set atime to now (ctime unchanged).
    fn note_access(&self, _ino: Ino) {}

    /// The VFS wrote a file's page cache: set mtime and ctime to now.
    fn note_modify(&self, _ino: Ino) {}

    /// Says whether the cached entry `name -> ino` in `parent` is still true;
    /// `ino` 0 stands for a cached miss (as FUSE's negative entry).
    /// Filesystems whose truth lives elsewhere (passthrough, remote) check
    /// it; the default, for filesystems that change only through the VFS, is
    /// yes. `Ok(false)` makes the VFS drop the entry and look it up again.
    fn revalidate(&self, _parent: Ino, _name: &[u8], _ino: Ino) -> Result<bool> {
        Ok(true)
    }

    /// Whether [`revalidate`](Self::revalidate) must be asked before a
    /// cached entry is trusted. `false` (the default) lets lookups of cached
    /// names run without calling the filesystem at all (RCU-walk).
    fn revalidates(&self) -> bool {
        false
    }

    /// How many in-core inodes this filesystem can hold at once, if it is
    /// limited (passthrough: one descriptor each, under the process's
    /// descriptor limit). The VFS keeps its dcache target below it.
    fn inode_budget(&self) -> Option<usize> {
        None
    }

    /// Called once the VFS serves this filesystem: `notify` is how it
    /// reports changes made behind the VFS's back.
    fn attach(&self, _notify: std::sync::Arc<dyn Notify>) {}

    /// This filesystem as memfs, whose inodes the VFS can use as its
    /// in-core inodes instead of keeping copies (see `memfs`). A wrapper
    /// around a memfs leaves this `None`: the VFS then keeps copies, as for
    /// any filesystem.
    #[doc(hidden)]
    fn as_memfs(&self) -> Option<&memfs::MemFs> {
        None
    }
}

/// What a create makes (the VFS's one path for create, mkdir, mknod and
/// symlink).
#[derive(Clone, Copy, Debug)]
pub(crate) enum NewNode<'a> {
    File,
    Dir,
    /// A FIFO, socket, device or regular file from `mknod`, with its
    /// device number.
    Special(FileType, u64),
    /// A symlink to this target.
    Symlink(&'a [u8]),
}

impl NewNode<'_> {
    pub(crate) fn kind(&self) -> FileType {
        match *self {
            NewNode::File => FileType::File,
            NewNode::Dir => FileType::Dir,
            NewNode::Special(k, _) => k,
            NewNode::Symlink(_) => FileType::Symlink,
        }
    }

    /// Makes it through `fs`'s own call.
    pub(crate) fn make(&self, fs: &dyn FileSystem, dir: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        match *self {
            NewNode::File => fs.create(dir, name, perm, owner),
            NewNode::Dir => fs.mkdir(dir, name, perm, owner),
            NewNode::Special(kind, rdev) => fs.mknod(dir, name, kind, perm, rdev, owner),
            NewNode::Symlink(target) => fs.symlink(dir, name, target, owner),
        }
    }
}

/// What a filesystem tells the VFS about changes it did not make (FUSE's
/// `notify_inval_entry` and `notify_inval_inode`). Calls may come from any
/// thread, at any time, and after the VFS is gone (they then do nothing).
///
/// A filesystem calls these holding none of its own locks. Each call takes
/// the VFS's locks (the superblock list, the dcache's), and under them the
/// VFS may call back into the filesystem: dropping a cached name can release
/// the last reference to an inode, and with it `FileSystem::forget`. A
/// filesystem lock held across a call would close a cycle with any thread
/// that is in the VFS and waiting for that lock.
pub trait Notify: Send + Sync {
    /// `name` in directory `parent` appeared, went, or now names another
    /// object: the cached dentry, positive or negative, is dropped.
    fn entry_changed(&self, parent: Ino, name: &[u8]);
    /// A change the VFS itself made, through this filesystem, left `name`
    /// in `parent` naming `ino` (`None`: no such name). The VFS applied
    /// the change to what its cache said the name was; where the filesystem
    /// is shared and the cache was behind (another client had just replaced
    /// the name), the change acted on the object that is there now, and the
    /// cache's answer is wrong. A cached answer that differs is dropped, one
    /// that agrees is kept. The default drops it in any case.
    fn entry_is(&self, parent: Ino, name: &[u8], ino: Option<Ino>) {
        let _ = ino;
        self.entry_changed(parent, name);
    }
    /// The object `name` in `parent` changed (its attributes or data): its
    /// cached attributes are read again, if it is cached.
    fn attr_changed(&self, parent: Ino, name: &[u8]);
    /// The attributes of `ino` changed: its cached copy is read again.
    fn inode_changed(&self, ino: Ino);
    /// Anything may have changed (events were lost): every cached name of
    /// this filesystem is dropped.
    fn all_changed(&self);
    /// From now on, cached names must (or need not) be checked through
    /// [`FileSystem::revalidate`] before they are trusted.
    fn set_revalidate(&self, on: bool);
}
