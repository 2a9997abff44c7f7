//! Latencies of the etcd filesystem, and how creates scale with clients.
//!
//! `cargo run --release -p rcuvfs --features etcd --example etcd -- [N] [SPEC]`
//!
//! Starts a local one-member cluster (unless SPEC, `ENDPOINTS[/PREFIX]`, is
//! given), then, with N files (default 2,000) in one directory:
//! create, cold stat (a client with nothing cached), warm stat, readdir,
//! rename; the time from a commit on one client to the change being
//! visible on another (a chmod of a cached file, a create over a cached
//! miss); and creates per second from 1, 2, 4 and 8 clients at once, each
//! in its own directory and all in one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcuvfs::fs::etcd::{Etcd, EtcdOptions, LocalCluster};
use rcuvfs::Vfs;

fn client(o: &EtcdOptions) -> (Vfs, Arc<Etcd>) {
    let fs = Arc::new(Etcd::connect(o.clone()).unwrap());
    (Vfs::builder().filesystem(fs.clone()).build().unwrap(), fs)
}

/// p50 and p99 of `v`, in microseconds.
fn pct(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}

fn timed(n: usize, mut f: impl FnMut(usize)) -> Vec<Duration> {
    (0..n)
        .map(|i| {
            let t = Instant::now();
            f(i);
            t.elapsed()
        })
        .collect()
}

fn row(what: &str, v: Vec<Duration>) {
    let (p50, p99) = pct(v);
    println!("| {what} | {p50:.0} | {p99:.0} | |");
}

/// A row with the round trips to the cluster per operation that `fs` made.
fn row_rt(what: &str, fs: &Etcd, f: impl FnOnce() -> Vec<Duration>) {
    let before = fs.stats().requests.load(Ordering::Relaxed);
    let v = f();
    let rt = (fs.stats().requests.load(Ordering::Relaxed) - before) as f64 / v.len() as f64;
    let (p50, p99) = pct(v);
    println!("| {what} | {p50:.0} | {p99:.0} | {rt:.2} |");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(2000, |a| a.parse().expect("N"));
    let _cluster;
    let mut o = match args.get(2) {
        Some(spec) => EtcdOptions::parse(spec).unwrap(),
        None => {
            let c = LocalCluster::start(1).unwrap();
            let o = EtcdOptions::parse(&c.spec("example")).unwrap();
            _cluster = c;
            o
        }
    };
    o.prefix = format!("{}/example-{}", o.prefix, std::process::id());
    o.remove_on_drop = true;
    let (a, afs) = client(&o);
    let mut keep = o.clone();
    keep.remove_on_drop = false;
    println!("{n} files in one directory; microseconds\n");
    println!("| operation | p50 | p99 | round trips |\n|---|---|---|---|");
    a.create_dir("/d").unwrap();
    row_rt("create (write of an empty file)", &afs, || timed(n, |i| a.write(format!("/d/f{i}"), b"").unwrap()));
    let (b, bfs) = client(&keep);
    row_rt("stat, cold (another client)", &bfs, || {
        timed(n, |i| {
            std::hint::black_box(b.metadata(format!("/d/f{i}")).unwrap());
        })
    });
    // Warm: cached, no call to etcd; per stat, averaged over the files.
    let warm: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            for i in 0..n {
                std::hint::black_box(b.metadata(format!("/d/f{i}")).unwrap());
            }
            t.elapsed() / n as u32
        })
        .collect();
    let (w50, w99) = pct(warm);
    println!("| stat, warm (cached; mean of {n} per sample) | {w50:.3} | {w99:.3} | |");
    // A client's first listing reads the directory from etcd; later ones
    // use the listing it keeps until the directory changes.
    let fresh: Vec<_> = (0..5).map(|_| client(&keep).0).collect();
    row(
        &format!("readdir of {n} entries, a client's first (one range read)"),
        fresh
            .iter()
            .map(|c| {
                let t = Instant::now();
                std::hint::black_box(c.read_dir("/d").unwrap().count());
                t.elapsed()
            })
            .collect(),
    );
    row(
        &format!("readdir of {n} entries, again (the kept listing)"),
        timed(5, |_| {
            std::hint::black_box(fresh[0].read_dir("/d").unwrap().count());
        }),
    );
    row_rt("rename within the directory", &afs, || {
        timed(n, |i| a.rename(format!("/d/f{i}"), format!("/d/g{i}")).unwrap())
    });
    row_rt("unlink", &afs, || timed(n, |i| a.remove_file(format!("/d/g{i}")).unwrap()));

    // Invalidation: B holds the file cached; A changes it; B polls its
    // cache (no call to etcd) until the change shows.
    let rounds = 200;
    a.write("/watched", b"").unwrap();
    b.metadata("/watched").unwrap();
    let chmod = timed(rounds, |i| {
        let mode = 0o600 | ((i as u32 % 2) * 0o44);
        a.set_permissions("/watched", rcuvfs::Permissions::from_mode(mode)).unwrap();
        let t = Instant::now();
        while b.metadata("/watched").unwrap().permissions().mode() & 0o777 != mode {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::hint::spin_loop();
        }
    });
    // The commit's own round trip is in each sample: take A's chmod alone.
    let alone = timed(rounds, |i| {
        a.set_permissions("/watched", rcuvfs::Permissions::from_mode(0o600 | ((i as u32 % 2) * 0o44))).unwrap()
    });
    row("chmod on A, seen on B (commit + invalidation)", chmod);
    row("chmod on A alone (commit)", alone);
    let create = timed(rounds, |i| {
        let p = format!("/new{i}");
        assert!(b.metadata(&p).is_err()); // a cached miss on B
        a.write(&p, b"").unwrap();
        let t = Instant::now();
        while b.metadata(&p).is_err() {
            assert!(t.elapsed() < Duration::from_secs(10));
        }
    });
    row("create on A over B's cached miss, seen on B (incl. B's lookup)", create);

    // Creates per second from K clients at once.
    println!("\n| clients | own directories, creates/s | one shared directory, creates/s |\n|---|---|---|");
    for k in [1, 2, 4, 8] {
        let mut out = Vec::new();
        for shared in [false, true] {
            let clients: Vec<_> = (0..k).map(|_| client(&keep)).collect();
            let tag = format!("k{k}{}", if shared { "s" } else { "o" });
            for (j, (v, _)) in clients.iter().enumerate() {
                let d = if shared { format!("/{tag}") } else { format!("/{tag}-{j}") };
                let _ = v.create_dir(&d);
            }
            let stop = AtomicBool::new(false);
            let count = AtomicU64::new(0);
            let t = Instant::now();
            std::thread::scope(|s| {
                for (j, (v, _)) in clients.iter().enumerate() {
                    let (stop, count, tag) = (&stop, &count, &tag);
                    s.spawn(move || {
                        let d = if shared { format!("/{tag}") } else { format!("/{tag}-{j}") };
                        let mut i = 0;
                        while !stop.load(Ordering::Relaxed) {
                            v.write(format!("{d}/c{j}-{i}"), b"").unwrap();
                            i += 1;
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
                std::thread::sleep(Duration::from_secs(2));
                stop.store(true, Ordering::Relaxed);
            });
            out.push(count.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64());
        }
        println!("| {k} | {:.0} | {:.0} |", out[0], out[1]);
    }
}
