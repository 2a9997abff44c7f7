//! Paths and ancestry: `d_path`, `is_ancestor`, the paths of an inode's
//! aliases.

use std::ptr;

use super::dentry::Dentry;
use super::Dcache;
use crate::inode::Inode;

impl Dcache {
    /// The path of `d` from its superblock's root (`d_path`); `None` for an
    /// unhashed dentry (a removed name). Built under RCU with no lock: each
    /// component's name and parent are read under its sequence count, every
    /// count is checked again at the end (so the path held at that instant),
    /// and the count of moves across directories is validated around it.
    /// After a few failed attempts, it is built under the rename mutex.
    pub fn d_path(&self, d: &Dentry) -> Option<Vec<u8>> {
        for attempt in 0.. {
            let _rm = (attempt >= 8).then(|| self.rename_mutex.lock());
            let _g = self.rcu.read_lock();
            let Some(rs) = self.renames.read_begin() else { continue };
            let mut seen: Vec<(&Dentry, u32)> = Vec::new();
            let mut comps: Vec<&[u8]> = Vec::new();
            let mut cur = d;
            let mut consistent = true;
            let mut live = true;
            while !cur.is_root() {
                let s = cur.seq.raw();
                if s & 1 != 0 {
                    consistent = false;
                    break;
                }
                if !cur.is_hashed() {
                    live = false;
                    break;
                }
                comps.push(&cur.name().bytes);
                let p = cur.parent();
                seen.push((cur, s));
                cur = p;
            }
            if !consistent
                || seen.iter().any(|(x, s)| x.seq.read_retry(*s))
                || (_rm.is_none() && self.renames.read_retry(rs))
            {
                continue;
            }
            if !live {
                return None;
            }
            let mut path = Vec::new();
            for c in comps.iter().rev() {
                path.push(b'/');
                path.extend_from_slice(c);
            }
            if path.is_empty() {
                path.push(b'/');
            }
            return Some(path);
        }
        unreachable!()
    }

    /// The paths of the cached, hashed dentries that name `inode` (its
    /// aliases: hard links), sorted.
    pub fn alias_paths(&self, inode: &Inode) -> Vec<Vec<u8>> {
        let _g = self.rcu.read_lock();
        let ds: Vec<usize> = Self::aliases_of(inode);
        // SAFETY: a dentry on an inode's alias list is live until it leaves
        // the list (kill, d_delete), and it is freed only through RCU, whose
        // read section we are in.
        let mut out: Vec<Vec<u8>> =
            ds.into_iter().filter_map(|d| self.d_path(unsafe { &*(d as *const Dentry) })).collect();
        out.sort();
        out
    }

    /// The hash of `d`'s current name (which covers its parent): the key of
    /// its name lock.
    pub fn name_hash_of(&self, d: &Dentry) -> u64 {
        let _g = self.rcu.read_lock();
        d.name().hash
    }

    /// Is `anc` an ancestor of `d` (or `d` itself)? Reads the parent chain
    /// under RCU. Exact when the caller holds the rename mutex, so the tree's
    /// shape above both cannot change (a cross-directory rename, a mount, a
    /// lookup moving a directory); a same-directory rename asks only whether
    /// its source is the directory itself or above it, which no concurrent
    /// rename can change, since moving the source needs its name lock, held
    /// by the caller.
    pub fn is_ancestor(&self, anc: &Dentry, d: &Dentry) -> bool {
        let _g = self.rcu.read_lock();
        let mut cur = d;
        loop {
            if ptr::eq(cur, anc) {
                return true;
            }
            if cur.is_root() {
                return false;
            }
            cur = cur.parent();
        }
    }
}
