//! The seed techniques as switchable policies, chosen when a `Vfs` is built.
//! Every decision a mode makes is a method here, so each mode's behaviour
//! reads in one place.
//!
//! | mode      | lookup and stat of a cached path                                   | seed |
//! |-----------|--------------------------------------------------------------------|------|
//! | `global`  | one lock held over every namespace operation, stat included (Linux 2.4's `dcache_lock`; gVisor's per-filesystem lock over the walk) | 003 (before) |
//! | `dlock`   | REF-walk over RCU hash chains; every reference change takes the dentry's lock (Linux 2.6 after seed 003) | 003 |
//! | `lockref` | REF-walk: a compare-and-swap reference on every component       | 000  |
//! | `rcuwalk` | RCU-walk; stat takes and drops a reference on the final dentry (Linux today) | 003, 002 |
//! | `norefs`  | RCU-walk; stat reads attributes under the inode's sequence count and takes no reference: nothing shared is written (default) | beyond Linux |
//!
//! The other axes, each with its policy here:
//!
//! | axis | choices | seed |
//! |---|---|---|
//! | [`Layout`] | where a dentry's reference count lives: in its lookup cache line (`packed`) or on a line of its own (`split`, default) | 000 |
//! | [`CacheMode`] | how the page cache's index is locked: `mutex`, `rwlock`, `lockless` (default) | 001 |
//! | [`ListMode`] | how a superblock's inode list is locked: `locked`, `batch`, `percpu` (default) | 004 |
//! | [`AtimePolicy`] | when a read updates atime: `relatime` (default), `noatime`, `strict` | |

/// How lookups take references.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RefMode {
    Global,
    Dlock,
    Lockref,
    RcuWalk,
    #[default]
    NoRefs,
}

impl RefMode {
    pub const ALL: [RefMode; 5] =
        [RefMode::Global, RefMode::Dlock, RefMode::Lockref, RefMode::RcuWalk, RefMode::NoRefs];

    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            RefMode::Global => "global",
            RefMode::Dlock => "dlock",
            RefMode::Lockref => "lockref",
            RefMode::RcuWalk => "rcuwalk",
            RefMode::NoRefs => "norefs",
        }
    }

    pub fn from_name(name: &str) -> Option<RefMode> {
        RefMode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Every namespace operation holds the one global lock.
    #[inline(always)]
    pub(crate) fn takes_global_lock(self) -> bool {
        self == RefMode::Global
    }

    /// Reference changes take the dentry's lock instead of a
    /// compare-and-swap.
    #[inline(always)]
    pub(crate) fn locks_every_reference(self) -> bool {
        matches!(self, RefMode::Global | RefMode::Dlock)
    }

    /// Lookups try RCU-walk before REF-walk.
    #[inline(always)]
    pub(crate) fn tries_rcu_walk(self) -> bool {
        matches!(self, RefMode::RcuWalk | RefMode::NoRefs)
    }

    /// A file (not a directory) made in a directory of the bound memfs
    /// gets no dentry, and an open of one finds its inode without making
    /// one: memfs's index, which the RCU walk reads, answers for the name
    /// as well as a dentry would (see `Dcache::creates_bare`). Only where
    /// a stat takes no reference: in `rcuwalk` a stat pins the final
    /// dentry, so the first stat of the name would make it anyway.
    #[inline(always)]
    pub(crate) fn leaves_bare(self) -> bool {
        self == RefMode::NoRefs
    }

    /// Stat pins the final dentry (a get and a put), as Linux's
    /// `vfs_statx` does through `path_put`.
    #[inline(always)]
    pub(crate) fn stat_pins_final(self) -> bool {
        self == RefMode::RcuWalk
    }
}

/// Where a dentry keeps its reference count (seed 002).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Layout {
    /// In the cache line the RCU lookup reads: every get and put by one
    /// thread invalidates that line for every other thread's lookup.
    Packed,
    /// On its own cache line (default).
    #[default]
    Split,
}

impl Layout {
    pub const ALL: [Layout; 2] = [Layout::Packed, Layout::Split];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Packed => "packed",
            Layout::Split => "split",
        }
    }

    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// How the page cache's index is locked (seed 001: `mutex` and `rwlock`
/// before, `lockless` after; see `filemap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheMode {
    Mutex,
    RwLock,
    #[default]
    Lockless,
}

impl CacheMode {
    pub const ALL: [CacheMode; 3] = [CacheMode::Mutex, CacheMode::RwLock, CacheMode::Lockless];

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Mutex => "mutex",
            CacheMode::RwLock => "rwlock",
            CacheMode::Lockless => "lockless",
        }
    }

    pub fn from_name(name: &str) -> Option<CacheMode> {
        CacheMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// How a superblock's inode list is locked (seed 004: `locked` before,
/// `batch` and `percpu` after; see `sync::list_batch`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ListMode {
    Locked,
    Batch,
    #[default]
    PerCpu,
}

impl ListMode {
    pub const ALL: [ListMode; 3] = [ListMode::Locked, ListMode::Batch, ListMode::PerCpu];

    pub fn name(self) -> &'static str {
        match self {
            ListMode::Locked => "locked",
            ListMode::Batch => "batch",
            ListMode::PerCpu => "percpu",
        }
    }

    pub fn from_name(name: &str) -> Option<ListMode> {
        ListMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// When reads update atime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtimePolicy {
    /// Update atime only if it is not newer than mtime or ctime, or is more
    /// than a day old (Linux's default): a read of a hot file writes nothing.
    #[default]
    Relatime,
    /// Never update atime on read.
    Noatime,
    /// Update atime on every read (POSIX strict).
    Strict,
}
