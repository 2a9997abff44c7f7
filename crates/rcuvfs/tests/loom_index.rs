//! loom models of the RCU index (`sync::index`): run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --release --test loom_index`.
//! Tables start at four homes, so a few inserts force a resize.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use rcuvfs::sync::atomic::loom_model as model;
use rcuvfs::sync::index::{Index, Indexed, InsertError, Probe};
use rcuvfs::sync::Rcu;

struct E {
    key: u64,
    hash: u64,
}

impl Indexed for E {
    fn index_hash(&self) -> u64 {
        self.hash
    }
}

/// Hashes spread over the four homes of the first table (top bits), and
/// tags that differ.
fn h(key: u64) -> u64 {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !0xffff) | key << 48 | 1
}

fn entry(key: u64) -> usize {
    Box::into_raw(Box::new(E { key, hash: h(key) })) as usize
}

fn insert(ix: &Index<E>, rcu: &Rcu, p: usize) -> bool {
    // SAFETY: entries are leaked for the model's length.
    let e = unsafe { &*(p as *const E) };
    loop {
        let mut l = ix.lock(e.hash, rcu);
        if l.find(e.hash, |x| if x.key == e.key { Probe::Stop(()) } else { Probe::Skip }).is_some() {
            return false; // already there
        }
        match l.insert(p as *const E, e.hash) {
            Ok(()) => return true,
            Err(InsertError::Full) => {
                drop(l);
                ix.grow(rcu);
            }
            Err(InsertError::Closed) => unreachable!(),
        }
    }
}

fn present(ix: &Index<E>, rcu: &Rcu, key: u64) -> bool {
    let g = rcu.read_lock();
    ix.find(&g, h(key), |x| if x.key == key { Probe::Stop(()) } else { Probe::Skip }).is_some()
}

/// A lookup of a key that is in the index throughout finds it while an
/// insert resizes the table under it (the reader either keeps the old,
/// frozen table or loads the complete new one).
#[test]
fn loom_lookup_vs_resize() {
    model(|| {
        let rcu = Arc::new(Rcu::new());
        let ix = Arc::new(Index::<E>::new());
        for k in 1..=3 {
            assert!(insert(&ix, &rcu, entry(k)));
        }
        let writer = {
            let (ix, rcu) = (ix.clone(), rcu.clone());
            thread::spawn(move || assert!(insert(&ix, &rcu, entry(4))))
        };
        let reader = {
            let (ix, rcu) = (ix.clone(), rcu.clone());
            thread::spawn(move || {
                assert!(present(&ix, &rcu, 2), "a stable key missed during a resize");
            })
        };
        writer.join().unwrap();
        reader.join().unwrap();
        for k in 1..=4 {
            assert!(present(&ix, &rcu, k));
        }
    });
}

/// Two inserts of one key under its home lock: exactly one lands.
#[test]
fn loom_same_key_inserted_once() {
    model(|| {
        let rcu = Arc::new(Rcu::new());
        let ix = Arc::new(Index::<E>::new());
        assert!(insert(&ix, &rcu, entry(1)));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let (ix, rcu) = (ix.clone(), rcu.clone());
                thread::spawn(move || insert(&ix, &rcu, entry(7)))
            })
            .collect();
        let wins: usize = ts.into_iter().map(|t| t.join().unwrap() as usize).sum();
        assert_eq!(wins, 1);
        assert_eq!(ix.len(&rcu.read_lock()), 2);
    });
}

/// A remove racing an insert that resizes: the removed key is gone
/// afterwards, every other is there, and the counts agree.
#[test]
fn loom_remove_vs_resize() {
    model(|| {
        let rcu = Arc::new(Rcu::new());
        let ix = Arc::new(Index::<E>::new());
        let victim = entry(2);
        for p in [entry(1), victim, entry(3)] {
            assert!(insert(&ix, &rcu, p));
        }
        let remover = {
            let (ix, rcu) = (ix.clone(), rcu.clone());
            thread::spawn(move || {
                let mut l = ix.lock(h(2), &rcu);
                assert!(l.remove(victim as *const E, h(2)));
            })
        };
        let inserter = {
            let (ix, rcu) = (ix.clone(), rcu.clone());
            thread::spawn(move || assert!(insert(&ix, &rcu, entry(4))))
        };
        remover.join().unwrap();
        inserter.join().unwrap();
        assert!(!present(&ix, &rcu, 2));
        for k in [1, 3, 4] {
            assert!(present(&ix, &rcu, k), "key {k} lost");
        }
        assert_eq!(ix.len(&rcu.read_lock()), 3);
    });
}

/// An entry with its home set: `home` in the first table (four homes),
/// and a tag of its own.
fn entry_at(key: u64, home: u64) -> usize {
    Box::into_raw(Box::new(E { key, hash: home << 62 | key << 48 | 1 })) as usize
}

fn insert_entry(ix: &Index<E>, rcu: &Rcu, p: usize) -> Result<(), InsertError> {
    // SAFETY: entries are leaked for the model's length.
    let e = unsafe { &*(p as *const E) };
    loop {
        let mut l = ix.lock(e.hash, rcu);
        match l.insert(p as *const E, e.hash) {
            Err(InsertError::Full) => {
                drop(l);
                ix.grow(rcu);
            }
            r => return r,
        }
    }
}

fn present_entry(ix: &Index<E>, rcu: &Rcu, p: usize) -> bool {
    // SAFETY: as above.
    let e = unsafe { &*(p as *const E) };
    let g = rcu.read_lock();
    ix.find(&g, e.hash, |x| if x.key == e.key { Probe::Stop(()) } else { Probe::Skip }).is_some()
}

/// A remove that vacates its slot (both neighbours empty when it looked)
/// racing two inserts of the home before it: the second insert passes the
/// slot while it is being vacated and claims the one after. It must not
/// end there behind an empty slot (it looks back and moves), or readers
/// from its home would stop at the empty slot and miss it.
#[test]
fn loom_vacate_vs_insert_past_it() {
    model(|| {
        let rcu = Arc::new(Rcu::new());
        let ix = Arc::new(Index::<E>::new());
        let a = entry_at(1, 1);
        assert!(insert_entry(&ix, &rcu, a).is_ok());
        let (y, k) = (entry_at(2, 0), entry_at(3, 0));
        let remover = {
            let (ix, rcu) = (ix.clone(), rcu.clone());
            thread::spawn(move || {
                // SAFETY: leaked for the model's length.
                let h = unsafe { (*(a as *const E)).hash };
                let mut l = ix.lock(h, &rcu);
                assert!(l.remove(a as *const E, h));
            })
        };
        let inserter = {
            let (ix, rcu) = (ix.clone(), rcu.clone());
            thread::spawn(move || {
                assert!(insert_entry(&ix, &rcu, y).is_ok());
                assert!(insert_entry(&ix, &rcu, k).is_ok());
            })
        };
        remover.join().unwrap();
        inserter.join().unwrap();
        assert!(!present_entry(&ix, &rcu, a));
        assert!(present_entry(&ix, &rcu, y), "an entry hidden by a vacated slot");
        assert!(present_entry(&ix, &rcu, k), "an entry hidden by a vacated slot");
        assert_eq!(ix.len(&rcu.read_lock()), 2);
    });
}

/// Closing an index that counts per shard (a removed directory's) racing
/// an insert: either the close counts the entry (NotEmpty, and the entry
/// is in) or the insert sees the close (Closed, and nothing is in), never
/// an entry in a closed index.
#[test]
fn loom_close_empty_vs_sharded_insert() {
    use rcuvfs::sync::index::Close;
    model(|| {
        let rcu = Arc::new(Rcu::new());
        let ix = Arc::new(Index::<E>::new());
        ix.count_per_shard(&rcu);
        let k = entry_at(1, 2);
        let inserter = {
            let (ix, rcu) = (ix.clone(), rcu.clone());
            thread::spawn(move || insert_entry(&ix, &rcu, k))
        };
        let closed = ix.close_empty(&rcu);
        let inserted = inserter.join().unwrap();
        match closed {
            Close::Closed => {
                assert_eq!(inserted, Err(InsertError::Closed), "an insert into a closed index");
                assert!(!present_entry(&ix, &rcu, k));
            }
            Close::NotEmpty => {
                assert_eq!(inserted, Ok(()));
                assert!(present_entry(&ix, &rcu, k));
            }
            Close::AlreadyClosed => unreachable!(),
        }
    });
}
