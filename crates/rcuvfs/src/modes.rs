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
//! A second axis, [`Layout`], places the reference count in the dentry's
//! lookup cache line (`packed`) or on a line of its own (`split`, default).

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
