//! Errors are `std::io::Error` carrying a POSIX errno (`raw_os_error()`).

use std::io;

pub use libc::{
    E2BIG, EACCES, EBADF, EBUSY, EEXIST, EFBIG, EINVAL, EISDIR, ELOOP, ENAMETOOLONG, ENODATA, ENOENT, ENOSPC, ENOTDIR,
    ENOTEMPTY, ENOTSUP, EOPNOTSUPP, EPERM, ERANGE, EROFS, EXDEV,
};

pub type Result<T> = io::Result<T>;

/// An `io::Error` for `errno`.
#[inline]
pub fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// `Err(errno)`.
#[inline]
pub fn fail<T>(errno: i32) -> Result<T> {
    Err(err(errno))
}

/// The errno of `e`, or `EIO` for an error that carries none.
pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}
