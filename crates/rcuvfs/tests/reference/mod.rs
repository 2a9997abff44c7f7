//! The plain reference model of the filesystem (a tree of nodes with its
//! own path walk), the operations the model tests run, and the runners that
//! apply an operation to the model and to a `Vfs`. Shared by the proptest
//! model test and the fuzz target (`fuzz/`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;

use rcuvfs::{FileType, OpenOptions, Permissions, RenameFlags, Vfs};

pub const USER: u32 = 1000;
pub const E: fn(i32) -> Out = Out::Err;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    Unit,
    Stat { kind: FileType, size: u64, nlink: u32, perm: u32, uid: u32 },
    Data(Vec<u8>),
    Names(Vec<Vec<u8>>),
    Err(i32),
}

// ---------------------------------------------------------------- the model

pub type Id = usize;

#[derive(Clone, Debug)]
pub enum Kind {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, Id>, Id /* parent */),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    pub perm: u32,
    pub uid: u32,
    pub nlink: u32,
}

pub struct Model {
    pub nodes: Vec<Node>,
}

pub enum Lst<'p> {
    Name(&'p [u8]),
    Dot,
    DotDot,
    Root,
}

pub struct Who {
    pub uid: u32,
}

impl Who {
    pub fn root(&self) -> bool {
        self.uid == 0
    }
    /// mask: 4 read, 2 write, 1 exec.
    pub fn may(&self, n: &Node, mask: u32) -> bool {
        if self.root() {
            return true; // no exec-on-file checks in this model
        }
        let bits = if n.uid == self.uid { n.perm >> 6 } else { n.perm } & 7;
        bits & mask == mask
    }
}

impl Model {
    pub fn new() -> Model {
        Model { nodes: vec![Node { kind: Kind::Dir(BTreeMap::new(), 0), perm: 0o755, uid: 0, nlink: 2 }] }
    }

    pub fn is_dir(&self, id: Id) -> bool {
        matches!(self.nodes[id].kind, Kind::Dir(..))
    }

    pub fn entries(&self, id: Id) -> &BTreeMap<Vec<u8>, Id> {
        match &self.nodes[id].kind {
            Kind::Dir(e, _) => e,
            _ => unreachable!(),
        }
    }

    pub fn entries_mut(&mut self, id: Id) -> &mut BTreeMap<Vec<u8>, Id> {
        match &mut self.nodes[id].kind {
            Kind::Dir(e, _) => e,
            _ => unreachable!(),
        }
    }

    pub fn parent_of(&self, id: Id) -> Id {
        match &self.nodes[id].kind {
            Kind::Dir(_, p) => *p,
            _ => unreachable!(),
        }
    }

    pub fn nlink(&self, id: Id) -> u32 {
        match &self.nodes[id].kind {
            Kind::Dir(e, _) => 2 + e.values().filter(|&&c| self.is_dir(c)).count() as u32,
            _ => self.nodes[id].nlink,
        }
    }

    pub fn search(&self, who: &Who, dir: Id) -> Result<(), i32> {
        if !self.is_dir(dir) {
            return Err(libc::ENOTDIR);
        }
        if !who.may(&self.nodes[dir], 1) {
            return Err(libc::EACCES);
        }
        Ok(())
    }

    /// Walks all but the last component.
    pub fn parent<'p>(&self, who: &Who, path: &'p [u8], links: &mut u32) -> Result<(Id, Lst<'p>, bool), i32> {
        let comps: Vec<&[u8]> = path.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
        let mut cur = 0;
        let Some((&last, inner)) = comps.split_last() else {
            return Ok((0, Lst::Root, false));
        };
        for &c in inner {
            self.search(who, cur)?;
            cur = match c {
                b"." => cur,
                b".." => self.parent_of(cur),
                name => {
                    let id = *self.entries(cur).get(name).ok_or(libc::ENOENT)?;
                    self.follow(who, cur, id, links)?
                }
            };
            if !self.is_dir(cur) {
                return Err(libc::ENOTDIR);
            }
        }
        self.search(who, cur)?;
        let last = match last {
            b"." => Lst::Dot,
            b".." => Lst::DotDot,
            n => Lst::Name(n),
        };
        Ok((cur, last, path.ends_with(b"/")))
    }

    pub fn follow(&self, who: &Who, dir: Id, id: Id, links: &mut u32) -> Result<Id, i32> {
        match &self.nodes[id].kind {
            Kind::Symlink(t) => {
                *links += 1;
                if *links > 40 {
                    return Err(libc::ELOOP);
                }
                let t = t.clone();
                // Targets in this test are absolute, so `dir` does not matter.
                let _ = dir;
                self.resolve(who, &t, true, links)
            }
            _ => Ok(id),
        }
    }

    pub fn resolve(&self, who: &Who, path: &[u8], follow: bool, links: &mut u32) -> Result<Id, i32> {
        let (dir, last, trailing) = self.parent(who, path, links)?;
        let id = match last {
            Lst::Root | Lst::Dot => dir,
            Lst::DotDot => self.parent_of(dir),
            Lst::Name(n) => {
                let mut id = *self.entries(dir).get(n).ok_or(libc::ENOENT)?;
                if follow || trailing {
                    id = self.follow(who, dir, id, links)?;
                }
                if trailing && !self.is_dir(id) {
                    return Err(libc::ENOTDIR);
                }
                id
            }
        };
        Ok(id)
    }

    pub fn stat(&self, id: Id) -> Out {
        let n = &self.nodes[id];
        let (kind, size) = match &n.kind {
            Kind::File(d) => (FileType::File, d.len() as u64),
            Kind::Dir(e, _) => (FileType::Dir, e.len() as u64),
            Kind::Symlink(t) => (FileType::Symlink, t.len() as u64),
        };
        Out::Stat { kind, size, nlink: self.nlink(id), perm: n.perm, uid: n.uid }
    }

    pub fn add(&mut self, dir: Id, name: &[u8], kind: Kind, perm: u32, uid: u32) -> Id {
        self.nodes.push(Node { kind, perm, uid, nlink: 1 });
        let id = self.nodes.len() - 1;
        self.entries_mut(dir).insert(name.to_vec(), id);
        id
    }

    pub fn may_delete(&self, who: &Who, dir: Id, victim: Id, want_dir: bool) -> Result<(), i32> {
        let d = &self.nodes[dir];
        if !who.may(d, 3) {
            return Err(libc::EACCES);
        }
        if d.perm & 0o1000 != 0 && !who.root() && who.uid != d.uid && who.uid != self.nodes[victim].uid {
            return Err(libc::EPERM);
        }
        match (want_dir, self.is_dir(victim)) {
            (true, false) => Err(libc::ENOTDIR),
            (false, true) => Err(libc::EISDIR),
            _ => Ok(()),
        }
    }

    pub fn may_create(&self, who: &Who, dir: Id) -> Result<(), i32> {
        if who.may(&self.nodes[dir], 3) {
            Ok(())
        } else {
            Err(libc::EACCES)
        }
    }

    pub fn is_ancestor(&self, anc: Id, mut id: Id) -> bool {
        loop {
            if id == anc {
                return true;
            }
            if id == 0 {
                return false;
            }
            id = self.parent_of(id);
        }
    }

    pub fn mkdir(&mut self, who: &Who, path: &[u8], umask: u32) -> Result<Out, i32> {
        let (dir, last, _) = self.parent(who, path, &mut 0)?;
        let Lst::Name(name) = last else {
            return Err(libc::EEXIST);
        };
        if self.entries(dir).contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.may_create(who, dir)?;
        self.add(dir, name, Kind::Dir(BTreeMap::new(), dir), 0o777 & !umask, who.uid);
        Ok(Out::Unit)
    }

    /// open(O_WRONLY|O_CREAT|O_TRUNC) and write `data`.
    pub fn write(&mut self, who: &Who, path: &[u8], data: &[u8], links: &mut u32) -> Result<Out, i32> {
        let (dir, last, trailing) = self.parent(who, path, links)?;
        let Lst::Name(name) = last else {
            return Err(libc::EISDIR);
        };
        if trailing {
            return Err(libc::EISDIR);
        }
        let id = match self.entries(dir).get(name) {
            Some(&id) => {
                if let Kind::Symlink(t) = &self.nodes[id].kind {
                    *links += 1;
                    if *links > 40 {
                        return Err(libc::ELOOP);
                    }
                    let t = t.clone();
                    return self.write(who, &t, data, links);
                }
                if self.is_dir(id) {
                    return Err(libc::EISDIR);
                }
                if !who.may(&self.nodes[id], 2) {
                    return Err(libc::EACCES);
                }
                id
            }
            None => {
                self.may_create(who, dir)?;
                self.add(dir, name, Kind::File(Vec::new()), 0o666 & !0o022, who.uid)
            }
        };
        self.nodes[id].kind = Kind::File(data.to_vec());
        Ok(Out::Unit)
    }

    pub fn unlink(&mut self, who: &Who, path: &[u8]) -> Result<Out, i32> {
        let (dir, last, trailing) = self.parent(who, path, &mut 0)?;
        let Lst::Name(name) = last else {
            return Err(libc::EISDIR);
        };
        let id = *self.entries(dir).get(name).ok_or(libc::ENOENT)?;
        if trailing {
            return Err(if self.is_dir(id) { libc::EISDIR } else { libc::ENOTDIR });
        }
        self.may_delete(who, dir, id, false)?;
        self.entries_mut(dir).remove(name);
        self.nodes[id].nlink -= 1;
        Ok(Out::Unit)
    }

    pub fn rmdir(&mut self, who: &Who, path: &[u8]) -> Result<Out, i32> {
        let (dir, last, _) = self.parent(who, path, &mut 0)?;
        let name = match last {
            Lst::Name(n) => n,
            Lst::Dot => return Err(libc::EINVAL),
            Lst::DotDot => return Err(libc::ENOTEMPTY),
            Lst::Root => return Err(libc::EBUSY),
        };
        let id = *self.entries(dir).get(name).ok_or(libc::ENOENT)?;
        self.may_delete(who, dir, id, true)?;
        if !self.entries(id).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.entries_mut(dir).remove(name);
        Ok(Out::Unit)
    }

    pub fn rename(&mut self, who: &Who, from: &[u8], to: &[u8], flags: RenameFlags) -> Result<Out, i32> {
        let (od, ol, ot) = self.parent(who, from, &mut 0)?;
        let (nd, nl, nt) = self.parent(who, to, &mut 0)?;
        let Lst::Name(on) = ol else {
            return Err(libc::EBUSY);
        };
        let Lst::Name(nn) = nl else {
            return Err(if flags.noreplace { libc::EEXIST } else { libc::EBUSY });
        };
        let src = *self.entries(od).get(on).ok_or(libc::ENOENT)?;
        let dst = self.entries(nd).get(nn).copied();
        if flags.exchange && dst.is_none() {
            return Err(libc::ENOENT);
        }
        if flags.noreplace && dst.is_some() {
            return Err(libc::EEXIST);
        }
        let sdir = self.is_dir(src);
        if flags.exchange && !self.is_dir(dst.unwrap()) && nt {
            return Err(libc::ENOTDIR);
        }
        if !sdir && (ot || (nt && !flags.exchange)) {
            return Err(libc::ENOTDIR);
        }
        if self.is_ancestor(src, nd) {
            return Err(libc::EINVAL);
        }
        if let Some(d) = dst {
            if self.is_ancestor(d, od) {
                return Err(if flags.exchange { libc::EINVAL } else { libc::ENOTEMPTY });
            }
            if d == src {
                return Ok(Out::Unit);
            }
        }
        self.may_delete(who, od, src, sdir)?;
        match dst {
            Some(d) => {
                let want = if flags.exchange { self.is_dir(d) } else { sdir };
                self.may_delete(who, nd, d, want)?;
            }
            None => self.may_create(who, nd)?,
        }
        if od != nd {
            for (x, isd) in [(Some(src), sdir), (dst, flags.exchange && dst.is_some_and(|d| self.is_dir(d)))] {
                if let (Some(x), true) = (x, isd) {
                    if !who.may(&self.nodes[x], 2) {
                        return Err(libc::EACCES);
                    }
                }
            }
        }
        if flags.exchange {
            let d = dst.unwrap();
            self.entries_mut(od).insert(on.to_vec(), d);
            self.entries_mut(nd).insert(nn.to_vec(), src);
            for (x, p) in [(src, nd), (d, od)] {
                if let Kind::Dir(_, parent) = &mut self.nodes[x].kind {
                    *parent = p;
                }
            }
            return Ok(Out::Unit);
        }
        if let Some(d) = dst {
            if self.is_dir(d) && !self.entries(d).is_empty() {
                return Err(libc::ENOTEMPTY);
            }
            if !self.is_dir(d) {
                self.nodes[d].nlink -= 1;
            }
        }
        self.entries_mut(od).remove(on);
        self.entries_mut(nd).insert(nn.to_vec(), src);
        if let Kind::Dir(_, parent) = &mut self.nodes[src].kind {
            *parent = nd;
        }
        Ok(Out::Unit)
    }

    pub fn link(&mut self, who: &Who, src: &[u8], dst: &[u8]) -> Result<Out, i32> {
        let s = self.resolve(who, src, false, &mut 0)?;
        let (dir, last, trailing) = self.parent(who, dst, &mut 0)?;
        let Lst::Name(name) = last else {
            return Err(libc::EEXIST);
        };
        if self.entries(dir).contains_key(name) {
            return Err(libc::EEXIST);
        }
        if trailing {
            return Err(libc::ENOENT);
        }
        self.may_create(who, dir)?;
        if self.is_dir(s) {
            return Err(libc::EPERM);
        }
        self.nodes[s].nlink += 1;
        self.entries_mut(dir).insert(name.to_vec(), s);
        Ok(Out::Unit)
    }

    pub fn symlink(&mut self, who: &Who, target: &[u8], path: &[u8]) -> Result<Out, i32> {
        let (dir, last, trailing) = self.parent(who, path, &mut 0)?;
        let Lst::Name(name) = last else {
            return Err(libc::EEXIST);
        };
        if self.entries(dir).contains_key(name) {
            return Err(libc::EEXIST);
        }
        if trailing {
            return Err(libc::ENOENT);
        }
        self.may_create(who, dir)?;
        self.add(dir, name, Kind::Symlink(target.to_vec()), 0o777, who.uid);
        Ok(Out::Unit)
    }

    pub fn read(&self, who: &Who, path: &[u8]) -> Result<(Id, Out), i32> {
        let id = self.resolve(who, path, true, &mut 0)?;
        if !who.may(&self.nodes[id], 4) {
            return Err(libc::EACCES);
        }
        match &self.nodes[id].kind {
            Kind::File(d) => Ok((id, Out::Data(d.clone()))),
            Kind::Dir(..) => Err(libc::EISDIR),
            Kind::Symlink(_) => unreachable!(),
        }
    }

    pub fn read_dir(&self, who: &Who, path: &[u8]) -> Result<Out, i32> {
        let id = self.resolve(who, path, true, &mut 0)?;
        if !self.is_dir(id) {
            return Err(libc::ENOTDIR);
        }
        if !who.may(&self.nodes[id], 4) {
            return Err(libc::EACCES);
        }
        Ok(Out::Names(self.entries(id).keys().cloned().collect()))
    }

    pub fn read_link(&self, who: &Who, path: &[u8]) -> Result<Out, i32> {
        let id = self.resolve(who, path, false, &mut 0)?;
        match &self.nodes[id].kind {
            Kind::Symlink(t) => Ok(Out::Data(t.clone())),
            _ => Err(libc::EINVAL),
        }
    }

    pub fn chmod(&mut self, who: &Who, path: &[u8], perm: u32) -> Result<Out, i32> {
        let id = self.resolve(who, path, true, &mut 0)?;
        if !who.root() && who.uid != self.nodes[id].uid {
            return Err(libc::EPERM);
        }
        self.nodes[id].perm = perm;
        Ok(Out::Unit)
    }
}

// ---------------------------------------------------------------- operations

#[derive(Clone, Debug)]
pub enum Op {
    Mkdir(String),
    Write(String, u8),
    Unlink(String),
    Rmdir(String),
    Rename(String, String, u8),
    Link(String, String),
    Symlink(String, String),
    Stat(String),
    Lstat(String),
    Read(String),
    ReadDir(String),
    ReadLink(String),
    Chmod(String, u32),
    /// Open a file for reading and keep the handle.
    Hold(String),
    /// Read through held handle `i`, then close it.
    ReadHeld(usize),
    /// Run the inner operation as an unprivileged user.
    AsUser(Box<Op>),
}

pub fn flags(f: u8) -> RenameFlags {
    [RenameFlags::NONE, RenameFlags::NOREPLACE, RenameFlags::EXCHANGE][f as usize]
}

pub fn to_out(r: std::io::Result<Out>) -> Out {
    r.unwrap_or_else(|e| E(e.raw_os_error().unwrap_or(-1)))
}

pub fn stat_out(m: rcuvfs::Metadata) -> Out {
    Out::Stat { kind: m.file_type(), size: m.len(), nlink: m.nlink(), perm: m.permissions().mode(), uid: m.uid() }
}

pub struct Sut {
    pub root: Vfs,
    pub user: Vfs,
    pub held: Vec<(Id, rcuvfs::File)>,
    pub held_model: Vec<Id>,
}

pub fn run_vfs(s: &mut Sut, op: &Op, as_user: bool) -> Out {
    let v = if as_user { s.user.clone() } else { s.root.clone() };
    let unit = |r: std::io::Result<()>| to_out(r.map(|_| Out::Unit));
    match op {
        Op::Mkdir(p) => unit(v.create_dir(p)),
        Op::Write(p, b) => unit(v.write(p, [*b])),
        Op::Unlink(p) => unit(v.remove_file(p)),
        Op::Rmdir(p) => unit(v.remove_dir(p)),
        Op::Rename(a, b, f) => unit(v.rename_with(a, b, flags(*f))),
        Op::Link(a, b) => unit(v.hard_link(a, b)),
        Op::Symlink(t, p) => unit(v.symlink(t, p)),
        Op::Stat(p) => to_out(v.metadata(p).map(stat_out)),
        Op::Lstat(p) => to_out(v.symlink_metadata(p).map(stat_out)),
        Op::Read(p) => to_out(v.read(p).map(Out::Data)),
        Op::ReadDir(p) => to_out(v.read_dir(p).map(|rd| {
            let mut n: Vec<Vec<u8>> = rd.map(|e| e.unwrap().file_name().as_bytes().to_vec()).collect();
            n.sort();
            Out::Names(n)
        })),
        Op::ReadLink(p) => to_out(v.read_link(p).map(|t| Out::Data(t.as_os_str().as_bytes().to_vec()))),
        Op::Chmod(p, m) => unit(v.set_permissions(p, Permissions::from_mode(*m))),
        Op::Hold(p) => to_out(v.open(p, OpenOptions::new().read(true)).map(|f| {
            s.held.push((0, f));
            Out::Unit
        })),
        Op::ReadHeld(i) => {
            if *i >= s.held.len() {
                return Out::Unit;
            }
            let (_, mut f) = s.held.remove(*i);
            let mut buf = Vec::new();
            to_out(f.read_to_end(&mut buf).map(|_| Out::Data(buf)))
        }
        Op::AsUser(inner) => run_vfs(s, inner, true),
    }
}

pub fn run_model(m: &mut Model, held: &mut Vec<Id>, op: &Op, who: &Who) -> Out {
    let r = |x: Result<Out, i32>| x.unwrap_or_else(E);
    let b = |p: &String| p.as_bytes().to_vec();
    match op {
        Op::Mkdir(p) => r(m.mkdir(who, &b(p), 0o022)),
        Op::Write(p, v) => r(m.write(who, &b(p), &[*v], &mut 0)),
        Op::Unlink(p) => r(m.unlink(who, &b(p))),
        Op::Rmdir(p) => r(m.rmdir(who, &b(p))),
        Op::Rename(a, c, f) => r(m.rename(who, &b(a), &b(c), flags(*f))),
        Op::Link(a, c) => r(m.link(who, &b(a), &b(c))),
        Op::Symlink(t, p) => r(m.symlink(who, &b(t), &b(p))),
        Op::Stat(p) => r(m.resolve(who, &b(p), true, &mut 0).map(|id| m.stat(id))),
        Op::Lstat(p) => r(m.resolve(who, &b(p), false, &mut 0).map(|id| m.stat(id))),
        Op::Read(p) => r(m.read(who, &b(p)).map(|(_, o)| o)),
        Op::ReadDir(p) => r(m.read_dir(who, &b(p))),
        Op::ReadLink(p) => r(m.read_link(who, &b(p))),
        Op::Chmod(p, perm) => r(m.chmod(who, &b(p), *perm)),
        Op::Hold(p) => match m.resolve(who, &b(p), true, &mut 0) {
            Ok(id) if !who.may(&m.nodes[id], 4) => E(libc::EACCES),
            Ok(id) => {
                held.push(id);
                Out::Unit
            }
            Err(e) => E(e),
        },
        Op::ReadHeld(i) => {
            if *i >= held.len() {
                return Out::Unit;
            }
            let id = held.remove(*i);
            match &m.nodes[id].kind {
                Kind::File(d) => Out::Data(d.clone()),
                Kind::Dir(..) => E(libc::EISDIR),
                Kind::Symlink(_) => unreachable!(),
            }
        }
        Op::AsUser(inner) => run_model(m, held, inner, &Who { uid: USER }),
    }
}
