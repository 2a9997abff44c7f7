//! Time is cheap: timestamps come from the coarse realtime clock, which the
//! kernel serves from the vDSO without a syscall or a fence.

use crate::fs::Timespec;

/// The current time from `CLOCK_REALTIME_COARSE`.
pub fn now() -> Timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc != 0 {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() };
    }
    Timespec { sec: ts.tv_sec, nsec: ts.tv_nsec as u32 }
}
