//! A table from numbers to what they number, for numbers handed out a
//! chunk at a time: memfs's inode table. Written by hand, because it is the
//! product (the inode table of a filesystem that owns its inodes, next to
//! the dcache's and memfs's directory indexes).
//!
//! # Layout
//!
//! One leaf per chunk of `C` numbers: a slot per number, and the count of
//! the chunk's numbers not yet finished. Leaves are found by chunk number
//! in an RCU index ([`Index`]); the leaf a thread shard is filling is also
//! named by that shard's hint, which an insert or a remove in the same
//! chunk reads instead of probing the index.
//!
//! # Why not a hash of every number
//!
//! Until 2026-11-29 memfs's inodes were the entries of a sharded [`Index`]
//! keyed by number. A create locked a home, claimed a slot, inserted and
//! counted itself: seven atomic read-modify-writes and about 440
//! instructions. An unlink did the same backwards, and looked for a
//! resize: eleven and about 650. But a number is its creator's alone from
//! the moment it is handed out, so its slot needs no lock: here an insert
//! is one store, and a remove one store and one decrement.
//!
//! # Protocol
//!
//! - **Numbers.** A number is *unfinished* from the moment its owner hands
//!   it out until its entry is removed. The owner says, at each insert,
//!   how many numbers of the chunk it will insert and remove (`expect`,
//!   the same at every insert of a chunk): the leaf is made with that
//!   count, at the chunk's first insert, under the index's home lock (so
//!   once). Each remove decrements it. The remove that takes it to 0 takes
//!   the leaf out of the index, clears the hint that names it, and retires
//!   it through RCU. So a leaf lives while any of its numbers is
//!   unfinished: an inserter and a remover each hold one, which keeps the
//!   leaf they write; a reader holds a read section.
//! - **Slots.** `null -> entry` by its number's inserter (Release), `entry
//!   -> null` by its remover. A reader loads a slot (Acquire) and checks
//!   what it found (an inode's dead mark): a remove is not ordered before
//!   a reader's load.
//! - **Hints.** `hints[chunk % HINTS]` (for memfs's chunks, the shard that
//!   fills the chunk) names a leaf, or nothing. Whoever reads a hint
//!   compares the leaf's chunk with its own before using it, in a read
//!   section, so a hint to another leaf costs a probe, never a wrong
//!   answer. An inserter stores the hint before it publishes its entry;
//!   the leaf's last remover clears it (a CAS from the leaf) after taking
//!   the leaf out of the index. Every hint store of a leaf happens before
//!   that CAS (each remover learnt of its entry from the inserter's slot
//!   store or what followed it, and the last remover's decrement acquires
//!   every earlier one), so the CAS reads the last such store or a later
//!   value, and no hint names the leaf once it is retired.
//!
//! The numbers are the owner's own, not a caller's: nobody chooses them,
//! so nobody can make a chunk's leaf sparse on purpose. A chunk whose
//! entries mostly went keeps its leaf (`8 * C` bytes) until the last goes.

use std::ptr;

use super::atomic::{preemption_point, AtomicPtr, AtomicU32, Ordering};
use super::index::{Index, Indexed, InsertError, Probe};
use super::shard::{Padded, THREAD_SHARDS};
use super::{Rcu, RcuGuard};

/// Hints: one per thread shard that fills chunks (under loom, two).
const HINTS: usize = if cfg!(loom) { 2 } else { THREAD_SHARDS };

/// The leaf of one chunk.
#[repr(C, align(64))]
struct Leaf<T, const C: usize> {
    chunk: u64,
    /// The chunk's numbers not yet finished.
    unfinished: AtomicU32,
    slots: [AtomicPtr<T>; C],
}

/// The key of a chunk in the index of leaves (a multiplicative mix: the
/// index's homes are its top bits).
#[inline]
fn chunk_hash(chunk: u64) -> u64 {
    let x = chunk.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x ^ (x >> 29)).wrapping_mul(0x94d0_49bb_1331_11eb) | 1
}

impl<T, const C: usize> Indexed for Leaf<T, C> {
    fn index_hash(&self) -> u64 {
        chunk_hash(self.chunk)
    }
}

impl<T, const C: usize> Leaf<T, C> {
    fn new(chunk: u64, unfinished: u32) -> *mut Self {
        #[cfg(not(loom))]
        {
            let mut b = Box::<Self>::new_zeroed();
            let p = b.as_mut_ptr();
            // SAFETY: `p` is the box's, allocated and zeroed; the atomics
            // are valid zeroed (null pointers), and the two fields written
            // here are the rest.
            unsafe {
                ptr::addr_of_mut!((*p).chunk).write(chunk);
                ptr::addr_of_mut!((*p).unfinished).write(AtomicU32::new(unfinished));
                Box::into_raw(b.assume_init())
            }
        }
        #[cfg(loom)]
        Box::into_raw(Box::new(Leaf {
            chunk,
            unfinished: AtomicU32::new(unfinished),
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }))
    }
}

/// The table: numbers to `*const T`, in chunks of `C`. It does not own
/// the entries.
pub struct ChunkMap<T, const C: usize> {
    leaves: Index<Leaf<T, C>>,
    hints: Box<[Padded<AtomicPtr<Leaf<T, C>>>]>,
}

// SAFETY: the map hands out `&T` to any thread and stores pointers any
// thread inserted: `T: Sync` covers both; leaves are its own.
unsafe impl<T: Sync, const C: usize> Send for ChunkMap<T, C> {}
// SAFETY: as above.
unsafe impl<T: Sync, const C: usize> Sync for ChunkMap<T, C> {}

impl<T: Sync + Send + 'static, const C: usize> Default for ChunkMap<T, C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Sync + Send + 'static, const C: usize> ChunkMap<T, C> {
    pub fn new() -> Self {
        ChunkMap { leaves: Index::new(), hints: (0..HINTS).map(|_| Padded(AtomicPtr::new(ptr::null_mut()))).collect() }
    }

    #[inline]
    fn hint(&self, chunk: u64) -> &AtomicPtr<Leaf<T, C>> {
        &self.hints[chunk as usize % HINTS]
    }

    /// The leaf of `chunk`, if it has one; the caller is in a read section.
    #[inline]
    fn leaf<'g>(&'g self, guard: &'g RcuGuard<'_>, chunk: u64) -> Option<&'g Leaf<T, C>> {
        // Acquire: pairs with the Release store of the hint (the leaf's
        // fields were written before it was shared).
        let h = self.hint(chunk).load(Ordering::Acquire);
        // SAFETY: a hinted leaf is retired only after its hint is cleared,
        // and we are in a read section (`guard`).
        if let Some(l) = unsafe { h.as_ref() } {
            if l.chunk == chunk {
                return Some(l);
            }
        }
        self.leaves.find(guard, chunk_hash(chunk), |l| if l.chunk == chunk { Probe::Stop(l) } else { Probe::Skip })
    }

    /// What number `n` names now, if anything (the caller checks that it
    /// is still live, as with any RCU read).
    #[inline]
    pub fn get<'g>(&'g self, guard: &'g RcuGuard<'_>, n: u64) -> Option<&'g T> {
        let l = self.leaf(guard, n / C as u64)?;
        // Acquire: pairs with the inserter's Release store.
        let p = l.slots[n as usize % C].load(Ordering::Acquire);
        // SAFETY: entries are freed a grace period after their removal.
        unsafe { p.as_ref() }
    }

    /// Puts `p` in number `n`'s slot.
    ///
    /// # Safety
    /// `n` was handed out by the map's owner, is unfinished, and was never
    /// inserted; `expect` is the number of its chunk's numbers the owner
    /// inserts and removes, the same at every insert in the chunk; `p`
    /// stays valid until a grace period after its removal.
    pub unsafe fn insert(&self, n: u64, p: *const T, expect: u32, rcu: &Rcu) {
        debug_assert!(expect as usize <= C && expect > 0);
        let chunk = n / C as u64;
        let g = rcu.read_lock();
        let l = match self.leaf(&g, chunk) {
            Some(l) => l,
            None => self.make_leaf(chunk, expect, rcu),
        };
        // Before the entry is published (module doc: "Hints"). Only when it
        // changes: the first insert of a chunk, or one after another
        // chunk's insert on the same hint.
        let h = self.hint(chunk);
        if !ptr::eq(h.load(Ordering::Relaxed), l) {
            h.store(l as *const _ as *mut _, Ordering::Release);
        }
        // Lets loom run a reader or a remover between the two stores.
        preemption_point();
        let s = &l.slots[n as usize % C];
        debug_assert!(s.load(Ordering::Relaxed).is_null(), "number {n} inserted twice");
        // Release: a reader that finds `p` sees it whole.
        s.store(p as *mut T, Ordering::Release);
        drop(g);
    }

    /// The leaf of `chunk`, made now unless a racing inserter of the same
    /// chunk made it first. The caller holds an unfinished number of the
    /// chunk (so the leaf stays) and a read section (for the reference).
    #[cold]
    fn make_leaf(&self, chunk: u64, expect: u32, rcu: &Rcu) -> &Leaf<T, C> {
        let hash = chunk_hash(chunk);
        let mut made: *mut Leaf<T, C> = ptr::null_mut();
        let found = loop {
            let mut l = self.leaves.lock(hash, rcu);
            if let Some(p) =
                l.find(hash, |x| if x.chunk == chunk { Probe::Stop(x as *const Leaf<T, C>) } else { Probe::Skip })
            {
                break p;
            }
            if made.is_null() {
                made = Leaf::new(chunk, expect);
            }
            match l.insert(made, hash) {
                Ok(()) => {
                    let p = made as *const Leaf<T, C>;
                    made = ptr::null_mut();
                    break p;
                }
                Err(InsertError::Full) => {
                    drop(l);
                    self.leaves.grow(rcu);
                }
                Err(InsertError::Closed) => unreachable!("a chunk map's index is never closed"),
            }
        };
        if !made.is_null() {
            // SAFETY: never shared.
            drop(unsafe { Box::from_raw(made) });
        }
        // SAFETY: in the index; our unfinished number keeps it there.
        unsafe { &*found }
    }

    /// Empties number `n`'s slot and finishes `n`; the last number of a
    /// chunk retires its leaf. Returns the entry's pointer as inserted
    /// (the one to free it by).
    ///
    /// # Safety
    /// `n` was inserted and not removed since; the caller removes it once.
    pub unsafe fn remove(&self, n: u64, rcu: &Rcu) -> *mut T {
        let chunk = n / C as u64;
        let g = rcu.read_lock();
        let Some(l) = self.leaf(&g, chunk) else {
            unreachable!("number {n} is not in the map");
        };
        let s = &l.slots[n as usize % C];
        // Only this number's inserter and remover write its slot: a load
        // and a store, not a swap.
        let e = s.load(Ordering::Relaxed);
        debug_assert!(!e.is_null(), "number {n} removed twice");
        s.store(ptr::null_mut(), Ordering::Release);
        // AcqRel: the last decrement sees every earlier remove, and with
        // them every hint store (module doc).
        if l.unfinished.fetch_sub(1, Ordering::AcqRel) == 1 {
            let p = l as *const Leaf<T, C>;
            drop(g);
            self.retire_leaf(p, chunk, rcu);
        }
        e
    }

    #[cold]
    fn retire_leaf(&self, p: *const Leaf<T, C>, chunk: u64, rcu: &Rcu) {
        let hash = chunk_hash(chunk);
        let owned = self.leaves.lock(hash, rcu).take(p, hash);
        let _ = self.hint(chunk).compare_exchange(p as *mut _, ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed);
        self.leaves.shrink_if_sparse(rcu);
        let owned = owned.expect("a finished leaf is in the index");
        // SAFETY: out of the index and off its hint: only readers that
        // reached it earlier can see it, and they are waited out.
        unsafe { rcu.retire_box(owned) };
    }

    /// Every entry (a snapshot of no instant: one present throughout is
    /// seen once).
    pub fn for_each<'g>(&'g self, guard: &'g RcuGuard<'_>, mut f: impl FnMut(&'g T)) {
        self.leaves.for_each(guard, |l| {
            for s in &l.slots {
                // SAFETY: as in `get`.
                if let Some(e) = unsafe { s.load(Ordering::Acquire).as_ref() } {
                    f(e)
                }
            }
        })
    }

    /// Empties the map now, calling `f` on every entry it held.
    ///
    /// # Safety
    /// Nothing can reach the map any more, not even an RCU reader.
    pub unsafe fn drain_now(&self, mut f: impl FnMut(*const T)) {
        for h in self.hints.iter() {
            h.store(ptr::null_mut(), Ordering::Relaxed);
        }
        // SAFETY: the caller's contract.
        unsafe {
            self.leaves.drain_now(|l| {
                let leaf = Box::from_raw(l);
                for s in &leaf.slots {
                    let e = s.load(Ordering::Relaxed);
                    if !e.is_null() {
                        f(e)
                    }
                }
            })
        };
    }

    /// Leaves in the map (statistics and tests).
    pub fn leaves(&self, guard: &RcuGuard<'_>) -> usize {
        self.leaves.len(guard)
    }

    /// Whether every hint names a leaf in the index, or nothing (the loom
    /// models' check that no hint outlives its leaf; compares addresses,
    /// reads no leaf).
    #[cfg(any(test, loom))]
    pub fn hints_name_only_live_leaves(&self, rcu: &Rcu) -> bool {
        let g = rcu.read_lock();
        let mut live = Vec::new();
        self.leaves.for_each_raw(&g, |l| live.push(l as usize));
        self.hints.iter().all(|h| {
            let p = h.load(Ordering::Relaxed);
            p.is_null() || live.contains(&(p as usize))
        })
    }
}

impl<T, const C: usize> Drop for ChunkMap<T, C> {
    fn drop(&mut self) {
        // SAFETY: the map is being dropped: no reader or writer is left.
        // The entries are not the map's.
        unsafe { self.leaves.drain_now(|l| drop(Box::from_raw(l))) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    type Map = ChunkMap<u64, 8>;

    fn entry(n: u64) -> *const u64 {
        Box::into_raw(Box::new(n))
    }

    #[test]
    fn numbers_find_what_was_inserted_and_a_finished_chunk_leaves() {
        let rcu = Rcu::new();
        let m = Map::new();
        let mut es = Vec::new();
        for n in 8..24 {
            let e = entry(n);
            // SAFETY: each number once; two chunks of eight.
            unsafe { m.insert(n, e, 8, &rcu) };
            es.push(e);
        }
        {
            let g = rcu.read_lock();
            for n in 8..24 {
                assert_eq!(m.get(&g, n).copied(), Some(n));
            }
            assert_eq!(m.get(&g, 7), None, "a chunk never filled");
            assert_eq!(m.get(&g, 24), None);
            assert_eq!(m.leaves(&g), 2);
        }
        for n in 8..16 {
            // SAFETY: inserted above, removed once.
            assert_eq!(unsafe { *m.remove(n, &rcu) }, n, "the entry comes back");
            let g = rcu.read_lock();
            assert_eq!(m.get(&g, n), None, "{n} removed");
            assert_eq!(m.leaves(&g), if n < 15 { 2 } else { 1 }, "a leaf goes with its last number, not before");
        }
        let g = rcu.read_lock();
        let mut seen = Vec::new();
        m.for_each(&g, |e| seen.push(*e));
        seen.sort();
        assert_eq!(seen, (16..24).collect::<Vec<_>>());
        drop(g);
        let mut drained = 0;
        // SAFETY: nothing else reaches the map.
        unsafe { m.drain_now(|_| drained += 1) };
        assert_eq!(drained, 8);
        for e in es {
            // SAFETY: ours, and out of the map.
            drop(unsafe { Box::from_raw(e as *mut u64) });
        }
    }

    #[test]
    fn a_chunk_expecting_fewer_numbers_leaves_with_its_last() {
        let rcu = Rcu::new();
        let m = Map::new();
        // SAFETY: the only number its owner uses in chunk 0.
        unsafe { m.insert(1, entry(1), 1, &rcu) };
        assert_eq!(m.leaves(&rcu.read_lock()), 1);
        // SAFETY: inserted above.
        let e = unsafe { m.remove(1, &rcu) };
        assert_eq!(m.leaves(&rcu.read_lock()), 0);
        // SAFETY: out of the map.
        drop(unsafe { Box::from_raw(e) });
    }

    #[test]
    fn threads_filling_chunks_of_their_own_and_removing_them_leave_nothing() {
        let rcu = Rcu::new();
        let m = Map::new();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (m, rcu) = (&m, &rcu);
                s.spawn(move || {
                    // Chunks t, t + 4, t + 8, ...: four shards' worth, each
                    // filled by one thread, removed in another order.
                    let nums: Vec<u64> = (0..32u64).flat_map(|k| (k * 4 + t) * 8..(k * 4 + t + 1) * 8).collect();
                    for &n in &nums {
                        // SAFETY: each number once; chunks of eight.
                        unsafe { m.insert(n, entry(n), 8, rcu) };
                    }
                    for &n in nums.iter().rev() {
                        let g = rcu.read_lock();
                        assert_eq!(m.get(&g, n).copied(), Some(n));
                        drop(g);
                        // SAFETY: inserted above; removed once.
                        let e = unsafe { m.remove(n, rcu) };
                        // SAFETY: out of the map; a grace period would be
                        // needed for readers, and no other thread reads
                        // this thread's numbers.
                        unsafe { rcu.retire_box(e) };
                    }
                });
            }
        });
        assert_eq!(m.leaves(&rcu.read_lock()), 0);
    }
}

/// loom models of the map's protocol (module doc): numbers of one chunk
/// inserted and removed by several threads, a reader by number, and the
/// leaf's retirement. Chunks of four numbers, two hints.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::atomic::{loom_model as model, until_done, AtomicBool};
    use loom::sync::Arc;
    use loom::thread;

    type Map = ChunkMap<u64, 4>;

    fn entry(n: u64) -> *const u64 {
        Box::into_raw(Box::new(n))
    }

    fn get(m: &Map, rcu: &Rcu, n: u64) -> Option<u64> {
        let g = rcu.read_lock();
        m.get(&g, n).copied()
    }

    /// Two threads fill one chunk (its owner inserts two of its numbers),
    /// each finds its own entry and removes it, while a third looks its
    /// number up: every insert lands in the chunk's one leaf, the leaf
    /// goes with the last remove, once, and no hint names it afterwards.
    #[test]
    fn loom_two_inserters_of_a_chunk_share_its_leaf_and_the_last_remove_retires_it() {
        model(|| {
            let rcu = Arc::new(Rcu::new());
            let m = Arc::new(Map::new());
            let ts: Vec<_> = [4u64, 5]
                .into_iter()
                .map(|n| {
                    let (m, rcu) = (m.clone(), rcu.clone());
                    thread::spawn(move || {
                        // SAFETY: each number once; two per chunk.
                        unsafe { m.insert(n, entry(n), 2, &rcu) };
                        assert_eq!(get(&m, &rcu, n), Some(n), "an inserted number is not found");
                        // SAFETY: inserted above; removed once. The entry
                        // goes through RCU: the reader may hold it.
                        unsafe { rcu.retire_box(m.remove(n, &rcu)) };
                    })
                })
                .collect();
            if let Some(v) = get(&m, &rcu, 4) {
                assert_eq!(v, 4, "a number found another's entry");
            }
            for t in ts {
                t.join().unwrap();
            }
            assert_eq!(m.leaves(&rcu.read_lock()), 0, "a finished chunk kept its leaf");
            assert!(m.hints_name_only_live_leaves(&rcu), "a hint names a retired leaf");
        });
    }

    /// The chunk's one number, inserted by one thread and removed by
    /// another that found it by number (if it never did, the model removes
    /// it at the end): the remove retires the leaf, and no hint names it
    /// afterwards. Fails without the retirement's CAS of the hint. (With
    /// the insert's hint store moved after its slot store, the bug the
    /// module doc rules out, it passes: the remover would have to run
    /// from its find to its CAS between the inserter's two stores, and the
    /// index's remove yields to loom on the way, which then finishes the
    /// insert first.)
    #[test]
    fn loom_a_hint_does_not_outlive_its_leaf() {
        model(|| {
            let rcu = Arc::new(Rcu::new());
            let m = Arc::new(Map::new());
            let done = Arc::new(AtomicBool::new(false));
            let inserter = {
                let (m, rcu, done) = (m.clone(), rcu.clone(), done.clone());
                thread::spawn(move || {
                    // SAFETY: the chunk's one number.
                    unsafe { m.insert(9, entry(9), 1, &rcu) };
                    done.store(true, std::sync::atomic::Ordering::Release);
                })
            };
            let remover = {
                let (m, rcu) = (m.clone(), rcu.clone());
                thread::spawn(move || {
                    // Tries until the insert is over: with one try, loom
                    // runs it before or after the insert, never inside.
                    until_done(&done, || {
                        let found = get(&m, &rcu, 9).is_some();
                        if found {
                            // SAFETY: inserted (found), removed once: here.
                            unsafe { rcu.retire_box(m.remove(9, &rcu)) };
                        }
                        found
                    })
                })
            };
            inserter.join().unwrap();
            if !remover.join().unwrap() {
                // SAFETY: inserted, and not removed by the remover.
                unsafe { rcu.retire_box(m.remove(9, &rcu)) };
            }
            assert_eq!(m.leaves(&rcu.read_lock()), 0);
            assert!(m.hints_name_only_live_leaves(&rcu), "a hint names a retired leaf");
        });
    }
}
