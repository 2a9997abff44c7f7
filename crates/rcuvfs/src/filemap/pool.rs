//! The page allocator under the page cache, written by hand: tmpfs's pages
//! come from the kernel's page allocator and go back to it the moment a
//! file is truncated or deleted, and rcuvfs's must too, whatever allocator
//! the embedding program uses.
//!
//! A 4 KiB page of file data taken from the global allocator (4 KiB plus a
//! header) sat in the allocator's heap once freed: after writing and
//! deleting a 512 MiB file, the process kept 520 MB resident. Here frames
//! (4 KiB, 4 KiB-aligned) are carved from chunks of [`CHUNK_PAGES`] mapped
//! with `mmap`:
//! - a chunk whose frames are all free is unmapped at once, past a few
//!   such chunks kept mapped, so that files written and deleted over and
//!   over do not map and unmap chunks each time;
//! - free frames of chunks still in use are reused first (they are
//!   resident already); past a bound, those of the highest chunks are
//!   purged (`MADV_DONTNEED`) until half that many are left: the memory
//!   goes back to the system, the address stays, and the frame reads as
//!   zeros when it is next touched.
//!
//! Two bounds, by how frames come back:
//! - a bulk free ([`BULK`] frames or more at once: a large file truncated
//!   or deleted) leaves at most [`SPARE_CHUNKS`] free chunks and
//!   [`SPARE_FRAMES`] resident free frames (16 MiB): its memory goes back
//!   to the system at once;
//! - frees of a few frames (small files deleted, coming back one by one a
//!   grace period late, in bursts) may keep up to [`CHURN_CHUNKS`] chunks
//!   and [`CHURN_FRAMES`] frames (256 MiB): what many threads writing small
//!   files have in flight. With one spare chunk and 4 MiB, two threads
//!   writing small files mapped and unmapped chunks hundreds of times a
//!   second (each map faulting 512 pages in, each unmap and purge a TLB
//!   shootdown of the other core), and 16 threads purged every few
//!   milliseconds frames the next writes faulted in again.
//!
//! So the memory a process keeps resident for freed file data is bounded
//! (`CHURN_FRAMES` plus the shard caches), and deleting a large file hands
//! its memory back as soon as its pages' grace period ends.
//!
//! One lock guards the chunk table. A write takes it once for all the
//! frames it needs, and a truncate or a delete once for all the frames it
//! frees, so its cost is per call, not per page.
//!
//! Small allocations and frees (up to [`SMALL`] frames: a small file
//! written and deleted) go through a per-CPU cache (`shard::cpu`) of up to
//! [`CACHE_MAX`] frames instead (Linux's per-CPU page lists): threads that
//! write small files share no lock and no line, and a frame freed by a
//! thread is reused by it, still warm. Between the caches and the table is
//! a depot of full magazines ([`CACHE_BATCH`] frames each; Bonwick and
//! Adams's magazines, USENIX 2001): a cache that overflows pushes its
//! oldest magazine there, and one that runs dry pops one, each an O(1)
//! step under the depot's lock. Small files are freed where a grace period
//! ends (one thread drains a batch of inodes) and allocated where they are
//! written (every thread), so frames flow from cache to cache all the
//! time: through the chunk table, with its per-frame bit work under the
//! one lock, 16 threads of `bench short` on 16 cores spent 10% of their
//! time spinning for that lock, 4% asleep on it and 5% in the work under
//! it. Only a depot empty (or full, [`DEPOT_MAX`]
//! magazines) reaches the table. The caches and the depot hold at most
//! `SHARDS * CACHE_MAX + DEPOT_MAX * CACHE_BATCH` frames (24 MiB) besides
//! the bounds above, and a bulk free empties the depot into the table, so
//! that the table's lower bound applies to them too.
//!
//! | lock | protects |
//! |------|----------|
//! | `Pool::inner` | the chunk table, the dirty, used and move counts |
//! | `Pool::depot` | the full magazines, their move count |
//! | a shard's cache lock | that shard's cached frames, its op count |
//!
//! Order: `stats` holds every cache's lock, then the depot's, then the
//! table's, for one consistent snapshot; no other path holds two of them:
//! a cache moves frames to or from the depot or the table with its own
//! lock released, and the depot's lock is released before the table's is
//! taken.
//!
//! The reclaimer (`sync::reclaim`) trims what sits unused: a cache that
//! served nothing between two of its visits is emptied into the table,
//! and when neither the depot nor the table moved either, the depot is
//! emptied, the table trimmed to a bulk free's spare chunks and every
//! resident free frame purged
//! ([`Pool::trim_idle`]). The counts it compares are kept under the locks
//! their paths hold anyway.
//!
//! Under loom and Miri frames come from the global allocator instead (no
//! `mmap` there); the page cache above is the same.

#[cfg(not(any(loom, miri)))]
use std::collections::{BTreeSet, HashMap};
use std::ptr::NonNull;

use super::{Frame, PAGE};

/// Frames per chunk (2 MiB).
#[cfg(not(any(loom, miri)))]
pub const CHUNK_PAGES: usize = 512;
#[cfg(not(any(loom, miri)))]
const CHUNK: usize = CHUNK_PAGES * PAGE;
#[cfg(not(any(loom, miri)))]
const WORDS: usize = CHUNK_PAGES / 64;
/// Entirely free chunks kept mapped after a bulk free (8 MiB of addresses;
/// resident only as far as `SPARE_FRAMES` allows).
#[cfg(not(any(loom, miri)))]
pub const SPARE_CHUNKS: usize = 4;
/// The same after frees of a few frames.
#[cfg(not(any(loom, miri)))]
pub const CHURN_CHUNKS: usize = 32;

/// Free frames kept resident after a bulk free (16 MiB).
#[cfg(not(any(loom, miri)))]
pub const SPARE_FRAMES: usize = 4096;
/// The same after frees of a few frames (256 MiB): the small files that
/// wait for a grace period. With 16 threads writing small files on 2
/// cores, a grace period waits for a round of the run queue and that many
/// are in flight: with 64 MiB, and then 128, the pool purged frames the
/// next writes faulted in again (`bench short --threads 16`: 400-480k page
/// faults in 2 s at 64 MiB, 96-165k at 128, 460 at 256). Only frames that
/// came back and were not taken again count, so a program that writes few
/// small files keeps few.
#[cfg(not(any(loom, miri)))]
pub const CHURN_FRAMES: usize = 65536;

/// Frames freed at once that make a bulk free (1 MiB).
#[cfg(not(any(loom, miri)))]
pub const BULK: usize = 256;

/// What a chunk's frames are: `free` bits are frames not in use; `dirty`
/// bits (a subset) are free frames still holding old data (resident).
#[cfg(not(any(loom, miri)))]
#[derive(Default)]
struct Chunk {
    free: [u64; WORDS],
    dirty: [u64; WORDS],
}

#[cfg(not(any(loom, miri)))]
impl Chunk {
    fn fresh() -> Chunk {
        Chunk { free: [u64::MAX; WORDS], dirty: [0; WORDS] }
    }

    fn all_free(&self) -> bool {
        self.free.iter().all(|&w| w == u64::MAX)
    }

    fn any_free(&self) -> bool {
        self.free.iter().any(|&w| w != 0)
    }

    /// Takes a free frame, a resident one (dirty) first, so that spare
    /// resident frames are used up rather than purged while clean ones are
    /// faulted in: (index, whether it must be zeroed).
    fn take(&mut self) -> Option<(usize, bool)> {
        let w = match self.dirty.iter().position(|&w| w != 0) {
            Some(w) => w,
            None => self.free.iter().position(|&w| w != 0)?,
        };
        let pick = if self.dirty[w] != 0 { self.dirty[w] } else { self.free[w] };
        let b = pick.trailing_zeros() as usize;
        self.free[w] &= !(1 << b);
        let dirty = self.dirty[w] & (1 << b) != 0;
        self.dirty[w] &= !(1 << b);
        Some((w * 64 + b, dirty))
    }

    fn dirty_count(&self) -> usize {
        self.dirty.iter().map(|w| w.count_ones() as usize).sum()
    }
}

#[cfg(not(any(loom, miri)))]
#[derive(Default)]
struct Inner {
    /// Every mapped chunk, by base address.
    chunks: HashMap<usize, Chunk>,
    /// Chunks with a free frame (lowest address first: allocation packs
    /// the low chunks, so the high ones empty out and are unmapped).
    partial: BTreeSet<usize>,
    /// Chunks with a dirty free frame: an allocation takes from these
    /// first, so that resident spare frames are used up rather than purged
    /// while clean ones are faulted in elsewhere.
    warm: BTreeSet<usize>,
    /// Entirely free chunks kept mapped, at most `SPARE_CHUNKS`.
    spares: Vec<usize>,
    /// Dirty free frames over all chunks.
    dirty: usize,
    /// Frames in use.
    used: usize,
    /// Allocations and frees it served, ever; and the count at the
    /// reclaimer's last visit (as `Cache::ops`).
    moves: u64,
    seen: u64,
}

/// Frames a cache takes from, or gives back to, the depot (or the chunk
/// table) at a time: a magazine.
#[cfg(not(any(loom, miri)))]
pub const CACHE_BATCH: usize = 64;
/// Frames a shard's cache keeps at most (512 KiB): two magazines, so that
/// a cache that just pushed one out, or just took one in, has a
/// magazine's worth of room either way before it must go to the depot
/// again.
#[cfg(not(any(loom, miri)))]
pub const CACHE_MAX: usize = 2 * CACHE_BATCH;
/// The largest allocation or free the caches serve.
#[cfg(not(any(loom, miri)))]
pub const SMALL: usize = 16;
/// Full magazines the depot keeps at most (16 MiB); past that a cache's
/// overflow goes to the chunk table.
#[cfg(not(any(loom, miri)))]
pub const DEPOT_MAX: usize = 64;

/// What a frame that may hold old data is filled with in debug builds
/// (`alloc_raw`).
#[cfg(debug_assertions)]
const POISON: u8 = 0xA5;

/// A cached frame, and whether it holds old data (must be zeroed).
#[cfg(not(any(loom, miri)))]
type Cached = (NonNull<Frame>, bool);

/// A shard's cache of frames.
#[cfg(not(any(loom, miri)))]
#[derive(Default)]
struct Cache {
    frames: Vec<Cached>,
    /// Allocations and frees it served, ever; and the count at the
    /// reclaimer's last visit. On the cache's own line, under its lock:
    /// telling an idle cache costs the working threads no store of their
    /// own.
    ops: u64,
    seen: u64,
}

/// Full magazines of free frames, `CACHE_BATCH` each, at most
/// `DEPOT_MAX`.
#[cfg(not(any(loom, miri)))]
#[derive(Default)]
struct Depot {
    mags: Vec<Vec<Cached>>,
    /// Pushes and pops, ever; and the count at the reclaimer's last
    /// visit (as `Cache::ops`).
    moves: u64,
    seen: u64,
}

/// The frame allocator.
pub struct Pool {
    #[cfg(not(any(loom, miri)))]
    inner: crate::sync::Mutex<Inner>,
    #[cfg(not(any(loom, miri)))]
    caches: Box<[crate::sync::shard::Padded<crate::sync::Mutex<Cache>>]>,
    #[cfg(not(any(loom, miri)))]
    depot: crate::sync::shard::Padded<crate::sync::Mutex<Depot>>,
    /// Frames handed out (a statistic: Relaxed).
    #[cfg(any(loom, miri))]
    used: std::sync::atomic::AtomicUsize,
}

// SAFETY: the chunk table holds addresses only; frames are handed out to
// one owner each.
unsafe impl Send for Pool {}
// SAFETY: as above; the table is behind a lock.
unsafe impl Sync for Pool {}

/// Bytes the pool has resident or mapped, for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Frames in use by page caches.
    pub used_frames: usize,
    /// Bytes mapped (chunks).
    pub mapped_bytes: usize,
    /// Free frames still resident (not yet purged or unmapped).
    pub dirty_free_frames: usize,
}

impl Pool {
    pub fn new() -> Pool {
        Pool {
            #[cfg(not(any(loom, miri)))]
            inner: crate::sync::Mutex::new(Inner::default()),
            #[cfg(not(any(loom, miri)))]
            caches: (0..crate::sync::shard::SHARDS)
                .map(|_| crate::sync::shard::Padded(crate::sync::Mutex::new(Cache::default())))
                .collect(),
            #[cfg(not(any(loom, miri)))]
            depot: crate::sync::shard::Padded(crate::sync::Mutex::new(Depot::default())),
            #[cfg(any(loom, miri))]
            used: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub fn stats(&self) -> PoolStats {
        #[cfg(not(any(loom, miri)))]
        {
            // Cached frames are free (and resident): not in use. One
            // snapshot, every lock held (caches, depot, table: no other
            // path holds two of them), so that frames moving meanwhile (the
            // reclaimer's trim) are counted once.
            let caches: Vec<_> = self.caches.iter().map(|c| c.0.lock()).collect();
            let depot = self.depot.0.lock();
            let g = self.inner.lock();
            let cached: usize =
                caches.iter().map(|c| c.frames.len()).sum::<usize>() + depot.mags.iter().map(Vec::len).sum::<usize>();
            PoolStats {
                used_frames: g.used - cached,
                mapped_bytes: g.chunks.len() * CHUNK,
                dirty_free_frames: g.dirty + cached,
            }
        }
        #[cfg(any(loom, miri))]
        {
            let used = self.used.load(std::sync::atomic::Ordering::Relaxed);
            PoolStats { used_frames: used, mapped_bytes: used * PAGE, dirty_free_frames: 0 }
        }
    }

    /// `n` zeroed frames, appended to `out`; ENOMEM (and nothing taken)
    /// if the system has no memory to map. (The page cache zeroes what it
    /// must itself: `alloc_raw`.)
    #[cfg(test)]
    pub fn alloc(&self, n: usize, out: &mut Vec<NonNull<Frame>>) -> crate::error::Result<()> {
        let start = out.len();
        let mut raw = Vec::with_capacity(n);
        self.alloc_raw(n, &mut raw)?;
        for (f, dirty) in raw {
            if dirty {
                // SAFETY: a frame we own now, reachable by no one else.
                unsafe { super::zero_frame(f, PAGE) };
            }
            out.push(f);
        }
        debug_assert_eq!(out.len() - start, n);
        Ok(())
    }

    /// `n` frames, each with whether it may hold old data (`true`: its
    /// bytes are anything; `false`: zeros), appended to `out`, for a
    /// caller that zeroes only what it must (a small file's first write
    /// covers the bytes it wrote and needs nothing else zeroed: the rest
    /// of its page is past the end of the file). ENOMEM as `alloc`.
    ///
    /// In debug builds a frame that may hold old data is filled with a
    /// poison pattern, so a test reading a byte its caller forgot to zero
    /// sees it.
    pub fn alloc_raw(&self, n: usize, out: &mut Vec<(NonNull<Frame>, bool)>) -> crate::error::Result<()> {
        #[cfg(all(debug_assertions, not(loom)))]
        let start = out.len();
        #[cfg(not(any(loom, miri)))]
        if n <= SMALL {
            self.alloc_cached(n, out)?;
        } else {
            self.alloc_table(n, out)?;
        }
        #[cfg(any(loom, miri))]
        {
            for _ in 0..n {
                #[cfg(loom)]
                out.push((NonNull::from(Box::leak(Box::new(Frame::stale()))), true));
                #[cfg(not(loom))]
                out.push((NonNull::from(Box::leak(Box::new(Frame::zeroed()))), false));
            }
            self.used.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        #[cfg(all(debug_assertions, not(loom)))]
        for (f, dirty) in &mut out[start..] {
            if *dirty {
                // SAFETY: a frame we own now, PAGE bytes long.
                unsafe { std::ptr::write_bytes(f.as_ptr().cast::<u8>(), POISON, PAGE) };
            }
        }
        Ok(())
    }

    /// A small allocation, from this shard's cache (refilled with a
    /// magazine from the depot, or from the table, when short).
    #[cfg(not(any(loom, miri)))]
    fn alloc_cached(&self, n: usize, out: &mut Vec<(NonNull<Frame>, bool)>) -> crate::error::Result<()> {
        let cache = &self.caches[crate::sync::shard::cpu()].0;
        let mut c = cache.lock();
        c.ops += 1;
        if c.frames.len() < n {
            drop(c);
            let popped = {
                let mut d = self.depot.0.lock();
                d.moves += 1;
                d.mags.pop()
            };
            let fresh = match popped {
                Some(full) => full,
                None => {
                    let mut fresh = Vec::with_capacity(CACHE_BATCH);
                    self.alloc_table(CACHE_BATCH, &mut fresh)?;
                    fresh
                }
            };
            c = cache.lock();
            c.frames.extend(fresh);
        }
        let at = c.frames.len() - n;
        out.extend(c.frames.drain(at..));
        Ok(())
    }

    /// `n` frames from the chunk table, each with whether it holds old
    /// data (`alloc_raw`).
    #[cfg(not(any(loom, miri)))]
    fn alloc_table(&self, n: usize, out: &mut Vec<(NonNull<Frame>, bool)>) -> crate::error::Result<()> {
        {
            let start = out.len();
            let mut g = self.inner.lock();
            g.moves += 1;
            while out.len() - start < n {
                let Some(&base) = g.warm.first().or(g.partial.first()) else {
                    // Mapped and faulted in without the lock (hundreds of
                    // microseconds): others allocate and free meanwhile.
                    drop(g);
                    let Some(base) = map_chunk() else {
                        // Counted as used as they were taken: freeing them
                        // balances.
                        let taken: Vec<_> = out.drain(start..).map(|(f, _)| f).collect();
                        self.free(taken);
                        return crate::error::fail(libc::ENOMEM);
                    };
                    g = self.inner.lock();
                    g.chunks.insert(base, Chunk::fresh());
                    g.partial.insert(base);
                    continue;
                };
                if let Some(k) = g.spares.iter().position(|&s| s == base) {
                    g.spares.swap_remove(k);
                }
                let c = g.chunks.get_mut(&base).expect("a partial chunk is mapped");
                let (mut taken, mut reused) = (0, 0);
                while out.len() - start < n {
                    let Some((i, dirty)) = c.take() else { break };
                    let f = NonNull::new((base + i * PAGE) as *mut Frame).expect("a mapped address");
                    if dirty {
                        reused += 1;
                    }
                    out.push((f, dirty));
                    taken += 1;
                }
                let full = !c.any_free();
                let cold = c.dirty_count() == 0;
                g.dirty -= reused;
                g.used += taken;
                if full {
                    g.partial.remove(&base);
                }
                if cold {
                    g.warm.remove(&base);
                }
            }
            drop(g);
            Ok(())
        }
    }

    /// Returns frames. The caller guarantees no one reads them any more
    /// (their grace period has ended).
    pub fn free(&self, frames: impl IntoIterator<Item = NonNull<Frame>>) {
        #[cfg(not(any(loom, miri)))]
        {
            let frames: Vec<NonNull<Frame>> = frames.into_iter().collect();
            if frames.len() > SMALL {
                return self.free_table(frames);
            }
            let cache = &self.caches[crate::sync::shard::cpu()].0;
            let mut c = cache.lock();
            c.ops += 1;
            c.frames.extend(frames.into_iter().map(|f| (f, true)));
            if c.frames.len() <= CACHE_MAX {
                return;
            }
            // The oldest frames go (allocation takes the newest, warm).
            let full: Vec<Cached> = c.frames.drain(..CACHE_BATCH).collect();
            drop(c);
            let mut depot = self.depot.0.lock();
            depot.moves += 1;
            if depot.mags.len() < DEPOT_MAX {
                depot.mags.push(full);
                return;
            }
            drop(depot);
            self.free_table(full.into_iter().map(|(f, _)| f).collect());
        }
        #[cfg(any(loom, miri))]
        for f in frames {
            // SAFETY: frames come from `Box::leak` in `alloc`, freed once.
            drop(unsafe { Box::from_raw(f.as_ptr()) });
            self.used.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Hands back what frees of small files keep resident, as far as it
    /// sat unused since the last call: the frames of every cache that
    /// served nothing since, and, if no frame went through the depot or
    /// the table since either, the depot and every resident free frame of
    /// the table. For the reclaimer (`sync::reclaim`),
    /// a few times a second: the bounds for churn keep up to 256 MiB for
    /// the next small files, which a program that stopped writing them
    /// would otherwise keep for good.
    pub fn trim_idle(&self) {
        #[cfg(not(any(loom, miri)))]
        {
            let mut frames = Vec::new();
            for c in self.caches.iter() {
                let mut c = c.0.lock();
                if c.ops == c.seen {
                    frames.extend(c.frames.drain(..).map(|(f, _)| f));
                }
                c.seen = c.ops;
            }
            let (depot_idle, parked) = {
                let mut d = self.depot.0.lock();
                let idle = d.moves == d.seen;
                d.seen = d.moves;
                (idle, !d.mags.is_empty())
            };
            let (table_idle, dirty, spares) = {
                let mut g = self.inner.lock();
                let idle = g.moves == g.seen;
                g.seen = g.moves;
                (idle, g.dirty, g.spares.len())
            };
            let idle = depot_idle && table_idle;
            if !idle && frames.is_empty() {
                return;
            }
            if idle && frames.is_empty() && !parked && dirty == 0 && spares <= SPARE_CHUNKS {
                return;
            }
            // Idle caches of a busy pool go to the table as churn; an idle
            // pool's go as a bulk free (the depot empties too, and the
            // lower bounds apply), and then the rest of its resident free
            // frames go too (an idle pool keeps none: the next write
            // faults its frames in).
            self.free_table_as(frames, idle);
            let mut g = self.inner.lock();
            if idle {
                purge(&mut g, 0);
            }
            // The visit's own move through the table is not the
            // program's: the next visit may trim again.
            g.seen = g.moves;
        }
    }

    /// Returns frames to the chunk table.
    #[cfg(not(any(loom, miri)))]
    fn free_table(&self, frames: Vec<NonNull<Frame>>) {
        let bulk = frames.len() >= BULK;
        self.free_table_as(frames, bulk)
    }

    /// Returns frames to the chunk table, under the bounds of a bulk free
    /// or of churn.
    #[cfg(not(any(loom, miri)))]
    fn free_table_as(&self, mut frames: Vec<NonNull<Frame>>, bulk: bool) {
        let (spare_chunks, spare_frames) =
            if bulk { (SPARE_CHUNKS, SPARE_FRAMES) } else { (CHURN_CHUNKS, CHURN_FRAMES) };
        if bulk {
            // The depot's frames are free too: under the lower bound with
            // the rest (a large file's delete hands memory back).
            let spare = std::mem::take(&mut self.depot.0.lock().mags);
            frames.extend(spare.into_iter().flatten().map(|(f, _)| f));
        }
        {
            let mut unmap = Vec::new();
            let mut guard = self.inner.lock();
            let g = &mut *guard;
            g.moves += 1;
            let mut n = 0;
            for f in frames {
                n += 1;
                let addr = f.as_ptr() as usize;
                let base = addr & !(CHUNK - 1);
                let i = (addr - base) / PAGE;
                let c = g.chunks.get_mut(&base).expect("a frame from the pool");
                debug_assert!(c.free[i / 64] & (1 << (i % 64)) == 0, "a frame freed twice");
                c.free[i / 64] |= 1 << (i % 64);
                c.dirty[i / 64] |= 1 << (i % 64);
                g.dirty += 1;
                if c.all_free() && !g.spares.contains(&base) {
                    // Keep a few entirely free chunks; unmap the others.
                    if g.spares.len() >= spare_chunks {
                        g.dirty -= c.dirty_count();
                        g.chunks.remove(&base);
                        g.partial.remove(&base);
                        g.warm.remove(&base);
                        unmap.push(base);
                        continue;
                    }
                    g.spares.push(base);
                }
                g.partial.insert(base);
                g.warm.insert(base);
            }
            g.used -= n;
            if g.spares.len() > spare_chunks {
                // A bulk free after churn: back to the lower bound.
                let gone: Vec<usize> = g.spares.drain(spare_chunks..).collect();
                for base in gone {
                    let c = g.chunks.remove(&base).expect("a spare chunk is mapped");
                    g.dirty -= c.dirty_count();
                    g.partial.remove(&base);
                    g.warm.remove(&base);
                    unmap.push(base);
                }
            }
            if g.dirty > spare_frames {
                purge(g, spare_frames / 2);
            }
            drop(guard);
            for base in unmap {
                // SAFETY: a chunk we mapped, with no frame in use.
                unsafe { libc::munmap(base as *mut libc::c_void, CHUNK) };
            }
        }
    }
}

impl Default for Pool {
    fn default() -> Self {
        Self::new()
    }
}

/// Hands dirty free frames back to the system (`MADV_DONTNEED`, one call
/// per run of adjacent frames), highest chunks first (allocation takes the
/// lowest), until `keep` are left; they stay free, now clean.
#[cfg(not(any(loom, miri)))]
fn purge(g: &mut Inner, keep: usize) {
    let mut bases: Vec<usize> = g.chunks.keys().copied().collect();
    bases.sort_unstable_by(|a, b| b.cmp(a));
    for base in bases {
        if g.dirty <= keep {
            return;
        }
        let c = g.chunks.get_mut(&base).expect("listed above");
        g.dirty -= c.dirty_count();
        g.warm.remove(&base);
        let mut i = 0;
        while i < CHUNK_PAGES {
            if c.dirty[i / 64] & (1 << (i % 64)) == 0 {
                i += 1;
                continue;
            }
            let start = i;
            while i < CHUNK_PAGES && c.dirty[i / 64] & (1 << (i % 64)) != 0 {
                c.dirty[i / 64] &= !(1 << (i % 64));
                i += 1;
            }
            // SAFETY: free frames of a chunk we mapped; no one uses them,
            // and the lock keeps them from being handed out meanwhile.
            unsafe {
                libc::madvise((base + start * PAGE) as *mut libc::c_void, (i - start) * PAGE, libc::MADV_DONTNEED)
            };
        }
    }
}

/// Maps a chunk aligned to its size (maps twice the size, unmaps the
/// ends), so that a frame's chunk is its address rounded down.
#[cfg(not(any(loom, miri)))]
fn map_chunk() -> Option<usize> {
    // SAFETY: an anonymous private mapping; we unmap only what we mapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            2 * CHUNK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        let p = p as usize;
        let base = (p + CHUNK - 1) & !(CHUNK - 1);
        if base > p {
            libc::munmap(p as *mut libc::c_void, base - p);
        }
        let end = p + 2 * CHUNK;
        if end > base + CHUNK {
            libc::munmap((base + CHUNK) as *mut libc::c_void, end - (base + CHUNK));
        }
        // Fault the chunk in with one call rather than one fault per page
        // (a third of a write's time went to page faults); older kernels
        // answer EINVAL and the pages fault in as they are touched.
        libc::madvise(base as *mut libc::c_void, CHUNK, MADV_POPULATE_WRITE);
        Some(base)
    }
}

/// `MADV_POPULATE_WRITE` (Linux 5.14).
#[cfg(not(any(loom, miri)))]
const MADV_POPULATE_WRITE: libc::c_int = 23;

#[cfg(all(test, not(loom), not(miri)))]
mod tests {
    use super::*;

    #[test]
    fn chunks_go_back_when_their_frames_are_freed_and_reused_frames_are_zero() {
        let pool = Pool::new();
        let mut frames = Vec::new();
        pool.alloc(3 * CHUNK_PAGES + 7, &mut frames).unwrap();
        assert_eq!(pool.stats().mapped_bytes, 4 * CHUNK);
        for f in &frames {
            // SAFETY: frames we own.
            unsafe { std::ptr::write_bytes(f.as_ptr().cast::<u8>(), 0xAB, PAGE) };
        }
        let keep = frames.split_off(frames.len() - 3);
        pool.free(frames);
        let s = pool.stats();
        assert_eq!(s.used_frames, 3);
        // The three kept frames hold one chunk; the three empty ones are
        // spare.
        assert_eq!(s.mapped_bytes, 4 * CHUNK, "{s:?}");
        assert!(s.dirty_free_frames <= SPARE_FRAMES);
        let mut again = Vec::new();
        pool.alloc(2 * CHUNK_PAGES, &mut again).unwrap();
        for f in &again {
            // SAFETY: frames we own, PAGE bytes.
            let bytes = unsafe { std::slice::from_raw_parts(f.as_ptr().cast::<u8>(), PAGE) };
            assert!(bytes.iter().all(|&b| b == 0), "a reused frame was not zeroed");
        }
        pool.free(again);
        pool.free_table(keep); // past the shard caches: the table alone
        let s = pool.stats();
        assert_eq!((s.used_frames, s.mapped_bytes), (0, SPARE_CHUNKS * CHUNK), "{s:?}");
    }

    /// Keeps the calling thread on the CPU it runs on until dropped, then
    /// gives back its old affinity. The shard caches are per CPU: a test
    /// that counts what they hold must not move between a free and the
    /// allocation meant to reuse it, or the frames wait in the other CPU's
    /// cache and the allocation maps a chunk. (ThreadSanitizer's slowdown
    /// made that migration happen: "reused, not mapped" failed by one chunk;
    /// forcing the move to the other CPU reproduces it.)
    struct OnOneCpu(libc::cpu_set_t);

    impl OnOneCpu {
        fn new() -> OnOneCpu {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            // SAFETY: plain data; the calls write only the sets we pass.
            unsafe {
                let mut old: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(libc::sched_getaffinity(0, size, &mut old), 0);
                let mut one: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(libc::sched_getcpu() as usize, &mut one);
                assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
                OnOneCpu(old)
            }
        }
    }

    impl Drop for OnOneCpu {
        fn drop(&mut self) {
            // SAFETY: the set we read in `new`.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
        }
    }

    #[test]
    fn small_frees_reach_other_caches_through_the_depot_and_a_bulk_free_empties_it() {
        let _cpu = OnOneCpu::new();
        let pool = Pool::new();
        // One frame at a time, as small files take them: through the caches.
        let singles = SHARDS_FRAMES + (DEPOT_MAX + 8) * CACHE_BATCH;
        let mut small = Vec::new();
        for _ in 0..singles {
            pool.alloc_raw(1, &mut small).unwrap();
        }
        let mut big = Vec::new();
        pool.alloc(2 * BULK, &mut big).unwrap();
        for (f, _) in &small {
            pool.free([*f]);
        }
        // Nothing reached the table but what overflowed a full depot.
        let s = pool.stats();
        assert_eq!(s.used_frames, 2 * BULK, "{s:?}");
        let parked = pool.depot.0.lock().mags.len();
        assert_eq!(parked, DEPOT_MAX, "the depot fills before the table takes anything");
        // A frame a cache gave up is taken by the next allocation that
        // finds its own cache dry, wherever it runs.
        let mut again = Vec::new();
        let before = pool.stats().mapped_bytes;
        for _ in 0..singles {
            pool.alloc_raw(1, &mut again).unwrap();
        }
        assert_eq!(pool.stats().mapped_bytes, before, "reused, not mapped");
        for (f, _) in &again {
            pool.free([*f]);
        }
        // A large file's delete: the depot empties into the table, whose
        // lower bound then holds for those frames too.
        pool.free(big.drain(..));
        let s = pool.stats();
        assert_eq!(s.used_frames, 0, "{s:?}");
        assert!(pool.depot.0.lock().mags.is_empty());
        assert!(s.dirty_free_frames <= SPARE_FRAMES + SHARDS_FRAMES, "{s:?}");
    }

    /// What the shard caches may hold at most.
    const SHARDS_FRAMES: usize = crate::sync::shard::SHARDS * CACHE_MAX;

    #[test]
    fn scattered_frees_past_the_spare_are_purged() {
        let pool = Pool::new();
        let mut frames = Vec::new();
        pool.alloc(8 * CHUNK_PAGES, &mut frames).unwrap();
        for f in &frames {
            // SAFETY: frames we own.
            unsafe { std::ptr::write_bytes(f.as_ptr().cast::<u8>(), 1, PAGE) };
        }
        // Free every other frame: no chunk empties, half the frames are free.
        let (odd, even): (Vec<_>, Vec<_>) = frames.iter().enumerate().partition(|(i, _)| i % 2 == 1);
        pool.free(odd.into_iter().map(|(_, f)| *f));
        let s = pool.stats();
        assert_eq!(s.used_frames, 4 * CHUNK_PAGES);
        assert!(s.dirty_free_frames <= SPARE_FRAMES, "{s:?}");
        pool.free(even.into_iter().map(|(_, f)| *f));
        assert_eq!(pool.stats().mapped_bytes, SPARE_CHUNKS * CHUNK);
    }
}
