//! The page cache: each file's data as an index of 4 KiB pages (seed 001),
//! written by hand: it is the product.
//!
//! # Modes
//!
//! | mode       | readers                                   | writers                    | seed |
//! |------------|-------------------------------------------|----------------------------|------|
//! | `mutex`    | take the index's lock                     | take the index's lock      | before 001 (`tree_lock` a spinlock) |
//! | `rwlock`   | take the index's lock shared              | take it exclusive          | 001 |
//! | `lockless` | no lock: find the page under RCU and copy it under the page's sequence count | serialize per file | later kernels (RCU page cache, then the XArray) |
//!
//! In every mode writers also hold `writer`, so one writer at a time
//! changes the index, the pages and the size.
//!
//! # Locks and protocols
//!
//! | lock / protocol   | protects                                              |
//! |-------------------|-------------------------------------------------------|
//! | `writer`          | every change: the index, page contents, `size`, accounting |
//! | `Page::seq`       | a page's words: written inside a write section        |
//! | RCU (`rcu()`)     | an index or page a reader reached stays allocated until the reader leaves |
//! | the inode's open count | an orphan's pages, freed at once (`drop_unread`) once no file has them open and none can open them |
//!
//! Order: `writer`, then (mutex/rwlock modes) `mode_lock`.
//!
//! # Why the lockless read is sound under Rust's memory model
//!
//! Page bytes live in `AtomicU64` words. A reader copies the words it needs
//! with relaxed atomic loads between the page's `read_begin` and
//! `read_retry`; a writer stores words with relaxed atomic stores inside a
//! write section. No access is a data race (all are atomic), so a torn copy
//! is merely a wrong value, which the sequence check rejects; the reader
//! copies again (a bounded number of times, then under `writer`). A reader
//! reaches pages through an index published with Release stores and read
//! with Acquire loads, inside an RCU read section: a page or index that a
//! truncate or a growth replaced is freed only after a grace period.
//!
//! `size` is stored (Release) after the data below it is written and before
//! a truncate removes data above it, and readers clamp to the size they load
//! (Acquire): a read that starts after a write returned sees the write, and
//! one that starts after a truncate returned sees nothing past the new end.
//!
//! # What is zeroed, and when
//!
//! Every byte a reader may read (below `size`) holds what was written there
//! or zero. Past `size`, the last page may hold anything: a frame reused
//! from a freed page is zeroed only where it must be (`populate`: up to
//! where its write begins, or the old end), not whole, so a small file's
//! first write costs no 4 KiB memset; whatever grows the file (a write
//! past the end, `set_len`, `allocate`) zeroes that page's bytes from the
//! old end to the new one first (`zero_gap`), and only then publishes the
//! size. A page published before its write copies in is zero wherever a
//! reader could look meanwhile: below the old size. The one reader that can
//! hold a larger size than the file's is a lockless one that loaded it
//! before a truncate: a truncate counts itself (`shrinks`), and such a
//! reader, seeing the count move over its copy, reads again under
//! `writer`. Debug builds fill reused frames with a poison pattern, so a
//! byte left unzeroed shows in tests.

#[cfg(not(loom))]
use std::ptr;
#[cfg(not(loom))]
use std::sync::OnceLock;

use crate::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::error::{fail, Result, EFBIG};
use crate::sync::{Mutex, Rcu, SeqCount};

#[cfg(not(loom))]
pub const PAGE: usize = 4096;
/// Under loom a page is two words: the same protocol, a tractable model.
#[cfg(loom)]
pub const PAGE: usize = 16;
const WORDS: usize = PAGE / 8;
/// The largest file (like tmpfs's `s_maxbytes`, but sized to memory).
pub const MAX_FILE_SIZE: u64 = 1 << 40;

pub use crate::modes::CacheMode;

/// The RCU domain of all page caches (pages outlive any one Vfs view).
#[cfg(not(loom))]
fn rcu() -> &'static Rcu {
    static RCU: OnceLock<Rcu> = OnceLock::new();
    RCU.get_or_init(Rcu::new)
}

/// Under loom: a stand-in that never frees (loom objects cannot live in a
/// static across executions), which keeps every reader's page valid.
#[cfg(loom)]
fn rcu() -> &'static Rcu {
    Box::leak(Box::new(Rcu::new()))
}

mod pool;
pub use pool::PoolStats;

/// The frames of every page cache.
fn pool() -> &'static pool::Pool {
    #[cfg(not(loom))]
    {
        static POOL: OnceLock<pool::Pool> = OnceLock::new();
        POOL.get_or_init(pool::Pool::new)
    }
    // Under loom: one per use, as for `rcu()` (never freed).
    #[cfg(loom)]
    Box::leak(Box::new(pool::Pool::new()))
}

/// The reclaimer's visit (`sync::reclaim`): the page caches' retired
/// objects of idle shards are handed over (if `rcu`), and the page pool
/// hands back what small files' frees keep if it saw no traffic since the
/// last visit.
pub(crate) fn trim_idle(rcu_too: bool) {
    #[cfg(not(loom))]
    {
        if rcu_too {
            rcu().flush_idle();
        }
        pool().trim_idle();
    }
    #[cfg(loom)]
    let _ = rcu_too;
}

/// What the page allocator holds now: frames in use, bytes mapped, free
/// frames not yet handed back. For tests and reports.
pub fn pool_stats() -> PoolStats {
    pool().stats()
}

/// One page of file data: 4 KiB-aligned, from the page allocator.
#[repr(C, align(4096))]
pub(crate) struct Frame {
    words: [AtomicU64; WORDS],
}

impl Frame {
    #[cfg(all(miri, not(loom)))]
    fn zeroed() -> Frame {
        Frame { words: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    /// Under loom a new frame holds old bytes, as a reused one does, so
    /// that the models check what its users must zero.
    #[cfg(loom)]
    fn stale() -> Frame {
        Frame { words: std::array::from_fn(|_| AtomicU64::new(0xA5A5_A5A5_A5A5_A5A5)) }
    }
}

/// Zeroes the first `len` bytes of a frame nobody else can reach.
///
/// # Safety
/// The caller owns the frame, and no reader can reach it.
unsafe fn zero_frame(f: std::ptr::NonNull<Frame>, len: usize) {
    #[cfg(not(loom))]
    // SAFETY: the caller owns the frame, PAGE bytes long.
    unsafe {
        ptr::write_bytes(f.as_ptr().cast::<u8>(), 0, len.min(PAGE))
    };
    #[cfg(loom)]
    {
        // loom's atomics are not plain memory: store each word (under loom
        // PAGE is a few words, and callers zero whole words or the page).
        // SAFETY: the caller owns the frame.
        let words = unsafe { &f.as_ref().words };
        for w in &words[..len.min(PAGE).div_ceil(8)] {
            w.store(0, Ordering::Relaxed);
        }
    }
}

/// A page: its sequence count and its frame.
struct Page {
    seq: SeqCount,
    frame: std::ptr::NonNull<Frame>,
}

impl Page {
    fn new(frame: std::ptr::NonNull<Frame>) -> Box<Page> {
        Box::new(Page { seq: SeqCount::new(), frame })
    }

    #[inline]
    fn words(&self) -> &[AtomicU64; WORDS] {
        // SAFETY: the frame lives as long as the page (freed with it).
        unsafe { &self.frame.as_ref().words }
    }

    /// Copies bytes `[from, from + out.len())` of the page (relaxed loads:
    /// the caller validates or excludes writers): whole words in one load
    /// each, a partial word at either end through a copy of it.
    fn copy_out(&self, from: usize, out: &mut [u8]) {
        let words = self.words();
        let (head, whole) = split_words(from, out.len());
        let (h, rest) = out.split_at_mut(head);
        let (body, tail) = rest.split_at_mut(whole * 8);
        self.partial_out(from, h);
        let first = (from + head) / 8;
        for (c, w) in body.chunks_exact_mut(8).zip(&words[first..]) {
            c.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        self.partial_out(from + head + whole * 8, tail);
    }

    /// Stores bytes at `from` (the caller holds `writer` and has opened a
    /// write section): whole words in one store each, a partial word at
    /// either end by a load, a merge and a store.
    fn copy_in(&self, from: usize, data: &[u8]) {
        let words = self.words();
        let (head, whole) = split_words(from, data.len());
        let (h, rest) = data.split_at(head);
        let (body, tail) = rest.split_at(whole * 8);
        self.partial_in(from, h);
        let first = (from + head) / 8;
        for (c, w) in body.chunks_exact(8).zip(&words[first..]) {
            w.store(u64::from_le_bytes(c.try_into().expect("8 bytes")), Ordering::Relaxed);
        }
        self.partial_in(from + head + whole * 8, tail);
    }

    /// `copy_out` of bytes within one word.
    fn partial_out(&self, at: usize, out: &mut [u8]) {
        if !out.is_empty() {
            let w = self.words()[at / 8].load(Ordering::Relaxed).to_le_bytes();
            out.copy_from_slice(&w[at % 8..at % 8 + out.len()]);
        }
    }

    /// `copy_in` of bytes within one word.
    fn partial_in(&self, at: usize, data: &[u8]) {
        if !data.is_empty() {
            let word = &self.words()[at / 8];
            let mut w = word.load(Ordering::Relaxed).to_le_bytes();
            w[at % 8..at % 8 + data.len()].copy_from_slice(data);
            word.store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
    }

    fn zero(&self, from: usize) {
        self.zero_range(from, PAGE);
    }

    /// Zeroes bytes `[from, to)` (the caller holds `writer`; readers may
    /// read the page only where the bytes do not change, or in a write
    /// section the caller opened).
    fn zero_range(&self, from: usize, to: usize) {
        if from >= to {
            return;
        }
        let (head, whole) = split_words(from, to - from);
        self.partial_in(from, &[0; 8][..head]);
        let first = (from + head) / 8;
        for w in &self.words()[first..first + whole] {
            w.store(0, Ordering::Relaxed);
        }
        let tail = from + head + whole * 8;
        self.partial_in(tail, &[0; 8][..to - tail]);
    }
}

/// Byte `pos` of the file as an offset in page `pi`, clamped to the page.
fn clamp_in_page(pos: u64, pi: usize) -> usize {
    pos.saturating_sub(pi as u64 * PAGE as u64).min(PAGE as u64) as usize
}

/// How `len` bytes at byte `from` of a page split into words: the bytes
/// before the first word boundary (all of them if none is reached), then
/// the number of whole words; the rest is a partial word.
fn split_words(from: usize, len: usize) -> (usize, usize) {
    let head = ((8 - from % 8) % 8).min(len);
    (head, (len - head) / 8)
}

/// Frees pages (their boxes and, in one call, their frames).
///
/// # Safety
/// Each pointer came from `Box::into_raw(Page::new(..))`, is freed once,
/// and no reader can reach it any more.
unsafe fn free_pages(pages: Vec<*mut Page>) {
    let frames: Vec<_> = pages
        .into_iter()
        .map(|p| {
            // SAFETY: the caller's contract.
            let page = unsafe { Box::from_raw(p) };
            page.frame
        })
        .collect();
    pool().free(frames);
}

/// Pages to free after a grace period, as one callback; a large batch is
/// pushed out at once, so that deleted data goes back to the system within
/// the grace period, not whenever this thread's reclamation batch fills.
struct Retired(Vec<*mut Page>);
// SAFETY: the pages are unreachable; only the callback touches them.
unsafe impl Send for Retired {}

/// Pages at which a retirement is pushed out at once (1 MiB).
pub const EXPEDITE_PAGES: usize = 256;

/// # Safety
/// As [`free_pages`], but readers that reached the pages before they were
/// made unreachable may still be reading: they are waited out.
unsafe fn retire_pages(pages: Vec<*mut Page>) {
    if pages.is_empty() {
        return;
    }
    let big = pages.len() >= EXPEDITE_PAGES;
    let bytes = pages.len() * PAGE;
    let r = Retired(pages);
    rcu().call_rcu_sized(
        move || {
            let r = r;
            // SAFETY: the grace period has ended: no reader holds them.
            unsafe { free_pages(r.0) }
        },
        bytes,
    );
    if big {
        rcu().expedite();
    }
}

/// The page pointers, replaced whole (and retired) when the file grows
/// past them.
struct Index {
    slots: Box<[AtomicPtr<Page>]>,
}

impl Index {
    fn new(n: usize) -> Box<Index> {
        Box::new(Index { slots: (0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect() })
    }

    /// The index of a new cache: outside loom one, shared by every cache
    /// without pages yet and never freed, so that an empty file costs no
    /// allocation (and no retirement when its first write replaces it).
    /// Under loom, where atomics cannot outlive one execution, its own.
    fn initial() -> *mut Index {
        #[cfg(not(loom))]
        {
            /// The shared index, kept as a pointer (not an address) so
            /// that it stays reachable from the static: Miri's leak check
            /// reported it as leaked when it was held as a `usize`.
            struct EmptyIndex(*mut Index);
            // SAFETY: the index it points to is never freed, and written
            // only through atomics.
            unsafe impl Send for EmptyIndex {}
            // SAFETY: as above.
            unsafe impl Sync for EmptyIndex {}
            static EMPTY: OnceLock<EmptyIndex> = OnceLock::new();
            EMPTY.get_or_init(|| EmptyIndex(Box::into_raw(Index::new(0)))).0
        }
        #[cfg(loom)]
        Box::into_raw(Index::new(0))
    }

    /// Whether `p` is the shared initial index (not to be retired).
    fn is_shared(p: *mut Index) -> bool {
        #[cfg(not(loom))]
        return p == Index::initial();
        #[cfg(loom)]
        {
            let _ = p;
            false
        }
    }
}

/// Charges (positive) or refunds (negative) pages against a filesystem's
/// space limit; `Err` (ENOSPC) refuses a charge.
///
/// A handle on the filesystem's charging function: the filesystem holds
/// the first ([`Accounting::new`]), and each page cache its own
/// ([`Accounting::handle`]), counted per thread shard (`PercpuRef`): an
/// `Arc` clone per new cache was one line that every thread writing a new
/// file stored to. The function goes with the last handle, after the
/// filesystem's.
pub struct Accounting {
    inner: std::ptr::NonNull<AcctInner>,
    /// The filesystem's handle: its drop kills the count.
    owner: bool,
}

struct AcctInner {
    refs: crate::sync::percpu_ref::PercpuRef,
    charge: Box<dyn Fn(i64) -> Result<()> + Send + Sync>,
}

// SAFETY: the function is Send + Sync; the count is a per-shard reference
// count that any thread may take and drop.
unsafe impl Send for Accounting {}
// SAFETY: as above.
unsafe impl Sync for Accounting {}

impl Accounting {
    /// The filesystem's handle on `charge`.
    pub fn new(charge: impl Fn(i64) -> Result<()> + Send + Sync + 'static) -> Accounting {
        let inner = Box::new(AcctInner { refs: crate::sync::percpu_ref::PercpuRef::new(), charge: Box::new(charge) });
        Accounting { inner: std::ptr::NonNull::from(Box::leak(inner)), owner: true }
    }

    fn inner(&self) -> &AcctInner {
        // SAFETY: a handle keeps it alive (see `Drop`).
        unsafe { self.inner.as_ref() }
    }

    /// Another handle, for a page cache.
    pub fn handle(&self) -> Accounting {
        self.inner().refs.get(rcu());
        Accounting { inner: self.inner, owner: false }
    }

    /// Charges `pages` (or refunds, negative).
    pub fn charge(&self, pages: i64) -> Result<()> {
        (self.inner().charge)(pages)
    }
}

impl Drop for Accounting {
    fn drop(&mut self) {
        let refs = &self.inner().refs;
        let last = if self.owner { refs.kill(rcu()) } else { refs.put(rcu()) };
        if last {
            // SAFETY: the last handle (the count says so): made by `new`.
            drop(unsafe { Box::from_raw(self.inner.as_ptr()) });
        }
    }
}

/// One file's data. What every read loads (`mode`, `size`, `index`) sits
/// on its own cache line, apart from the locks and counters writers
/// change, so that a write does not invalidate the line readers need
/// (seed 002's lesson, applied here).
pub struct PageCache {
    mode: CacheMode,
    size: AtomicU64,
    /// Truncations so far: a lockless reader that saw one happen while it
    /// copied reads again with writers excluded (see `read_lockless`).
    /// Written only by a truncate, so it stays on the readers' line.
    shrinks: AtomicU64,
    index: AtomicPtr<Index>,
    acct: Option<Accounting>,
    w: WriterSide,
    /// loom: whether `drop_unread` freed pages with no grace period (the
    /// orphan models check it never does while another holds the cache).
    #[cfg(loom)]
    pub(crate) dropped_unread: std::sync::atomic::AtomicBool,
}

/// The fields writers change, on cache lines of their own.
#[repr(align(128))]
struct WriterSide {
    writer: Mutex<()>,
    mode_lock: std::sync::RwLock<()>,
    pages: AtomicU64,
}

// SAFETY: pages and indexes are owned by the cache and shared only through
// atomics; freeing goes through RCU.
unsafe impl Send for PageCache {}
// SAFETY: as above.
unsafe impl Sync for PageCache {}

impl PageCache {
    pub fn new(mode: CacheMode) -> PageCache {
        PageCache::with_accounting(mode, None)
    }

    /// A cache whose page allocations are charged through `acct`.
    pub fn with_accounting(mode: CacheMode, acct: Option<Accounting>) -> PageCache {
        PageCache {
            mode,
            acct,
            size: AtomicU64::new(0),
            shrinks: AtomicU64::new(0),
            index: AtomicPtr::new(Index::initial()),
            w: WriterSide { writer: Mutex::new(()), mode_lock: std::sync::RwLock::new(()), pages: AtomicU64::new(0) },
            #[cfg(loom)]
            dropped_unread: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn mode(&self) -> CacheMode {
        self.mode
    }

    /// The file's size.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Pages allocated (holes take none).
    pub fn pages(&self) -> u64 {
        self.w.pages.load(Ordering::Relaxed)
    }

    /// Reads at `offset`; returns the bytes read (0 at or past the end).
    /// Holes read as zeros.
    #[inline]
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> usize {
        match self.mode {
            CacheMode::Lockless => self.read_lockless(offset, buf),
            CacheMode::RwLock => {
                let _g = self.w.mode_lock.read().unwrap_or_else(|e| e.into_inner());
                self.read_excluded(offset, buf)
            }
            CacheMode::Mutex => {
                let _g = self.w.mode_lock.write().unwrap_or_else(|e| e.into_inner());
                self.read_excluded(offset, buf)
            }
        }
    }

    fn span(&self, offset: u64, len: usize) -> usize {
        let size = self.size.load(Ordering::Acquire);
        if offset >= size {
            0
        } else {
            len.min((size - offset) as usize)
        }
    }

    /// A read with writers excluded (they hold `mode_lock` exclusively, or
    /// the caller holds `writer`).
    fn read_excluded(&self, offset: u64, buf: &mut [u8]) -> usize {
        let n = self.span(offset, buf.len());
        let _r = rcu().read_lock();
        // SAFETY: the index is live (writers excluded; RCU besides).
        let index = unsafe { &*self.index.load(Ordering::Acquire) };
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let (pi, from) = ((pos / PAGE as u64) as usize, (pos % PAGE as u64) as usize);
            let len = (PAGE - from).min(n - done);
            let out = &mut buf[done..done + len];
            // SAFETY: pages are live while reachable, and we are in a read
            // section.
            match index.slots.get(pi).and_then(|s| unsafe { s.load(Ordering::Acquire).as_ref() }) {
                Some(page) => page.copy_out(from, out),
                None => out.fill(0),
            }
            done += len;
        }
        n
    }

    fn read_lockless(&self, offset: u64, buf: &mut [u8]) -> usize {
        // Before the size: see the check at the end.
        let shrinks = self.shrinks.load(Ordering::Acquire);
        let n = self.span(offset, buf.len());
        let guard = rcu().read_lock();
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let (pi, from) = ((pos / PAGE as u64) as usize, (pos % PAGE as u64) as usize);
            let len = (PAGE - from).min(n - done);
            // Acquire: pairs with the Release publication of an index and
            // of a page, so their contents are initialized.
            // SAFETY: indexes are retired through RCU; we are in a read
            // section.
            let index = unsafe { &*self.index.load(Ordering::Acquire) };
            // SAFETY: as above, for pages.
            let page = index.slots.get(pi).and_then(|s| unsafe { s.load(Ordering::Acquire).as_ref() });
            let out = &mut buf[done..done + len];
            match page {
                None => out.fill(0),
                Some(page) => {
                    let mut copied = false;
                    for _ in 0..crate::sync::seqcount::READ_RETRIES {
                        if let Some(s) = page.seq.read_begin() {
                            page.copy_out(from, out);
                            if !page.seq.read_retry(s) {
                                copied = true;
                                break;
                            }
                        }
                        std::hint::spin_loop();
                    }
                    if !copied {
                        // A writer stayed in the page: copy the rest of the
                        // request under its lock (not only this page: a
                        // short read in the middle of a file reads as an
                        // end of file to FUSE and to `read_exact`).
                        drop(guard);
                        let _w = self.w.writer.lock();
                        // What we copied so far is checked as at the end.
                        if self.shrinks.load(Ordering::Acquire) != shrinks {
                            return self.read_excluded(offset, buf);
                        }
                        let m = self.read_excluded(pos, &mut buf[done..n]);
                        return done + m;
                    }
                }
            }
            done += len;
        }
        drop(guard);
        // The size we clamped to may be from before a truncate: a write
        // since may have put a page in our range whose bytes past its own
        // end were never zeroed (a reused frame's, which may be another
        // file's), and we may have copied them. Such a page was published
        // after the truncate counted itself, and we loaded it (Acquire)
        // before this load, so we see the count move: read again with
        // writers excluded. (Review of the lazy zeroing found this.)
        if self.shrinks.load(Ordering::Acquire) != shrinks {
            let _w = self.w.writer.lock();
            return self.read_excluded(offset, buf);
        }
        n
    }

    /// Writes `data` at `offset` (or at the end, atomically with respect to
    /// other appenders, when `offset` is `None`); returns the offset
    /// written at. New pages are charged first: on ENOSPC nothing changes.
    pub fn write(&self, offset: Option<u64>, data: &[u8]) -> Result<u64> {
        let _w = self.w.writer.lock();
        let _m =
            (self.mode != CacheMode::Lockless).then(|| self.w.mode_lock.write().unwrap_or_else(|e| e.into_inner()));
        let size = self.size.load(Ordering::Relaxed);
        let at = offset.unwrap_or(size);
        let end = at.checked_add(data.len() as u64).filter(|&e| e <= MAX_FILE_SIZE);
        let Some(end) = end else { return fail(EFBIG) };
        if data.is_empty() {
            return Ok(at);
        }
        let (first, last) = ((at / PAGE as u64) as usize, ((end - 1) / PAGE as u64) as usize);
        // SAFETY: `writer` is held.
        unsafe { self.zero_gap(size, at) };
        // A new page's bytes at or past both the write's start and the old
        // size are either written here or past the new end: only those
        // before must be zeros when the page is published (see `populate`).
        let written_from = at.max(size);
        // SAFETY: `writer` is held.
        let index = unsafe { self.populate(first, last, |pi| clamp_in_page(written_from, pi))? };
        let mut done = 0;
        for pi in first..=last {
            let p = index.slots[pi].load(Ordering::Relaxed);
            // SAFETY: a page in the index is live (`populate` put one in
            // every slot of the range); we hold `writer`.
            let page = unsafe { &*p };
            let pos = at + done as u64;
            let from = (pos % PAGE as u64) as usize;
            let len = (PAGE - from).min(data.len() - done);
            page.seq.write_begin();
            page.copy_in(from, &data[done..done + len]);
            page.seq.write_end();
            done += len;
        }
        if end > size {
            // Release: the data is written before readers can see it in
            // range.
            self.size.store(end, Ordering::Release);
        }
        Ok(at)
    }

    /// Puts a page in every empty slot of pages `first..=last`, charged
    /// first (ENOSPC, or ENOMEM from the pool, changes nothing), and returns
    /// the index that holds them. A new page reads as zeros up to byte
    /// `dirty_from(page)` when it is published; past that its bytes are
    /// whatever its frame held (a reused frame is not zeroed whole), which
    /// the caller covers before any reader may read there: with its write,
    /// or by being past the end of the file (see the module doc).
    ///
    /// # Safety
    /// The caller holds `writer`.
    unsafe fn populate(&self, first: usize, last: usize, dirty_from: impl Fn(usize) -> usize) -> Result<&Index> {
        // SAFETY: only writers (the caller holds `writer`) replace the index.
        let mut index = unsafe { &*self.index.load(Ordering::Relaxed) };
        let missing =
            (first..=last).filter(|&i| index.slots.get(i).is_none_or(|s| s.load(Ordering::Relaxed).is_null())).count();
        self.charge(missing as i64)?;
        let mut frames = Vec::with_capacity(missing);
        if let Err(e) = pool().alloc_raw(missing, &mut frames) {
            let _ = self.charge(-(missing as i64));
            return Err(e);
        }
        let mut frames = frames.into_iter();
        if last >= index.slots.len() {
            index = self.grow(last + 1);
        }
        for (pi, slot) in (first..=last).zip(&index.slots[first..=last]) {
            if slot.load(Ordering::Relaxed).is_null() {
                let (frame, dirty) = frames.next().expect("a frame per missing page");
                if dirty {
                    // SAFETY: a frame of ours, not yet reachable by any
                    // reader.
                    unsafe { zero_frame(frame, dirty_from(pi)) };
                }
                let p = Box::into_raw(Page::new(frame));
                // Release: the page's bytes that readers may read are
                // initialized before they can reach it.
                slot.store(p, Ordering::Release);
                self.w.pages.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(index)
    }

    /// The file grows from `size` to `to`: the bytes of its last page from
    /// `size` on may be anything (a frame not zeroed whole, or a write's
    /// tail past the old end), and are zeroed up to `to` before the new
    /// size lets readers in.
    ///
    /// # Safety
    /// The caller holds `writer`.
    unsafe fn zero_gap(&self, size: u64, to: u64) {
        let from = (size % PAGE as u64) as usize;
        if to <= size || from == 0 {
            return;
        }
        let pi = (size / PAGE as u64) as usize;
        // SAFETY: only writers replace the index; pages in it are live.
        let index = unsafe { &*self.index.load(Ordering::Relaxed) };
        if let Some(page) = index.slots.get(pi).and_then(|s| unsafe { s.load(Ordering::Relaxed).as_ref() }) {
            let end = (to - pi as u64 * PAGE as u64).min(PAGE as u64) as usize;
            page.seq.write_begin();
            page.zero_range(from, end);
            page.seq.write_end();
        }
    }

    /// `fallocate` modes 0 and KEEP_SIZE: every page of `[offset, offset +
    /// len)` exists (zeroed where it was a hole, charged to the budget), so
    /// later writes there need no space; the size grows to the end unless
    /// `keep_size`, and never shrinks (it is read and set under `writer`,
    /// as every write does).
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        let end = offset.checked_add(len).filter(|&e| e <= MAX_FILE_SIZE);
        let Some(end) = end else { return fail(EFBIG) };
        if len == 0 {
            return fail(crate::error::EINVAL);
        }
        let _w = self.w.writer.lock();
        let _m =
            (self.mode != CacheMode::Lockless).then(|| self.w.mode_lock.write().unwrap_or_else(|e| e.into_inner()));
        let (first, last) = ((offset / PAGE as u64) as usize, ((end - 1) / PAGE as u64) as usize);
        // One call allocates at most half of the machine's memory (tmpfs's
        // default size), whatever the budget: ENOSPC, not an OOM kill.
        // Miri has no `_SC_PHYS_PAGES`: a machine of 4 GiB there.
        #[cfg(miri)]
        let phys = (4u64 << 30) / PAGE as u64;
        // SAFETY: sysconf has no preconditions.
        #[cfg(not(miri))]
        let phys = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0) as u64;
        if (last - first + 1) as u64 > phys / 2 {
            return fail(crate::error::ENOSPC);
        }
        let size = self.size.load(Ordering::Relaxed);
        if !keep_size {
            // SAFETY: `writer` is held.
            unsafe { self.zero_gap(size, end) };
        }
        // SAFETY: `writer` is held.
        unsafe { self.populate(first, last, |_| PAGE)? };
        if !keep_size && end > size {
            // Release: the zeroed pages are in place before readers see
            // them in range.
            self.size.store(end, Ordering::Release);
        }
        Ok(())
    }

    /// Replaces the index with a larger copy, retiring the old one.
    fn grow(&self, min: usize) -> &Index {
        // SAFETY: only writers replace the index (caller holds `writer`).
        let old = unsafe { &*self.index.load(Ordering::Relaxed) };
        let new = Index::new(min.next_power_of_two().max(4));
        for (i, s) in old.slots.iter().enumerate() {
            new.slots[i].store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let new = Box::into_raw(new);
        // Release: the copied slots are visible to readers of the new index.
        let old = self.index.swap(new, Ordering::Release);
        if !Index::is_shared(old) {
            // SAFETY: unreachable from the cache now; readers that loaded
            // it are waited out. Its pages are shared with the new index,
            // not freed with it (dropping an Index frees only the slot
            // array).
            unsafe { rcu().retire_box(old) };
        }
        // SAFETY: just published, and only writers retire indexes.
        unsafe { &*new }
    }

    /// Sets the size (`truncate`, `set_len`). Shrinking publishes the new
    /// size first, zeroes the tail of the new last page, and frees the
    /// pages past it (refunded); growing leaves a hole.
    pub fn set_len(&self, len: u64) -> Result<()> {
        if len > MAX_FILE_SIZE {
            return fail(EFBIG);
        }
        let _w = self.w.writer.lock();
        let _m =
            (self.mode != CacheMode::Lockless).then(|| self.w.mode_lock.write().unwrap_or_else(|e| e.into_inner()));
        let size = self.size.load(Ordering::Relaxed);
        // SAFETY: `writer` is held.
        unsafe { self.zero_gap(size, len) };
        // Release: a reader that sees the new size sees nothing of what
        // follows (it clamps), and the zeros of a grown last page; one that
        // raced us read before it.
        self.size.store(len, Ordering::Release);
        if len >= size {
            return Ok(());
        }
        // Before any page a later write publishes (they take `writer`
        // after us): a lockless reader still clamping to the old size sees
        // it move once it reaches such a page (`read_lockless`).
        self.shrinks.fetch_add(1, Ordering::Release);
        // SAFETY: only writers replace the index.
        let index = unsafe { &*self.index.load(Ordering::Relaxed) };
        let keep = len.div_ceil(PAGE as u64) as usize;
        if !len.is_multiple_of(PAGE as u64) {
            // SAFETY: pages in the index are live; we hold `writer`.
            if let Some(page) = index.slots.get(keep - 1).and_then(|s| unsafe { s.load(Ordering::Relaxed).as_ref() }) {
                page.seq.write_begin();
                page.zero((len % PAGE as u64) as usize);
                page.seq.write_end();
            }
        }
        let gone = Self::unpublish(index, keep);
        let freed = gone.len();
        // SAFETY: unreachable now; readers are waited out.
        unsafe { retire_pages(gone) };
        self.uncount(freed)
    }

    /// Takes the pages at and past slot `from` out of `index` (under
    /// `writer`), for the caller to free or retire.
    fn unpublish(index: &Index, from: usize) -> Vec<*mut Page> {
        // Release: as every store of a slot (a reader that loads the null
        // slot reads a hole, after what came before).
        index
            .slots
            .iter()
            .skip(from)
            .map(|s| s.swap(std::ptr::null_mut(), Ordering::Release))
            .filter(|p| !p.is_null())
            .collect()
    }

    /// Uncounts `n` pages taken out of the index, refunded.
    fn uncount(&self, n: usize) -> Result<()> {
        self.w.pages.fetch_sub(n as u64, Ordering::Relaxed);
        self.charge(-(n as i64))
    }

    /// Empties the cache and frees its pages at once, with no grace period:
    /// an orphaned file's data (`Inode::drop_data_unless_open`: as its
    /// last name, open or lookup goes, or as memfs frees the inode), as
    /// the kernel's `evict` truncates
    /// a deleted inode's pages before the inode waits for its own grace
    /// period. Its frames go back to this thread's cache while they are
    /// still in this core's caches, and the next small file gets them hot.
    /// The cache itself stays (empty) until its inode goes.
    ///
    /// # Safety
    /// No lockless reader is reading it, and none can start: every reader
    /// reaches a cache through a file it opened or a count it holds (see
    /// the caller), and none is left.
    pub(crate) unsafe fn drop_unread(&self) {
        let _w = self.w.writer.lock();
        let _m =
            (self.mode != CacheMode::Lockless).then(|| self.w.mode_lock.write().unwrap_or_else(|e| e.into_inner()));
        // As a truncate to 0 publishes it, though no reader is left to see it.
        self.size.store(0, Ordering::Release);
        self.shrinks.fetch_add(1, Ordering::Release);
        // SAFETY: only writers replace the index.
        let gone = Self::unpublish(unsafe { &*self.index.load(Ordering::Relaxed) }, 0);
        let freed = gone.len();
        #[cfg(loom)]
        self.dropped_unread.store(freed > 0, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: out of the index, and the caller's contract: no reader.
        unsafe { free_pages(gone) };
        // A refund cannot fail.
        let _ = self.uncount(freed);
    }

    fn charge(&self, pages: i64) -> Result<()> {
        match &self.acct {
            Some(a) if pages != 0 => a.charge(pages),
            _ => Ok(()),
        }
    }
}

impl Drop for PageCache {
    fn drop(&mut self) {
        let _ = self.charge(-(self.pages() as i64));
        let index = self.index.load(Ordering::Relaxed);
        // SAFETY: dropping the cache: no reader can be inside it. A reader
        // reaches a cache through a reference (an `Arc`, an open file's
        // inode) or through an inode it found under RCU, which is freed,
        // and this cache with it, a grace period after it became
        // unreachable; either way its read has ended. So its index and the
        // pages still in it go now, with no grace period of their own (those
        // that a truncate removed earlier went through `retire_pages`).
        unsafe {
            let pages = (*index).slots.iter().map(|s| s.load(Ordering::Relaxed)).filter(|p| !p.is_null()).collect();
            free_pages(pages);
            if !Index::is_shared(index) {
                drop(Box::from_raw(index));
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    #[derive(Clone, Debug)]
    enum Op {
        Write(u64, Vec<u8>),
        Append(Vec<u8>),
        SetLen(u64),
        Read(u64, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let off = prop_oneof![0u64..64, 4090u64..4110, 0u64..20_000];
        prop_oneof![
            3 => (off.clone(), prop::collection::vec(any::<u8>(), 1..300)).prop_map(|(o, d)| Op::Write(o, d)),
            1 => prop::collection::vec(any::<u8>(), 1..50).prop_map(Op::Append),
            1 => off.clone().prop_map(Op::SetLen),
            3 => (off, 0usize..9000).prop_map(|(o, n)| Op::Read(o, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 3 } else { 256 }, ..ProptestConfig::default() })]

        /// Random writes, appends, truncates and reads against a Vec model,
        /// in every mode.
        #[test]
        fn contents_match_a_vec_model(ops in prop::collection::vec(op(), 1..40), mode in prop::sample::select(CacheMode::ALL.to_vec())) {
            let pc = PageCache::new(mode);
            let mut model: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::Write(o, d) => {
                        pc.write(Some(o), &d).unwrap();
                        let end = o as usize + d.len();
                        if model.len() < end { model.resize(end, 0); }
                        model[o as usize..end].copy_from_slice(&d);
                    }
                    Op::Append(d) => {
                        let at = pc.write(None, &d).unwrap();
                        prop_assert_eq!(at, model.len() as u64);
                        model.extend_from_slice(&d);
                    }
                    Op::SetLen(n) => {
                        pc.set_len(n).unwrap();
                        model.resize(n as usize, 0);
                    }
                    Op::Read(o, n) => {
                        let mut buf = vec![0xAA; n];
                        let got = pc.read(o, &mut buf);
                        let want: &[u8] = if (o as usize) < model.len() { &model[o as usize..model.len().min(o as usize + n)] } else { &[] };
                        prop_assert_eq!(&buf[..got], want);
                    }
                }
                prop_assert_eq!(pc.size(), model.len() as u64);
            }
        }
    }

    /// Frames freed by one file and reused by the next are zeroed only
    /// where they must be: every byte below the size reads as written or
    /// zero, through each way a file grows (debug builds poison reused
    /// frames, so a byte left over shows as 0xA5).
    #[test]
    fn reused_frames_read_as_zeros_wherever_nothing_was_written() {
        for mode in CacheMode::ALL {
            for round in 0..4 {
                // Dirty frames in this thread's cache for the next file.
                let old = PageCache::new(mode);
                old.write(Some(0), &[0xFF; 8 * PAGE]).unwrap();
                drop(old);
                let pc = PageCache::new(mode);
                let mut model = Vec::new();
                let put = |pc: &PageCache, model: &mut Vec<u8>, at: usize, d: &[u8]| {
                    pc.write(Some(at as u64), d).unwrap();
                    if model.len() < at + d.len() {
                        model.resize(at + d.len(), 0);
                    }
                    model[at..at + d.len()].copy_from_slice(d);
                };
                match round {
                    // A small write in the middle of a new page.
                    0 => put(&pc, &mut model, 100, b"tail"),
                    // A write past the end, in the same page and the next.
                    1 => {
                        put(&pc, &mut model, 0, b"head");
                        put(&pc, &mut model, 3000, b"gap in the first page");
                        put(&pc, &mut model, 2 * PAGE + 10, b"and a hole between");
                    }
                    // set_len up, then a write that does not reach the end.
                    2 => {
                        put(&pc, &mut model, 0, b"short");
                        pc.set_len(3 * PAGE as u64 + 5).unwrap();
                        model.resize(3 * PAGE + 5, 0);
                        put(&pc, &mut model, PAGE + 7, b"inside");
                    }
                    // allocate past the end, truncate down, then grow again.
                    _ => {
                        put(&pc, &mut model, 0, &[7; 5000]);
                        pc.set_len(4100).unwrap();
                        model.truncate(4100);
                        pc.allocate(6000, 100, false).unwrap();
                        model.resize(6100, 0);
                        pc.set_len(2 * PAGE as u64).unwrap();
                        model.resize(2 * PAGE, 0);
                    }
                }
                let mut buf = vec![0x11; model.len() + 10];
                let n = pc.read(0, &mut buf);
                assert_eq!(n, model.len(), "{mode:?} round {round}");
                assert!(buf[..n] == model[..], "{mode:?} round {round}: a byte nobody wrote is not zero");
            }
        }
    }

    /// A reader of a hole races a writer filling it with reused frames: it
    /// sees zeros or the data, never a frame's old bytes.
    #[test]
    fn a_reader_of_a_hole_never_sees_a_reused_frames_old_bytes() {
        let rounds = if cfg!(miri) { 2 } else { 200 };
        for _ in 0..rounds {
            let old = PageCache::new(CacheMode::Lockless);
            old.write(Some(0), &[0xFF; 8 * PAGE]).unwrap();
            drop(old);
            let pc = Arc::new(PageCache::new(CacheMode::Lockless));
            pc.write(Some(8 * PAGE as u64), b"end").unwrap();
            let reader = {
                let pc = pc.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 8 * PAGE];
                    // Each read copies and checks 32 KiB: Miri's interpreter
                    // takes minutes over fifty of them.
                    for _ in 0..if cfg!(miri) { 3 } else { 50 } {
                        let n = pc.read(0, &mut buf);
                        assert!(buf[..n].iter().all(|&b| b == 0 || b == 9), "old bytes read from a hole");
                    }
                })
            };
            for p in 0..8 {
                pc.write(Some(p * PAGE as u64 + 2000), &[9; 100]).unwrap();
            }
            reader.join().unwrap();
        }
    }

    /// A lockless reader that loaded the size before a truncate, racing
    /// writes that put reused frames back in its range: it never returns
    /// a byte this file did not hold (the review's reproducer: before the
    /// truncate count, it read a reused frame's old bytes within 0.2 s).
    #[test]
    fn a_reader_racing_truncate_and_rewrite_never_sees_another_files_bytes() {
        let old = PageCache::new(CacheMode::Lockless);
        old.write(Some(0), &[0xFF; 8 * PAGE]).unwrap();
        drop(old);
        let pages = if cfg!(miri) { 4 } else { 64 };
        let pc = Arc::new(PageCache::new(CacheMode::Lockless));
        pc.write(Some(0), &vec![1; pages * PAGE]).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = {
            let (pc, stop) = (pc.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    pc.set_len(0).unwrap();
                    for k in (0..pages as u64).rev() {
                        pc.write(Some(k * PAGE as u64), &[2; 4]).unwrap();
                    }
                    pc.write(Some(0), &vec![1; pages * PAGE]).unwrap();
                }
            })
        };
        let mut buf = vec![0u8; pages * PAGE];
        let mut bad = None;
        for _ in 0..if cfg!(miri) { 20 } else { 20_000 } {
            let n = pc.read(0, &mut buf);
            if let Some(&b) = buf[..n].iter().find(|&&b| b > 2) {
                bad = Some(b);
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
        assert_eq!(bad, None, "a reader saw a byte nobody wrote to this file");
    }

    #[test]
    fn disjoint_concurrent_writers_lose_nothing() {
        for mode in CacheMode::ALL {
            let pc = Arc::new(PageCache::new(mode));
            let per = if cfg!(miri) { 16 } else { 5000 };
            let ts: Vec<_> = (0..4u8)
                .map(|t| {
                    let pc = pc.clone();
                    std::thread::spawn(move || {
                        for i in 0..per {
                            // Interleaved 3-byte records: threads share words and pages.
                            let at = (i * 4 + t as usize) as u64 * 3;
                            pc.write(Some(at), &[t + 1; 3]).unwrap();
                        }
                    })
                })
                .collect();
            for t in ts {
                t.join().unwrap();
            }
            let mut buf = vec![0; per * 12];
            assert_eq!(pc.read(0, &mut buf), per * 12);
            for (r, chunk) in buf.chunks(3).enumerate() {
                assert_eq!(chunk, [(r % 4) as u8 + 1; 3], "{mode:?} record {r}");
            }
        }
    }

    #[test]
    fn a_reader_racing_truncate_never_sees_past_the_new_end_once_it_returned() {
        use std::sync::atomic::AtomicBool;
        for mode in CacheMode::ALL {
            let pc = Arc::new(PageCache::new(mode));
            let rounds = if cfg!(miri) { 3 } else { 300 };
            let (done, ack, stop) =
                (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
            // The writer grows the file to 3 pages, truncates it to 100
            // bytes, publishes the round, and waits for the checker.
            let writer = {
                let (pc, done, ack) = (pc.clone(), done.clone(), ack.clone());
                std::thread::spawn(move || {
                    for r in 1..=rounds {
                        pc.write(Some(0), &[0xEE; 3 * PAGE]).unwrap();
                        pc.set_len(100).unwrap();
                        done.store(r, Ordering::Release);
                        while ack.load(Ordering::Acquire) != r {
                            std::thread::yield_now();
                        }
                    }
                })
            };
            // The racer reads all along: it must never crash, and sees only
            // written bytes or zeros.
            let racer = {
                let (pc, stop) = (pc.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 3 * PAGE];
                    while !stop.load(Ordering::Relaxed) {
                        let n = pc.read(0, &mut buf);
                        assert!(buf[..n].iter().all(|&b| b == 0xEE || b == 0));
                    }
                })
            };
            // The checker reads only between a truncate's return and the
            // next write: exactly the 100 bytes kept.
            let mut buf = vec![0u8; 3 * PAGE];
            for r in 1..=rounds {
                while done.load(Ordering::Acquire) != r {
                    std::thread::yield_now();
                }
                let n = pc.read(0, &mut buf);
                assert_eq!(n, 100, "{mode:?}: read past the new end after truncate returned");
                assert!(buf[..100].iter().all(|&b| b == 0xEE));
                ack.store(r, Ordering::Release);
            }
            writer.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            racer.join().unwrap();
            // The truncated tail reads as zeros when the file grows again.
            pc.set_len(300).unwrap();
            assert_eq!(pc.read(0, &mut buf), 300);
            assert!(buf[100..300].iter().all(|&b| b == 0), "{mode:?}: stale bytes past the truncation");
        }
    }
}
