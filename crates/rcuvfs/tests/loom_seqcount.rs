//! loom models for sequence counts: run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --release --test loom_seqcount`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use rcuvfs::sync::atomic::loom_model as model;

use rcuvfs::sync::{SeqCount, SeqLock};

/// A reader whose read_retry passes saw both fields from the same write.
#[test]
fn seqcount_reader_that_validates_sees_no_torn_pair() {
    model(|| {
        let s = Arc::new((SeqCount::new(), AtomicU64::new(0), AtomicU64::new(0)));
        let w = {
            let s = s.clone();
            thread::spawn(move || {
                for i in 1..=2 {
                    s.0.write_begin();
                    s.1.store(i, Ordering::Relaxed);
                    s.2.store(i, Ordering::Relaxed);
                    s.0.write_end();
                }
            })
        };
        if let Some(start) = s.0.read_begin() {
            let a = s.1.load(Ordering::Relaxed);
            let b = s.2.load(Ordering::Relaxed);
            if !s.0.read_retry(start) {
                assert_eq!(a, b);
            }
        }
        w.join().unwrap();
    });
}

/// SeqLock::read always returns a consistent snapshot: optimistically, or
/// under the lock after its bounded retries.
#[test]
fn seqlock_read_returns_a_snapshot() {
    model(|| {
        let s = Arc::new((SeqLock::new(), AtomicU64::new(0), AtomicU64::new(0)));
        let w = {
            let s = s.clone();
            thread::spawn(move || {
                let _g = s.0.write();
                s.1.store(1, Ordering::Relaxed);
                s.2.store(1, Ordering::Relaxed);
            })
        };
        let (a, b) = s.0.read(|| (s.1.load(Ordering::Relaxed), s.2.load(Ordering::Relaxed)));
        assert_eq!(a, b);
        w.join().unwrap();
    });
}
