//! The etcd filesystem: a tree whose truth is an etcd cluster, so that
//! several machines (each its own `Vfs`, or its own `rcuvfs mount`) see one
//! namespace.
//!
//! ```no_run
//! use rcuvfs::fs::etcd::{Etcd, EtcdOptions};
//! use std::sync::Arc;
//!
//! let fs = Etcd::connect(EtcdOptions::parse("10.0.0.1:2379,10.0.0.2:2379/mytree")?)?;
//! let vfs = rcuvfs::Vfs::builder().filesystem(Arc::new(fs)).build()?;
//! vfs.write("/shared.txt", b"seen by every client")?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # What is stored where
//!
//! See `layout` for the keys. Inodes are records keyed by number; a
//! directory's entries are keys under the directory's number, sorted by a
//! hash of the name that is also the readdir cookie; file data is chunks of
//! at most 64 KiB (`data`). Inode numbers are handed to each client in
//! batches of 1,024 from one counter, so creates on different clients never
//! contend on it.
//!
//! # Every operation is one transaction
//!
//! A namespace operation reads what it depends on, then commits one etcd
//! transaction whose compares say that none of it changed: a create commits
//! only if the name is still absent and the parent still exists; an unlink
//! or rename only if the names still map as read; an rmdir only if the
//! directory has no entry (a compare over the whole range of its entries);
//! a rename of a directory into another only if none of the new parent's
//! ancestors moved (so two machines cannot make a cycle). A failed compare
//! reads again and retries, or answers the POSIX error it now finds
//! (EEXIST, ENOENT, ENOTEMPTY). Two machines racing on one name therefore
//! get the answers one machine's threads would get, and a client that dies
//! leaves nothing half done: a transaction is whole or absent.
//!
//! Creates and unlinks in one directory do not contend unless they touch the
//! same name: they compare the parent's existence (its creation revision),
//! not its last change, and put its new mtime and ctime to a key of their own
//! (`P/i/{dir}/t`), read together with the record. Only mkdir, rmdir and
//! moves of directories rewrite the parent's record (its link count).
//!
//! # Coherence: the guarantee
//!
//! Each client keeps one watch on the tree's prefix, from the revision it
//! has read up to, and turns each change another client committed into a
//! [`Notify`] call: an entry put or deleted drops the cached name (a
//! negative one included), a record, times or data change makes the VFS read
//! the inode's attributes again. A change committed at revision `r` is seen
//! by every lookup on another client that starts after that client's
//! watcher has passed `r`; a client's own changes are visible to itself at
//! once (the VFS caches what each call returns). Cached lookups and stats
//! ask nothing of etcd, so they stay as fast as on memfs.
//!
//! A client's own change acts on the names as etcd has them when it
//! commits, while the VFS applies it to what its cache said the names
//! were. If the cache was behind (another client replaced `a` a moment
//! before this one renamed `a` to `c`), etcd moved the new file and the
//! cache moved the old one. So the watcher hands the entries of the
//! client's own revisions to the VFS too (`Notify::entry_is`), which keeps
//! a cached name that agrees and drops one that does not.
//!
//! After a disconnect the watch resumes from its revision. If etcd
//! compacted past it, events were lost: every cached name is dropped
//! (`Notify::all_changed`), as the passthrough does when inotify overflows.
//!
//! File data is not cached in this process: a read asks etcd, so it sees
//! the last committed write. One `write` call of at most 1 MiB is one
//! transaction (atomic against other clients' writes and appends); a larger
//! call is several, in order.
//!
//! # Unlinked while held
//!
//! A file whose last link goes keeps its record and data and is marked an
//! orphan (`P/o/{ino}`). A client that still holds the inode (the VFS has
//! it: an open file, a handle) registers a hold (`P/h/{ino}/{client}`)
//! attached to its lease: at once if it made the unlink, or when its
//! watcher sees the link count reach zero. The grace period (5 s by
//! default) is the time other clients have to register: the unlink's
//! transaction also puts the orphan's grace key (`P/g/{ino}`), attached to
//! a lease the cluster expires, so the period is counted by the cluster's
//! clock and the machines' clocks may disagree by any amount. An orphan is
//! reclaimed (record, data, attributes) once its grace key is gone and no
//! hold is left: when the last holder lets it go, when a holder's lease
//! expires (the client died), or by any client's sweep. A client whose
//! watcher is cut off for longer than the grace period may therefore lose
//! an unlinked file it held; its reads then answer ENOENT.
//!
//! Leases are granted in whole seconds and a grant is a round trip, so a
//! client shares one grace lease among the unlinks of a while (a quarter of
//! the grace period, at least 1 s) and grants it for the grace period, plus
//! that while, plus the call timeout: a grace key put in the last moment of
//! the lease's use, by a transaction that took the whole timeout, still
//! lives the grace period. An orphan nobody holds is therefore reclaimed
//! between the grace period and that sum after its unlink (11 s by
//! default): when the cluster expires the key, every client's watcher sees
//! it go and tries the reclaim (one succeeds), as when a holder lets go.
//!
//! # Errors and limits
//!
//! Every call is bounded by the client's timeout (5 s by default): a cluster
//! without quorum answers ETIMEDOUT (or EIO when the connection fails), and
//! nothing is changed by a call that failed before it committed. (A call
//! that timed out after its transaction committed has changed the tree,
//! as with any remote filesystem.) A value is at most etcd's request size
//! (1.5 MiB by default); a transaction at most `--max-txn-ops` (128) keys, which
//! bounds a directory rename to moves whose new parent is at most 100 levels
//! deep. The whole tree is bounded by etcd's database quota (2 GiB by
//! default; ENOSPC past it), and etcd keeps old revisions until it compacts,
//! so a cluster should run with `--auto-compaction-retention`.
//!
//! # Locks
//!
//! There are only leaves: a shard of the held-inodes table, taken alone
//! and never across a call to etcd or to the VFS; and the inode batch,
//! held across the one call that takes a new batch (the creates of this
//! client wait for it then, once per 1,024). Calls into the VFS ([`Notify`]) are
//! made from the watcher's own thread, holding none of them.

mod check;
pub mod cluster;
mod layout;
mod watch;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};

pub use cluster::LocalCluster;
pub use layout::CHUNK;
use layout::{decode_entry, decode_times, encode_entry, encode_times, prefix_end, Layout, Record, ROOT};

use super::{Attr, DirEntry, FileSystem, FileType, Ino, Notify, Owner, RenameFlags, SetAttr, StatFs};
use super::{Timespec, WritePos, XattrSet};
use crate::error::{err, fail, Result};
use libc::{EEXIST, EFBIG, EINVAL, EIO, EISDIR, ENODATA, ENOENT, ENOSPC, ENOTDIR, ENOTEMPTY, EPERM, ETIMEDOUT};

/// The largest file: 1 TiB (the cluster's quota is far smaller by default).
const MAX_FILE: u64 = 1 << 40;
/// Bytes of one `write` committed in one transaction.
const WRITE_BATCH: usize = 16 * CHUNK;
/// Entries read per readdir batch.
const READDIR_BATCH: i64 = 512;
/// Inode numbers taken from the shared counter at once.
const INO_BATCH: u64 = 1024;
/// Retries of a transaction whose compares failed before giving up (EIO):
/// far more than any real contention needs.
const RETRIES: usize = 10_000;

/// Where the tree lives and how the client behaves.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Client URLs of the cluster's members, `host:port` (or `http://...`).
    pub endpoints: Vec<String>,
    /// The key prefix of this tree.
    pub prefix: String,
    /// The longest any call may take before it answers ETIMEDOUT.
    pub timeout: Duration,
    /// The client's lease: how long a dead client's holds outlive it.
    pub lease_ttl: Duration,
    /// How long an orphan waits for holders to register before it may be
    /// reclaimed.
    pub orphan_grace: Duration,
    /// Delete the whole tree when this client goes (for scratch trees:
    /// the lab's runs, tests).
    pub remove_on_drop: bool,
}

impl EtcdOptions {
    /// `ENDPOINTS[/PREFIX]`: comma-separated `host:port` of the cluster's
    /// client URLs, then the key prefix (default `rcuvfs`).
    pub fn parse(spec: &str) -> Result<EtcdOptions> {
        let spec = spec.strip_prefix("http://").unwrap_or(spec);
        let (hosts, prefix) = match spec.split_once('/') {
            Some((h, p)) if !p.trim_matches('/').is_empty() => (h, p.trim_matches('/').to_string()),
            Some((h, _)) => (h, "rcuvfs".to_string()),
            None => (spec, "rcuvfs".to_string()),
        };
        let endpoints: Vec<String> = hosts.split(',').filter(|h| !h.is_empty()).map(|h| h.to_string()).collect();
        if endpoints.is_empty() || endpoints.iter().any(|e| !e.contains(':')) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("etcd endpoints {hosts:?}: expected host:port[,host:port...][/PREFIX]"),
            ));
        }
        Ok(EtcdOptions { endpoints, prefix, ..EtcdOptions::default() })
    }
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            endpoints: vec!["127.0.0.1:2379".into()],
            prefix: "rcuvfs".into(),
            timeout: Duration::from_secs(5),
            lease_ttl: Duration::from_secs(10),
            orphan_grace: Duration::from_secs(5),
            remove_on_drop: false,
        }
    }
}

/// Counters for tests and the lab.
#[derive(Debug, Default)]
pub struct EtcdStats {
    /// Transactions committed by this client.
    pub commits: AtomicU64,
    /// Transactions whose compares failed (another client got there first).
    pub conflicts: AtomicU64,
    /// Other clients' changes the watcher turned into `Notify` calls.
    pub events: AtomicU64,
    /// Times the watch lost its history and dropped every cached name.
    pub resyncs: AtomicU64,
    /// Orphans this client reclaimed.
    pub reclaimed: AtomicU64,
    /// Requests a caller of the filesystem waited on (round trips to the
    /// cluster: reads, transactions, lease grants; retries counted).
    pub requests: AtomicU64,
}

/// How many times this client holds an inode (lookup references), and
/// whether it has registered a hold on it as an orphan; for a directory,
/// its whole listing while no change to its entries has been seen since it
/// was read, and a count of such changes.
#[derive(Default)]
struct Held {
    count: u64,
    hold_key: bool,
    listing: Option<Arc<Vec<DirEntry>>>,
    changes: u64,
}

/// The largest directory whose whole listing is kept.
const LISTING_MAX: usize = 10_000;

const SHARDS: usize = 16;

/// What the client's tasks share with it.
struct Shared {
    handle: tokio::runtime::Handle,
    client: Client,
    layout: Layout,
    opts: EtcdOptions,
    /// The client's lease (granted again if it ever expires).
    lease: std::sync::atomic::AtomicI64,
    held: [Mutex<HashMap<Ino, Held>>; SHARDS],
    /// This client's identity (its first lease's id, unique in the
    /// cluster): the name of its writer key.
    client_id: i64,
    /// The lease orphans' grace keys are attached to now, and when it was
    /// asked for (see "Unlinked while held").
    grace: Mutex<Option<(i64, Instant)>>,
    notify: OnceLock<Arc<dyn Notify>>,
    stats: Arc<EtcdStats>,
}

/// A tree in an etcd cluster, served through [`FileSystem`].
pub struct Etcd {
    /// Owns the client's threads; dropped after the watcher has stopped.
    _rt: Arc<tokio::runtime::Runtime>,
    sh: Arc<Shared>,
    /// The next free inode number of this client's batch, and its end.
    inos: Mutex<(u64, u64)>,
    /// Taken (stopped) first when the client goes.
    watcher: Option<watch::Watcher>,
}

fn now() -> Timespec {
    Timespec::from_system_time(SystemTime::now())
}

/// The errno for an error from the client: ETIMEDOUT when the cluster
/// did not answer in time (no quorum, no leader), ENOSPC past its quota,
/// EFBIG for a request past its size limits, EIO otherwise.
fn errno_of(e: &etcd_client::Error) -> i32 {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let m = s.message();
            let code = format!("{:?}", s.code());
            if m.contains("database space exceeded") {
                ENOSPC
            } else if m.contains("request is too large") || m.contains("too many operations") {
                EFBIG
            } else if m.contains("timed out")
                || m.contains("no leader")
                || code == "DeadlineExceeded"
                || code == "Unavailable"
            {
                ETIMEDOUT
            } else {
                EIO
            }
        }
        _ => EIO,
    }
}

/// Whether the cluster refused `e`'s request before applying it.
fn not_applied(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let m = s.message();
            // Refused before a proposal, or a connection never made. A
            // connection lost in flight (also Unavailable) is not here: its
            // request may have been applied.
            m.contains("no leader")
                || m.contains("not capable")
                || (format!("{:?}", s.code()) == "Unavailable" && (m.contains("connect") || m.contains("refused")))
        }
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// The pause between retries of a refused request.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// An `io::Error` carrying the errno of `e` (`raw_os_error`, the contract
/// the VFS and the FUSE server read); the client's message goes to stderr
/// when `RCUVFS_ETCD_LOG` is set.
fn io_error(e: etcd_client::Error) -> std::io::Error {
    let errno = errno_of(&e);
    if std::env::var_os("RCUVFS_ETCD_LOG").is_some() {
        eprintln!("rcuvfs: etcd: {e} (errno {errno})");
    }
    err(errno)
}

/// A record as read, with the revisions its compares need.
struct Loaded {
    rec: Record,
    /// The record's last change.
    rev: i64,
    /// The record's creation: the object's identity.
    created: i64,
    /// The directory times key, if any, and its last change (0: none).
    times: Option<(Timespec, Timespec)>,
    times_rev: i64,
}

impl Loaded {
    fn from_kvs(layout: &Layout, ino: Ino, kvs: &[KeyValue]) -> Option<Loaded> {
        let (rk, tk) = (layout.record(ino), layout.times(ino));
        let mut out = None;
        let (mut times, mut times_rev) = (None, 0);
        for kv in kvs {
            if kv.key() == rk.as_slice() {
                out = Some((Record::decode(kv.value())?, kv.mod_revision(), kv.create_revision()));
            } else if kv.key() == tk.as_slice() {
                times = decode_times(kv.value());
                times_rev = kv.mod_revision();
            }
        }
        let (rec, rev, created) = out?;
        Some(Loaded { rec, rev, created, times, times_rev })
    }

    /// The record with the times key folded in (the later of each).
    fn merged(&self) -> Record {
        let mut r = self.rec.clone();
        if let Some((m, c)) = self.times {
            r.mtime = r.mtime.max(m);
            r.ctime = r.ctime.max(c);
        }
        r
    }

    fn attr(&self, ino: Ino) -> Attr {
        attr_of(ino, &self.merged())
    }
}

/// Moves a record's ctime to `t`, or past its present value by a
/// nanosecond if that is later: ctime then rises with every change of the
/// inode whatever the clocks of the machines that make them, and the VFS
/// orders attribute updates by it (`Inode::set_attr`).
fn bump(ctime: &mut Timespec, t: Timespec) {
    let next = if ctime.nsec >= 999_999_999 {
        Timespec { sec: ctime.sec + 1, nsec: 0 }
    } else {
        Timespec { sec: ctime.sec, nsec: ctime.nsec + 1 }
    };
    *ctime = t.max(next);
}

fn attr_of(ino: Ino, r: &Record) -> Attr {
    Attr {
        ino,
        kind: r.kind,
        perm: r.perm,
        nlink: r.nlink,
        uid: r.uid,
        gid: r.gid,
        size: r.size,
        blocks: r.size.div_ceil(512),
        atime: r.atime,
        mtime: r.mtime,
        ctime: r.ctime,
        rdev: r.rdev,
    }
}

fn record(kind: FileType, perm: u32, owner: Owner, parent: Ino) -> Record {
    let t = now();
    Record {
        kind,
        perm: perm & 0o7777,
        nlink: if kind == FileType::Dir { 2 } else { 1 },
        uid: owner.uid,
        gid: owner.gid,
        size: 0,
        atime: t,
        mtime: t,
        ctime: t,
        rdev: 0,
        parent: if kind == FileType::Dir { parent } else { 0 },
        target: Vec::new(),
    }
}

/// A transaction this client commits, built as etcd's `Txn` is; `txn`
/// adds the client's writer key.
#[derive(Default)]
struct Tx {
    when: Vec<Compare>,
    then: Vec<TxnOp>,
    otherwise: Vec<TxnOp>,
}

impl Tx {
    fn new() -> Tx {
        Tx::default()
    }
    fn when(mut self, c: impl Into<Vec<Compare>>) -> Tx {
        self.when = c.into();
        self
    }
    fn and_then(mut self, ops: impl Into<Vec<TxnOp>>) -> Tx {
        self.then = ops.into();
        self
    }
    fn or_else(mut self, ops: impl Into<Vec<TxnOp>>) -> Tx {
        self.otherwise = ops.into();
        self
    }
}

/// A put with this client's lease.
fn leased(lease: i64) -> Option<PutOptions> {
    Some(PutOptions::new().with_lease(lease))
}

fn range(prefix: Vec<u8>) -> Option<GetOptions> {
    Some(GetOptions::new().with_range(prefix_end(&prefix)))
}

/// The compare "no key in `prefix`".
fn range_empty(prefix: Vec<u8>) -> Compare {
    let end = prefix_end(&prefix);
    Compare::create_revision(prefix, CompareOp::Equal, 0).with_range(end)
}

/// `d` if it is a live directory: ENOENT once removed, ENOTDIR otherwise.
fn as_dir(d: Loaded) -> Result<Loaded> {
    if d.rec.kind != FileType::Dir || d.rec.nlink == 0 {
        return fail(if d.rec.nlink == 0 { ENOENT } else { ENOTDIR });
    }
    Ok(d)
}

fn get_kvs(r: &TxnOpResponse) -> &[KeyValue] {
    match r {
        TxnOpResponse::Get(g) => g.kvs(),
        _ => &[],
    }
}

impl Etcd {
    /// Connects to the cluster and serves the tree under `opts.prefix`,
    /// making its root if the tree is new.
    pub fn connect(opts: EtcdOptions) -> Result<Etcd> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rcuvfs-etcd")
            .enable_all()
            .build()?;
        let copts = ConnectOptions::new()
            .with_timeout(opts.timeout)
            .with_connect_timeout(opts.timeout)
            .with_keep_alive(Duration::from_secs(2), opts.timeout)
            .with_require_leader(true);
        let endpoints: Vec<String> =
            opts.endpoints.iter().map(|e| if e.contains("://") { e.clone() } else { format!("http://{e}") }).collect();
        let t = opts.timeout;
        let client = rt
            .block_on(async { tokio::time::timeout(t, Client::connect(endpoints, Some(copts))).await })
            .map_err(|_| err(ETIMEDOUT))?
            .map_err(io_error)?;
        let ttl = opts.lease_ttl.as_secs().max(2) as i64;
        let mut c = client.clone();
        let lease = rt
            .block_on(async { tokio::time::timeout(t, c.lease_grant(ttl, None)).await })
            .map_err(|_| err(ETIMEDOUT))?
            .map_err(io_error)?
            .id();
        let sh = Arc::new(Shared {
            handle: rt.handle().clone(),
            client,
            layout: Layout::new(&opts.prefix),
            opts,
            lease: lease.into(),
            held: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            client_id: lease,
            grace: Mutex::new(None),
            notify: OnceLock::new(),
            stats: Arc::new(EtcdStats::default()),
        });
        let start = sh.format()?;
        let rt = Arc::new(rt);
        let watcher = watch::Watcher::start(&rt, sh.clone(), start)?;
        Ok(Etcd { inos: Mutex::new((0, 0)), watcher: Some(watcher), _rt: rt, sh })
    }

    /// This client's counters.
    pub fn stats(&self) -> Arc<EtcdStats> {
        self.sh.stats.clone()
    }

    /// This client's lease (its holds are attached to it).
    pub fn lease(&self) -> i64 {
        self.sh.lease()
    }

    /// The cluster's revision now (the last commit by any client).
    pub fn revision(&self) -> Result<i64> {
        let r = self.get(self.sh.layout.next_ino(), None)?;
        Ok(r.header().map_or(0, |h| h.revision()))
    }

    /// The revision up to which this client has applied other clients'
    /// changes.
    pub fn watched_revision(&self) -> i64 {
        self.watcher.as_ref().map_or(0, |w| w.revision())
    }

    /// Runs `f` on the client, bounded by the timeout.
    fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.sh.call(f)
    }

    fn txn(&self, tx: Tx) -> Result<etcd_client::TxnResponse> {
        self.sh.txn(tx)
    }

    fn get(&self, key: Vec<u8>, opts: Option<GetOptions>) -> Result<etcd_client::GetResponse> {
        self.call(move |mut c| {
            let (key, opts) = (key.clone(), opts.clone());
            async move { c.get(key, opts).await }
        })
    }

    /// The record of `ino` and its times: ENOENT if there is none.
    fn load(&self, ino: Ino) -> Result<Loaded> {
        let l = &self.sh.layout;
        let r = self.get(l.record(ino), range(l.record(ino)))?;
        Loaded::from_kvs(l, ino, r.kvs()).ok_or_else(|| err(ENOENT))
    }

    /// The directories `dirs` (as `load_dir`, in order) and the entries
    /// `names` (as `entry`, in order), read in one round trip, at one
    /// revision: a transaction of reads only.
    #[allow(clippy::type_complexity)]
    fn load_dirs_and_entries(
        &self,
        dirs: &[Ino],
        names: &[(Ino, &[u8])],
    ) -> Result<(Vec<Loaded>, Vec<Option<(Ino, FileType, i64)>>)> {
        let l = &self.sh.layout;
        let mut ops: Vec<TxnOp> = dirs.iter().map(|&d| TxnOp::get(l.record(d), range(l.record(d)))).collect();
        ops.extend(names.iter().map(|&(d, n)| TxnOp::get(l.entry(d, n), None)));
        let r = self.read_txn(ops)?;
        let resp = r.op_responses();
        let mut loaded = Vec::with_capacity(dirs.len());
        for (&d, g) in dirs.iter().zip(&resp) {
            loaded.push(as_dir(Loaded::from_kvs(l, d, get_kvs(g)).ok_or_else(|| err(ENOENT))?)?);
        }
        let entries = resp[dirs.len()..]
            .iter()
            .map(|g| get_kvs(g).first().and_then(|kv| decode_entry(kv.value()).map(|(i, k)| (i, k, kv.mod_revision()))))
            .collect();
        Ok((loaded, entries))
    }

    fn load_dir(&self, ino: Ino) -> Result<Loaded> {
        as_dir(self.load(ino)?)
    }

    /// Runs a transaction of reads only (one round trip, one revision).
    fn read_txn(&self, ops: Vec<TxnOp>) -> Result<etcd_client::TxnResponse> {
        let txn = Txn::new().and_then(ops);
        self.call(move |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
    }

    /// The entry `name` in `dir`: its inode, type and last change.
    fn entry(&self, dir: Ino, name: &[u8]) -> Result<Option<(Ino, FileType, i64)>> {
        let r = self.get(self.sh.layout.entry(dir, name), None)?;
        Ok(r.kvs().first().and_then(|kv| decode_entry(kv.value()).map(|(i, k)| (i, k, kv.mod_revision()))))
    }

    /// A fresh inode number from this client's batch.
    fn alloc_ino(&self) -> Result<Ino> {
        let mut b = self.inos.lock().unwrap();
        if b.0 == b.1 {
            let key = self.sh.layout.next_ino();
            for _ in 0..RETRIES {
                let r = self.get(key.clone(), None)?;
                let Some(kv) = r.kvs().first() else { return fail(EIO) };
                let next = u64::from_be_bytes(kv.value().try_into().map_err(|_| err(EIO))?);
                let txn = Tx::new()
                    .when([Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision())])
                    .and_then([TxnOp::put(key.clone(), (next + INO_BATCH).to_be_bytes().to_vec(), None)]);
                if self.txn(txn)?.succeeded() {
                    *b = (next, next + INO_BATCH);
                    break;
                }
            }
            if b.0 == b.1 {
                return fail(EIO);
            }
        }
        let ino = b.0;
        b.0 += 1;
        Ok(ino)
    }

    /// Counts one lookup reference on `ino`.
    fn hold_ref(&self, ino: Ino) {
        self.sh.held(ino).entry(ino).or_default().count += 1;
    }

    /// Makes a new object `name` in `parent` from `rec`.
    fn make(&self, parent: Ino, name: &[u8], rec: Record) -> Result<Attr> {
        let ino = self.alloc_ino()?;
        // Counted before the commit, so that the inode is held from the
        // moment it exists (see `lookup`); given back on failure.
        self.counted(ino, || self.make_as(ino, parent, name, rec))
    }

    /// Runs `f`, which hands the VFS `ino`, with one lookup reference
    /// counted first and given back if it fails.
    fn counted(&self, ino: Ino, f: impl FnOnce() -> Result<Attr>) -> Result<Attr> {
        self.hold_ref(ino);
        let r = f();
        if r.is_err() {
            self.forget(ino, 1);
        }
        r
    }

    fn make_as(&self, ino: Ino, parent: Ino, name: &[u8], mut rec: Record) -> Result<Attr> {
        let l = &self.sh.layout;
        let dir = rec.kind == FileType::Dir;
        let ek = l.entry(parent, name);
        for _ in 0..RETRIES {
            let p = self.load_dir(parent)?;
            let t = now();
            rec.atime = t;
            rec.mtime = t;
            rec.ctime = t;
            if dir {
                rec.parent = parent;
            }
            let mut ops = vec![
                TxnOp::put(ek.clone(), encode_entry(ino, rec.kind), None),
                TxnOp::put(l.record(ino), rec.encode(), None),
            ];
            let mut when = vec![Compare::version(ek.clone(), CompareOp::Equal, 0)];
            if dir {
                // The parent's link count: a read-modify-write.
                let mut pr = p.merged();
                pr.nlink += 1;
                pr.mtime = t;
                bump(&mut pr.ctime, t);
                when.push(Compare::mod_revision(l.record(parent), CompareOp::Equal, p.rev));
                ops.push(TxnOp::put(l.record(parent), pr.encode(), None));
            } else {
                when.push(Compare::create_revision(l.record(parent), CompareOp::Equal, p.created));
                ops.push(self.times_op(parent, t));
            }
            let r = self.txn(Tx::new().when(when).and_then(ops).or_else([TxnOp::get(ek.clone(), None)]))?;
            if r.succeeded() {
                self.sh.entries_changed(parent);
                return Ok(attr_of(ino, &rec));
            }
            if r.op_responses().first().is_some_and(|g| !get_kvs(g).is_empty()) {
                // The inode number stays unused; batches are plentiful.
                return fail(EEXIST);
            }
        }
        fail(EIO)
    }

    /// The compares and puts that drop one link of the non-directory `ino`
    /// (read as `v`): the record with one link less, or an orphan.
    fn unlink_ops(
        &self,
        ino: Ino,
        v: &Loaded,
        t: Timespec,
        when: &mut Vec<Compare>,
        ops: &mut Vec<TxnOp>,
    ) -> Result<()> {
        let l = &self.sh.layout;
        let mut r = v.merged();
        r.nlink = r.nlink.saturating_sub(1);
        bump(&mut r.ctime, t);
        when.push(Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev));
        ops.push(TxnOp::put(l.record(ino), r.encode(), None));
        if r.nlink == 0 {
            ops.push(TxnOp::put(l.orphan(ino), Vec::new(), None));
            if let Some(lease) = self.sh.grace_lease()? {
                ops.push(TxnOp::put(l.grace(ino), Vec::new(), leased(lease)));
            }
        }
        Ok(())
    }

    /// After a commit that left `ino` with no link: registers this client's
    /// hold if it still holds the inode in a moment (its own change never
    /// comes back through the watcher), else reclaims the orphan at once where there is no
    /// grace period.
    fn orphaned(&self, ino: Ino) {
        if self.sh.holds_locally(ino) {
            watch::register_later(&self.sh, ino);
        } else if self.sh.opts.orphan_grace.is_zero() {
            let _ = watch::reclaim(&self.sh, ino);
        }
    }

    /// Puts `dir`'s times key to `t` unless it already holds a later time
    /// (two creates may commit in the other order than they read the clock).
    fn times_op(&self, dir: Ino, t: Timespec) -> TxnOp {
        let tk = self.sh.layout.times(dir);
        let v = encode_times(t, t);
        let put = || TxnOp::put(tk.clone(), v.clone(), None);
        TxnOp::txn(Txn::new().when([Compare::value(tk.clone(), CompareOp::Less, v.clone())]).and_then([put()]).or_else(
            [TxnOp::txn(Txn::new().when([Compare::version(tk.clone(), CompareOp::Equal, 0)]).and_then([put()]))],
        ))
    }

    /// What an unlink (`dir` false) or rmdir (`dir` true) of `name` in
    /// `parent` removes: the parent, the victim's inode number, its entry's
    /// revision and its record. ENOENT, EISDIR or ENOTDIR as POSIX says;
    /// `None` when the record went between the two reads (try again).
    fn victim(&self, parent: Ino, name: &[u8], dir: bool) -> Result<Option<(Loaded, Ino, i64, Loaded)>> {
        let (mut ps, es) = self.load_dirs_and_entries(&[parent], &[(parent, name)])?;
        let p = ps.pop().expect("one directory");
        let Some((ino, kind, erev)) = es[0] else { return fail(ENOENT) };
        match (kind == FileType::Dir, dir) {
            (true, false) => return fail(EISDIR),
            (false, true) => return fail(ENOTDIR),
            _ => {}
        }
        match self.load(ino) {
            Ok(v) => Ok(Some((p, ino, erev, v))),
            Err(e) if e.raw_os_error() == Some(ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The compares and deletes that remove the empty directory `ino`.
    fn rmdir_ops(&self, ino: Ino, v: &Loaded, when: &mut Vec<Compare>, ops: &mut Vec<TxnOp>) {
        let l = &self.sh.layout;
        when.push(Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev));
        when.push(range_empty(l.entries(ino)));
        ops.push(TxnOp::delete(l.record(ino), None));
        ops.push(TxnOp::delete(l.times(ino), None));
        ops.push(TxnOp::delete(l.xattrs(ino), Some(etcd_client::DeleteOptions::new().with_prefix())));
    }

    fn is_empty_dir(&self, ino: Ino) -> Result<bool> {
        let r = self.get(
            self.sh.layout.entries(ino),
            range(self.sh.layout.entries(ino)).map(|o| o.with_limit(1).with_keys_only()),
        )?;
        Ok(r.kvs().is_empty())
    }

    /// One batch of `dir`'s entries after cookie `offset`, read from etcd.
    fn readdir_batch(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>> {
        let l = &self.sh.layout;
        let start = l.entries_after(ino, offset);
        let opts = GetOptions::new().with_range(prefix_end(&l.entries(ino))).with_limit(READDIR_BATCH);
        let r = self.get(start, Some(opts))?;
        if r.kvs().is_empty() && offset == 0 {
            // Say ENOTDIR or ENOENT rather than an empty listing.
            self.load_dir(ino)?;
        }
        let mut out: Vec<DirEntry> = r
            .kvs()
            .iter()
            .filter_map(|kv| {
                let (cookie, name) = l.entry_name(ino, kv.key())?;
                let (child, kind) = decode_entry(kv.value())?;
                Some(DirEntry { ino: child, name: name.to_vec(), kind, offset: cookie })
            })
            .collect();
        // Names that share a cookie stay in one batch: a listing resumes
        // after a cookie, never in the middle of one.
        if r.more() {
            if let Some(last) = out.last().map(|e| e.offset) {
                let keep = out.iter().position(|e| e.offset == last).unwrap_or(out.len());
                if keep > 0 {
                    out.truncate(keep);
                }
            }
        }
        Ok(out)
    }

    /// The whole listing of `dir`, kept while the VFS holds the directory
    /// and no change to its entries is seen (`None`: too large, or not
    /// held). Read in one range read, so it is one snapshot; kept only if
    /// no change was noted while it was read (a change committed before the
    /// read is in it, one after clears it).
    fn listing(&self, dir: Ino) -> Result<Option<Arc<Vec<DirEntry>>>> {
        let before = match self.sh.held(dir).get(&dir) {
            Some(h) if h.count > 0 => match &h.listing {
                Some(list) => return Ok(Some(list.clone())),
                None => h.changes,
            },
            _ => return Ok(None),
        };
        let l = &self.sh.layout;
        let opts = GetOptions::new().with_range(prefix_end(&l.entries(dir))).with_limit(LISTING_MAX as i64);
        let r = self.get(l.entries(dir), Some(opts))?;
        if r.more() {
            return Ok(None);
        }
        if r.kvs().is_empty() {
            self.load_dir(dir)?;
        }
        let list: Vec<DirEntry> = r
            .kvs()
            .iter()
            .filter_map(|kv| {
                let (cookie, name) = l.entry_name(dir, kv.key())?;
                let (child, kind) = decode_entry(kv.value())?;
                Some(DirEntry { ino: child, name: name.to_vec(), kind, offset: cookie })
            })
            .collect();
        let list = Arc::new(list);
        if let Some(h) = self.sh.held(dir).get_mut(&dir) {
            if h.changes == before {
                h.listing = Some(list.clone());
            }
        }
        Ok(Some(list))
    }

    /// Reads `ino`'s record and the chunks `indexes` (all of
    /// `first..=last` for a range) in one transaction: a consistent snapshot.
    fn read_chunks(&self, ino: Ino, which: Chunks) -> Result<(Loaded, Vec<KeyValue>)> {
        let l = &self.sh.layout;
        let mut ops = vec![TxnOp::get(l.record(ino), range(l.record(ino)))];
        match which {
            Chunks::Range(first, last) => ops.push(TxnOp::get(
                l.chunk(ino, first),
                Some(GetOptions::new().with_range(l.chunk(ino, last.saturating_add(1)))),
            )),
            Chunks::Edges(first, last) => {
                ops.push(TxnOp::get(l.chunk(ino, first), None));
                if last != first {
                    ops.push(TxnOp::get(l.chunk(ino, last), None));
                }
            }
        }
        let r = self.read_txn(ops)?;
        let resp = r.op_responses();
        let v = Loaded::from_kvs(l, ino, get_kvs(&resp[0])).ok_or_else(|| err(ENOENT))?;
        Ok((v, resp[1..].iter().flat_map(|g| get_kvs(g).iter().cloned()).collect()))
    }

    /// Writes one batch (at most `WRITE_BATCH` bytes) in one transaction.
    fn write_batch(&self, ino: Ino, pos: WritePos, data: &[u8]) -> Result<u64> {
        let l = &self.sh.layout;
        let ch = CHUNK as u64;
        for _ in 0..RETRIES {
            // Where the write goes; an append reads the size first.
            let off = match pos {
                WritePos::At(o) => o,
                WritePos::Append => self.load(ino)?.rec.size,
            };
            let end = off.checked_add(data.len() as u64).filter(|e| *e <= MAX_FILE).ok_or_else(|| err(EFBIG))?;
            let (first, last) = (off / ch, end.saturating_sub(1).max(off) / ch);
            // The record and the edge chunks, which keep their bytes
            // outside the write.
            let (v, edges) = self.read_chunks(ino, Chunks::Edges(first, last))?;
            match v.rec.kind {
                FileType::File => {}
                FileType::Dir => return fail(EISDIR),
                _ => return fail(EINVAL),
            }
            if matches!(pos, WritePos::Append) && v.rec.size != off {
                continue;
            }
            let t = now();
            let mut r = v.merged();
            r.size = r.size.max(end);
            r.mtime = t;
            bump(&mut r.ctime, t);
            let mut when = vec![Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev)];
            let mut ops = vec![TxnOp::put(l.record(ino), r.encode(), None)];
            for i in (first..=last).filter(|_| !data.is_empty()) {
                let (s, e) = ((i * ch).max(off), ((i + 1) * ch).min(end));
                let key = l.chunk(ino, i);
                // A chunk never holds bytes past the size, so one written
                // from its start to its end or past the old size is all new.
                let covered = s == i * ch && (e == (i + 1) * ch || e >= v.rec.size);
                let mut buf = Vec::new();
                if !covered {
                    let old = edges.iter().find(|kv| kv.key() == key.as_slice());
                    when.push(Compare::mod_revision(
                        key.clone(),
                        CompareOp::Equal,
                        old.map_or(0, |kv| kv.mod_revision()),
                    ));
                    buf = old.map(|kv| kv.value().to_vec()).unwrap_or_default();
                }
                let (bs, be) = ((s - i * ch) as usize, (e - i * ch) as usize);
                if buf.len() < be {
                    buf.resize(be, 0);
                }
                buf[bs..be].copy_from_slice(&data[(s - off) as usize..(e - off) as usize]);
                ops.push(TxnOp::put(key, buf, None));
            }
            if self.txn(Tx::new().when(when).and_then(ops))?.succeeded() {
                return Ok(off);
            }
        }
        fail(EIO)
    }

    /// Reads at most `WRITE_BATCH` bytes from one snapshot.
    fn read_batch(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let ch = CHUNK as u64;
        let want = (buf.len() as u64).min(MAX_FILE);
        let (first, last) = (offset / ch, offset.saturating_add(want - 1) / ch);
        let (v, chunks) = self.read_chunks(ino, Chunks::Range(first, last))?;
        match v.rec.kind {
            FileType::File => {}
            FileType::Dir => return fail(EISDIR),
            _ => return fail(EINVAL),
        }
        if offset >= v.rec.size {
            return Ok(0);
        }
        let n = want.min(v.rec.size - offset) as usize;
        buf[..n].fill(0);
        for kv in &chunks {
            let Some(i) = self.sh.layout.chunk_index(ino, kv.key()) else { continue };
            let base = i * ch;
            let data = kv.value();
            let (s, e) = (base.max(offset), (base + data.len() as u64).min(offset + n as u64));
            if s < e {
                buf[(s - offset) as usize..(e - offset) as usize]
                    .copy_from_slice(&data[(s - base) as usize..(e - base) as usize]);
            }
        }
        Ok(n)
    }
}

/// Which chunks `read_chunks` reads.
enum Chunks {
    Range(u64, u64),
    Edges(u64, u64),
}

impl Shared {
    fn lease(&self) -> i64 {
        // Relaxed: the id is the whole of what is shared; nothing else is
        // published with it.
        self.lease.load(Ordering::Relaxed)
    }

    /// Makes the root and the inode counter if the tree is new; returns the
    /// revision to watch from.
    fn format(&self) -> Result<i64> {
        let l = &self.layout;
        let mut root = record(FileType::Dir, 0o755, Owner { uid: 0, gid: 0 }, ROOT);
        root.parent = ROOT;
        let txn = Tx::new().when([Compare::version(l.record(ROOT), CompareOp::Equal, 0)]).and_then([
            TxnOp::put(l.record(ROOT), root.encode(), None),
            TxnOp::put(l.next_ino(), (ROOT + 1).to_be_bytes().to_vec(), None),
        ]);
        let r = self.txn(txn)?;
        Ok(r.header().map_or(0, |h| h.revision()))
    }

    /// Commits `tx`, with the put of this client's writer key that tells
    /// its watcher that the revision is its own (a client's own changes are
    /// in its cache already; read back from the watch, they could race a
    /// later change of its own and put older attributes over newer ones;
    /// only their entries are checked, see "Coherence").
    fn txn(&self, tx: Tx) -> Result<etcd_client::TxnResponse> {
        let mut then = tx.then;
        then.push(TxnOp::put(self.layout.writer(self.client_id), Vec::new(), None));
        let txn = Txn::new().when(tx.when).and_then(then).or_else(tx.otherwise);
        let r = self.call(move |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })?;
        if r.succeeded() {
            self.stats.commits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
        }
        Ok(r)
    }

    /// The lease for the grace keys of this client's unlinks, granted anew
    /// once the current one has been used for its while; `None` when
    /// there is no grace period. See "Unlinked while held" for the TTL.
    /// Two unlinks may both grant one when the while ends; the spare
    /// lease expires unused.
    fn grace_lease(&self) -> Result<Option<i64>> {
        if self.opts.orphan_grace.is_zero() {
            return Ok(None);
        }
        let use_for = (self.opts.orphan_grace / 4).max(Duration::from_secs(1));
        if let Some((id, asked)) = *self.grace.lock().unwrap() {
            if asked.elapsed() < use_for {
                return Ok(Some(id));
            }
        }
        // The lease's time runs from the grant on the cluster, after it was
        // asked for here: counted from `asked`, its use ends early, never late.
        let asked = Instant::now();
        let ttl = (self.opts.orphan_grace + use_for + self.opts.timeout).as_secs_f64().ceil() as i64;
        let id = self.call(move |mut c| async move { c.lease_grant(ttl, None).await })?.id();
        let mut g = self.grace.lock().unwrap();
        if g.is_none_or(|(_, a)| a < asked) {
            *g = Some((id, asked));
        }
        Ok(Some(id))
    }

    fn held(&self, ino: Ino) -> std::sync::MutexGuard<'_, HashMap<Ino, Held>> {
        self.held[ino as usize % SHARDS].lock().unwrap()
    }

    fn holds_locally(&self, ino: Ino) -> bool {
        self.held(ino).get(&ino).is_some_and(|h| h.count > 0)
    }

    /// The entries of directory `dir` changed (a commit of this client's,
    /// or one the watcher saw): its kept listing goes.
    fn entries_changed(&self, dir: Ino) {
        if let Some(h) = self.held(dir).get_mut(&dir) {
            h.listing = None;
            h.changes += 1;
        }
    }

    /// Every kept listing goes (events were lost).
    fn forget_listings(&self) {
        for shard in &self.held {
            for h in shard.lock().unwrap().values_mut() {
                h.listing = None;
                h.changes += 1;
            }
        }
    }

    /// Runs `f` on the client, bounded by the timeout, and again while the
    /// cluster answers that it cannot take a request yet (no leader during
    /// an election, a member refusing connections): those requests were
    /// never applied, so a retry cannot apply one twice. Never from a thread
    /// of the runtime (the watcher's and the server's threads are not).
    fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let t = self.opts.timeout;
        let deadline = tokio::time::Instant::now() + t;
        let run = async {
            loop {
                self.stats.requests.fetch_add(1, Ordering::Relaxed);
                match f(self.client.clone()).await {
                    Err(e) if not_applied(&e) && tokio::time::Instant::now() + RETRY_PAUSE < deadline => {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    r => return r,
                }
            }
        };
        match self.handle.block_on(async { tokio::time::timeout_at(deadline, run).await }) {
            Ok(r) => r.map_err(io_error),
            Err(_) => fail(ETIMEDOUT),
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        drop(self.watcher.take());
        if tokio::runtime::Handle::try_current().is_ok() {
            // Dropped inside async code, where nothing may block: the
            // lease runs out by itself.
            return;
        }
        // Holds go with the lease, at once rather than at its expiry.
        let lease = self.sh.lease();
        let _ = self.call(move |mut c| async move { c.lease_revoke(lease).await });
        if self.sh.opts.remove_on_drop {
            let p = self.sh.layout.prefix().to_vec();
            let _ = self.call(|mut c| {
                let p = p.clone();
                async move { c.delete(p, Some(etcd_client::DeleteOptions::new().with_prefix())).await }
            });
        }
    }
}

impl FileSystem for Etcd {
    fn root(&self) -> Ino {
        ROOT
    }

    fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        for _ in 0..RETRIES {
            // `parent` is a directory the VFS holds (an inode never changes
            // type): a missing name is ENOENT, whether or not the directory
            // itself is still there.
            let Some((ino, _, _)) = self.entry(parent, name)? else { return fail(ENOENT) };
            match self.load(ino) {
                Ok(v) => {
                    self.hold_ref(ino);
                    return Ok(v.attr(ino));
                }
                // Unlinked between the two reads: look again.
                Err(e) if e.raw_os_error() == Some(ENOENT) => continue,
                Err(e) => return Err(e),
            }
        }
        fail(EIO)
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        let release = {
            let mut h = self.sh.held(ino);
            let Some(e) = h.get_mut(&ino) else { return };
            e.count = e.count.saturating_sub(nlookup);
            if e.count > 0 {
                return;
            }
            h.remove(&ino).is_some_and(|e| e.hold_key)
        };
        if release {
            watch::release(&self.sh, ino);
        }
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.load(ino)?.attr(ino))
    }

    fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let l = &self.sh.layout;
        let ch = CHUNK as u64;
        for _ in 0..RETRIES {
            let v = self.load(ino)?;
            let t = now();
            let mut r = v.merged();
            let mut when = vec![Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev)];
            let mut ops = Vec::new();
            if let Some(p) = set.perm {
                r.perm = p & 0o7777;
            }
            if let Some(u) = set.uid {
                r.uid = u;
            }
            if let Some(g) = set.gid {
                r.gid = g;
            }
            if let Some(a) = set.atime {
                r.atime = a.at(t);
            }
            if let Some(m) = set.mtime {
                r.mtime = m.at(t);
                // An explicit mtime replaces the directory times key, which
                // would otherwise win if later.
                when.push(Compare::mod_revision(l.times(ino), CompareOp::Equal, v.times_rev));
                ops.push(TxnOp::delete(l.times(ino), None));
            }
            if let Some(size) = set.size {
                match r.kind {
                    FileType::File => {}
                    FileType::Dir => return fail(EISDIR),
                    _ => return fail(EINVAL),
                }
                if size > MAX_FILE {
                    return fail(EFBIG);
                }
                if size < r.size {
                    let keep = size.div_ceil(ch);
                    ops.push(TxnOp::delete(
                        l.chunk(ino, keep),
                        Some(etcd_client::DeleteOptions::new().with_range(prefix_end(&l.chunks(ino)))),
                    ));
                    if size % ch != 0 {
                        // The chunk the new end falls in loses its tail.
                        let i = size / ch;
                        let got = self.get(l.chunk(ino, i), None)?;
                        if let Some(kv) = got.kvs().first() {
                            let keep = (size % ch) as usize;
                            if kv.value().len() > keep {
                                when.push(Compare::mod_revision(l.chunk(ino, i), CompareOp::Equal, kv.mod_revision()));
                                ops.push(TxnOp::put(l.chunk(ino, i), kv.value()[..keep].to_vec(), None));
                            }
                        }
                    }
                }
                if size != r.size && set.mtime.is_none() {
                    r.mtime = t;
                }
                r.size = size;
            }
            bump(&mut r.ctime, t);
            ops.push(TxnOp::put(l.record(ino), r.encode(), None));
            if self.txn(Tx::new().when(when).and_then(ops))?.succeeded() {
                return Ok(attr_of(ino, &r));
            }
        }
        fail(EIO)
    }

    fn create(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        self.make(parent, name, record(FileType::File, perm, owner, parent))
    }

    fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        self.make(parent, name, record(FileType::Dir, perm, owner, parent))
    }

    fn mknod(&self, parent: Ino, name: &[u8], kind: FileType, perm: u32, rdev: u64, owner: Owner) -> Result<Attr> {
        if matches!(kind, FileType::Dir | FileType::Symlink) {
            return fail(EINVAL);
        }
        let mut r = record(kind, perm, owner, parent);
        r.rdev = rdev;
        self.make(parent, name, r)
    }

    fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr> {
        let mut r = record(FileType::Symlink, 0o777, owner, parent);
        r.size = target.len() as u64;
        r.target = target.to_vec();
        self.make(parent, name, r)
    }

    fn link(&self, ino: Ino, parent: Ino, name: &[u8]) -> Result<Attr> {
        let l = &self.sh.layout;
        let ek = l.entry(parent, name);
        for _ in 0..RETRIES {
            let p = self.load_dir(parent)?;
            let v = self.load(ino)?;
            if v.rec.kind == FileType::Dir {
                return fail(EPERM);
            }
            if v.rec.nlink == 0 {
                return fail(ENOENT);
            }
            let t = now();
            let mut r = v.merged();
            r.nlink += 1;
            bump(&mut r.ctime, t);
            let txn = Tx::new()
                .when([
                    Compare::version(ek.clone(), CompareOp::Equal, 0),
                    Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev),
                    Compare::create_revision(l.record(parent), CompareOp::Equal, p.created),
                ])
                .and_then([
                    TxnOp::put(ek.clone(), encode_entry(ino, r.kind), None),
                    TxnOp::put(l.record(ino), r.encode(), None),
                    self.times_op(parent, t),
                ])
                .or_else([TxnOp::get(ek.clone(), None)]);
            let resp = self.txn(txn)?;
            if resp.succeeded() {
                self.sh.entries_changed(parent);
                self.hold_ref(ino);
                return Ok(attr_of(ino, &r));
            }
            if resp.op_responses().first().is_some_and(|g| !get_kvs(g).is_empty()) {
                return fail(EEXIST);
            }
        }
        fail(EIO)
    }

    fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let l = &self.sh.layout;
        let ek = l.entry(parent, name);
        for _ in 0..RETRIES {
            let Some((p, ino, erev, v)) = self.victim(parent, name, false)? else { continue };
            let t = now();
            let mut when = vec![
                Compare::mod_revision(ek.clone(), CompareOp::Equal, erev),
                Compare::create_revision(l.record(parent), CompareOp::Equal, p.created),
            ];
            let mut ops = vec![TxnOp::delete(ek.clone(), None), self.times_op(parent, t)];
            self.unlink_ops(ino, &v, t, &mut when, &mut ops)?;
            if self.txn(Tx::new().when(when).and_then(ops))?.succeeded() {
                self.sh.entries_changed(parent);
                if v.rec.nlink <= 1 {
                    self.orphaned(ino);
                }
                return Ok(());
            }
        }
        fail(EIO)
    }

    fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let l = &self.sh.layout;
        let ek = l.entry(parent, name);
        for _ in 0..RETRIES {
            let Some((p, ino, erev, v)) = self.victim(parent, name, true)? else { continue };
            let t = now();
            let mut pr = p.merged();
            pr.nlink = pr.nlink.saturating_sub(1);
            pr.mtime = t;
            bump(&mut pr.ctime, t);
            let mut when = vec![
                Compare::mod_revision(ek.clone(), CompareOp::Equal, erev),
                Compare::mod_revision(l.record(parent), CompareOp::Equal, p.rev),
            ];
            let mut ops = vec![TxnOp::delete(ek.clone(), None), TxnOp::put(l.record(parent), pr.encode(), None)];
            self.rmdir_ops(ino, &v, &mut when, &mut ops);
            if self.txn(Tx::new().when(when).and_then(ops))?.succeeded() {
                self.sh.entries_changed(parent);
                return Ok(());
            }
            if !self.is_empty_dir(ino)? {
                return fail(ENOTEMPTY);
            }
        }
        fail(EIO)
    }

    fn rename(&self, parent: Ino, name: &[u8], new_parent: Ino, new_name: &[u8], flags: RenameFlags) -> Result<()> {
        for _ in 0..RETRIES {
            match self.try_rename(parent, name, new_parent, new_name, flags) {
                Ok(Some(done)) => return Ok(done),
                Ok(None) => {}
                // An inode read along the way (the replaced one, an
                // ancestor) went under a concurrent change: ENOENT is the
                // answer only if a name the rename needs is gone.
                Err(e) if e.raw_os_error() == Some(ENOENT) => {
                    let src = self.entry(parent, name)?.is_some();
                    let dst = !flags.exchange || self.entry(new_parent, new_name)?.is_some();
                    if !(src && dst && self.load_dir(parent).is_ok() && self.load_dir(new_parent).is_ok()) {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        fail(EIO)
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let v = self.load(ino)?;
        if v.rec.kind != FileType::Symlink {
            return fail(EINVAL);
        }
        Ok(v.rec.target)
    }

    fn readdir(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>> {
        if let Some(list) = self.listing(ino)? {
            // From the kept listing: the entries after the cookie, a batch,
            // ending at a cookie boundary.
            let from = list.partition_point(|e| e.offset <= offset);
            let mut end = (from + READDIR_BATCH as usize).min(list.len());
            while end < list.len() && end > from && list[end].offset == list[end - 1].offset {
                end += 1;
            }
            return Ok(list[from..end].to_vec());
        }
        self.readdir_batch(ino, offset)
    }

    fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        let l = &self.sh.layout;
        let txn = Txn::new().and_then([TxnOp::get(l.record(ino), None), TxnOp::get(l.xattr(ino, name), None)]);
        let r = self.call(move |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })?;
        let resp = r.op_responses();
        if get_kvs(&resp[0]).is_empty() {
            return fail(ENOENT);
        }
        get_kvs(&resp[1]).first().map(|kv| kv.value().to_vec()).ok_or_else(|| err(ENODATA))
    }

    fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        let l = &self.sh.layout;
        let xk = l.xattr(ino, name);
        for _ in 0..RETRIES {
            let v = self.load(ino)?;
            let mut r = v.merged();
            bump(&mut r.ctime, now());
            let mut when = vec![Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev)];
            match how {
                XattrSet::Either => {}
                XattrSet::Create => when.push(Compare::version(xk.clone(), CompareOp::Equal, 0)),
                XattrSet::Replace => when.push(Compare::version(xk.clone(), CompareOp::Greater, 0)),
            }
            let txn = Tx::new()
                .when(when)
                .and_then([TxnOp::put(xk.clone(), value.to_vec(), None), TxnOp::put(l.record(ino), r.encode(), None)])
                .or_else([TxnOp::get(xk.clone(), Some(GetOptions::new().with_keys_only()))]);
            let resp = self.txn(txn)?;
            if resp.succeeded() {
                return Ok(());
            }
            let exists = resp.op_responses().first().is_some_and(|g| !get_kvs(g).is_empty());
            match how {
                XattrSet::Create if exists => return fail(EEXIST),
                XattrSet::Replace if !exists => return fail(ENODATA),
                _ => {}
            }
        }
        fail(EIO)
    }

    fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let l = &self.sh.layout;
        let txn = Txn::new().and_then([
            TxnOp::get(l.record(ino), Some(GetOptions::new().with_keys_only())),
            TxnOp::get(l.xattrs(ino), range(l.xattrs(ino)).map(|o| o.with_keys_only())),
        ]);
        let r = self.call(move |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })?;
        let resp = r.op_responses();
        if get_kvs(&resp[0]).is_empty() {
            return fail(ENOENT);
        }
        let p = l.xattrs(ino);
        Ok(get_kvs(&resp[1]).iter().filter_map(|kv| kv.key().strip_prefix(p.as_slice()).map(|n| n.to_vec())).collect())
    }

    fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        let l = &self.sh.layout;
        let xk = l.xattr(ino, name);
        for _ in 0..RETRIES {
            let v = self.load(ino)?;
            let mut r = v.merged();
            bump(&mut r.ctime, now());
            let txn = Tx::new()
                .when([
                    Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev),
                    Compare::version(xk.clone(), CompareOp::Greater, 0),
                ])
                .and_then([TxnOp::delete(xk.clone(), None), TxnOp::put(l.record(ino), r.encode(), None)])
                .or_else([TxnOp::get(xk.clone(), Some(GetOptions::new().with_keys_only()))]);
            let resp = self.txn(txn)?;
            if resp.succeeded() {
                return Ok(());
            }
            if resp.op_responses().first().is_some_and(|g| get_kvs(g).is_empty()) {
                return fail(ENODATA);
            }
        }
        fail(EIO)
    }

    fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        // Each batch is one snapshot; a read longer than a batch may see a
        // write of another client land between two.
        let mut done = 0;
        while done < buf.len() {
            let end = (done + WRITE_BATCH).min(buf.len());
            let n = self.read_batch(ino, offset + done as u64, &mut buf[done..end])?;
            done += n;
            if n < end - (done - n) {
                break;
            }
        }
        Ok(done)
    }

    fn write(&self, ino: Ino, pos: WritePos, data: &[u8]) -> Result<u64> {
        let mut batches = data.chunks(WRITE_BATCH);
        let first = batches.next().unwrap_or(&[]);
        let start = self.write_batch(ino, pos, first)?;
        let mut at = start + first.len() as u64;
        for b in batches {
            self.write_batch(ino, WritePos::At(at), b)?;
            at += b.len() as u64;
        }
        Ok(start)
    }

    fn statfs(&self) -> Result<StatFs> {
        // etcd's default quota; the cluster's own may differ.
        let blocks = (2u64 << 30) / 4096;
        Ok(StatFs { bsize: 4096, blocks, bfree: blocks, bavail: blocks, files: 1 << 32, ffree: 1 << 32, namelen: 255 })
    }

    /// A read found atime due (relatime): atime becomes now. ctime stays,
    /// as for Linux's atime updates; a failure is ignored (the next read
    /// tries again).
    fn note_access(&self, ino: Ino) {
        let l = &self.sh.layout;
        for _ in 0..8 {
            let Ok(v) = self.load(ino) else { return };
            let mut r = v.merged();
            r.atime = now();
            let tx = Tx::new()
                .when([Compare::mod_revision(l.record(ino), CompareOp::Equal, v.rev)])
                .and_then([TxnOp::put(l.record(ino), r.encode(), None)]);
            match self.txn(tx) {
                Ok(resp) if !resp.succeeded() => continue,
                _ => return,
            }
        }
    }

    fn attach(&self, notify: Arc<dyn Notify>) {
        let _ = self.sh.notify.set(notify);
    }
}

impl Etcd {
    /// One attempt at a rename: `None` when a compare failed and it must be
    /// tried again.
    fn try_rename(
        &self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<Option<()>> {
        let l = &self.sh.layout;
        let (sk, dk) = (l.entry(parent, name), l.entry(new_parent, new_name));
        let dirs: &[Ino] = if new_parent == parent { &[parent] } else { &[parent, new_parent] };
        let (mut ds, es) = self.load_dirs_and_entries(dirs, &[(parent, name), (new_parent, new_name)])?;
        let np = if new_parent == parent { None } else { ds.pop() };
        let p = ds.pop().expect("the source directory");
        let Some((src, skind, srev)) = es[0] else { return fail(ENOENT) };
        let dst = es[1];
        if flags.exchange && dst.is_none() {
            return fail(ENOENT);
        }
        if let Some((d, dkind, _)) = dst {
            if flags.noreplace {
                return fail(EEXIST);
            }
            if d == src {
                // Two names of one inode: nothing to do.
                return Ok(Some(()));
            }
            if !flags.exchange {
                if skind == FileType::Dir && dkind != FileType::Dir {
                    return fail(ENOTDIR);
                }
                if skind != FileType::Dir && dkind == FileType::Dir {
                    return fail(EISDIR);
                }
            }
        }
        let t = now();
        let mut when = vec![
            Compare::mod_revision(sk.clone(), CompareOp::Equal, srev),
            Compare::mod_revision(dk.clone(), CompareOp::Equal, dst.map_or(0, |d| d.2)),
        ];
        let mut ops = Vec::new();
        // Records rewritten by this rename, by inode: each key is put once.
        let mut recs: HashMap<Ino, (Record, i64)> = HashMap::new();
        let load_into = |ino: Ino, recs: &mut HashMap<Ino, (Record, i64)>| -> Result<()> {
            if let std::collections::hash_map::Entry::Vacant(e) = recs.entry(ino) {
                let fresh;
                let v = match &np {
                    _ if ino == parent => &p,
                    Some(np) if ino == new_parent => np,
                    _ => {
                        fresh = self.load(ino)?;
                        &fresh
                    }
                };
                e.insert((v.merged(), v.rev));
            }
            Ok(())
        };
        // The renamed inode's ctime (and a directory's parent).
        load_into(src, &mut recs)?;
        bump(&mut recs.get_mut(&src).unwrap().0.ctime, t);
        let cross = parent != new_parent;
        let mut moved_dirs = Vec::new();
        let mut victim = None;
        if skind == FileType::Dir && cross {
            moved_dirs.push((src, new_parent));
        }
        if flags.exchange {
            let (d, dkind, _) = dst.unwrap();
            ops.push(TxnOp::put(sk.clone(), encode_entry(d, dkind), None));
            ops.push(TxnOp::put(dk.clone(), encode_entry(src, skind), None));
            load_into(d, &mut recs)?;
            bump(&mut recs.get_mut(&d).unwrap().0.ctime, t);
            if dkind == FileType::Dir && cross {
                moved_dirs.push((d, parent));
            }
        } else {
            ops.push(TxnOp::delete(sk.clone(), None));
            ops.push(TxnOp::put(dk.clone(), encode_entry(src, skind), None));
            if let Some((d, dkind, _)) = dst {
                let v = self.load(d)?;
                if dkind == FileType::Dir {
                    if !self.is_empty_dir(d)? {
                        return fail(ENOTEMPTY);
                    }
                    self.rmdir_ops(d, &v, &mut when, &mut ops);
                    // The replaced directory's link to new_parent goes.
                    load_into(new_parent, &mut recs)?;
                    let r = &mut recs.get_mut(&new_parent).unwrap().0;
                    r.nlink = r.nlink.saturating_sub(1);
                } else {
                    // The victim's record is put here, never in recs (it
                    // is neither parent nor the renamed inode).
                    self.unlink_ops(d, &v, t, &mut when, &mut ops)?;
                    victim = Some((d, v.rec.nlink <= 1));
                }
            }
        }
        // Directories that change parent: link counts, parent pointers, and
        // no cycle (the mover must not be an ancestor of where it goes).
        for &(dir, to) in &moved_dirs {
            let from = if to == new_parent { parent } else { new_parent };
            load_into(from, &mut recs)?;
            recs.get_mut(&from).unwrap().0.nlink -= 1;
            load_into(to, &mut recs)?;
            recs.get_mut(&to).unwrap().0.nlink += 1;
            recs.get_mut(&dir).unwrap().0.parent = to;
            let mut a = to;
            let mut depth = 0;
            while a != ROOT {
                if a == dir {
                    return fail(EINVAL);
                }
                let v = self.load(a)?;
                when.push(Compare::mod_revision(l.record(a), CompareOp::Equal, v.rev));
                a = v.rec.parent;
                depth += 1;
                if depth > 60 {
                    return fail(EIO);
                }
            }
        }
        for pdir in [parent, new_parent] {
            if let Some((r, _)) = recs.get_mut(&pdir) {
                r.mtime = t;
                bump(&mut r.ctime, t);
            }
        }
        for (ino, (r, rev)) in &recs {
            when.push(Compare::mod_revision(l.record(*ino), CompareOp::Equal, *rev));
            ops.push(TxnOp::put(l.record(*ino), r.encode(), None));
        }
        let pdirs = if cross { vec![(parent, &p), (new_parent, np.as_ref().unwrap())] } else { vec![(parent, &p)] };
        for (pdir, v) in pdirs {
            if !recs.contains_key(&pdir) {
                when.push(Compare::create_revision(l.record(pdir), CompareOp::Equal, v.created));
                ops.push(self.times_op(pdir, t));
            }
        }
        if self.txn(Tx::new().when(when).and_then(ops))?.succeeded() {
            self.sh.entries_changed(parent);
            self.sh.entries_changed(new_parent);
            if let Some((d, true)) = victim {
                self.orphaned(d);
            }
            return Ok(Some(()));
        }
        Ok(None)
    }
}
