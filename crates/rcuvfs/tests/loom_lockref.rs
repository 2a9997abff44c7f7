//! loom models for `Lockref`: run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --release --test loom_lockref`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rcuvfs::sync::atomic::loom_model as model;

use rcuvfs::sync::Lockref;

/// A thread that takes a reference and drops it (lockless, else by the
/// lock), then takes `more` references.
fn get_put_then_get(r: &Arc<Lockref>, more: u32) -> thread::JoinHandle<()> {
    let r = r.clone();
    thread::spawn(move || {
        r.get();
        if r.put_return().is_none() {
            assert!(r.put_or_lock().is_none());
        }
        for _ in 0..more {
            r.get();
        }
    })
}

/// A lockless get and put racing a lock holder: no update is lost, and the
/// holder sees a count nobody else changes while it holds the lock.
#[test]
fn lockref_updates_are_not_lost_around_the_lock() {
    model(|| {
        let r = Arc::new(Lockref::new(2));
        let a = get_put_then_get(&r, 1);
        {
            let mut g = r.lock();
            let c = g.count();
            assert_eq!(g.count(), c, "count changed under the lock");
            g.set_count(c + 10);
        }
        a.join().unwrap();
        assert_eq!(r.count_hint(), 13);
    });
}

/// The last reference: exactly one of two putters gets the lock at count 1,
/// and a concurrent get_not_dead after mark_dead fails.
#[test]
fn lockref_last_put_is_seen_by_exactly_one_thread() {
    model(|| {
        let r = Arc::new(Lockref::new(2));
        let put = |r: Arc<Lockref>| {
            thread::spawn(move || match r.put_or_lock() {
                None => false,
                Some(mut g) => {
                    assert_eq!(g.count(), 1);
                    g.mark_dead();
                    true
                }
            })
        };
        let a = put(r.clone());
        let b = put(r.clone());
        let last = u32::from(a.join().unwrap()) + u32::from(b.join().unwrap());
        assert_eq!(last, 1);
        assert!(!r.get_not_dead());
    });
}

/// `unlock_with` sets the count and unlocks in one RMW: a lockless get and
/// put racing it lose nothing, and a locker parked meanwhile is woken.
#[test]
fn lockref_unlock_with_loses_no_update_and_wakes_a_waiter() {
    model(|| {
        let r = Arc::new(Lockref::new(2));
        let a = get_put_then_get(&r, 0);
        let b = {
            let r = r.clone();
            thread::spawn(move || {
                let g = r.lock();
                let c = g.count();
                g.unlock_with(c + 1);
            })
        };
        let g = r.lock();
        let c = g.count();
        g.unlock_with(c + 10);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(r.count_hint(), 13);
    });
}
