//! The RCU facade: `read_lock`, `call_rcu` and `synchronize`, over one
//! reclamation crate.
//!
//! Outside loom this wraps a [`seize::Collector`]. Entering a read section
//! is a store to the calling thread's own reservation slot (and, where the
//! kernel offers `membarrier`, no fence at all), so a reader writes nothing
//! that another reader touches: the property the default mode needs.
//! Retired objects go into per-thread batches; a batch is freed once every
//! thread that was inside a read section when it was retired has left it.
//! That is exactly a grace period, whether or not the reader ever loaded the
//! retired pointer.
//!
//! `synchronize` is built on top: it retires a sentinel whose callback sets a
//! flag, and pads the batch so that it is pushed out (a seize batch needs at
//! least as many entries as there are active threads), until the flag is
//! set. It must not be called from inside a read section of the same `Rcu`:
//! it would wait for itself.
//!
//! Under `--cfg loom`, and with the `tsan` feature (ThreadSanitizer cannot
//! see seize's fence- and membarrier-based protocol and would report every
//! reclamation as a race), a stand-in keeps every retired object until the
//! `Rcu` is dropped: trivially safe (nothing is freed while anything may
//! read it), visible to both tools (a mutex), and it lets them check the
//! protocols above the facade unchanged.
//!
//! Under loom the stand-in also keeps real grace periods, for checking:
//! it tracks every read section, and [`Rcu::poison_after_grace_period`]
//! sets a flag once every section that was active when it was called has
//! ended, the moment the real facade could free the object. A model that
//! asserts the flag is clear wherever it touches an object then catches a
//! touch after the object's grace period (a use after free in the real
//! build) as a failed assertion, not as undefined behaviour.

#[cfg(not(any(loom, feature = "tsan")))]
use seize::{Collector, Guard as _};

#[cfg(loom)]
use loom::sync::atomic::AtomicBool as LoomBool;
#[cfg(loom)]
use loom::sync::Mutex as DeferMutex;
#[cfg(all(not(loom), feature = "tsan"))]
use std::sync::Mutex as DeferMutex;

/// Retired objects per thread before a reclamation attempt. Each attempt
/// costs a `membarrier` (an interrupt on every core running the process),
/// and an update retires two to four objects, so seize's default of 32
/// spent a fifth of a two-thread create/unlink loop in those interrupts;
/// 512 amortizes it for a few tens of KiB per thread held a little longer.
#[cfg(not(any(loom, feature = "tsan")))]
const BATCH: usize = 2048;

/// One RCU domain. rcuvfs has one per `Vfs`, so that tests in parallel do
/// not wait on each other's readers and teardown frees everything at once.
pub struct Rcu {
    #[cfg(not(any(loom, feature = "tsan")))]
    collector: Collector,
    #[cfg(any(loom, feature = "tsan"))]
    deferred: DeferMutex<Vec<Callback>>,
    #[cfg(loom)]
    grace: DeferMutex<Grace>,
}

/// The loom stand-in's grace-period bookkeeping.
#[cfg(loom)]
#[derive(Default)]
struct Grace {
    /// Read sections in progress: (thread, section id, nesting depth).
    active: Vec<(loom::thread::ThreadId, u64, u32)>,
    next_section: u64,
    /// Flags to set once the listed sections (active when the flag was
    /// handed over) have all ended. The pointers stay valid: the stand-in
    /// frees nothing before the `Rcu` itself is dropped.
    pending: Vec<(Vec<u64>, *const LoomBool)>,
}

// SAFETY: the flag pointers are only dereferenced under the stand-in's
// mutex, and the flags stay allocated as long as the `Rcu` (see above).
#[cfg(loom)]
unsafe impl Send for Grace {}

type Callback = Box<dyn FnOnce() + Send>;

/// A read-side critical section. Everything reached through RCU-protected
/// pointers while it lives stays allocated. Not `Send`: it marks this thread.
pub struct RcuGuard<'a> {
    #[cfg(not(any(loom, feature = "tsan")))]
    _guard: seize::LocalGuard<'a>,
    #[cfg(all(not(loom), feature = "tsan"))]
    _rcu: core::marker::PhantomData<(&'a Rcu, *const ())>,
    #[cfg(loom)]
    rcu: &'a Rcu,
    #[cfg(loom)]
    _not_send: core::marker::PhantomData<*const ()>,
}

#[cfg(loom)]
impl Drop for RcuGuard<'_> {
    fn drop(&mut self) {
        self.rcu.read_unlock();
    }
}

impl Default for Rcu {
    fn default() -> Self {
        Self::new()
    }
}

impl Rcu {
    pub fn new() -> Self {
        Self {
            #[cfg(not(any(loom, feature = "tsan")))]
            collector: Collector::new().batch_size(BATCH),
            #[cfg(any(loom, feature = "tsan"))]
            deferred: DeferMutex::new(Vec::new()),
            #[cfg(loom)]
            grace: DeferMutex::new(Grace::default()),
        }
    }

    /// Enters a read-side critical section (`rcu_read_lock`). Reentrant.
    #[inline]
    pub fn read_lock(&self) -> RcuGuard<'_> {
        #[cfg(loom)]
        {
            let me = loom::thread::current().id();
            let mut g = self.grace.lock().unwrap();
            match g.active.iter_mut().find(|(t, _, _)| *t == me) {
                Some(a) => a.2 += 1,
                None => {
                    let id = g.next_section;
                    g.next_section += 1;
                    g.active.push((me, id, 1));
                }
            }
        }
        RcuGuard {
            #[cfg(not(any(loom, feature = "tsan")))]
            _guard: self.collector.enter(),
            #[cfg(all(not(loom), feature = "tsan"))]
            _rcu: core::marker::PhantomData,
            #[cfg(loom)]
            rcu: self,
            #[cfg(loom)]
            _not_send: core::marker::PhantomData,
        }
    }

    /// Ends this thread's outermost read section (loom stand-in): flags
    /// whose grace period it completes are set.
    #[cfg(loom)]
    fn read_unlock(&self) {
        let me = loom::thread::current().id();
        let mut g = self.grace.lock().unwrap();
        let k = g.active.iter().position(|(t, _, _)| *t == me).expect("a section in progress");
        g.active[k].2 -= 1;
        if g.active[k].2 > 0 {
            return;
        }
        let (_, id, _) = g.active.swap_remove(k);
        g.pending.retain_mut(|(waits, flag)| {
            waits.retain(|&w| w != id);
            if waits.is_empty() {
                // SAFETY: the stand-in frees nothing before the `Rcu` is
                // dropped, so the flag is still allocated.
                unsafe { (**flag).store(true, loom::sync::atomic::Ordering::SeqCst) };
            }
            !waits.is_empty()
        });
    }

    /// Sets `flag` once every read section in progress now has ended: at
    /// once if none is (loom stand-in; see the module doc).
    #[cfg(loom)]
    pub fn poison_after_grace_period(&self, flag: &LoomBool) {
        let mut g = self.grace.lock().unwrap();
        let waits: Vec<u64> = g.active.iter().map(|&(_, id, _)| id).collect();
        if waits.is_empty() {
            flag.store(true, loom::sync::atomic::Ordering::SeqCst);
        } else {
            g.pending.push((waits, flag));
        }
    }

    /// Runs `f` after a grace period: once every read section in progress
    /// now has ended (`call_rcu`). The caller must already have made the
    /// object `f` frees unreachable for new readers.
    pub fn call_rcu(&self, f: impl FnOnce() + Send + 'static) {
        let cb: *mut Callback = Box::into_raw(Box::new(Box::new(f)));
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            unsafe fn run(cb: *mut Callback, _: &Collector) {
                // SAFETY: `cb` came from `Box::into_raw` in `call_rcu` and
                // seize calls each reclaimer exactly once.
                let cb = unsafe { Box::from_raw(cb) };
                cb();
            }
            // SAFETY: `cb` is a fresh allocation no other thread can reach,
            // and `run` is its matching reclaimer.
            unsafe { self.collector.retire(cb, run) };
        }
        #[cfg(any(loom, feature = "tsan"))]
        {
            // SAFETY: `cb` came from `Box::into_raw` just above.
            let cb = unsafe { Box::from_raw(cb) };
            self.deferred.lock().unwrap().push(*cb);
        }
    }

    /// Frees `ptr` (allocated by `Box`) after a grace period.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is retired once, and is no longer
    /// reachable by readers that enter after this call.
    pub unsafe fn retire_box<T: Send + 'static>(&self, ptr: *mut T) {
        // Straight into the batch: no closure to allocate.
        #[cfg(not(any(loom, feature = "tsan")))]
        // SAFETY: the caller's contract; `boxed` is the matching reclaimer.
        unsafe {
            self.collector.retire(ptr, seize::reclaim::boxed::<T>)
        };
        #[cfg(any(loom, feature = "tsan"))]
        {
            struct SendPtr<T>(*mut T);
            // SAFETY: the pointee is `Send`, and the pointer is used once, by
            // the callback, after every reader is gone.
            unsafe impl<T: Send> Send for SendPtr<T> {}
            let p = SendPtr(ptr);
            self.call_rcu(move || {
                let p = p;
                // SAFETY: the caller's contract: a Box pointer retired once.
                drop(unsafe { Box::from_raw(p.0) });
            });
        }
    }

    /// Pushes this thread's batch of retired objects out now instead of
    /// when it fills: each is freed as soon as its grace period ends (at
    /// once if no reader is inside), by whichever thread ends it. Does not
    /// wait. For retirements that free much memory (a deleted file's data).
    pub fn expedite(&self) {
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            // Padding: one no-op entry per possible active thread, so the
            // batch is full enough to be pushed to every reservation.
            let pad = std::thread::available_parallelism().map_or(8, |n| n.get()).max(64);
            for _ in 0..pad {
                self.call_rcu(|| {});
            }
            self.collector.enter().flush();
        }
    }

    /// Waits until every read section that was in progress when it was
    /// called has ended, and the callbacks queued before it by this thread
    /// have run (`synchronize_rcu` plus `rcu_barrier` for this thread).
    pub fn synchronize(&self) {
        // The loom stand-in frees at drop only, but waits out real grace
        // periods here (a protocol may rely on the wait itself: the
        // per-shard reference count's kill). The tsan stand-in tracks no
        // read sections, so it cannot wait; what relies on the wait has no
        // per-shard mode in that build (`PercpuRef`).
        #[cfg(loom)]
        {
            let flag = LoomBool::new(false);
            self.poison_after_grace_period(&flag);
            while !flag.load(loom::sync::atomic::Ordering::SeqCst) {
                loom::thread::yield_now();
            }
        }
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            use std::sync::atomic::{AtomicBool, Ordering};
            use std::sync::Arc;
            let done = Arc::new(AtomicBool::new(false));
            let flag = done.clone();
            // Release/Acquire: the callback runs after the reclamation of
            // everything queued before it on this thread's batch.
            self.call_rcu(move || flag.store(true, Ordering::Release));
            let mut backoff = 1u64;
            while !done.load(Ordering::Acquire) {
                self.expedite();
                if done.load(Ordering::Acquire) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(backoff));
                backoff = (backoff * 2).min(1000);
            }
        }
    }
}

#[cfg(any(loom, feature = "tsan"))]
impl Drop for Rcu {
    fn drop(&mut self) {
        for cb in self.deferred.lock().unwrap().drain(..) {
            cb();
        }
    }
}

#[cfg(all(test, not(loom), not(feature = "tsan")))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn call_rcu_waits_for_a_reader_in_progress() {
        let rcu = Arc::new(Rcu::new());
        let freed = Arc::new(AtomicBool::new(false));
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        let reader = {
            let rcu = rcu.clone();
            let freed = freed.clone();
            std::thread::spawn(move || {
                let _g = rcu.read_lock();
                entered_tx.send(()).unwrap();
                leave_rx.recv().unwrap();
                // Still inside the read section: nothing retired since may be gone.
                assert!(!freed.load(Ordering::SeqCst));
            })
        };
        entered_rx.recv().unwrap();
        let f = freed.clone();
        rcu.call_rcu(move || f.store(true, Ordering::SeqCst));
        // Push the batch out while the reader is still inside.
        for _ in 0..128 {
            rcu.call_rcu(|| {});
        }
        assert!(!freed.load(Ordering::SeqCst));
        leave_tx.send(()).unwrap();
        reader.join().unwrap();
        rcu.synchronize();
        assert!(freed.load(Ordering::SeqCst));
    }

    #[test]
    fn synchronize_runs_earlier_callbacks_and_drop_runs_the_rest() {
        let n = Arc::new(AtomicUsize::new(0));
        let rcu = Rcu::new();
        for _ in 0..10 {
            let n = n.clone();
            rcu.call_rcu(move || {
                n.fetch_add(1, Ordering::SeqCst);
            });
        }
        rcu.synchronize();
        assert_eq!(n.load(Ordering::SeqCst), 10);
        let n2 = n.clone();
        rcu.call_rcu(move || {
            n2.fetch_add(1, Ordering::SeqCst);
        });
        drop(rcu);
        assert_eq!(n.load(Ordering::SeqCst), 11);
    }
}
