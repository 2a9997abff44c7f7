//! The client's watch (other clients' changes turned into `Notify` calls)
//! and the orphan protocol (holds, release, reclaim, the sweep).
//!
//! The watch runs as a task on the client's runtime and hands each batch of
//! events to a thread of its own, which calls the VFS: a `Notify` call may
//! call back into the filesystem (a refreshed inode's `getattr`), which
//! blocks on the runtime, and blocking is not allowed on the runtime's own
//! threads.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, EventType, GetOptions, Txn, TxnOp, WatchOptions};

use super::layout::{decode_entry, Key, Record};
use super::{get_kvs, leased, range, range_empty, Shared};
use crate::error::Result;
use crate::fs::Ino;

/// What the watch task hands the notifying thread.
enum Msg {
    /// Changes, each (key, put?, value, revision), in revision order.
    Events(Vec<(Vec<u8>, bool, Vec<u8>, i64)>),
    /// History was lost: drop everything cached.
    AllChanged,
}

/// The running watch; stops when dropped.
#[derive(Default)]
pub(super) struct Watcher {
    revision: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Watches the tree from revision `start` (exclusive).
    /// The notifying thread keeps the runtime alive until it ends, so that
    /// a notification in progress when the client goes can still finish.
    pub(super) fn start(rt: &Arc<tokio::runtime::Runtime>, sh: Arc<Shared>, start: i64) -> Result<Watcher> {
        let (tx, rx) = mpsc::channel();
        let revision = Arc::new(AtomicI64::new(start));
        let stop = Arc::new(AtomicBool::new(false));
        let watch = rt.spawn(watch_loop(sh.clone(), start, tx));
        let sweep = rt.spawn(sweep_loop(sh.clone()));
        let lease = rt.spawn(keep_lease(sh.clone()));
        let (rev, st, keep) = (revision.clone(), stop.clone(), rt.clone());
        let thread = std::thread::Builder::new().name("rcuvfs-etcd-watch".into()).spawn(move || {
            deliver(&sh, rx, &rev, &st);
            drop(keep);
        })?;
        Ok(Watcher { revision, stop, tasks: vec![watch, sweep, lease], thread: Some(thread) })
    }

    /// The revision up to which changes have been delivered.
    pub(super) fn revision(&self) -> i64 {
        // Acquire, paired with the Release after each batch's notifications:
        // whoever reads r also sees what the notifications up to r did.
        self.revision.load(Ordering::Acquire)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Relaxed: a flag, publishing nothing; the thread checks it per event.
        self.stop.store(true, Ordering::Relaxed);
        for t in &self.tasks {
            t.abort();
        }
        // The aborted watch task drops its sender, which ends the thread
        // after the event in hand. It is not joined: the client may go on
        // any thread, that one included (a VFS whose last reference a
        // notification held), or one holding a lock the thread waits for.
        drop(self.thread.take());
    }
}

async fn watch_loop(sh: Arc<Shared>, mut rev: i64, tx: mpsc::Sender<Msg>) {
    loop {
        let mut c = sh.client.clone();
        let opts = WatchOptions::new().with_prefix().with_start_revision(rev + 1);
        let mut stream = match c.watch(sh.layout.prefix().to_vec(), Some(opts)).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            match stream.message().await {
                Ok(Some(resp)) => {
                    if resp.compact_revision() > 0 {
                        // Compacted past `rev`: what happened since is
                        // gone, so everything cached goes too.
                        sh.stats.resyncs.fetch_add(1, Ordering::Relaxed);
                        if tx.send(Msg::AllChanged).is_err() {
                            return;
                        }
                        rev = rev.max(resp.compact_revision() - 1);
                        break;
                    }
                    if resp.canceled() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        break;
                    }
                    let batch: Vec<_> = resp
                        .events()
                        .iter()
                        .filter_map(|e| {
                            let kv = e.kv()?;
                            Some((
                                kv.key().to_vec(),
                                e.event_type() == EventType::Put,
                                kv.value().to_vec(),
                                kv.mod_revision(),
                            ))
                        })
                        .collect();
                    if let Some(last) = batch.last() {
                        rev = rev.max(last.3);
                        if tx.send(Msg::Events(batch)).is_err() {
                            return;
                        }
                    }
                }
                // The member went away: resume from `rev` on another.
                Ok(None) | Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    break;
                }
            }
        }
    }
}

fn deliver(sh: &Arc<Shared>, rx: mpsc::Receiver<Msg>, revision: &AtomicI64, stop: &AtomicBool) {
    while let Ok(msg) = rx.recv() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let notify = sh.notify.get();
        match msg {
            Msg::AllChanged => {
                sh.forget_listings();
                if let Some(n) = notify {
                    n.all_changed();
                }
            }
            Msg::Events(events) => {
                let mut changed = BTreeSet::new();
                let mut last = 0;
                // The revisions this client committed: its writer key is in
                // them (a revision's events come in one response).
                let own: BTreeSet<i64> = events
                    .iter()
                    .filter(|(k, ..)| sh.layout.parse(k) == Key::Writer(sh.client_id))
                    .map(|e| e.3)
                    .collect();
                for (key, put, value, rev) in &events {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    last = *rev;
                    if let Key::Grace(ino) = sh.layout.parse(key) {
                        // Not a change to the tree: the cluster expired an
                        // orphan's grace period (a reclaim never takes the key).
                        // Every client tries the reclaim, as when a holder goes.
                        if !put {
                            // In the background: a lease's expiry may end
                            // many grace periods at once, and this thread
                            // delivers every other change.
                            reclaim_later(sh, ino);
                        }
                        continue;
                    }
                    if own.contains(rev) {
                        // Not news to this client, but its cache applied
                        // the change to what it believed the names were,
                        // which may have been behind: it checks them.
                        if let (Key::Entry(parent, name), Some(n)) = (sh.layout.parse(key), notify) {
                            let ino = if *put { decode_entry(value).map(|(i, _)| i) } else { None };
                            n.entry_is(parent, name, ino);
                        }
                        continue;
                    }
                    sh.stats.events.fetch_add(1, Ordering::Relaxed);
                    match sh.layout.parse(key) {
                        Key::Entry(parent, name) => {
                            sh.entries_changed(parent);
                            if let Some(n) = notify {
                                n.entry_changed(parent, name);
                            }
                        }
                        Key::Record(ino) => {
                            changed.insert(ino);
                            if *put && Record::decode(value).is_some_and(|r| r.nlink == 0) && sh.holds_locally(ino) {
                                register(sh, ino);
                            }
                        }
                        Key::Times(ino) | Key::Chunk(ino) => {
                            changed.insert(ino);
                        }
                        // A holder went (let go, or its client died).
                        Key::Hold(ino) if !put => {
                            let _ = reclaim(sh, ino);
                        }
                        _ => {}
                    }
                }
                if let Some(n) = notify {
                    for ino in changed {
                        n.inode_changed(ino);
                    }
                }
                revision.store(last, Ordering::Release);
            }
        }
    }
}

/// Registers this client's hold on the orphan `ino`.
pub(super) fn register(sh: &Arc<Shared>, ino: Ino) {
    let t = sh.opts.timeout;
    let _ = sh.handle.block_on(async { tokio::time::timeout(t, register_async(sh, ino)).await });
}

async fn register_async(sh: &Arc<Shared>, ino: Ino) {
    let l = &sh.layout;
    let lease = sh.lease();
    let txn = Txn::new().when([Compare::version(l.record(ino), CompareOp::Greater, 0)]).and_then([
        TxnOp::put(l.writer(sh.client_id), Vec::new(), None),
        TxnOp::put(l.hold(ino, lease), Vec::new(), leased(lease)),
    ]);
    let mut c = sh.client.clone();
    if c.txn(txn).await.is_ok_and(|r| r.succeeded()) {
        let mut h = sh.held(ino);
        match h.get_mut(&ino) {
            Some(e) if e.count > 0 => e.hold_key = true,
            _ => {
                drop(h);
                release(sh, ino);
            }
        }
    }
}

/// After this client unlinked `ino` while holding it: registers its hold
/// shortly, if it still holds it then. Most unlinks are of names the VFS
/// lets go of at once (the cached dentry was the only holder), and need no
/// hold; the sweep registers any this misses, well within the grace period.
pub(super) fn register_later(sh: &Arc<Shared>, ino: Ino) {
    let sh2 = sh.clone();
    sh.handle.spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if sh2.held(ino).get(&ino).is_some_and(|h| h.count > 0 && !h.hold_key) {
            let _ = tokio::time::timeout(sh2.opts.timeout, register_async(&sh2, ino)).await;
        }
    });
}

/// This client lets the orphan `ino` go: its hold is deleted, and the
/// orphan reclaimed if it was the last. In the background.
pub(super) fn release(sh: &Arc<Shared>, ino: Ino) {
    let (c, key) = (sh.client.clone(), sh.layout.hold(ino, sh.lease()));
    let sh2 = sh.clone();
    sh.handle.spawn(async move {
        let mut c = c;
        let _ = tokio::time::timeout(sh2.opts.timeout, c.txn(own_delete(&sh2, key))).await;
        let _ = tokio::time::timeout(sh2.opts.timeout, reclaim_async(&sh2, ino)).await;
    });
}

/// A delete of `key` marked as this client's own (see `Shared::txn`).
fn own_delete(sh: &Shared, key: Vec<u8>) -> Txn {
    Txn::new().and_then([TxnOp::put(sh.layout.writer(sh.client_id), Vec::new(), None), TxnOp::delete(key, None)])
}

/// Reclaims the orphan `ino` in the background, if it may be (see `reclaim`).
fn reclaim_later(sh: &Arc<Shared>, ino: Ino) {
    let sh2 = sh.clone();
    sh.handle.spawn(async move {
        let _ = tokio::time::timeout(sh2.opts.timeout, reclaim_async(&sh2, ino)).await;
    });
}

/// Reclaims the orphan `ino` if its grace period is over (its grace key
/// expired) and no client holds it.
pub(super) fn reclaim(sh: &Shared, ino: Ino) -> Result<bool> {
    let t = sh.opts.timeout;
    match sh.handle.block_on(async { tokio::time::timeout(t, reclaim_async(sh, ino)).await }) {
        Ok(r) => r.map_err(super::io_error),
        Err(_) => crate::error::fail(libc::ETIMEDOUT),
    }
}

async fn reclaim_async(sh: &Shared, ino: Ino) -> std::result::Result<bool, etcd_client::Error> {
    if sh.holds_locally(ino) {
        return Ok(false);
    }
    let l = &sh.layout;
    let mut c = sh.client.clone();
    let read = Txn::new().and_then([TxnOp::get(l.orphan(ino), None), TxnOp::get(l.record(ino), None)]);
    let r = c.txn(read).await?;
    let resp = r.op_responses();
    let Some(marker) = get_kvs(&resp[0]).first() else { return Ok(false) };
    let mut when = vec![
        Compare::mod_revision(l.orphan(ino), CompareOp::Equal, marker.mod_revision()),
        // The grace period is over when the cluster has expired its key.
        Compare::version(l.grace(ino), CompareOp::Equal, 0),
        range_empty(l.holds(ino)),
    ];
    let rec_rev = get_kvs(&resp[1]).first().map_or(0, |kv| kv.mod_revision());
    when.push(Compare::mod_revision(l.record(ino), CompareOp::Equal, rec_rev));
    let prefix = || Some(DeleteOptions::new().with_prefix());
    let txn = Txn::new().when(when).and_then([
        TxnOp::put(l.writer(sh.client_id), Vec::new(), None),
        TxnOp::delete(l.orphan(ino), None),
        TxnOp::delete(l.record(ino), None),
        TxnOp::delete(l.chunks(ino), prefix()),
        TxnOp::delete(l.xattrs(ino), prefix()),
    ]);
    let done = c.txn(txn).await?.succeeded();
    if done {
        sh.stats.reclaimed.fetch_add(1, Ordering::Relaxed);
    }
    Ok(done)
}

/// Every so often, reclaims the orphans whose grace period is over (those
/// left by clients that died, or by holders whose release was lost).
async fn sweep_loop(sh: Arc<Shared>) {
    let every = (sh.opts.orphan_grace / 2).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        let mut c = sh.client.clone();
        let Ok(r) = c.get(sh.layout.orphans(), range(sh.layout.orphans()).map(GetOptions::with_keys_only)).await else {
            continue;
        };
        for kv in r.kvs() {
            let Some(ino) = sh.layout.orphan_ino(kv.key()) else { continue };
            let registered = sh.held(ino).get(&ino).map(|h| h.hold_key);
            match registered {
                // Held here but not registered (the watcher's event was
                // lost, or its register failed): register now, well within
                // the grace period that other clients wait out.
                Some(false) => register_async(&sh, ino).await,
                Some(true) => {}
                None => {
                    let _ = reclaim_async(&sh, ino).await;
                }
            }
        }
        // This client's holds on inodes it no longer holds (a release that
        // failed) go, so that their orphans can be reclaimed.
        let mut holds = sh.layout.prefix().to_vec();
        holds.extend_from_slice(b"h/");
        let Ok(r) = c.get(holds.clone(), range(holds).map(GetOptions::with_keys_only)).await else { continue };
        let mine = format!("/{:016x}", sh.lease() as u64);
        for kv in r.kvs() {
            if let Key::Hold(ino) = sh.layout.parse(kv.key()) {
                if kv.key().ends_with(mine.as_bytes()) && !sh.holds_locally(ino) {
                    let _ = c.txn(own_delete(&sh, kv.key().to_vec())).await;
                    let _ = reclaim_async(&sh, ino).await;
                }
            }
        }
    }
}

/// Keeps the client's lease alive (a third of its TTL apart). If it
/// expired anyway (the client was cut off for longer than the TTL), grants
/// a new one and registers again the holds this client still has; an
/// orphan reclaimed meanwhile is lost to it (its reads answer ENOENT).
async fn keep_lease(sh: Arc<Shared>) {
    let ttl = sh.opts.lease_ttl.as_secs().max(2) as i64;
    let every = Duration::from_millis(ttl as u64 * 1000 / 3);
    loop {
        let mut c = sh.client.clone();
        if let Ok((mut keeper, mut stream)) = c.lease_keep_alive(sh.lease()).await {
            loop {
                if keeper.keep_alive().await.is_err() {
                    break;
                }
                match stream.message().await {
                    Ok(Some(r)) if r.ttl() > 0 => tokio::time::sleep(every).await,
                    Ok(Some(_)) => {
                        if let Ok(g) = c.lease_grant(ttl, None).await {
                            sh.lease.store(g.id(), Ordering::Relaxed);
                            let held: Vec<Ino> = sh
                                .held
                                .iter()
                                .flat_map(|m| {
                                    m.lock()
                                        .unwrap()
                                        .iter()
                                        .filter(|(_, h)| h.hold_key)
                                        .map(|(i, _)| *i)
                                        .collect::<Vec<_>>()
                                })
                                .collect();
                            for ino in held {
                                let l = &sh.layout;
                                let txn = Txn::new()
                                    .when([Compare::version(l.record(ino), CompareOp::Greater, 0)])
                                    .and_then([TxnOp::put(l.hold(ino, g.id()), Vec::new(), leased(g.id()))]);
                                let _ = c.txn(txn).await;
                            }
                        }
                        break;
                    }
                    _ => break,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
