//! The reclaimer: one thread per process, while any `Vfs` lives, that
//! frees what idle threads leave behind (written here: the product; Linux
//! has its RCU kthreads and the page allocator's periodic drain of the
//! per-CPU lists for the same reason).
//!
//! Everything else in the crate frees on the threads that work: a shard's
//! retired objects are handed over when its list fills, and the page pool
//! keeps small files' frames for the next small files. Both wait for more
//! work. A program that deleted a thousand small files and went idle kept
//! their inodes and data for good (the inodes in its thread's list, 1,010
//! frames in use after 2 s), and one that churned 100,000 kept 83 MiB of
//! free frames resident. Issue 19 asks for deleted data freed within a
//! second even when nothing else runs.
//!
//! Every [`TICK`] the reclaimer visits each registered domain
//! ([`Rcu::flush_idle`]: lists of shards that retired nothing since the
//! last visit are handed over, and what came back is freed), the page
//! caches' own domain, and the page pool ([`trim_idle`]: when no frame
//! moved through its depot or table since the last visit, the caches, the
//! depot and the free frames past the lower bound go back to the system).
//! So a deleted file's memory goes a few ticks after its thread stops:
//! the visit that sees the shard idle, the one that frees what its grace
//! period returned, the ones that see the pool's caches and then its depot
//! and table idle (the reclaimer's own frees count as moves once).
//!
//! It only reads counts that the working threads keep under locks they
//! hold anyway, on lines they write anyway (a shard's list, a cache, the
//! depot, the table), so it adds no store to any operation; it takes each
//! of those locks once per tick.
//!
//! Domains are registered as weak references: the reclaimer never keeps
//! a `Vfs` alive past a tick, and it exits when none is left (the next
//! registration starts it again). Not under loom or Miri, whose models
//! end with every thread joined.
//!
//! | state | protected by |
//! |-------|--------------|
//! | `REGISTRY` (the domains, whether the thread runs) | its mutex |
//!
//! A panic in a visit (a destructor of something freed there) is caught
//! and reported; the thread goes on, so `running` is true exactly while
//! the one thread runs.
//!
//! [`trim_idle`]: crate::filemap::trim_idle

#[cfg(not(any(loom, miri)))]
use std::sync::{Arc, Mutex, Weak};
#[cfg(not(any(loom, miri)))]
use std::time::Duration;

#[cfg(not(any(loom, miri)))]
use super::Rcu;

/// How often the reclaimer visits.
#[cfg(not(any(loom, miri)))]
pub const TICK: Duration = Duration::from_millis(250);

#[cfg(not(any(loom, miri)))]
struct Registry {
    domains: Vec<Weak<Rcu>>,
    running: bool,
}

#[cfg(not(any(loom, miri)))]
static REGISTRY: Mutex<Registry> = Mutex::new(Registry { domains: Vec::new(), running: false });

/// Has the reclaimer visit `rcu` for as long as it lives.
#[cfg(not(any(loom, miri)))]
pub fn register(rcu: &Arc<Rcu>) {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    // Only live domains are searched: a program that builds Vfs after Vfs
    // would otherwise search all it built within a tick.
    r.domains.retain(|w| w.strong_count() > 0);
    // Once per domain: a memfs outlives its first Vfs and may serve
    // another, and a domain visited twice a tick would look idle to the
    // second visit (its counts just seen) and have every list handed over.
    if !r.domains.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(rcu))) {
        r.domains.push(Arc::downgrade(rcu));
    }
    if r.running {
        return;
    }
    // If no thread can be started, nothing is reclaimed while idle (as
    // before the reclaimer), and the next registration tries again.
    r.running = std::thread::Builder::new().name("rcuvfs-reclaim".into()).spawn(run).is_ok();
}

/// Under loom and Miri: nothing (module doc).
#[cfg(any(loom, miri))]
pub fn register(_rcu: &std::sync::Arc<super::Rcu>) {}

/// Runs one visit; a panic in it (a destructor of something it freed)
/// is reported by the panic hook and does not end the thread, which keeps
/// visiting the domains still registered.
#[cfg(not(any(loom, miri)))]
fn guarded(visit: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(visit));
}

#[cfg(not(any(loom, miri)))]
fn run() {
    loop {
        std::thread::sleep(TICK);
        let live: Vec<Arc<Rcu>> = {
            let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
            r.domains.retain(|w| w.strong_count() > 0);
            if r.domains.is_empty() {
                r.running = false;
                // The pool outlives every Vfs: one last visit before the
                // thread ends. Not the page caches' domain: a batch handed
                // over now could stay in this thread's seize batch, which
                // nothing flushes once the thread is gone.
                drop(r);
                guarded(|| crate::filemap::trim_idle(false));
                return;
            }
            r.domains.iter().filter_map(Weak::upgrade).collect()
        };
        guarded(|| {
            for rcu in live {
                rcu.flush_idle();
                // Dropped here, one at a time: if this was the last
                // reference (its Vfs went meanwhile), the domain drops on
                // this thread.
            }
            crate::filemap::trim_idle(true);
        });
    }
}
