//! Multi-threaded stress: lookups of names that exist for the whole call
//! are never reported missing while other threads rename siblings, move
//! directories between parents, create and unlink; and a create or unlink
//! published with Release/Acquire is seen by the next lookup of another
//! thread.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use common::scaled;
use rcuvfs::{Layout, RefMode, RenameFlags, Vfs};

#[test]
fn a_stable_name_is_never_reported_missing() {
    for mode in RefMode::ALL {
        for layout in Layout::ALL {
            stable_names_under_a_rename_storm(mode, layout, 1 << 20);
        }
    }
    // And with the shrinker busy: a target smaller than the tree, so that
    // dentries are evicted and found again while the storm runs.
    for mode in [RefMode::RcuWalk, RefMode::NoRefs] {
        stable_names_under_a_rename_storm(mode, Layout::Split, 32);
    }
}

fn stable_names_under_a_rename_storm(mode: RefMode, layout: Layout, target: usize) {
    let v = Vfs::builder().mode(mode).layout(layout).hash_buckets(16).dcache_target(target).build().unwrap();
    for d in ["/s", "/s/deep", "/s/deep/er", "/m", "/m/p1", "/m/p2", "/m/p1/moving"] {
        v.create_dir(d).unwrap();
    }
    let stable: Vec<String> =
        (0..8).map(|i| format!("/s/stable{i}")).chain((0..4).map(|i| format!("/s/deep/er/leaf{i}"))).collect();
    for p in &stable {
        v.write(p, b"x").unwrap();
    }
    for i in 0..8 {
        v.write(format!("/s/r{i}"), b"r").unwrap();
        v.write(format!("/s/deep/er/r{i}"), b"r").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let false_negatives = Arc::new(AtomicU64::new(0));
    let lookups = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    // Renamers: siblings of the stable names, back and forth.
    for t in 0..2 {
        let (v, stop) = (v.clone(), stop.clone());
        workers.push(thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) || n < 10 {
                for i in (t..8).step_by(2) {
                    for dir in ["/s", "/s/deep/er"] {
                        v.rename(format!("{dir}/r{i}"), format!("{dir}/r{i}.moved")).unwrap();
                        v.rename(format!("{dir}/r{i}.moved"), format!("{dir}/r{i}")).unwrap();
                    }
                }
                n += 1;
            }
        }));
    }
    // A mover of a whole directory between parents, and a creator/unlinker.
    {
        let (v, stop) = (v.clone(), stop.clone());
        workers.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                v.rename("/m/p1/moving", "/m/p2/moving").unwrap();
                v.rename("/m/p2/moving", "/m/p1/moving").unwrap();
                v.write("/s/tmp", b"t").unwrap();
                v.rename_with("/s/tmp", "/s/r0", RenameFlags::NOREPLACE).ok();
                v.remove_file("/s/tmp").ok();
            }
        }));
    }
    // Readers.
    let barrier = Arc::new(Barrier::new(3));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (v, stable, fnn, lookups, barrier) =
                (v.clone(), stable.clone(), false_negatives.clone(), lookups.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                // RCUVFS_TORTURE_LOOKUPS sets the total for a long campaign
                // (README: at least 10 million).
                let rounds = std::env::var("RCUVFS_TORTURE_LOOKUPS")
                    .ok()
                    .and_then(|v| v.parse::<usize>().ok())
                    .map_or(scaled(5_000), |n| n / 2 / 12 + 1);
                for _ in 0..rounds {
                    for p in &stable {
                        if v.metadata(p).is_err() {
                            fnn.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    lookups.fetch_add(stable.len() as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    barrier.wait();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(lookups.load(Ordering::Relaxed) > 0);
    assert_eq!(false_negatives.load(Ordering::Relaxed), 0, "{mode:?} {layout:?}");
    // The storm left the tree as it started.
    for i in 0..8 {
        assert_eq!(v.read(format!("/s/r{i}")).unwrap(), b"r");
    }
    assert!(v.metadata("/m/p1/moving").unwrap().is_dir());
}

#[test]
fn published_creates_and_unlinks_are_seen_at_once() {
    for mode in RefMode::ALL {
        visibility(mode);
    }
}

fn visibility(mode: RefMode) {
    let v = Vfs::builder().mode(mode).build().unwrap();
    v.create_dir("/vis").unwrap();
    let rounds = scaled(5_000);
    // Round r creates (odd r) or unlinks (even r) /vis/f{(r-1)/2 % 4} and
    // then publishes r; the reader checks the name against the last round
    // it saw.
    let published = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let wrong = Arc::new(AtomicU64::new(0));
    let checked = Arc::new(AtomicU64::new(0));
    let writer = {
        let (v, published, started) = (v.clone(), published.clone(), started.clone());
        thread::spawn(move || {
            for r in 1..=rounds {
                started.store(r, Ordering::SeqCst);
                let name = format!("/vis/f{}", (r - 1) / 2 % 4);
                if r % 2 == 1 {
                    v.write(&name, b"").unwrap();
                } else {
                    v.remove_file(&name).unwrap();
                }
                published.store(r, Ordering::Release);
            }
        })
    };
    let reader = {
        let (v, published, started, wrong, checked) =
            (v.clone(), published.clone(), started.clone(), wrong.clone(), checked.clone());
        thread::spawn(move || loop {
            let r = published.load(Ordering::Acquire);
            if r == 0 {
                continue;
            }
            let name = format!("/vis/f{}", (r - 1) / 2 % 4);
            let exists = v.metadata(&name).is_ok();
            // Round r created (odd) or removed (even) this name; if round
            // r+1 had not started when the lookup ended, the lookup saw
            // round r. (The writer announces a round before it starts, so
            // a lookup that saw round r+1's change sees the announcement.)
            let still = started.load(Ordering::SeqCst) == r;
            if still {
                checked.fetch_add(1, Ordering::Relaxed);
                if exists != (r % 2 == 1) {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
            if r == rounds {
                break;
            }
        })
    };
    writer.join().unwrap();
    reader.join().unwrap();
    assert!(checked.load(Ordering::Relaxed) > 0, "no lookup was checked");
    assert_eq!(wrong.load(Ordering::Relaxed), 0, "{mode:?}");
}

/// Past the dcache target every lookup asks memfs again (a name pruned,
/// then found again: memfs hands the VFS its inode, `lookup_bound`). With
/// a target far below the tree, readers stat names that always exist
/// while a churner unlinks and recreates others in the same directories
/// and renames one back and forth: every stat must find its file, with
/// its own size, and every pruned name come back as what it was.
#[test]
fn names_pruned_from_the_dcache_are_found_again_right() {
    let v = Vfs::builder().dcache_target(64).build().unwrap();
    let dirs = 8;
    let per = if cfg!(miri) { 8 } else { 250 };
    for d in 0..dirs {
        v.create_dir(format!("/d{d}")).unwrap();
        for f in 0..per {
            v.write(format!("/d{d}/stable{f}"), vec![b's'; f % 17]).unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churner = {
        let (v, stop) = (v.clone(), stop.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let d = n % 8;
                v.write(format!("/d{d}/churn"), b"c").unwrap();
                v.rename(format!("/d{d}/churn"), format!("/d{d}/churned")).unwrap();
                v.remove_file(format!("/d{d}/churned")).unwrap();
                n += 1;
            }
        })
    };
    let wrong = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (v, wrong) = (v.clone(), wrong.clone());
            thread::spawn(move || {
                for round in 0..scaled(4) {
                    for d in 0..dirs {
                        for f in (t..per).step_by(2) {
                            match v.metadata(format!("/d{d}/stable{f}")) {
                                Ok(m) if m.is_file() && m.len() == (f % 17) as u64 => {}
                                _ => {
                                    wrong.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        if v.metadata(format!("/d{d}/never{round}")).is_ok() {
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().unwrap();
    assert_eq!(wrong.load(Ordering::Relaxed), 0, "wrong answers for names the dcache pruned");
    let cached = v.stats().dentries;
    assert!(cached < (dirs * per) as i64 / 4, "{cached} dentries: the target did not prune");
}

/// A thousand threads start at once, each creates and unlinks files in a
/// directory of its own and exits; then the `Vfs` drops. Its drop waits for
/// every object retired before it (`Rcu::barrier`), so a retired batch left
/// in an exited thread's seize slot hung it for good: the handing thread
/// padded for the highest thread id seen, a thread that had just become
/// active with a higher one made the attempt fail, and the batch stayed
/// where no thread would flush it (2 of 4 runs of `bench create-private
/// --threads 1000` hung in the drop). A watchdog turns a hang into a
/// failure; no time is measured. Not with the `tsan` feature: its RCU
/// stand-in has no seize batches, and the sanitizer would run 4,000 threads.
#[test]
#[cfg(not(feature = "tsan"))]
fn a_vfs_outlives_a_thousand_threads_that_come_and_go() {
    let rounds = if cfg!(miri) { 1 } else { 4 };
    let threads = if cfg!(miri) { 4 } else { 1000 };
    let (done, waited) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for round in 0..rounds {
            let v = Vfs::new();
            let stop = Arc::new(AtomicBool::new(false));
            // Started one after another, as a program starts them: the
            // first work while the last enter for the first time.
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (v, stop) = (v.clone(), stop.clone());
                    thread::spawn(move || {
                        let dir = format!("/t{t}");
                        v.create_dir(&dir).unwrap();
                        let mut i = 0;
                        while i < 16 || !stop.load(Ordering::Relaxed) {
                            let p = format!("{dir}/f{}", i % 8);
                            v.write(&p, b"x").unwrap();
                            v.remove_file(&p).unwrap();
                            i += 1;
                        }
                    })
                })
                .collect();
            stop.store(true, Ordering::Relaxed);
            for w in workers {
                w.join().unwrap();
            }
            drop(v);
            done.send(round).unwrap();
        }
    });
    for round in 0..rounds {
        match waited.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(r) => assert_eq!(r, round),
            Err(e) => panic!("round {round}: the Vfs's drop did not return ({e:?})"),
        }
    }
}
