//! The tree's invariants, checked on one snapshot of the cluster (an
//! fsck): what the tests assert after racing clients, killed members and
//! killed clients, and what a user can run on a live tree.

use std::collections::{BTreeMap, HashMap};

use super::layout::{decode_entry, Key, Record, CHUNK, ROOT};
use super::{range, Etcd};
use crate::error::Result;
use crate::fs::{FileType, Ino};

impl Etcd {
    /// Reads the whole tree at one revision and returns every broken
    /// invariant found (none: the tree is whole). Reads everything into
    /// memory: for tests and trees of modest size.
    pub fn check(&self) -> Result<Vec<String>> {
        let l = &self.sh.layout;
        let all = self.call(|mut c| {
            let p = l.prefix().to_vec();
            async move { c.get(p.clone(), range(p)).await }
        })?;
        let mut recs: BTreeMap<Ino, Record> = BTreeMap::new();
        let mut entries: Vec<(Ino, Vec<u8>, Ino, FileType)> = Vec::new();
        let (mut chunks, mut xattrs, mut orphans, mut holds) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut graces = Vec::new();
        let mut next = 0;
        let mut bad = Vec::new();
        for kv in all.kvs() {
            match l.parse(kv.key()) {
                Key::Record(ino) => match Record::decode(kv.value()) {
                    Some(r) => {
                        recs.insert(ino, r);
                    }
                    None => bad.push(format!("inode {ino}: undecodable record")),
                },
                Key::Entry(dir, name) => match decode_entry(kv.value()) {
                    Some((ino, kind)) => entries.push((dir, name.to_vec(), ino, kind)),
                    None => bad.push(format!("entry {dir}/{:?}: undecodable", String::from_utf8_lossy(name))),
                },
                Key::Chunk(ino) => chunks.push((ino, l.chunk_index(ino, kv.key()), kv.value().len())),
                Key::Xattr(ino) => xattrs.push(ino),
                Key::Orphan(ino) => orphans.push(ino),
                Key::Grace(ino) => graces.push(ino),
                Key::Hold(ino) => holds.push(ino),
                Key::Times(_) | Key::Writer(_) => {}
                Key::Other if kv.key() == l.next_ino().as_slice() => {
                    next = kv.value().try_into().map(u64::from_be_bytes).unwrap_or(0);
                }
                Key::Other => bad.push(format!("unknown key {:?}", String::from_utf8_lossy(kv.key()))),
            }
        }
        // Links into each inode, subdirectories of each directory, and the
        // directory holding each directory.
        let mut links: HashMap<Ino, u32> = HashMap::new();
        let mut subdirs: HashMap<Ino, u32> = HashMap::new();
        let mut home: HashMap<Ino, Ino> = HashMap::new();
        for (dir, name, ino, kind) in &entries {
            let name = String::from_utf8_lossy(name);
            match recs.get(dir) {
                Some(d) if d.kind == FileType::Dir => {}
                _ => bad.push(format!("entry {dir}/{name}: its directory is missing or not one")),
            }
            match recs.get(ino) {
                None => bad.push(format!("entry {dir}/{name}: inode {ino} missing")),
                Some(r) if r.kind != *kind => {
                    bad.push(format!("entry {dir}/{name}: says {kind:?}, inode is {:?}", r.kind))
                }
                Some(_) => {}
            }
            *links.entry(*ino).or_default() += 1;
            if *kind == FileType::Dir {
                *subdirs.entry(*dir).or_default() += 1;
                if home.insert(*ino, *dir).is_some() {
                    bad.push(format!("directory {ino} has more than one name"));
                }
            }
        }
        for (ino, r) in &recs {
            let n = links.get(ino).copied().unwrap_or(0);
            if *ino >= next {
                bad.push(format!("inode {ino} at or past the counter {next}"));
            }
            if r.kind == FileType::Dir {
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if r.nlink != want {
                    bad.push(format!("directory {ino}: nlink {} but {want} expected", r.nlink));
                }
                if *ino != ROOT {
                    if n != 1 {
                        bad.push(format!("directory {ino}: {n} names"));
                    }
                    if home.get(ino) != Some(&r.parent) {
                        bad.push(format!("directory {ino}: parent {} but named in {:?}", r.parent, home.get(ino)));
                    }
                    // The parents lead to the root: no cycle.
                    let (mut a, mut steps) = (*ino, 0);
                    while a != ROOT && steps <= recs.len() {
                        a = recs.get(&a).map_or(ROOT, |r| r.parent);
                        steps += 1;
                    }
                    if steps > recs.len() {
                        bad.push(format!("directory {ino}: its parents make a cycle"));
                    }
                }
            } else if r.nlink != n {
                bad.push(format!("inode {ino}: nlink {} but {n} names", r.nlink));
            } else if n == 0 && !orphans.contains(ino) {
                bad.push(format!("inode {ino}: no links and not an orphan"));
            }
        }
        for (ino, index, len) in chunks {
            match (recs.get(&ino), index) {
                (Some(r), Some(i)) if r.kind == FileType::File => {
                    let start = i * CHUNK as u64;
                    if len > CHUNK || start + len as u64 > r.size {
                        bad.push(format!("inode {ino}: chunk {i} ({len} bytes) past the size {}", r.size));
                    }
                }
                _ => bad.push(format!("chunk of inode {ino} without a file")),
            }
        }
        for ino in xattrs.iter().chain(&holds) {
            if !recs.contains_key(ino) {
                bad.push(format!("attribute or hold of inode {ino} without an inode"));
            }
        }
        for ino in graces {
            // An orphan is reclaimed only once its grace key has expired.
            if !orphans.contains(&ino) {
                bad.push(format!("grace period of inode {ino} without an orphan"));
            }
        }
        for ino in orphans {
            if recs.get(&ino).is_none_or(|r| r.nlink != 0) {
                bad.push(format!("orphan {ino} without an unlinked inode"));
            }
        }
        Ok(bad)
    }

    /// How many orphans and holds the tree has (for tests of reclaim).
    pub fn orphans(&self) -> Result<(usize, usize)> {
        let l = &self.sh.layout;
        let count = |p: Vec<u8>| -> Result<usize> {
            let r = self.call(|mut c| {
                let p = p.clone();
                async move { c.get(p.clone(), range(p).map(|o| o.with_count_only())).await }
            })?;
            Ok(r.count() as usize)
        };
        let mut holds = l.prefix().to_vec();
        holds.extend_from_slice(b"h/");
        Ok((count(l.orphans())?, count(holds)?))
    }
}
