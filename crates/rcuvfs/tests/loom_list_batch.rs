//! loom model of list batching (seed 004): a thread that finds the lock
//! busy queues its request, and the combiner, or the waiter itself once the
//! lock frees, completes it. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --release --test loom_list_batch`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rcuvfs::sync::atomic::loom_model as model;
use rcuvfs::sync::list_batch::{InodeList, Link, ListMode};

fn listed(list: &InodeList) -> Vec<usize> {
    let mut k = Vec::new();
    list.for_each(|x| k.push(x as usize));
    k.sort_unstable();
    k
}

/// Two threads race on the list: one adds, the other deletes a node that
/// was there before. Each request is applied exactly once (by its owner or
/// by a combiner), and each caller returns only after its own request is
/// applied.
#[test]
fn loom_batch_applies_every_queued_request_once() {
    model(|| {
        let list = Arc::new(InodeList::new(ListMode::Batch));
        // Nodes outlive the model's threads (leaked: loom runs many times).
        let a: &'static Link = Box::leak(Box::new(Link::new()));
        let c: &'static Link = Box::leak(Box::new(Link::new()));
        // SAFETY: fresh node, leaked.
        unsafe { list.add(c) };
        let t = {
            let list = list.clone();
            thread::spawn(move || {
                // SAFETY: fresh node, leaked.
                unsafe { list.add(a) };
                assert!(a.is_listed(), "add returned before it was applied");
            })
        };
        // A scheduling point first, so that loom also runs the other
        // thread's request before this one (without it, the model explores
        // a single interleaving).
        thread::yield_now();
        // SAFETY: `c` was added before the thread started.
        unsafe { list.del(c) };
        assert!(!c.is_listed(), "del returned before it was applied");
        t.join().unwrap();
        assert_eq!(listed(&list), vec![a as *const Link as usize]);
    });
}

/// Two adds at once, neither thread ever the combiner for the other by
/// design: the one that queues behind a busy lock must be applied and
/// woken, however the holder's release interleaves with its parking. A
/// combiner that released the lock with a request queued after its last
/// look, and woke nobody, left that request's owner asleep for good (loom
/// reports the deadlock; the parking lot under loom really sleeps).
#[test]
fn loom_batch_a_waiter_parked_behind_the_holder_is_woken() {
    adds_racing(2, false);
}

/// `n` threads add a node each while, with `with_len`, another counts the
/// list. With one request per batch under loom, this reaches a request
/// pushed back for the next combiner, a waiter that becomes the combiner,
/// and the hand-off at the release of each (`len`'s too). Each add returns
/// only once applied, and the list ends with every node once. Without the
/// hand-off in the waiter-turned-combiner's release, three adds deadlock;
/// without it in `len`'s, two adds and a `len` do (a reviewer checked both).
fn adds_racing(n: usize, with_len: bool) {
    model(move || {
        let list = Arc::new(InodeList::new(ListMode::Batch));
        let nodes: Vec<&'static Link> = (0..n).map(|_| &*Box::leak(Box::new(Link::new()))).collect();
        let mut threads = Vec::new();
        for &a in &nodes[1..] {
            let list = list.clone();
            threads.push(thread::spawn(move || {
                // SAFETY: fresh node, leaked.
                unsafe { list.add(a) };
                assert!(a.is_listed(), "add returned before it was applied");
            }));
        }
        if with_len {
            let list = list.clone();
            threads.push(thread::spawn(move || {
                let _ = list.len();
            }));
        }
        // SAFETY: fresh node, leaked.
        unsafe { list.add(nodes[0]) };
        assert!(nodes[0].is_listed(), "add returned before it was applied");
        for t in threads {
            t.join().unwrap();
        }
        let mut want: Vec<usize> = nodes.iter().map(|a| *a as *const Link as usize).collect();
        want.sort_unstable();
        assert_eq!(listed(&list), want);
    });
}

#[test]
fn loom_batch_three_adds_each_applied_once_and_woken() {
    adds_racing(3, false);
}

#[test]
fn loom_batch_two_adds_and_a_count_each_woken() {
    adds_racing(2, true);
}
