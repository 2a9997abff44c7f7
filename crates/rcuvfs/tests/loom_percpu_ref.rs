//! loom model of the per-shard reference count (`sync::percpu_ref`): run
//! with `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --release --test loom_percpu_ref`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use rcuvfs::sync::atomic::loom_model as model;
use rcuvfs::sync::percpu_ref::PercpuRef;
use rcuvfs::sync::Rcu;

/// A holder takes and drops references on top of its own while the owner
/// kills the count: exactly one side sees the last reference go, and only
/// after the holder's last use (the guarded object is "freed" once).
#[test]
fn loom_percpu_ref_kill_vs_get_and_put() {
    model(|| {
        let rcu = Arc::new(Rcu::new());
        let r = Arc::new(PercpuRef::new());
        let freed = Arc::new(AtomicBool::new(false));
        r.get(&rcu); // the holder's reference, taken while the owner lives
        let holder = {
            let (rcu, r, freed) = (rcu.clone(), r.clone(), freed.clone());
            thread::spawn(move || {
                r.get(&rcu);
                assert!(!r.put(&rcu), "a put freed while a reference was held");
                // The holder's last use of the guarded object.
                assert!(!freed.load(Ordering::SeqCst), "freed under a holder");
                if r.put(&rcu) {
                    assert!(!freed.swap(true, Ordering::SeqCst), "freed twice");
                }
            })
        };
        if r.kill(&rcu) {
            assert!(!freed.swap(true, Ordering::SeqCst), "freed twice");
        }
        holder.join().unwrap();
        assert!(freed.load(Ordering::SeqCst), "never freed");
    });
}
