//! A local etcd cluster on loopback ports, for tests, the lab, and users
//! trying the etcd filesystem on one machine (`rcuvfs etcd`).
//!
//! Members are `etcd` processes (the binary from `RCUVFS_ETCD`, else `etcd`
//! on the PATH: Debian's `etcd-server`), each with its own data directory
//! under one scratch directory (in `/dev/shm` where there is one, so that
//! Raft's fsyncs cost little). Members can be killed and restarted to test
//! faults; dropping the cluster kills them all and removes the directory.
//! Members die with the thread that started them (`PR_SET_PDEATHSIG`):
//! start and drop a cluster on one thread.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::Result;

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A running local cluster.
pub struct LocalCluster {
    dir: PathBuf,
    members: Vec<Member>,
    token: String,
}

/// A free loopback port for a member to listen on.
///
/// Not one the kernel picks (`bind` to port 0): those come from the
/// ephemeral range, the range every outgoing connection's local port comes
/// from too, and between the moment this function releases the port and the
/// moment etcd binds it, a client's connection (to another member, another
/// test's cluster) could take it; the member then exits with "address
/// already in use" (seen in CI, once in many runs). So the port is drawn
/// below the ephemeral range (`ip_local_port_range`), checked free by
/// binding it, and never handed out twice by this process.
fn free_port() -> Result<u16> {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<u32>().ok()))
        .unwrap_or(32768);
    let (low, high) = (20_000u32, ephemeral_low.min(u32::from(u16::MAX)));
    if high > low + 1000 {
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        let mut x = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
            as u64
            ^ u64::from(std::process::id()) << 32
            | 1;
        for _ in 0..1000 {
            // xorshift64: a different draw in each process and call.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = (low + (x % u64::from(high - low)) as u32) as u16;
            if given.contains(&port) {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn etcd_binary() -> PathBuf {
    std::env::var_os("RCUVFS_ETCD").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("etcd"))
}

/// Whether the member at `port` answers its health check.
fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(1000)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.contains("\"health\":\"true\"")
}

/// Removes the scratch directories of clusters whose process is gone
/// (killed before it could drop them).
fn remove_dead(base: &Path) {
    let Ok(dir) = std::fs::read_dir(base) else { return };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("rcuvfs-")).and_then(|n| n.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl LocalCluster {
    /// Starts `n` members (1 or 3 for tests) and waits until the cluster
    /// answers.
    ///
    /// A member that exits at once (a port taken by another process
    /// between the draw and etcd's bind) makes it try again, on other
    /// ports, twice; the error of the last try carries the member's log.
    pub fn start(n: usize) -> Result<LocalCluster> {
        let mut tries = 0;
        loop {
            match Self::start_once(n) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound && tries < 2 => tries += 1,
                r => return r,
            }
        }
    }

    fn start_once(n: usize) -> Result<LocalCluster> {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let token = format!("rcuvfs-{}-{stamp}", std::process::id());
        remove_dead(&base);
        let dir = base.join(&token);
        std::fs::create_dir_all(&dir)?;
        let mut members = Vec::new();
        for i in 0..n.max(1) {
            members.push(Member { name: format!("m{i}"), client: free_port()?, peer: free_port()?, child: None });
        }
        let mut c = LocalCluster { dir, members, token };
        for i in 0..c.members.len() {
            c.spawn(i, true)?;
        }
        c.wait_healthy(Duration::from_secs(30))?;
        Ok(c)
    }

    fn spawn(&mut self, i: usize, new: bool) -> Result<()> {
        let initial: Vec<String> =
            self.members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer)).collect();
        let m = &self.members[i];
        let log = std::fs::File::create(self.dir.join(format!("{}.log", m.name)))?;
        let mut cmd = Command::new(etcd_binary());
        // The member dies with the thread that started it, so that a
        // process killed before it could drop the cluster (a test run
        // stopped by hand, a crash) leaves no etcd behind.
        // SAFETY: prctl is async-signal-safe and touches only the child.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(self.dir.join(&m.name))
            .arg("--listen-client-urls")
            .arg(format!("http://127.0.0.1:{}", m.client))
            .arg("--advertise-client-urls")
            .arg(format!("http://127.0.0.1:{}", m.client))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-cluster")
            .arg(initial.join(","))
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--initial-cluster-state")
            .arg(if new { "new" } else { "existing" })
            // Failover in well under a second on loopback.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            // Keep 10,000 revisions of history; watches resume within it.
            .args(["--auto-compaction-mode", "revision", "--auto-compaction-retention", "10000"])
            .args(["--quota-backend-bytes", &(8u64 << 30).to_string()])
            // Applied Raft entries kept in memory before a snapshot (etcd's
            // default, 100,000, holds every 64 KiB chunk a write rewrote:
            // fsx's 20,000 operations through a mount peaked at 1.6 GB of
            // RSS, 0.9 GB with 5,000).
            .args(["--snapshot-count", "5000"])
            .args(["--log-level", "warn", "--logger", "zap"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("{}: {e} (install etcd-server, or set RCUVFS_ETCD)", etcd_binary().display()),
                )
            })?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Waits until every running member answers its health check.
    pub fn wait_healthy(&mut self, within: Duration) -> Result<()> {
        let t = Instant::now();
        loop {
            let mut all = true;
            for m in &mut self.members {
                if let Some(c) = &mut m.child {
                    if let Ok(Some(status)) = c.try_wait() {
                        // The directory goes with the cluster: the log's
                        // end travels in the error.
                        let log = std::fs::read_to_string(self.dir.join(format!("{}.log", m.name))).unwrap_or_default();
                        let tail: String = log
                            .lines()
                            .rev()
                            .take(5)
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect::<Vec<_>>()
                            .join("\n");
                        return Err(std::io::Error::other(format!(
                            "etcd member {} exited ({status}); its log ends:\n{tail}",
                            m.name,
                        )));
                    }
                    all &= healthy(m.client);
                }
            }
            if all {
                return Ok(());
            }
            if t.elapsed() > within {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("etcd cluster not healthy after {within:?}; logs in {}", self.dir.display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `host:port` of each member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| format!("127.0.0.1:{}", m.client)).collect()
    }

    /// `ENDPOINTS/PREFIX`, as `--backend etcd:` takes it.
    pub fn spec(&self, prefix: &str) -> String {
        format!("{}/{prefix}", self.endpoints().join(","))
    }

    /// Kills member `i` (SIGKILL), as a crash.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restarts member `i` on its data directory.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.kill(i);
        self.spawn(i, false)
    }

    /// The scratch directory (data and logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
