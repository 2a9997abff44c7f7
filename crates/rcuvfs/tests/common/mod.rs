//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::io;

/// The errno of a result, or 0 for success.
pub fn errno<T>(r: &io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// Scales an iteration count down under Miri.
pub fn scaled(n: usize) -> usize {
    if cfg!(miri) {
        (n / 1000).max(2)
    } else {
        n
    }
}
