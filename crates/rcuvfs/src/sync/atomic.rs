//! The facade through which every primitive reaches atomics, cells, spinning
//! and parking.
//!
//! Under `--cfg loom` the types come from loom, spinning yields to loom's
//! scheduler, and parking becomes "yield and re-check" (loom has no
//! address-keyed parking lot; a parked thread in our protocols always
//! re-validates its condition, so yield-and-retry explores the same
//! interleavings). Otherwise they are `core`'s atomics and
//! `parking_lot_core`'s parking lot.

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(not(loom))]
pub use core::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub use loom::cell::UnsafeCell;

/// `UnsafeCell` with loom's closure-based access API, so that code written for
/// loom compiles unchanged outside it.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared raw pointer to the contents.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with an exclusive raw pointer to the contents.
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }

    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

/// One step of a bounded spin: a CPU pause hint, or a yield under loom.
#[inline(always)]
pub fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Parks the calling thread on `addr` while `validate()` holds.
///
/// `validate` runs under the parking lot's bucket lock, so a waker that
/// changes the state and then calls [`unpark_all`] on the same address cannot
/// be missed: either `validate` sees the new state and we do not sleep, or we
/// are queued before the waker looks.
#[inline]
pub fn park(addr: usize, validate: impl FnOnce() -> bool) {
    #[cfg(loom)]
    {
        let _ = addr;
        if validate() {
            loom::thread::yield_now();
        }
    }
    #[cfg(not(loom))]
    {
        // SAFETY: `addr` is only a key; the callbacks do not panic and do not
        // call back into the parking lot.
        unsafe {
            parking_lot_core::park(addr, validate, || {}, |_, _| {}, parking_lot_core::DEFAULT_PARK_TOKEN, None);
        }
    }
}

/// Wakes every thread parked on `addr`.
#[inline]
pub fn unpark_all(addr: usize) {
    #[cfg(loom)]
    let _ = addr;
    #[cfg(not(loom))]
    // SAFETY: `addr` is only a key into the parking lot.
    unsafe {
        parking_lot_core::unpark_all(addr, parking_lot_core::DEFAULT_UNPARK_TOKEN);
    }
}

/// How many times a waiter spins before it parks. Short: in userspace the
/// holder may be preempted, and spinning on a preempted holder burns the
/// core that holder needs.
#[cfg(not(loom))]
pub const SPIN_LIMIT: u32 = 64;
/// Under loom every spin is a scheduling point: keep the state space small.
#[cfg(loom)]
pub const SPIN_LIMIT: u32 = 1;

/// Runs a loom model with the settings every model here uses: a preemption
/// bound of 2 (unless `LOOM_MAX_PREEMPTIONS` says otherwise), because
/// spin-then-park loops are scheduling points, and room for the long paths
/// a parked waiter produces.
#[cfg(loom)]
pub fn loom_model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}
