//! The invariant check: what must hold at every instant, checked while
//! updates run (nothing here stops them).

use super::dentry::{Dentry, HASHED, LRU_SHARD_MASK, LRU_SHARD_SHIFT, NEG_LRU, ON_LRU};
use super::lru::lru_next;
use super::Dcache;
use crate::sync::atomic::Ordering;
use crate::sync::index::Probe;
use crate::sync::lockref::DEAD;

impl Dcache {
    /// Checks the cache's structural invariants while updates may run:
    /// every dentry on an LRU list is live, flagged `ON_LRU` with its
    /// list's shard, and the lists' links agree both ways; every dentry
    /// found in a directory's index and still hashed (re-checked, since the
    /// walk sees changes in flight) has that directory as its parent, is not
    /// dead, and is found again under its own name. Returns the first
    /// violation found. A debugging aid for tests and bug reports.
    pub fn check_invariants(&self) -> Result<(), String> {
        let supers = self.supers.lock();
        for &sb in supers.iter() {
            // SAFETY: superblocks on the list are live, and their roots.
            let root = unsafe { &*(*sb).root.load(std::sync::atomic::Ordering::Relaxed) };
            let g = self.rcu.read_lock();
            let mut stack = vec![root];
            let mut err = None;
            while let Some(dir) = stack.pop() {
                dir.children.for_each(&g, |c| {
                    if err.is_some() {
                        return;
                    }
                    let s = c.seq.raw();
                    let hashed = c.flags.load(Ordering::Relaxed) & HASHED != 0;
                    let parent_ok = std::ptr::eq(c.parent.load(Ordering::Acquire), dir);
                    let dead = c.lockref().count_hint() == DEAD;
                    let name = c.name();
                    let refound = dir
                        .children
                        .find(&g, name.hash, |x| if std::ptr::eq(x, c) { Probe::Stop(()) } else { Probe::Skip })
                        .is_some();
                    if s & 1 != 0 || c.seq.read_retry(s) || !hashed {
                        return; // changing, moved or unhashed meanwhile
                    }
                    if !parent_ok {
                        err = Some(format!("hashed dentry {c:p} in the index of {dir:p}, not its parent"));
                    } else if dead {
                        err = Some(format!("dead dentry {c:p} still hashed"));
                    } else if !refound {
                        let mut tags = Vec::new();
                        dir.children.for_each(&g, |x| {
                            if std::ptr::eq(x, c) {
                                tags.push("present in a full scan");
                            }
                        });
                        err = Some(format!(
                            "hashed dentry {c:p} ({:?}, seq {s}, hash {:#x}) not found again under its own name ({tags:?}; {})",
                            String::from_utf8_lossy(&name.bytes),
                            name.hash,
                            dir.children.describe(&g, c, name.hash)
                        ));
                    } else {
                        stack.push(c);
                    }
                });
            }
            if let Some(e) = err {
                return Err(e);
            }
        }
        drop(supers);
        let mut err = None;
        self.lrus.for_each_locked(|shard, negative, head, tail| {
            let mut stamp = 0;
            let kind = if negative { "negative" } else { "positive" };
            let mut prev: *const Dentry = std::ptr::null();
            let mut p = head;
            let mut n = 0usize;
            while !p.is_null() && err.is_none() {
                // SAFETY: members of a list are live while its lock is held
                // (they leave it, under the lock, before they are marked
                // dead): the invariant this checks.
                let d = unsafe { &*p };
                let f = d.flags.load(Ordering::Relaxed);
                if f & ON_LRU == 0 || ((f & LRU_SHARD_MASK) >> LRU_SHARD_SHIFT) as usize != shard {
                    err = Some(format!("dentry {p:p} on LRU shard {shard} with flags {f:#x}"));
                } else if d.lockref().count_hint() == DEAD {
                    err = Some(format!("dead dentry {p:p} on LRU shard {shard}"));
                } else if (f & NEG_LRU != 0) != negative || d.inode.load(Ordering::Relaxed).is_null() != negative {
                    // The inode changes only with the shard's lock held
                    // while the dentry is on a list (`lru_flip_locked`).
                    err = Some(format!("dentry {p:p} with flags {f:#x} on LRU shard {shard}'s {kind} list"));
                }
                // SAFETY: the shard's lock is held.
                let (pv, nx, st) = unsafe { lru_next(d) };
                if !std::ptr::eq(pv, prev) {
                    err = Some(format!("broken LRU back link at {p:p}"));
                } else if st <= stamp {
                    err = Some(format!("LRU stamps out of order at {p:p}: {st} after {stamp}"));
                }
                stamp = st;
                n += 1;
                if n > 1 << 40 {
                    err = Some("an LRU list has a cycle".into());
                }
                prev = p;
                p = nx;
            }
            if err.is_none() && !std::ptr::eq(tail, prev) {
                err = Some(format!("broken tail of LRU shard {shard}'s {kind} list"));
            }
        });
        err.map_or(Ok(()), Err)
    }
}
