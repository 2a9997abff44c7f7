//! The facade through which every primitive reaches atomics, cells, spinning
//! and parking.
//!
//! Under `--cfg loom` the types come from loom, spinning yields to loom's
//! scheduler, and parking uses a small address-keyed parking lot of loom
//! threads (`loom_lot`): a parked thread sleeps until an unpark on its
//! address, as in the real one, so a lost wake-up fails the model (loom
//! reports every thread asleep as a deadlock). Otherwise they are `core`'s
//! atomics and `parking_lot_core`'s parking lot.

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

/// Reads a value out of a facade cell: one access that loom records (and
/// checks against every other access to the cell for a happens-before
/// order) under `--cfg loom`, a plain load otherwise.
///
/// # Safety
/// No one writes the cell meanwhile: the caller holds what guards it.
#[inline(always)]
pub unsafe fn cell_get<T: Copy>(cell: &UnsafeCell<T>) -> T {
    // SAFETY: the caller's guard excludes writers.
    cell.with(|p| unsafe { *p })
}

/// Writes a value into a facade cell (see [`cell_get`]).
///
/// # Safety
/// No one else reads or writes the cell meanwhile.
#[inline(always)]
pub unsafe fn cell_set<T>(cell: &UnsafeCell<T>, value: T) {
    // SAFETY: the caller's guard makes this access exclusive.
    cell.with_mut(|p| unsafe { *p = value })
}

/// One step of a bounded spin: a CPU pause hint, or a yield under loom.
#[inline(always)]
pub fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// The parking lot under loom: an address-keyed queue of parked threads
/// that really sleep (`loom::thread::park`) until an unpark on their
/// address, so that a lost wake-up leaves a thread asleep for good and
/// loom reports the deadlock. (An earlier stand-in only yielded and let the
/// caller re-check, which no lost wake-up could fail: list batching had one
/// for months.) One queue and one loom mutex per key, as weak as the real
/// lot, which orders two keys' parks and unparks only when they share a
/// bucket: with one mutex for every key, a reviewer's model of a protocol
/// that relied on an unpark of another key passed here and loses its
/// wake-up under `parking_lot_core`.
#[cfg(loom)]
mod loom_lot {
    use super::{AtomicBool, Ordering};
    use loom::sync::{Arc, Mutex};

    /// A parked thread, in its key's bucket (in parking order).
    pub struct Waiter {
        pub thread: loom::thread::Thread,
        pub woken: Arc<AtomicBool>,
    }

    impl Waiter {
        pub fn wake(self) {
            self.woken.store(true, Ordering::Release);
            self.thread.unpark();
        }
    }

    pub type Bucket = Arc<Mutex<Vec<Waiter>>>;

    loom::lazy_static! {
        // One bucket per key (the weakest parking_lot_core gives: two keys
        // order their operations only when they collide in a bucket). The map
        // itself is not modeled: loom runs one thread at a time.
        static ref BUCKETS: std::sync::Mutex<std::collections::HashMap<usize, Bucket>> = std::sync::Mutex::new(std::collections::HashMap::new());
    }

    /// Touches the map at the start of an execution, so that its lazy
    /// initialization (an AcqRel edge in loom) is not made by a model thread.
    pub fn init() {
        BUCKETS.lock().unwrap().clear();
    }

    pub fn bucket(addr: usize) -> Bucket {
        let mut m = BUCKETS.lock().unwrap();
        m.entry(addr).or_insert_with(|| Arc::new(Mutex::new(Vec::new()))).clone()
    }
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
        let woken = {
            let b = loom_lot::bucket(addr);
            let mut lot = b.lock().unwrap();
            if !validate() {
                return;
            }
            let woken = loom::sync::Arc::new(AtomicBool::new(false));
            lot.push(loom_lot::Waiter { thread: loom::thread::current(), woken: woken.clone() });
            woken
        };
        // loom reports a deadlock if every thread ends up here: a lost
        // wake-up is a failed model, not a hang.
        while !woken.load(Ordering::Acquire) {
            loom::thread::park();
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

/// Wakes one thread parked on `addr`, if any, and calls `on_wake` with
/// whether others stay parked there. `on_wake` runs under the parking lot's
/// bucket lock, so a waiter validating its condition (see [`park`]) sees
/// the lock word either before or after `on_wake` changed it, never in
/// between: a lock clears its `PARKED` bit there when nobody is left
/// (parking_lot's `unlock_slow`).
#[inline]
pub fn unpark_one(addr: usize, on_wake: impl FnOnce(bool)) {
    #[cfg(loom)]
    {
        let b = loom_lot::bucket(addr);
        let mut lot = b.lock().unwrap();
        // The longest parked first, as parking_lot_core.
        let woken = (!lot.is_empty()).then(|| lot.remove(0));
        on_wake(!lot.is_empty());
        if let Some(w) = woken {
            w.wake();
        }
    }
    #[cfg(not(loom))]
    // SAFETY: `addr` is only a key; the callback does not panic and does
    // not call back into the parking lot.
    unsafe {
        parking_lot_core::unpark_one(addr, |r| {
            on_wake(r.have_more_threads);
            parking_lot_core::DEFAULT_UNPARK_TOKEN
        });
    }
}

/// A scheduling point for loom, nothing otherwise. loom's preemption-bounded
/// search does not on its own preempt a thread between a lockless atomic
/// and the accesses that follow it (measured: the models of the last
/// `dput` explored 5 to 19 executions, and never the window in which a
/// killer frees a dentry just decremented to zero); a yield there makes it
/// explore that window.
#[inline(always)]
pub fn preemption_point() {
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Between a `SeqCst` write of one word and a `SeqCst` read of another,
/// where a protocol relies on the two being ordered (Dekker's pattern: of
/// two threads that each write, then read what the other wrote, one sees
/// the other's write). The `SeqCst` accesses order themselves in the real
/// build (one total order, consistent with program order), so this is
/// nothing there; loom models `SeqCst` accesses as acquire/release (as its
/// documentation says) but `SeqCst` fences exactly, so under loom it is a
/// fence, and the models check the protocols themselves.
#[inline(always)]
pub fn sc_fence() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// Wakes every thread parked on `addr`.
#[inline]
pub fn unpark_all(addr: usize) {
    #[cfg(loom)]
    {
        let b = loom_lot::bucket(addr);
        for w in b.lock().unwrap().drain(..) {
            w.wake();
        }
    }
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
/// Under loom a waiter parks at once: the parking lot there really sleeps,
/// and a spin (a yield, after which loom runs the other threads first)
/// would hide the window between the holder's last look and its release
/// in which a lost wake-up happens.
#[cfg(loom)]
pub const SPIN_LIMIT: u32 = 0;

/// (loom models) Calls `f` until it says it is done (`true`, returned), or until a call
/// begun after `done` was set (`false`), yielding in between: for a thread
/// whose one call must be tried inside another thread's, which sets
/// `done` after it. With a single try, loom ran the spawned thread's call
/// before the other's in every schedule (13 of them) and never inside
/// its window; yields let it interleave the two. Acquire, against the
/// setter's Release: the last call follows the other's whole.
#[cfg(loom)]
pub fn until_done(done: &AtomicBool, mut f: impl FnMut() -> bool) -> bool {
    loop {
        let over = done.load(Ordering::Acquire);
        if f() {
            return true;
        }
        if over {
            return false;
        }
        loom::thread::yield_now();
    }
}

/// Runs a loom model with the settings every model here uses: a preemption
/// bound of 2 (unless `LOOM_MAX_PREEMPTIONS` says otherwise), because
/// spin-then-park loops are scheduling points, and room for the long paths
/// a parked waiter produces.
#[cfg(loom)]
pub fn loom_model(f: impl Fn() + Sync + Send + 'static) {
    loom_model_bound(2, f)
}

/// [`loom_model`] with a preemption bound of `bound` (unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise): for a small model whose bad
/// schedule needs more preemptions than two (a thread stopped between a
/// look and its CAS while another runs a whole insert, which yields).
#[cfg(loom)]
pub fn loom_model_bound(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    b.check(move || {
        loom_lot::init();
        f()
    });
}

/// Asks the CPU to start loading the cache line at `p` (a hint: it never
/// faults, whatever `p` is, and changes nothing a program can see). A
/// listing issues it for the entries ahead of the one it reads, so that
/// their cache misses overlap instead of queueing one after another.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    // SAFETY: a prefetch reads nothing and may be given any address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    let _ = p;
}
