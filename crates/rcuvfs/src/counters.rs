//! [`LiveCounters`]: the dentries, inodes and mounts of one `Vfs` that are
//! alive. The dcache, the inode table and the mount code count into them;
//! they live here, apart from all three, so that none imports another for
//! them.

use crate::sync::shard::Counter;

/// Live-object counters of one `Vfs`, kept past its end so that tests can
/// check that teardown freed everything. Updated on allocation and free
/// only, never on a lookup; each thread counts on a line of its own and
/// folds into the shared total now and then (`sync::shard::Counter`).
#[derive(Debug)]
pub struct LiveCounters {
    pub(crate) dentries: Counter,
    pub(crate) negative: Counter,
    /// Misses cached without a dentry (`dcache::absent`).
    pub(crate) absent: Counter,
    pub(crate) inodes: Counter,
    mounts: std::sync::atomic::AtomicI64,
}

impl LiveCounters {
    /// Counters whose shards fold every `batch` units (small for a small
    /// cache target, which the shrinker must hold tightly).
    pub(crate) fn new(batch: i64) -> LiveCounters {
        LiveCounters {
            dentries: Counter::new(batch),
            negative: Counter::new(batch),
            absent: Counter::new(batch),
            inodes: Counter::new(batch),
            mounts: Default::default(),
        }
    }
    pub fn dentries(&self) -> i64 {
        self.dentries.exact()
    }
    pub fn negative_dentries(&self) -> i64 {
        self.negative.exact()
    }
    /// Names cached as absent in their directories' sets, with no dentry.
    pub fn absent_names(&self) -> i64 {
        self.absent.exact()
    }
    pub fn inodes(&self) -> i64 {
        self.inodes.exact()
    }
    /// Mounts besides the root one, attached or detached but still in use.
    pub fn mounts(&self) -> i64 {
        self.mounts.load(std::sync::atomic::Ordering::Relaxed)
    }
    pub(crate) fn add_mount(&self, n: i64) {
        self.mounts.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    pub(crate) fn add_inode(&self, n: i64) {
        self.inodes.add(n);
    }
    pub(crate) fn add_dentry(&self, n: i64, negative: bool) {
        self.dentries.add(n);
        if negative {
            self.negative.add(n);
        }
    }
}
