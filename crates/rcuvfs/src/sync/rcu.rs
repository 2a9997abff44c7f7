//! The RCU facade: `read_lock`, `call_rcu` and `synchronize`, over one
//! reclamation crate.
//!
//! Outside loom this wraps a [`seize::Collector`]. Entering a read section
//! is a store to the calling thread's own reservation slot (and, where the
//! kernel offers `membarrier`, no fence at all), so a reader writes nothing
//! that another reader touches: the property the default mode needs.
//! A batch handed to seize is released once every thread that was inside a
//! read section when it was retired has left it. That is exactly a grace
//! period, whether or not the reader ever loaded the retired pointer.
//!
//! # Per-shard callback lists (written here: the product)
//!
//! As Linux's per-CPU callback lists, retired objects gather in a list per
//! shard (`shard::thread`: the thread's, one of 64, the crate's stand-in
//! for a CPU), go to seize
//! [`SHARD_BATCH`] at a time, and are freed by a thread of the shard that
//! retired them, not by whichever thread happens to end their grace period
//! (seize's own rule): when their grace period ends, seize's reclaimer only
//! pushes their batch back onto the shard's `returned` stack (one CAS),
//! and the shard's next retirement frees them. Freed on another thread,
//! every object was a cross-thread free: the allocator's remote-free path,
//! and the object's lines moving to that thread and back when it is reused
//! (a tenth of a two-thread create/unlink loop). A batch can also go
//! *direct*: freed at the end of its grace period by whoever ends it
//! ([`Rcu::expedite`], for memory that must go back promptly).
//!
//! Lists per shard, not per thread: with 1000 threads on two cores, lists
//! per thread filled slowly and held their objects (and the pages they
//! freed) for a long time, and the memory ran out. What waits is bounded
//! by the shard count whatever the number of threads. Lists per CPU proper
//! (`shard::cpu`, with `synchronize` closing every shard's generation, since
//! a thread's retirements would then be in the list of each CPU it ran on)
//! would keep 16 threads on two cores to two lists, their objects in
//! flight an eighth as many; measured, they were slower (`bench short
//! --threads 16` on 2 cores: 0.95-0.98M jobs/s against 1.02-1.05M; 1
//! and 2 threads 1-2% lower, at the noise; not profiled). Not kept.
//!
//! | state | protected by |
//! |-------|--------------|
//! | `Shard::pending`, `gens` | the shard's `lock` (threads of one shard seldom run at once) |
//! | `Shard::returned` | atomic: any reclaimer pushes (Release CAS); a thread of the shard takes all (Acquire swap) |
//!
//! A hand-over is one seize attempt (a `membarrier`): the batch's entries
//! (objects in [`ENTRY`]s) plus, so that the attempt succeeds, one no-op
//! entry per thread that may be in a read section (seize needs an entry per
//! active thread; `Rcu::peak`, above every seize thread id that entered,
//! raised before the thread shows as active, bounds them), all retired by
//! the handing thread, then flushed, and padded and flushed again if the
//! peak moved meanwhile, so that nothing stays in a thread's seize batch
//! (`Rcu::pad_and_flush`). Objects still listed when the `Rcu` drops are
//! freed then.
//!
//! `synchronize` is built on top: it hands its shard's list over at once
//! under a new generation, and waits until no batch of that generation or
//! an earlier one is left unfreed (each batch carries its generation; the
//! shard counts them). `grace_period` only waits out readers: a private
//! sentinel whose callback sets a flag. Neither may be called from inside a
//! read section of the same `Rcu` (it would wait for itself), nor from a
//! function the `Rcu` runs to free an object.
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

/// Objects a shard gathers before it hands them to seize, at most. Each
/// hand-over costs a `membarrier` (an interrupt on every core running the
/// process, about 20 us here under a hypervisor), and an update retires two
/// to four objects. (seize's default, one attempt per 32 objects, spent a
/// fifth of a two-thread create/unlink loop in those interrupts.) With many
/// threads, fewer ([`Rcu::shard_batch`]): each shard's objects in flight,
/// and the pages they hold, are what sixteen threads on two cores fight
/// over in the caches.
#[cfg(not(any(loom, feature = "tsan")))]
const SHARD_BATCH: usize = 2048;

/// Bytes of retired memory at which a shard hands its list over (1 MiB).
#[cfg(not(any(loom, feature = "tsan")))]
pub const SHARD_BYTES: usize = 1 << 20;

/// The fewest objects a shard gathers before a hand-over.
#[cfg(not(any(loom, feature = "tsan")))]
const SHARD_BATCH_MIN: usize = 512;

/// Objects per seize entry of a hand-over.
#[cfg(not(any(loom, feature = "tsan")))]
const ENTRY: usize = 256;

/// seize's own batch size, a backstop: the hand-overs flush themselves.
#[cfg(not(any(loom, feature = "tsan")))]
const SEIZE_CAP: usize = 1024;

/// An object to free after a grace period, and how.
#[cfg(not(any(loom, feature = "tsan")))]
struct Deferred {
    ptr: *mut (),
    free: unsafe fn(*mut ()),
}

/// Objects of one shard, one seize entry.
#[cfg(not(any(loom, feature = "tsan")))]
struct Batch {
    items: Vec<Deferred>,
    /// The `returned` stack's link.
    next: *mut Batch,
    /// The shard whose objects they are.
    home: *const Shard,
    /// Freed by whoever ends the grace period, not sent home.
    direct: bool,
    /// The shard's generation it was handed over in (`synchronize`).
    gen: u64,
}

/// One shard's callback lists (module doc).
#[cfg(not(any(loom, feature = "tsan")))]
struct Shard {
    lock: super::RawMutex,
    pending: core::cell::UnsafeCell<Vec<Deferred>>,
    gens: core::cell::UnsafeCell<Gens>,
    returned: std::sync::atomic::AtomicPtr<Batch>,
    /// Direct batches (`expedite`, `grace_period`) handed over and not yet
    /// freed: `barrier` waits for them too.
    direct: std::sync::atomic::AtomicUsize,
}

/// A shard's generations: `synchronize` starts a new one, and waits for the
/// batches of its own and earlier ones.
#[cfg(not(any(loom, feature = "tsan")))]
#[derive(Default)]
struct Gens {
    current: u64,
    /// Bytes the listed objects free, about (`call_rcu_sized`).
    pending_bytes: usize,
    /// Batches (not direct) handed over and not yet freed, by generation.
    outstanding: std::collections::BTreeMap<u64, usize>,
    /// Retirements listed here, ever; and the count the reclaimer saw at
    /// its last visit (`flush_idle`).
    retired: u64,
    seen: u64,
}

// SAFETY: `pending` and `gens` are touched only under `lock`; the rest is
// atomic. The deferred pointers are objects retired to be freed on any
// thread (`retire_box` needs `T: Send`).
#[cfg(not(any(loom, feature = "tsan")))]
unsafe impl Sync for Shard {}
// SAFETY: as above.
#[cfg(not(any(loom, feature = "tsan")))]
unsafe impl Send for Shard {}

#[cfg(not(any(loom, feature = "tsan")))]
impl Shard {
    fn new() -> Shard {
        Shard {
            lock: super::RawMutex::new(),
            pending: Default::default(),
            gens: Default::default(),
            returned: Default::default(),
            direct: Default::default(),
        }
    }

    /// Runs `f` on the list under the lock.
    fn with<R>(&self, f: impl FnOnce(&mut Vec<Deferred>, &mut Gens) -> R) -> R {
        self.lock.lock();
        // SAFETY: under the lock (struct doc); `f` runs nothing retired.
        let r = unsafe { f(&mut *self.pending.get(), &mut *self.gens.get()) };
        // SAFETY: locked above.
        unsafe { self.lock.unlock() };
        r
    }
}

#[cfg(not(any(loom, feature = "tsan")))]
impl Batch {
    /// Frees every object.
    ///
    /// # Safety
    /// Their grace period has ended, and nothing else frees them.
    unsafe fn free_items(items: Vec<Deferred>) {
        for d in items {
            // SAFETY: the caller's contract; each `free` matches its `ptr`.
            unsafe { (d.free)(d.ptr) };
        }
    }
}

/// seize's reclaimer of a [`Batch`]: the grace period of its objects has
/// ended. A direct batch is freed here; any other goes home.
#[cfg(not(any(loom, feature = "tsan")))]
unsafe fn batch_done(b: *mut Batch, _: &Collector) {
    // SAFETY: seize calls this once per retired batch, after its grace
    // period; the batch came from `Box::into_raw` in `Rcu::hand`.
    unsafe {
        if (*b).direct {
            let b = Box::from_raw(b);
            let home = &*b.home;
            Batch::free_items(b.items);
            // Release: `barrier`'s Acquire load sees the frees done.
            home.direct.fetch_sub(1, std::sync::atomic::Ordering::Release);
            return;
        }
        // The shard lives as long as the `Rcu`, whose collector (and so
        // this call) it outlives.
        let home = &*(*b).home;
        let mut head = home.returned.load(std::sync::atomic::Ordering::Relaxed);
        loop {
            (*b).next = head;
            // Release: the shard's Acquire swap sees the batch, and
            // (through seize's own ordering before this call) that no reader
            // holds its objects any more.
            match home.returned.compare_exchange_weak(
                head,
                b,
                std::sync::atomic::Ordering::Release,
                std::sync::atomic::Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }
}

/// Takes `items` out of a shard's list for a hand-over in its current
/// generation (counted outstanding).
#[cfg(not(any(loom, feature = "tsan")))]
fn take_for_hand(pending: &mut Vec<Deferred>, gens: &mut Gens) -> (Vec<Deferred>, u64) {
    let g = note_handed(pending.len(), gens);
    let cap = pending.capacity();
    (core::mem::replace(pending, Vec::with_capacity(cap)), g)
}

/// Counts `n` objects about to be handed over (as `hand` splits them into
/// batches) in the shard's current generation, which it returns.
#[cfg(not(any(loom, feature = "tsan")))]
fn note_handed(n: usize, gens: &mut Gens) -> u64 {
    let g = gens.current;
    gens.pending_bytes = 0;
    *gens.outstanding.entry(g).or_default() += n.div_ceil(ENTRY);
    g
}

/// A no-op callback (a sentinel that makes a batch non-empty).
#[cfg(not(any(loom, feature = "tsan")))]
unsafe fn noop(_: *mut ()) {}

/// seize's reclaimer of a padding entry: nothing to free.
#[cfg(not(any(loom, feature = "tsan")))]
unsafe fn pad_done(_: *mut u8, _: &Collector) {}

/// The address every padding entry names (seize never reads it).
#[cfg(not(any(loom, feature = "tsan")))]
static PAD: u8 = 0;

/// Frees a retired `Box<T>`.
#[cfg(not(any(loom, feature = "tsan")))]
unsafe fn free_box<T>(p: *mut ()) {
    // SAFETY: `retire_box`'s contract: a Box pointer, retired once.
    drop(unsafe { Box::from_raw(p as *mut T) });
}

/// Runs a `call_rcu` callback.
#[cfg(not(any(loom, feature = "tsan")))]
unsafe fn run_callback(p: *mut ()) {
    // SAFETY: `call_rcu` made it with `Box::into_raw`; run once.
    let cb = unsafe { Box::from_raw(p as *mut Callback) };
    cb();
}

/// One RCU domain. rcuvfs has one per `Vfs`, so that tests in parallel do
/// not wait on each other's readers and teardown frees everything at once.
pub struct Rcu {
    /// Dropped first, in `drop` (its last reclaimers push to `shards`).
    #[cfg(not(any(loom, feature = "tsan")))]
    collector: core::mem::ManuallyDrop<Collector>,
    #[cfg(not(any(loom, feature = "tsan")))]
    shards: Box<[super::shard::Padded<Shard>]>,
    /// One past the highest seize thread id that entered a read section or
    /// handed a batch over: at least the number of threads that may be in
    /// read sections at once (ids are unique among live threads). Stored
    /// only when it grows.
    #[cfg(not(any(loom, feature = "tsan")))]
    peak: std::sync::atomic::AtomicUsize,
    /// Set as the `Rcu` drops: no reader is left, so an object retired
    /// from a destructor run then is freed at once.
    #[cfg(not(any(loom, feature = "tsan")))]
    dropping: std::sync::atomic::AtomicBool,
    /// Its name in a thread's [`Held`].
    #[cfg(not(any(loom, feature = "tsan")))]
    id: u64,
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
    /// seize's guard, for a section [`HELD`] does not count (another
    /// domain's, or none held); `None`: a section counted there. The only
    /// field: a flag beside it (the holder's, as it first was) was a byte
    /// store that the guard's 16-byte moves through the stack then read
    /// across, a failed store forward on every section (a page-cache read
    /// took 30.7 ns against 20.4, a handle lookup 135 against 106).
    #[cfg(not(any(loom, feature = "tsan")))]
    own: Option<seize::LocalGuard<'a>>,
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

#[cfg(not(any(loom, feature = "tsan")))]
impl Drop for RcuGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // A guard of its own drops with the struct.
        if self.own.is_none() {
            HELD.with(|h| {
                let d = h.depth.get() - 1;
                h.depth.set(d);
                if d == 0 {
                    // The last counted guard: the holder dropped before it
                    // and left its guard in the slot.
                    h.id.set(0);
                    h.leave_stored();
                }
            });
        }
    }
}

/// The read section an update holds ([`Rcu::hold`]): its holder's seize
/// guard, or, where the thread already held one (or another domain), a
/// plain read section. Not `Send`, as [`RcuGuard`].
pub struct RcuHold<'a> {
    #[cfg(not(any(loom, feature = "tsan")))]
    holder: Option<seize::LocalGuard<'a>>,
    _nested: Option<RcuGuard<'a>>,
}

#[cfg(not(any(loom, feature = "tsan")))]
impl Drop for RcuHold<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.holder.take() {
            HELD.with(|h| {
                let d = h.depth.get() - 1;
                h.depth.set(d);
                if d == 0 {
                    h.id.set(0);
                    drop(g);
                } else {
                    // Guards nested in it are left: the last drops this.
                    h.store(g);
                }
            });
        }
    }
}

/// The read section of a domain that a thread holds for a whole update,
/// counted (written here: the product).
///
/// seize counts nested guards itself, but each enter, nested or not, looks
/// its thread and reservation up (about 8 ns here), and an outermost one
/// also stores and exchanges its reservation's word (about 5 ns more). A
/// create entered eight sections one after another, a seventh of its time.
/// [`Rcu::hold`] enters one for the whole update and names its domain here;
/// the sections nested in it then only count (a thread-local add, about
/// 4 ns with the drop's subtract). The holder keeps seize's guard; if it
/// drops before guards nested in it (a `Locked` kept past the update's
/// scope, say), it leaves that guard in this slot, and the last counted
/// guard to drop drops it. A read section of a domain not held here is
/// seize's alone ([`Rcu::read_lock`] costs one thread-local load more), so
/// a lookup outside any update enters and leaves as it did.
///
/// A domain is named by its `id`, not its address: a guard leaked with
/// `mem::forget` keeps the slot counted for good, and a new `Rcu` at the
/// old one's address must not pass for it.
#[cfg(not(any(loom, feature = "tsan")))]
struct Held {
    /// The held domain's `id`; 0: none.
    id: core::cell::Cell<u64>,
    /// Guards counted, the holder's among them.
    depth: core::cell::Cell<usize>,
    /// seize's guard once the holder dropped before the guards nested in
    /// it. Its lifetime is the domain's: no counted guard outlives the
    /// `Rcu` it borrows, and the last one drops this.
    guard: core::cell::UnsafeCell<core::mem::MaybeUninit<seize::LocalGuard<'static>>>,
}

#[cfg(not(any(loom, feature = "tsan")))]
impl Held {
    /// Keeps the holder's guard, which dropped before guards nested in it.
    #[cold]
    #[inline(never)]
    fn store(&self, g: seize::LocalGuard<'_>) {
        // SAFETY: only the lifetime changes; the last counted guard, which
        // borrows the same domain, drops it (see `guard`). The slot is
        // empty: one holder per section, and this is it.
        unsafe {
            (*self.guard.get()).write(core::mem::transmute::<seize::LocalGuard<'_>, seize::LocalGuard<'static>>(g))
        };
    }

    /// Drops the guard the holder left here: the thread leaves the
    /// section. The slot is free first (`id` is 0), so that whatever the
    /// leave runs (seize's reclaimers) may enter a section of its own.
    #[cold]
    #[inline(never)]
    fn leave_stored(&self) {
        // SAFETY: written by `store` when the holder dropped with guards
        // still counted; read once, by the last of them.
        drop(unsafe { (*self.guard.get()).assume_init_read() });
    }
}

#[cfg(not(any(loom, feature = "tsan")))]
thread_local! {
    static HELD: Held = const {
        Held {
            id: core::cell::Cell::new(0),
            depth: core::cell::Cell::new(0),
            guard: core::cell::UnsafeCell::new(core::mem::MaybeUninit::uninit()),
        }
    };
}

/// Each `Rcu`'s [`Held`] name, from 1.
#[cfg(not(any(loom, feature = "tsan")))]
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Default for Rcu {
    fn default() -> Self {
        Self::new()
    }
}

impl Rcu {
    pub fn new() -> Self {
        Self {
            #[cfg(not(any(loom, feature = "tsan")))]
            collector: core::mem::ManuallyDrop::new(Collector::new().batch_size(SEIZE_CAP)),
            #[cfg(not(any(loom, feature = "tsan")))]
            shards: (0..super::shard::SHARDS).map(|_| super::shard::Padded(Shard::new())).collect(),
            #[cfg(not(any(loom, feature = "tsan")))]
            peak: Default::default(),
            #[cfg(not(any(loom, feature = "tsan")))]
            dropping: std::sync::atomic::AtomicBool::new(false),
            #[cfg(not(any(loom, feature = "tsan")))]
            // Relaxed: only uniqueness matters, which the RMW gives.
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            #[cfg(any(loom, feature = "tsan"))]
            deferred: DeferMutex::new(Vec::new()),
            #[cfg(loom)]
            grace: DeferMutex::new(Grace::default()),
        }
    }

    /// Enters a read-side critical section (`rcu_read_lock`). Reentrant.
    ///
    /// Always inlined: as a call (the compiler kept a few out-of-line
    /// copies), seize's guard went through the stack and its 16-byte reload
    /// missed store forwarding; a create and unlink took 4-5% longer and
    /// `short` 7% (`bench create-private short --threads 1,2`, 2026-11-26).
    #[inline(always)]
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
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            let counted = HELD.with(|h| {
                let counted = h.id.get() == self.id;
                if counted {
                    h.depth.set(h.depth.get() + 1);
                }
                counted
            });
            if counted {
                return RcuGuard { own: None };
            }
            // The guard built where it is returned, as before the count
            // (the count's first version made it in a closure and moved it
            // through the stack: a page-cache read took 31 ns against 20.5,
            // a handle lookup 137 against 106).
            RcuGuard { own: Some(self.enter()) }
        }
        #[cfg(any(loom, feature = "tsan"))]
        RcuGuard {
            #[cfg(all(not(loom), feature = "tsan"))]
            _rcu: core::marker::PhantomData,
            #[cfg(loom)]
            rcu: self,
            #[cfg(loom)]
            _not_send: core::marker::PhantomData,
        }
    }

    /// A [`read_lock`](Self::read_lock) that does not look for a section
    /// this thread holds ([`hold`](Self::hold)): seize's enter, as if none
    /// were. For read paths that never run inside a hold (a stat), where
    /// the look, a thread-local load and a branch, cost a hot stat 3 ns
    /// (46.5 to 49.5). Correct inside one too (seize nests), only not
    /// counted there.
    #[inline(always)]
    pub fn read_lock_unheld(&self) -> RcuGuard<'_> {
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            RcuGuard { own: Some(self.enter()) }
        }
        #[cfg(any(loom, feature = "tsan"))]
        self.read_lock()
    }

    /// Enters a read section meant to hold a whole update: the sections
    /// entered while it lives, on this thread and of this domain, nest in
    /// it for a thread-local count ([`Held`]) instead of seize's enter and
    /// leave. Otherwise a [`read_lock`](Self::read_lock), and nested in
    /// one if this thread already holds the domain. What a read section
    /// forbids applies to everything the update does meanwhile: it must not
    /// wait for a grace period of this domain (`synchronize`,
    /// `grace_period`, `barrier`), nor for a thread that may be waiting for
    /// one.
    #[inline(always)]
    pub fn hold(&self) -> RcuHold<'_> {
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            if HELD.with(|h| h.id.get() == 0) {
                // seize's enter first, the slot after: were the enter to
                // unwind (an allocation failure that panics), no later
                // guard is counted in a section never entered.
                let g = self.enter();
                HELD.with(|h| {
                    h.id.set(self.id);
                    h.depth.set(1);
                });
                return RcuHold { holder: Some(g), _nested: None };
            }
        }
        RcuHold {
            #[cfg(not(any(loom, feature = "tsan")))]
            holder: None,
            _nested: Some(self.read_lock()),
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
        self.call_rcu_sized(f, 0);
    }

    /// [`call_rcu`](Self::call_rcu) for a callback that frees `bytes` of
    /// memory: a shard hands its list over once what it holds adds up to
    /// [`SHARD_BYTES`], whatever the count (an index table replaced by a
    /// larger one must not wait for two thousand other retirements).
    pub fn call_rcu_sized(&self, f: impl FnOnce() + Send + 'static, bytes: usize) {
        let cb: *mut Callback = Box::into_raw(Box::new(Box::new(f)));
        #[cfg(not(any(loom, feature = "tsan")))]
        self.defer(Deferred { ptr: cb as *mut (), free: run_callback }, bytes);
        #[cfg(any(loom, feature = "tsan"))]
        let _ = bytes;
        #[cfg(any(loom, feature = "tsan"))]
        {
            // SAFETY: `cb` came from `Box::into_raw` just above.
            let cb = unsafe { Box::from_raw(cb) };
            self.deferred.lock().unwrap().push(*cb);
        }
    }

    /// Calls `free(ptr)` after a grace period (for an object freed otherwise
    /// than as a `Box`); `bytes`: its size, as `call_rcu_sized` counts it.
    ///
    /// # Safety
    /// `free(ptr)` is sound once no reader can hold `ptr`; `ptr` is retired
    /// once, and no longer reachable by readers that enter after this call.
    pub unsafe fn retire_with(&self, ptr: *mut (), free: unsafe fn(*mut ()), bytes: usize) {
        #[cfg(not(any(loom, feature = "tsan")))]
        self.defer(Deferred { ptr, free }, bytes);
        #[cfg(any(loom, feature = "tsan"))]
        {
            let _ = bytes;
            struct SendPtr(*mut ());
            // SAFETY: the pointer is used once, by the callback, after every
            // reader is gone; the caller vouches that `free` may run on any
            // thread.
            unsafe impl Send for SendPtr {}
            let p = SendPtr(ptr);
            self.call_rcu(move || {
                let p = p;
                // SAFETY: the caller's contract.
                unsafe { free(p.0) };
            });
        }
    }

    /// Frees `ptr` (allocated by `Box`) after a grace period.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is retired once, and is no longer
    /// reachable by readers that enter after this call.
    pub unsafe fn retire_box<T: Send + 'static>(&self, ptr: *mut T) {
        // Straight into the list: no closure to allocate.
        #[cfg(not(any(loom, feature = "tsan")))]
        self.defer(Deferred { ptr: ptr as *mut (), free: free_box::<T> }, std::mem::size_of::<T>());
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

    /// Frees `ptr` (allocated by `Box`) after a grace period, in a direct
    /// batch of its own: by the thread that ends the grace period, as it
    /// leaves its outermost read section, never from another thread's
    /// `drain` (which may run inside a read section an update holds). For
    /// an object whose destructor may block or wait (a superblock: its
    /// filesystem may revoke an etcd lease, or walk a whole memfs tree).
    ///
    /// # Safety
    /// As [`retire_box`](Self::retire_box).
    pub unsafe fn retire_box_direct<T: Send + 'static>(&self, ptr: *mut T) {
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            let d = Deferred { ptr: ptr as *mut (), free: free_box::<T> };
            if self.dropping.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: no reader is left (see `dropping`).
                unsafe { (d.free)(d.ptr) };
                return;
            }
            self.hand(self.shard(), vec![d], true, 0);
        }
        #[cfg(any(loom, feature = "tsan"))]
        // SAFETY: the caller's contract.
        unsafe {
            self.retire_box(ptr)
        };
    }

    /// Enters seize's critical section (reentrant) with this thread's id
    /// below [`peak`](Self::peak) *before* the thread shows as active: a
    /// load and a branch; the raise, rare, is out of line (inlined, its
    /// compare-and-swap loop cost the cached stat about 10%).
    ///
    /// The order is what lets [`pad_and_flush`](Self::pad_and_flush) know
    /// that its attempt succeeded. Raised after the thread became active
    /// (as it was until 2026-11-26), a thread between the two was active
    /// with an id the padding did not cover: the attempt found more active
    /// threads than entries and kept the batch, seize's "try again later",
    /// and if the handing thread then exited, the batch stayed in its seize
    /// slot for good (seize frees a thread's id at exit, not its batch).
    /// 1000 threads of `bench create-private` on 2 cores hung in the
    /// `Vfs`'s drop, `barrier` waiting for a generation that could never
    /// end, in 5 runs of 8.
    #[cfg(not(any(loom, feature = "tsan")))]
    #[inline(always)]
    fn enter(&self) -> seize::LocalGuard<'_> {
        let g = self.collector.enter();
        // Relaxed: the thread's own earlier raise is seen (program order);
        // another's only bounds the padding, which rechecks.
        let id = g.thread_id();
        if id >= self.peak.load(std::sync::atomic::Ordering::Relaxed) {
            // Not a call taking the guard: passed by value, it went
            // through the stack on the hot path too (`short` 6% slower).
            drop(g);
            self.raise_peak(id);
            return self.collector.enter();
        }
        g
    }

    /// [`enter`](Self::enter)'s rare path, between its leave and its
    /// enter again: raises the peak and fences, so that a retiring thread
    /// that sees this thread active (seize's scan, then `pad_and_flush`'s
    /// Acquire fence) sees the raise too. A nested guard cannot get here:
    /// the outer one raised.
    #[cfg(not(any(loom, feature = "tsan")))]
    #[cold]
    #[inline(never)]
    fn raise_peak(&self, id: usize) {
        self.peak.fetch_max(id + 1, std::sync::atomic::Ordering::Relaxed);
        // SeqCst (a release fence at least): orders the raise before the
        // active store of the caller's next `enter`.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// This thread's shard's lists.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn shard(&self) -> &Shard {
        &self.shards[super::shard::current()].0
    }

    /// Objects a shard gathers before a hand-over: [`SHARD_BATCH`] with a
    /// few threads, down to [`SHARD_BATCH_MIN`] with 32 or more.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn shard_batch(&self) -> usize {
        let threads = self.peak.load(std::sync::atomic::Ordering::Relaxed).max(1);
        (16 * SHARD_BATCH / threads).clamp(SHARD_BATCH_MIN, SHARD_BATCH)
    }

    /// Lists an object to free after a grace period.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn defer(&self, d: Deferred, bytes: usize) {
        if self.dropping.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: no reader is left (see `dropping`).
            unsafe { (d.free)(d.ptr) };
            return;
        }
        let sh = self.shard();
        let full = sh.with(|pending, gens| {
            pending.push(d);
            gens.retired += 1;
            gens.pending_bytes += bytes;
            (pending.len() >= self.shard_batch() || gens.pending_bytes >= SHARD_BYTES)
                .then(|| take_for_hand(pending, gens))
        });
        if let Some((items, gen)) = full {
            self.hand(sh, items, false, gen);
        }
        // What came back is freed at once, not at the next hand-over: the
        // objects (and the pages they hold) would wait a whole batch more.
        self.drain(sh);
    }

    /// Hands `items` (taken from `sh`'s list) to seize: entries of
    /// [`ENTRY`] objects, padding, and a reclamation attempt (module doc).
    #[cfg(not(any(loom, feature = "tsan")))]
    fn hand(&self, sh: &Shard, items: Vec<Deferred>, direct: bool, gen: u64) {
        let g = self.enter();
        self.retire_batches(sh, items, direct, gen);
        self.pad_and_flush(&g);
    }

    /// Retires `items` (taken from `sh`'s list) to seize as entries of
    /// [`ENTRY`] objects, without the attempt (`pad_and_flush`) that
    /// `hand` makes after them.
    ///
    /// Each entry is cut from the list's tail into a block of its own
    /// size, and the list's block is freed at once. Cut from the front
    /// (until 2026-11-27), each entry kept the whole block it was cut from
    /// (the first, the list's 2,048 slots, 32 KiB) and the rest was copied
    /// to a new one: 114 KiB allocated per hand-over of 2,048 objects, held
    /// until their grace period ended. With the shrinker killing a dentry
    /// per create (4M files, past `dcache_target`), those blocks came from
    /// fresh pages and their faults were a tenth of the create time.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn retire_batches(&self, sh: &Shard, mut items: Vec<Deferred>, direct: bool, gen: u64) {
        while !items.is_empty() {
            let entry = items.split_off(items.len().saturating_sub(ENTRY));
            if direct {
                sh.direct.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let b = Box::into_raw(Box::new(Batch { items: entry, next: std::ptr::null_mut(), home: sh, direct, gen }));
            // SAFETY: a fresh allocation no other thread can reach, and
            // `batch_done` is its matching reclaimer.
            unsafe { self.collector.retire(b, batch_done) };
        }
    }

    /// Pads this thread's seize batch with one no-op entry per thread that
    /// may be in a read section, and attempts a reclamation.
    ///
    /// The attempt fails (seize keeps the batch for a later one) when it
    /// finds more active threads than entries. Every active thread's id
    /// is below the peak it raised before becoming active
    /// ([`enter`](Self::enter)), so after the attempt this thread sees
    /// every such raise; if the peak moved past the padding, it pads to the
    /// new peak and tries again. An attempt that finds the peak unmoved
    /// had at least as many entries as active threads: it succeeded, and
    /// nothing is left in this thread's seize batch when it exits.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn pad_and_flush(&self, g: &seize::LocalGuard<'_>) {
        use std::sync::atomic::Ordering;
        let mut padded = 0;
        loop {
            let want = self.peak.load(Ordering::Relaxed).max(2);
            for _ in padded..want {
                // SAFETY: `pad_done` reads nothing; the address is never
                // freed.
                unsafe { self.collector.retire(&PAD as *const u8 as *mut u8, pad_done) };
            }
            padded = padded.max(want);
            g.flush();
            // Acquire: pairs with `raise_peak`'s fence through the active
            // stores that seize's scan read (it returns before its own
            // fence when it gives up).
            std::sync::atomic::fence(Ordering::Acquire);
            if self.peak.load(Ordering::Relaxed) <= want {
                return;
            }
        }
    }

    /// Frees the objects whose grace period has ended and that came back
    /// to this shard.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn drain(&self, sh: &Shard) {
        use std::sync::atomic::Ordering;
        // Relaxed first: nothing to take is the common case, and costs no
        // store.
        if sh.returned.load(Ordering::Relaxed).is_null() {
            return;
        }
        // Acquire: pairs with `batch_done`'s Release push.
        let mut b = sh.returned.swap(std::ptr::null_mut(), Ordering::Acquire);
        while !b.is_null() {
            // SAFETY: a batch pushed home by `batch_done`, now ours alone.
            let batch = unsafe { Box::from_raw(b) };
            b = batch.next;
            let gen = batch.gen;
            // SAFETY: their grace period ended before the push.
            unsafe { Batch::free_items(batch.items) };
            // Counted out after its objects are freed: `synchronize` waits
            // for the frees, not only the grace period.
            sh.with(|_, gens| {
                if let Some(n) = gens.outstanding.get_mut(&gen) {
                    *n -= 1;
                    if *n == 0 {
                        gens.outstanding.remove(&gen);
                    }
                }
            });
        }
    }

    /// Hands over the list of every shard that retired nothing since the
    /// last call, and frees what came back to each shard. For the
    /// reclaimer (`sync::reclaim`), a few times a second: a list waits
    /// for its shard's next retirement, and a thread that went idle (or
    /// exited) would otherwise keep its deleted files' inodes and data
    /// for good. The batches go home as any other (counted in their
    /// generation, so `synchronize` still waits for them), and the
    /// reclaimer's next visit frees them if no thread of the shard did.
    /// A shard that retired something since the last visit is left alone:
    /// its thread is active and will hand its list over itself.
    pub fn flush_idle(&self) {
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            if self.dropping.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            // What came back first (outside any read section: a freed
            // object's destructor may wait for a grace period), so that a
            // batch home but not yet freed does not count as one that
            // waits.
            for sh in self.shards.iter() {
                self.drain(&sh.0);
            }
            let g = self.enter();
            let mut handed = false;
            for sh in self.shards.iter() {
                let sh = &sh.0;
                let idle = sh.with(|pending, gens| {
                    let active = gens.retired != gens.seen;
                    gens.seen = gens.retired;
                    if active || pending.is_empty() {
                        return None;
                    }
                    let gen = note_handed(pending.len(), gens);
                    // Not `take_for_hand`: an idle shard needs no room kept.
                    Some((core::mem::take(pending), gen))
                });
                if let Some((items, gen)) = idle {
                    self.retire_batches(sh, items, false, gen);
                    handed = true;
                }
            }
            // One attempt for every shard handed over (one `membarrier`);
            // or, with none, one if a batch is still out: a batch this
            // thread retired earlier may sit in its own seize batch (an
            // attempt that found more threads than entries), and only its
            // next attempt would flush it.
            let waiting = || self.shards.iter().any(|sh| sh.0.with(|_, gens| !gens.outstanding.is_empty()));
            if handed || waiting() {
                self.pad_and_flush(&g);
            }
        }
    }

    /// Pushes this shard's retired objects out now instead of when its
    /// list fills: each is freed as soon as its grace period ends (at once
    /// if no reader is inside), by whichever thread ends it. Does not
    /// wait. For retirements that free much memory (a deleted file's data).
    pub fn expedite(&self) {
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            if self.dropping.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let sh = self.shard();
            let items = sh.with(|pending, gens| {
                gens.pending_bytes = 0;
                core::mem::take(pending)
            });
            self.hand(sh, items, true, 0);
            self.drain(sh);
        }
    }

    /// Waits until every read section that was in progress when it was
    /// called has ended (`synchronize_rcu`), without waiting for any
    /// retired object. Not from inside a read section of this `Rcu`.
    pub fn grace_period(&self) {
        #[cfg(any(loom, feature = "tsan"))]
        self.synchronize();
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            use std::sync::atomic::{AtomicBool, Ordering};
            use std::sync::Arc;
            if self.dropping.load(Ordering::Relaxed) {
                return;
            }
            let done = Arc::new(AtomicBool::new(false));
            let flag = done.clone();
            let cb: *mut Callback = Box::into_raw(Box::new(Box::new(move || flag.store(true, Ordering::Release))));
            // A direct batch of its own: freed (the flag set) when its
            // grace period ends, whatever else waits.
            self.hand(self.shard(), vec![Deferred { ptr: cb as *mut (), free: run_callback }], true, 0);
            // Acquire: pairs with the callback's Release.
            self.wait_until(|| done.load(Ordering::Acquire));
        }
    }

    /// Waits until every read section that was in progress when it was
    /// called has ended, and the objects this thread's shard retired before
    /// it and still listed are freed (`synchronize_rcu` plus `rcu_barrier`
    /// for this shard; those `expedite` already pushed out go at the end of
    /// their own grace period, by whichever thread ends it, and are not
    /// waited for here: `barrier` waits for them).
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
            if self.dropping.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let sh = self.shard();
            let mark = self.close_generation(sh);
            self.wait_until(|| {
                self.drain(sh);
                Self::generation_freed(sh, mark)
            });
        }
    }

    /// Hands everything `sh` lists now over in its current generation
    /// (with a sentinel, so that a grace period is waited for even with
    /// nothing listed), which it returns; later retirements go in the next.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn close_generation(&self, sh: &Shard) -> u64 {
        let (items, mark) = sh.with(|pending, gens| {
            pending.push(Deferred { ptr: std::ptr::null_mut(), free: noop });
            let r = take_for_hand(pending, gens);
            gens.current += 1;
            r
        });
        self.hand(sh, items, false, mark);
        mark
    }

    /// Whether every batch `sh` handed over in generation `mark` or before
    /// is freed.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn generation_freed(sh: &Shard, mark: u64) -> bool {
        sh.with(|_, gens| gens.outstanding.range(..=mark).next().is_none())
    }

    /// Polls `done` with a growing sleep (1 us to 1 ms), flushing this
    /// thread's reclamation between polls: a thread that entered since may
    /// need its entry.
    #[cfg(not(any(loom, feature = "tsan")))]
    fn wait_until(&self, mut done: impl FnMut() -> bool) {
        let mut backoff = 1u64;
        while !done() {
            std::thread::sleep(std::time::Duration::from_micros(backoff));
            backoff = (backoff * 2).min(1000);
            self.pad_and_flush(&self.enter());
        }
    }
    /// Waits until every object any thread retired before the call is
    /// freed (`rcu_barrier`), those `expedite` pushed out included. For a
    /// teardown: a retired object may hold this domain itself (a
    /// superblock an unmount killed holds an `Arc<Rcu>`, and so does the
    /// memfs it serves), and would otherwise keep the domain, and all it
    /// retired, alive after its last user (a `Vfs` dropped soon after an
    /// unmount leaked its mounted tree: Miri's leak check on the mount
    /// tests). It waits for every direct batch outstanding, so a thread
    /// expediting without end would keep it waiting. Not from inside a read
    /// section of this `Rcu`. (The loom and tsan stand-ins free at drop
    /// only.)
    pub fn barrier(&self) {
        #[cfg(not(any(loom, feature = "tsan")))]
        {
            if self.dropping.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let marks: Vec<u64> = self.shards.iter().map(|s| self.close_generation(&s.0)).collect();
            self.wait_until(|| {
                self.shards.iter().for_each(|s| self.drain(&s.0));
                self.shards.iter().zip(&marks).all(|(s, &mark)| {
                    // Acquire: pairs with `batch_done`'s Release count-down,
                    // so the direct batches' frees are done.
                    Self::generation_freed(&s.0, mark) && s.0.direct.load(std::sync::atomic::Ordering::Acquire) == 0
                })
            });
        }
    }
}

#[cfg(not(any(loom, feature = "tsan")))]
impl Drop for Rcu {
    fn drop(&mut self) {
        // No reader is left (`&mut self`): every object can go now. An
        // object retired while another is freed goes at once (`dropping`);
        // the collector stays alive until the end, so that a destructor
        // that enters a read section still finds it.
        self.dropping.store(true, std::sync::atomic::Ordering::Relaxed);
        loop {
            let mut any = false;
            for sh in self.shards.iter() {
                // SAFETY: no thread uses the `Rcu` any more: every list is
                // ours, and no reader is left.
                let pending = unsafe { core::mem::take(&mut *sh.0.pending.get()) };
                any |= !pending.is_empty();
                // SAFETY: as above.
                unsafe { Batch::free_items(pending) };
                let mut b = sh.0.returned.swap(std::ptr::null_mut(), std::sync::atomic::Ordering::Acquire);
                while !b.is_null() {
                    any = true;
                    // SAFETY: as in `drain`.
                    let batch = unsafe { Box::from_raw(b) };
                    b = batch.next;
                    // SAFETY: as in `drain`.
                    unsafe { Batch::free_items(batch.items) };
                }
            }
            // seize's entries not yet released (none is in a read section
            // now): their reclaimers free direct batches and push the others
            // home, for the next round.
            // SAFETY: no thread uses the collector any more.
            unsafe { self.collector.reclaim_all() };
            if !any && self.shards.iter().all(|s| s.0.returned.load(std::sync::atomic::Ordering::Acquire).is_null()) {
                break;
            }
        }
        // SAFETY: dropped once, here; nothing uses it after.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.collector) };
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

    /// A thread inside a read section of `rcu`, once it has entered; it
    /// runs `inside` and leaves when the sender is used or dropped.
    fn reader_inside(
        rcu: &Arc<Rcu>,
        inside: impl FnOnce() + Send + 'static,
    ) -> (std::thread::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        let rcu = rcu.clone();
        let reader = std::thread::spawn(move || {
            let _g = rcu.read_lock();
            entered_tx.send(()).unwrap();
            let _ = leave_rx.recv();
            inside();
        });
        entered_rx.recv().unwrap();
        (reader, leave_tx)
    }

    /// Runs `inside` on a thread of its own, which calls the function it
    /// is given once it has entered what it means to test; checks that a
    /// grace period of `gp_of` (asked for then) started then waits (200
    /// ms) until the thread has left, and ends after.
    fn grace_period_waits_for(gp_of: impl FnOnce() -> Arc<Rcu>, inside: impl FnOnce(&dyn Fn()) + Send + 'static) {
        let (in_tx, in_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            inside(&|| {
                in_tx.send(()).unwrap();
                let _ = go_rx.recv();
            })
        });
        in_rx.recv().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let (d, r) = (done.clone(), gp_of());
        let gp = std::thread::spawn(move || {
            r.grace_period();
            d.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!done.load(Ordering::SeqCst), "a grace period ended while the reader was inside");
        go_tx.send(()).unwrap();
        reader.join().unwrap();
        gp.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    }

    /// `grace_period_waits_for` on `rcu`'s own grace period, with `body`
    /// given the domain and the function to call once inside.
    fn grace_period_of_waits_for(rcu: &Arc<Rcu>, body: impl FnOnce(&Rcu, &dyn Fn()) + Send + 'static) {
        let r = rcu.clone();
        grace_period_waits_for(|| rcu.clone(), move |inside| body(&r, inside));
    }

    #[test]
    fn a_section_nested_in_a_hold_outlives_its_holder() {
        let rcu = Arc::new(Rcu::new());
        grace_period_of_waits_for(&rcu, |r, inside| {
            let holder = r.hold();
            let nested = r.read_lock();
            drop(holder);
            inside();
            drop(nested);
        });
        // The thread's slot is free again: a new hold holds, and a section
        // nested in it is one.
        grace_period_of_waits_for(&rcu, |r, inside| {
            let holder = r.hold();
            let nested = r.hold();
            let deeper = r.read_lock();
            drop(nested);
            drop(holder);
            inside();
            drop(deeper);
        });
    }

    #[test]
    fn a_hold_is_a_section_while_it_lives() {
        grace_period_of_waits_for(&Arc::new(Rcu::new()), |r, inside| {
            let holder = r.hold();
            drop(r.read_lock());
            inside();
            drop(holder);
        });
    }

    #[test]
    fn a_section_of_another_domain_inside_a_hold_is_its_own() {
        let (a, b) = (Arc::new(Rcu::new()), Arc::new(Rcu::new()));
        let (ra, rb) = (a.clone(), b.clone());
        grace_period_waits_for(
            || b,
            move |inside| {
                let holder = ra.hold();
                let other = rb.hold();
                drop(holder);
                inside();
                drop(other);
            },
        );
    }

    #[test]
    fn a_leaked_hold_does_not_count_for_a_new_domain() {
        let (tx, rx) = std::sync::mpsc::channel();
        grace_period_waits_for(
            move || rx.recv().unwrap(),
            move |inside| {
                let a = Rcu::new();
                std::mem::forget(a.hold());
                drop(a);
                // A new domain, perhaps where the old one was.
                let c = Arc::new(Rcu::new());
                tx.send(c.clone()).unwrap();
                let g = c.read_lock();
                inside();
                drop(g);
            },
        );
    }

    #[test]
    fn a_direct_retirement_is_freed_as_the_last_reader_leaves() {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let rcu = Arc::new(Rcu::new());
        let freed = Arc::new(AtomicBool::new(false));
        let seen = freed.clone();
        let (reader, leave_tx) = reader_inside(&rcu, move || assert!(!seen.load(Ordering::SeqCst)));
        // SAFETY: a fresh box, retired once, reachable by no one.
        unsafe { rcu.retire_box_direct(Box::into_raw(Box::new(Flag(freed.clone())))) };
        assert!(!freed.load(Ordering::SeqCst), "freed while a reader was inside");
        leave_tx.send(()).unwrap();
        reader.join().unwrap();
        // Freed by the reader as it left: no drain, no synchronize (a plain
        // `retire_box` would wait in this shard's list).
        assert!(freed.load(Ordering::SeqCst));
    }

    #[test]
    fn call_rcu_waits_for_a_reader_in_progress() {
        let rcu = Arc::new(Rcu::new());
        let freed = Arc::new(AtomicBool::new(false));
        let seen = freed.clone();
        // Still inside the read section: nothing retired since may be gone.
        let (reader, leave_tx) = reader_inside(&rcu, move || assert!(!seen.load(Ordering::SeqCst)));
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

    /// Every object of a hand-over of many entries is freed, once: lists
    /// of a few thousand objects, handed over when full (each cut into
    /// entries of `ENTRY`) and by `expedite`, all run by `barrier`.
    #[test]
    fn every_object_of_a_long_list_is_freed_once() {
        use std::sync::atomic::AtomicUsize;
        let rcu = Rcu::new();
        let runs = Arc::new(AtomicUsize::new(0));
        // Past a full list (`SHARD_BATCH`) and an uneven tail, then an
        // expedited list of more than one entry.
        let (listed, expedited) = if cfg!(miri) { (600, 300) } else { (5_000, 700) };
        for n in [listed, expedited] {
            for _ in 0..n {
                let r = runs.clone();
                rcu.call_rcu(move || {
                    r.fetch_add(1, Ordering::Relaxed);
                });
            }
        }
        rcu.expedite();
        rcu.barrier();
        assert_eq!(runs.load(Ordering::Relaxed), listed + expedited);
    }

    /// `barrier` waits for an object `expedite` pushed out too, whatever
    /// thread ends its grace period (a review's test: it returned before
    /// the object was freed while a reader held the grace period).
    #[test]
    fn barrier_waits_for_expedited_objects() {
        let rcu = Arc::new(Rcu::new());
        let freed = Arc::new(AtomicBool::new(false));
        let (reader, leave_tx) = reader_inside(&rcu, || {});
        let f = freed.clone();
        rcu.call_rcu(move || {
            std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) { 1 } else { 300 }));
            f.store(true, Ordering::SeqCst);
        });
        rcu.expedite();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            leave_tx.send(()).unwrap();
        });
        rcu.barrier();
        let after = freed.load(Ordering::SeqCst);
        t.join().unwrap();
        reader.join().unwrap();
        assert!(after, "barrier returned before an expedited object was freed");
    }
}
