//! The key layout of a tree in etcd, and the encoding of its values.
//!
//! Every key starts with the tree's prefix `P/` (several trees share one
//! cluster under different prefixes). Numbers in keys are 16 hex digits, so
//! that etcd's byte order is their numeric order and a key's prefix never
//! matches another number's.
//!
//! | key                             | value                                  |
//! |---------------------------------|----------------------------------------|
//! | `P/n`                           | the next free inode number (u64 BE)    |
//! | `P/i/{ino}`                     | the inode record ([`Record`])          |
//! | `P/i/{ino}/t`                   | a directory's mtime and ctime, put blind by creates and unlinks in it |
//! | `P/d/{dir}/{cookie}{name}`      | a directory entry: the child's inode number (u64 LE) and type |
//! | `P/c/{ino}/{index}`             | a chunk of file data, at most [`CHUNK`] bytes |
//! | `P/x/{ino}/{name}`              | an extended attribute                  |
//! | `P/o/{ino}`                     | an orphan: no links left, reclaimed once no client holds it and its grace key is gone |
//! | `P/g/{ino}`                     | an orphan's grace period: attached to a lease that expires at least the grace period after the unlink, by the cluster's clock |
//! | `P/h/{ino}/{client}`            | a client holds the orphan (attached to the client's lease) |
//! | `P/w/{client}`                  | put by every transaction of that client, so that its watcher knows the revision as its own |
//!
//! A directory's entries sort by cookie, a 61-bit hash of the name, which is
//! the readdir cookie: resuming a listing is a range read from the cookie's
//! key, and an entry keeps its cookie for as long as it exists.

use super::super::{FileType, Ino, Timespec};

/// The largest chunk of file data under one key.
pub const CHUNK: usize = 64 * 1024;

/// The root directory's inode number.
pub const ROOT: Ino = 1;

/// The keys of one tree.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `PREFIX/`.
    prefix: Vec<u8>,
}

fn push_hex(k: &mut Vec<u8>, n: u64) {
    k.extend_from_slice(format!("{n:016x}").as_bytes());
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

/// The first key after every key that starts with `prefix` (etcd's
/// `range_end` for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A name's readdir cookie: FNV-1a, folded to 61 bits, never 0 (0 starts
/// a listing). Two names of one directory with the same cookie are listed
/// together, never split across batches (see `readdir`).
pub fn cookie(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    ((h ^ (h >> 61)) & ((1 << 61) - 1)).max(1)
}

/// What a key of the tree is, as the watcher reads it.
#[derive(Debug, PartialEq, Eq)]
pub enum Key<'a> {
    Record(Ino),
    Times(Ino),
    Entry(Ino, &'a [u8]),
    Chunk(Ino),
    Xattr(Ino),
    Orphan(Ino),
    Grace(Ino),
    Hold(Ino),
    Writer(i64),
    Other,
}

impl Layout {
    pub fn new(prefix: &str) -> Layout {
        let p = prefix.trim_matches('/');
        Layout { prefix: format!("{p}/").into_bytes() }
    }

    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    fn key(&self, kind: u8, ino: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 40);
        k.extend_from_slice(&self.prefix);
        k.push(kind);
        k.push(b'/');
        push_hex(&mut k, ino);
        k
    }

    pub fn next_ino(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.push(b'n');
        k
    }

    pub fn record(&self, ino: Ino) -> Vec<u8> {
        self.key(b'i', ino)
    }

    pub fn times(&self, ino: Ino) -> Vec<u8> {
        let mut k = self.record(ino);
        k.extend_from_slice(b"/t");
        k
    }

    /// The prefix of a directory's entries.
    pub fn entries(&self, dir: Ino) -> Vec<u8> {
        let mut k = self.key(b'd', dir);
        k.push(b'/');
        k
    }

    pub fn entry(&self, dir: Ino, name: &[u8]) -> Vec<u8> {
        let mut k = self.entries(dir);
        push_hex(&mut k, cookie(name));
        k.extend_from_slice(name);
        k
    }

    /// The first key of `dir`'s entries whose cookie is above `after`.
    pub fn entries_after(&self, dir: Ino, after: u64) -> Vec<u8> {
        let mut k = self.entries(dir);
        push_hex(&mut k, after.saturating_add(1));
        k
    }

    pub fn chunks(&self, ino: Ino) -> Vec<u8> {
        let mut k = self.key(b'c', ino);
        k.push(b'/');
        k
    }

    pub fn chunk(&self, ino: Ino, index: u64) -> Vec<u8> {
        let mut k = self.chunks(ino);
        push_hex(&mut k, index);
        k
    }

    /// The index of a chunk key of `ino`.
    pub fn chunk_index(&self, ino: Ino, key: &[u8]) -> Option<u64> {
        parse_hex(key.strip_prefix(self.chunks(ino).as_slice())?)
    }

    pub fn xattrs(&self, ino: Ino) -> Vec<u8> {
        let mut k = self.key(b'x', ino);
        k.push(b'/');
        k
    }

    pub fn xattr(&self, ino: Ino, name: &[u8]) -> Vec<u8> {
        let mut k = self.xattrs(ino);
        k.extend_from_slice(name);
        k
    }

    pub fn orphans(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(b"o/");
        k
    }

    pub fn orphan(&self, ino: Ino) -> Vec<u8> {
        self.key(b'o', ino)
    }

    /// The grace key of the orphan `ino`: attached to a lease of the
    /// cluster's, so that its time is counted by the cluster's clock, not
    /// the machines'.
    pub fn grace(&self, ino: Ino) -> Vec<u8> {
        self.key(b'g', ino)
    }

    pub fn holds(&self, ino: Ino) -> Vec<u8> {
        let mut k = self.key(b'h', ino);
        k.push(b'/');
        k
    }

    pub fn hold(&self, ino: Ino, client: i64) -> Vec<u8> {
        let mut k = self.holds(ino);
        push_hex(&mut k, client as u64);
        k
    }

    pub fn writer(&self, client: i64) -> Vec<u8> {
        self.key(b'w', client as u64)
    }

    /// What `key` is.
    pub fn parse<'a>(&self, key: &'a [u8]) -> Key<'a> {
        let Some(rest) = key.strip_prefix(self.prefix.as_slice()) else { return Key::Other };
        if rest.len() < 18 || rest[1] != b'/' {
            return Key::Other;
        }
        let Some(ino) = parse_hex(&rest[2..18]) else { return Key::Other };
        let tail = &rest[18..];
        match (rest[0], tail) {
            (b'i', b"") => Key::Record(ino),
            (b'i', b"/t") => Key::Times(ino),
            (b'd', t) if t.len() > 17 && t[0] == b'/' => Key::Entry(ino, &t[17..]),
            (b'c', _) => Key::Chunk(ino),
            (b'x', _) => Key::Xattr(ino),
            (b'o', b"") => Key::Orphan(ino),
            (b'g', b"") => Key::Grace(ino),
            (b'h', _) => Key::Hold(ino),
            (b'w', b"") => Key::Writer(ino as i64),
            _ => Key::Other,
        }
    }

    /// The name and cookie of an entry key of `dir`.
    pub fn entry_name<'a>(&self, dir: Ino, key: &'a [u8]) -> Option<(u64, &'a [u8])> {
        let rest = key.strip_prefix(self.entries(dir).as_slice())?;
        if rest.len() <= 16 {
            return None;
        }
        Some((parse_hex(&rest[..16])?, &rest[16..]))
    }

    /// The inode number of an orphan key.
    pub fn orphan_ino(&self, key: &[u8]) -> Option<Ino> {
        match self.parse(key) {
            Key::Orphan(ino) => Some(ino),
            _ => None,
        }
    }
}

/// An inode as stored: everything `stat` reports but the inode number and
/// the block count, a directory's parent, and a symlink's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: FileType,
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub rdev: u64,
    /// A directory's parent (the root's is itself); 0 for other types.
    pub parent: Ino,
    pub target: Vec<u8>,
}

const KINDS: [FileType; 7] = [
    FileType::File,
    FileType::Dir,
    FileType::Symlink,
    FileType::CharDevice,
    FileType::BlockDevice,
    FileType::Fifo,
    FileType::Socket,
];

/// Little-endian fields, read in order.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn time(&mut self) -> Option<Timespec> {
        Some(Timespec { sec: self.u64()? as i64, nsec: self.u32()? })
    }
}

fn put_time(v: &mut Vec<u8>, t: Timespec) {
    v.extend_from_slice(&(t.sec as u64).to_le_bytes());
    v.extend_from_slice(&t.nsec.to_le_bytes());
}

/// A time as bytes that sort as the times do (etcd compares values
/// bytewise): the seconds offset by 2^63, then the nanoseconds, big-endian.
fn put_time_ordered(v: &mut Vec<u8>, t: Timespec) {
    v.extend_from_slice(&((t.sec as u64) ^ (1 << 63)).to_be_bytes());
    v.extend_from_slice(&t.nsec.to_be_bytes());
}

fn get_time_ordered(v: &[u8]) -> Option<Timespec> {
    let sec = u64::from_be_bytes(v.get(..8)?.try_into().ok()?) ^ (1 << 63);
    Some(Timespec { sec: sec as i64, nsec: u32::from_be_bytes(v.get(8..12)?.try_into().ok()?) })
}

/// The value of a `Times` key: ctime then mtime, in byte order, so that a
/// later value compares greater.
pub fn encode_times(mtime: Timespec, ctime: Timespec) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    put_time_ordered(&mut v, ctime);
    put_time_ordered(&mut v, mtime);
    v
}

/// (mtime, ctime) of a `Times` value.
pub fn decode_times(v: &[u8]) -> Option<(Timespec, Timespec)> {
    Some((get_time_ordered(v.get(12..)?)?, get_time_ordered(v)?))
}

/// The value of an entry key.
pub fn encode_entry(ino: Ino, kind: FileType) -> Vec<u8> {
    let mut v = ino.to_le_bytes().to_vec();
    v.push(KINDS.iter().position(|k| *k == kind).unwrap_or(0) as u8);
    v
}

pub fn decode_entry(v: &[u8]) -> Option<(Ino, FileType)> {
    let mut r = Reader(v);
    let ino = r.u64()?;
    let kind = *KINDS.get(r.take::<1>()?[0] as usize)?;
    Some((ino, kind))
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(80 + self.target.len());
        v.push(KINDS.iter().position(|k| *k == self.kind).unwrap_or(0) as u8);
        for n in [self.perm, self.nlink, self.uid, self.gid] {
            v.extend_from_slice(&n.to_le_bytes());
        }
        v.extend_from_slice(&self.size.to_le_bytes());
        for t in [self.atime, self.mtime, self.ctime] {
            put_time(&mut v, t);
        }
        v.extend_from_slice(&self.rdev.to_le_bytes());
        v.extend_from_slice(&self.parent.to_le_bytes());
        v.extend_from_slice(&self.target);
        v
    }

    pub fn decode(v: &[u8]) -> Option<Record> {
        let mut r = Reader(v);
        let kind = *KINDS.get(r.take::<1>()?[0] as usize)?;
        Some(Record {
            kind,
            perm: r.u32()?,
            nlink: r.u32()?,
            uid: r.u32()?,
            gid: r.u32()?,
            size: r.u64()?,
            atime: r.time()?,
            mtime: r.time()?,
            ctime: r.time()?,
            rdev: r.u64()?,
            parent: r.u64()?,
            target: r.0.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_back() {
        let l = Layout::new("/trees/a/");
        assert_eq!(l.prefix(), b"trees/a/");
        assert_eq!(l.parse(&l.record(7)), Key::Record(7));
        assert_eq!(l.parse(&l.times(7)), Key::Times(7));
        assert_eq!(l.parse(&l.entry(9, b"x/y")), Key::Entry(9, b"x/y"));
        assert_eq!(l.parse(&l.chunk(9, 3)), Key::Chunk(9));
        assert_eq!(l.chunk_index(9, &l.chunk(9, 3)), Some(3));
        assert_eq!(l.chunk_index(8, &l.chunk(9, 3)), None);
        assert_eq!(l.parse(&l.orphan(5)), Key::Orphan(5));
        assert_eq!(l.parse(&l.hold(5, 77)), Key::Hold(5));
        assert_eq!(l.parse(&l.writer(-3)), Key::Writer(-3));
        assert_eq!(l.parse(b"trees/b/i/0000000000000007"), Key::Other);
        assert_eq!(l.entry_name(9, &l.entry(9, b"name")), Some((cookie(b"name"), &b"name"[..])));
        // A record's key is a prefix of its times key only.
        assert!(l.times(7).starts_with(&l.record(7)));
        assert!(!l.record(70).starts_with(&l.record(7)));
        assert!(l.entries_after(9, cookie(b"name")) > l.entry(9, b"name"));
    }

    #[test]
    fn values_round_trip() {
        let r = Record {
            kind: FileType::Symlink,
            perm: 0o777,
            nlink: 1,
            uid: 5,
            gid: 6,
            size: 3,
            atime: Timespec { sec: -5, nsec: 7 },
            mtime: Timespec { sec: 1, nsec: 2 },
            ctime: Timespec { sec: 3, nsec: 4 },
            rdev: 0,
            parent: 0,
            target: b"a/b".to_vec(),
        };
        assert_eq!(Record::decode(&r.encode()), Some(r));
        assert_eq!(decode_entry(&encode_entry(42, FileType::Fifo)), Some((42, FileType::Fifo)));
        let (a, b) = (Timespec { sec: -1, nsec: 5 }, Timespec { sec: 2, nsec: 1 });
        assert_eq!(decode_times(&encode_times(a, b)), Some((a, b)));
        assert!(encode_times(a, a) < encode_times(b, b) && encode_times(b, a) < encode_times(a, b));
        assert_eq!(Record::decode(b"\x01abc"), None);
        assert!(cookie(b"") >= 1 && cookie(b"abc") < 1 << 61);
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
    }
}
