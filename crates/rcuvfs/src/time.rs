//! Time is cheap: timestamps come from the coarse realtime clock, which the
//! kernel serves from the vDSO without a syscall or a fence.

/// A time: seconds and nanoseconds since the epoch (`struct timespec`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn to_system_time(self) -> std::time::SystemTime {
        let d = std::time::Duration::new(self.sec.unsigned_abs(), self.nsec);
        if self.sec >= 0 {
            std::time::UNIX_EPOCH + d
        } else {
            std::time::UNIX_EPOCH - d
        }
    }

    pub fn from_system_time(t: std::time::SystemTime) -> Timespec {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
            Err(e) => {
                let d = e.duration();
                let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
                if nsec > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - nsec;
                }
                Timespec { sec, nsec }
            }
        }
    }
}

/// The current time from `CLOCK_REALTIME_COARSE`.
#[cfg(not(loom))]
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

/// Under loom, a clock that never moves: a model must run the same way in
/// every execution, and memfs's timestamp updates store only when the
/// clock moved.
#[cfg(loom)]
pub fn now() -> Timespec {
    Timespec { sec: 1, nsec: 0 }
}
