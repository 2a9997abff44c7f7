//! The FUSE operations: each finds its handles in the node table and
//! calls the library's handle-level operation in the caller's view.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use fuser::{
    AccessFlags, Errno, FileHandle, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use rcuvfs::fs::{SetAttr, SetTime, Timespec};
use rcuvfs::{FileType, XattrSet};

use super::nodes::Mounted;

pub(super) fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

pub(super) fn kind(t: FileType) -> fuser::FileType {
    match t {
        FileType::File => fuser::FileType::RegularFile,
        FileType::Dir => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(Timespec::from_system_time(t)),
    }
}

/// A variable-sized answer as FUSE asks it: size 0 asks the length; a
/// buffer too small is ERANGE.
fn reply_sized(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

fn done(reply: ReplyEmpty, r: io::Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

impl fuser::Filesystem for Mounted {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // readdirplus fills the kernel's dcache while listing; the kernel
        // decides per directory (READDIRPLUS_AUTO). Both are optional.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // Lookups and listings of one directory in parallel (the kernel
        // otherwise serializes them on the directory's inode lock).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Not FUSE_HANDLE_KILLPRIV: the kernel itself removes set-ID bits
        // and capabilities before a write, truncate or fallocate by a
        // caller without CAP_FSETID, with a chmod and a removexattr sent as
        // the writer, which the library accepts from whoever may write the
        // file. (With KILLPRIV the kernel would leave it to the server, and
        // writes through the kernel's FUSE passthrough or the writeback
        // cache never reach it as the writer: set-ID bits would survive a
        // user's write.)
        // Requests as large as the kernel allows: fuser asks 16 MiB writes
        // (the kernel clamps to its max_pages limit), and readahead as
        // large as the kernel proposes.
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            let _ = config.set_max_readahead(max);
        }
        if self.data.passthrough() {
            let ok =
                config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() && config.set_max_stack_depth(1).is_ok();
            if !ok {
                eprintln!("rcuvfs: the kernel has no FUSE passthrough: file I/O goes through the server");
                self.data.passthrough.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if self.data.export {
            let _ = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT);
        }
        if self.data.writeback {
            config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .map_err(|_| io::Error::other("the kernel has no FUSE writeback cache"))?;
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.lookup_name(&self.view(req), parent, name);
        self.reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_node(ino, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.getattr_of(ino, fh) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        };
        match self.set_attr(&self.view(req), ino, set, fh) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.entry(ino).and_then(|e| self.vfs.read_link_entry(&e).map_err(errno)) {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let p = self.entry(parent)?;
            let v = self.view(req);
            let kind = FileType::from_mode(mode).ok_or(Errno::EINVAL)?;
            v.mknod_at(&p, name, kind, mode & 0o7777, u64::from(rdev)).map_err(errno)?;
            self.lookup_entry(&v, &p, name)
        })();
        self.reply_entry(reply, r);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let r = self.make_dir(&self.view(req), parent, name, mode);
        self.reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove_name(&self.view(req), parent, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove_name(&self.view(req), parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = (|| {
            let p = self.entry(parent)?;
            let v = self.view(req);
            v.symlink_at(target, &p, link_name).map_err(errno)?;
            self.lookup_entry(&v, &p, link_name)
        })();
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.rename_names(&self.view(req), parent, name, newparent, newname, flags.bits()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let (e, np) = (self.entry(ino)?, self.entry(newparent)?);
            let v = self.view(req);
            v.link_entry(&e, &np, newname).map_err(errno)?;
            self.lookup_entry(&v, &np, newname)
        })();
        self.reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.open_node(&self.view(req), ino, flags.0, |fd| reply.open_backing(fd)) {
            Ok((fh, Some(b))) => reply.opened_passthrough(fh, self.fopen_flags(), &b),
            Ok((fh, None)) => reply.opened(fh, self.fopen_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.create_node(&self.view(req), parent, name, mode, flags, |fd| reply.open_backing(fd)) {
            Ok((attr, fh, Some(b))) => {
                reply.created_passthrough(&self.ttl, &attr, Generation(0), fh, self.fopen_flags(), &b)
            }
            Ok((attr, fh, None)) => reply.created(&self.ttl, &attr, Generation(0), fh, self.fopen_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        thread_local! {
            /// Each worker's read buffer, kept between requests: a fresh
            /// megabyte per read cost its zeroing (and its page faults).
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| {
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            match self.read_file(fh, offset, &mut buf[..size as usize]) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(e),
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.write_file(ino, fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.release_file(fh);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.file(fh) {
            Ok(f) => done(reply, f.file.sync_all()),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.open_dir(&self.view(req), ino) {
            Ok(flags) => reply.opened(FileHandle(0), flags),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match self.list(&self.view(req), ino, offset, |node, next, kind, name| reply.add(node, next, kind, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let r = self.list_plus(&self.view(req), ino, offset, |next, name, a| {
            reply.add(a.ino, next, name, &self.ttl, a, Generation(0))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.vfs.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let e = self.entry(ino)?;
            let how = XattrSet::from_bits(flags).map_err(errno)?;
            self.view(req).set_xattr_entry(&e, name, value, how).map_err(errno)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.get_xattr(&self.view(req), ino, name) {
            Ok(v) => reply_sized(reply, size, &v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.entry(ino).and_then(|e| self.view(req).list_xattr_entry(&e).map_err(errno)) {
            Ok(names) => {
                let mut list = Vec::new();
                for n in names {
                    list.extend_from_slice(n.as_bytes());
                    list.push(0);
                }
                reply_sized(reply, size, &list)
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.entry(ino) {
            Ok(e) => done(reply, self.view(req).remove_xattr_entry(&e, name)),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.check_access(&self.view(req), ino, mask.bits() as u32) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Modes 0 and KEEP_SIZE: the filesystem allocates the range (memfs
        // zeroed pages charged to its budget; the passthrough the host's
        // fallocate), never shrinking the file. Punching, zeroing and
        // collapsing ranges are not supported.
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let r = (|| {
            let f = self.file(fh)?;
            self.removing_privs(ino, &f, || f.file.allocate(offset, length, mode & libc::FALLOC_FL_KEEP_SIZE != 0))
                .map_err(errno)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
