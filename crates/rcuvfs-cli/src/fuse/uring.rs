//! FUSE over io_uring (`rcuvfs mount --io-uring`; Linux 6.14+, with the
//! fuse module's `enable_uring` parameter on).
//!
//! Why: through `/dev/fuse` every request wakes a server thread the kernel
//! picks from one queue, often on another CPU; on a VM a wake-up of a
//! halted vCPU costs tens of microseconds, and more client or server
//! threads only add such wake-ups (README, "The server's threads"). Over
//! io_uring the kernel keeps one queue per CPU and hands a request to the
//! queue of the CPU its caller runs on, whose thread (pinned there) answers
//! it and fetches the next in one `io_uring_enter`.
//!
//! How, given fuser (which reads only a descriptor and keeps its request
//! decoder to itself):
//! - This module owns `/dev/fuse`. fuser runs on one end of a
//!   `SOCK_SEQPACKET` socket pair, the *bridge*, as if it were the device:
//!   a message is one request or one reply, as on the device.
//! - A queue thread per CPU registers [`DEPTH`] ring entries and answers
//!   LOOKUP and GETATTR itself (the calls of a path walk and a stat). It
//!   hands every other request to fuser through the bridge, rebuilt in the
//!   device's layout, and goes on with its other entries; the reply comes
//!   back through the *pump* thread, which writes it into the entry and
//!   wakes the queue (an eventfd the ring polls) to commit it.
//! - The device thread reads what the kernel still sends through
//!   `/dev/fuse` (INIT, FORGET, INTERRUPT, anything before the queues are
//!   registered) and hands it to fuser. The pump writes fuser's replies to
//!   those, and its notifications, to the device. INIT's reply gains
//!   `FUSE_OVER_IO_URING`, and a `max_write` no larger than the ring's
//!   buffers; the queues register once it is sent.
//! - Not with the kernel's FUSE passthrough (its backing ids are ioctls on
//!   the device, which fuser would send to the bridge).
//!
//! Locks: `Shared::pending`, a queue's `done` and `started` are leaves,
//! each held for a map or vector operation; none is taken while another is
//! held.
//!
//! The ring protocol (the kernel's `fuse_uring_req_header`): a 128-byte
//! in/out header (`fuse_in_header` in, `fuse_out_header` out), 128 bytes of
//! the request's first argument (its op header, or nothing), then
//! `fuse_uring_ent_in_out` (commit id, payload size); the payload buffer
//! holds the other arguments in, the answer out.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{FileAttr, FileHandle, INodeNo};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::nodes::Mounted;

/// Ring entries per queue (libfuse's default).
const DEPTH: usize = 8;
/// The largest payload: a write or read of the kernel's default
/// `max_pages` (256 pages). INIT's reply caps `max_write` to it.
const PAYLOAD: usize = 1 << 20;
/// Room for a whole request or reply on the bridge.
const MESSAGE: usize = PAYLOAD + 4096;
/// The in/out header, the op header, then `fuse_uring_ent_in_out`.
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
/// Requests the bridge makes up itself (DESTROY at the end): their
/// replies go nowhere.
const OWN: u64 = 1 << 63;

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_BATCH_FORGET: u32 = 42;
const FUSE_GETATTR: u32 = 3;
const FUSE_SETATTR: u32 = 4;
const FUSE_MKDIR: u32 = 9;
const FUSE_UNLINK: u32 = 10;
const FUSE_RMDIR: u32 = 11;
const FUSE_RENAME: u32 = 12;
const FUSE_OPEN: u32 = 14;
const FUSE_GETXATTR: u32 = 22;
const FUSE_ACCESS: u32 = 34;
const FUSE_RENAME2: u32 = 45;
const FUSE_READ: u32 = 15;
const FUSE_WRITE: u32 = 16;
const FUSE_RELEASE: u32 = 18;
const FUSE_FLUSH: u32 = 25;
const FUSE_CREATE: u32 = 35;
const FUSE_OPENDIR: u32 = 27;
const FUSE_READDIR: u32 = 28;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_READDIRPLUS: u32 = 44;
const FUSE_INIT: u32 = 26;
const FUSE_DESTROY: u32 = 38;
const FUSE_GETATTR_FH: u32 = 1;
const FUSE_INIT_EXT: u32 = 1 << 30;
/// `FUSE_OVER_IO_URING` (bit 41), in `flags2`.
const OVER_IO_URING2: u32 = 1 << 9;
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Whether the fuse module lets a server use io_uring.
pub(super) fn kernel_allows() -> io::Result<()> {
    let p = "/sys/module/fuse/parameters/enable_uring";
    match std::fs::read_to_string(p) {
        Ok(s) if s.trim() == "Y" => Ok(()),
        Ok(_) => Err(io::Error::other(format!("the fuse module has io_uring off: `echo Y > {p}` (root) turns it on"))),
        Err(e) => Err(io::Error::other(format!("this kernel has no FUSE over io_uring ({p}: {e})"))),
    }
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// One CPU's ring: its entries, and what the pump hands back to it.
struct Queue {
    /// Entries whose reply the pump wrote, to commit.
    done: Mutex<Vec<usize>>,
    /// Wakes the queue's thread (its ring polls it).
    wake: OwnedFd,
    /// The entries' buffers: each header page, then its payload.
    ents: Vec<Ent>,
}

struct Ent {
    hdr: *mut u8,
    payload: *mut u8,
    iov: [libc::iovec; 2],
}

// SAFETY: an entry's buffers are written by one side at a time: the kernel
// until its completion, then the queue's thread, or the pump for a request
// handed to fuser (the thread touches it again only once the pump queued it
// in `done`, under that lock).
unsafe impl Send for Ent {}
unsafe impl Sync for Ent {}

struct Shared {
    dev: Arc<OwnedFd>,
    /// The bridge's end that this module reads and writes.
    bridge: OwnedFd,
    server: Mounted,
    queues: Vec<Queue>,
    /// Where a request handed to fuser came from, so that its reply goes
    /// back there: unique id -> (queue, entry); absent, the device.
    pending: Mutex<HashMap<u64, (usize, usize)>>,
    /// INIT's unique id (0: none, or its reply has passed). Relaxed, as
    /// `offered`: the device thread stores both before it writes INIT to
    /// the bridge, and the pump reads them after fuser's reply to it came
    /// back through the bridge (the socket's calls order them).
    init: AtomicU64,
    /// Set once INIT's reply is sent: the queues may register.
    started: (Mutex<bool>, Condvar),
    /// Whether the kernel offered FUSE_OVER_IO_URING at INIT.
    offered: AtomicBool,
}

fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: an anonymous private mapping; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Writes up to two slices as one message (one request or reply).
pub(super) fn writev(fd: RawFd, parts: &[&[u8]]) -> io::Result<usize> {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2];
    for (v, p) in iov.iter_mut().zip(parts) {
        *v = libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() };
    }
    debug_assert!(parts.len() <= iov.len(), "at most two parts");
    // SAFETY: every iovec in use points into a live slice.
    cvt(unsafe { libc::writev(fd, iov.as_ptr(), parts.len().min(iov.len()) as libc::c_int) })
}

/// Starts the bridge on the mounted `/dev/fuse` descriptor `dev`: returns
/// the descriptor fuser is to run on (`Session::from_fd`). `fuser_threads`
/// is how many of fuser's loops read it (each ends at one DESTROY).
pub(super) fn start(dev: OwnedFd, server: Mounted, fuser_threads: usize) -> io::Result<OwnedFd> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for fd in [&ours, &theirs] {
        // Room for a whole write request in one message (root may exceed
        // the system's default limits).
        let size: libc::c_int = 4 * MESSAGE as libc::c_int;
        let set = |opt| {
            // SAFETY: an int option of the right size.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                ) == 0
            }
        };
        // Without CAP_NET_ADMIN the system's limits cap the plain options;
        // a message the buffer cannot take is then answered EIO (below).
        if !set(libc::SO_SNDBUFFORCE) {
            set(libc::SO_SNDBUF);
        }
        if !set(libc::SO_RCVBUFFORCE) {
            set(libc::SO_RCVBUF);
        }
    }
    let cpus = possible_cpus();
    let mut queues = Vec::with_capacity(cpus);
    for _ in 0..cpus {
        // SAFETY: eventfd has no memory arguments.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut ents = Vec::with_capacity(DEPTH);
        for _ in 0..DEPTH {
            let hdr = map(4096)?;
            let payload = map(PAYLOAD)?;
            ents.push(Ent {
                hdr,
                payload,
                iov: [
                    libc::iovec { iov_base: hdr.cast(), iov_len: 4096 },
                    libc::iovec { iov_base: payload.cast(), iov_len: PAYLOAD },
                ],
            });
        }
        // SAFETY: just created, owned here.
        queues.push(Queue { done: Mutex::new(Vec::new()), wake: unsafe { OwnedFd::from_raw_fd(efd) }, ents });
    }
    let dev = Arc::new(dev);
    // Notifications go to the device from the thread that makes them, as
    // over /dev/fuse (see `KernelNotify`).
    let _ = server.kernel.device.set(dev.clone());
    let shared = Arc::new(Shared {
        dev,
        bridge: ours,
        server,
        queues,
        pending: Mutex::new(HashMap::new()),
        init: AtomicU64::new(0),
        started: (Mutex::new(false), Condvar::new()),
        offered: AtomicBool::new(false),
    });
    let s = shared.clone();
    std::thread::Builder::new().name("rcuvfs-dev".into()).spawn(move || device_loop(&s, fuser_threads))?;
    let s = shared.clone();
    std::thread::Builder::new().name("rcuvfs-pump".into()).spawn(move || pump_loop(&s))?;
    for q in 0..cpus {
        let s = shared.clone();
        std::thread::Builder::new().name(format!("rcuvfs-ring-{q}")).spawn(move || {
            if let Err(e) = queue_loop(&s, q) {
                // The kernel keeps giving this CPU's requests to a queue no
                // one serves: its callers would wait for good. Ending the
                // process ends the connection (they get ENOTCONN).
                eprintln!("rcuvfs: io_uring queue {q}: {e}: exiting");
                std::process::exit(1);
            }
        })?;
    }
    Ok(theirs)
}

/// The kernel keeps a queue per possible CPU and takes requests through
/// the ring only once every one of them has an entry.
fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let n = s
        .trim()
        .split(',')
        .filter_map(|r| r.split('-').next_back().and_then(|x| x.parse::<usize>().ok()))
        .max()
        .map_or(0, |m| m + 1);
    n.max(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Reads what the kernel sends through the device and hands it to fuser.
fn device_loop(s: &Shared, fuser_threads: usize) {
    let mut buf = vec![0u8; MESSAGE];
    loop {
        // SAFETY: buf is writable for its length.
        let r = unsafe { libc::read(s.dev.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        let n = match cvt(r) {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::ENOENT)) => continue,
            // ENODEV: unmounted. Each of fuser's loops ends at a DESTROY.
            Err(_) => break,
        };
        let m = &buf[..n];
        if n >= 60 && u32_at(m, 4) == FUSE_INIT {
            s.init.store(u64_at(m, 8), Ordering::Relaxed);
            let flags = u32_at(m, 52);
            let flags2 = if flags & FUSE_INIT_EXT != 0 { u32_at(m, 56) } else { 0 };
            s.offered.store(flags2 & OVER_IO_URING2 != 0, Ordering::Relaxed);
        }
        if let Err(e) = writev(s.bridge.as_raw_fd(), &[m]) {
            if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) {
                break; // fuser is gone
            }
            // The bridge could not take this one (a message past its
            // buffer, or no memory for it): fail it alone.
            let op = if n >= 40 { u32_at(m, 4) } else { 0 };
            if n >= 40 && !matches!(op, FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT) {
                let mut h = [0u8; 16];
                put_u32(&mut h, 0, 16);
                put_u32(&mut h, 4, (-libc::EIO) as u32);
                put_u64(&mut h, 8, u64_at(m, 8));
                let _ = writev(s.dev.as_raw_fd(), &[&h]);
            }
        }
    }
    for i in 0..fuser_threads as u64 {
        let mut h = [0u8; 40];
        put_u32(&mut h, 0, 40);
        put_u32(&mut h, 4, FUSE_DESTROY);
        put_u64(&mut h, 8, OWN | i);
        if writev(s.bridge.as_raw_fd(), &[&h]).is_err() {
            break;
        }
    }
}

/// Takes fuser's replies and notifications off the bridge and sends each
/// where its request came from.
fn pump_loop(s: &Arc<Shared>) {
    let mut buf = vec![0u8; MESSAGE];
    // Notifications go to the device from a thread of their own: the
    // kernel may hold a directory's lock while it waits for a reply that
    // only this thread delivers, and an entry's invalidation waits for
    // that lock.
    let (notify, notes) = std::sync::mpsc::channel::<Vec<u8>>();
    let n = s.clone();
    let _ = std::thread::Builder::new().name("rcuvfs-notify".into()).spawn(move || {
        for m in notes {
            let _ = writev(n.dev.as_raw_fd(), &[&m]);
        }
    });
    loop {
        // SAFETY: buf is writable for its length. MSG_TRUNC: the message's
        // whole length, even past the buffer.
        let r = unsafe { libc::recv(s.bridge.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC) };
        let n = match cvt(r) {
            Ok(0) => return, // fuser's end closed: the session is over.
            Ok(n) if n > buf.len() => {
                // A reply larger than any request may have: answered EIO
                // rather than cut short (the kernel would refuse it, and
                // its caller wait for good).
                put_u32(&mut buf, 0, 16);
                put_u32(&mut buf, 4, (-libc::EIO) as u32);
                16
            }
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => return,
        };
        if n < 16 {
            continue;
        }
        let unique = u64_at(&buf, 8);
        if unique & OWN != 0 {
            continue;
        }
        if unique == 0 {
            let _ = notify.send(buf[..n].to_vec());
            continue;
        }
        let to_queue = s.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&unique);
        if let Some((q, i)) = to_queue {
            let queue = &s.queues[q];
            let e = &queue.ents[i];
            let body = &buf[16..n];
            let len = body.len().min(PAYLOAD);
            // SAFETY: the entry is the pump's until it is queued in `done`;
            // the payload mapping holds PAYLOAD bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(body.as_ptr(), e.payload, len);
                answer(header(e), unique, u32_at(&buf, 4) as i32, len);
            }
            queue.done.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            let one = 1u64;
            // SAFETY: 8 bytes from a live u64.
            unsafe { libc::write(queue.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
            continue;
        }
        let is_init = s.init.load(Ordering::Relaxed) == unique;
        if is_init && u32_at(&buf, 4) == 0 && n >= 16 + 64 {
            let out = &mut buf[16..n];
            // Writes no larger than a ring entry's payload (and a device
            // read's buffer here): fuser asks 16 MiB and the kernel uses
            // its max_pages limit, 1 MiB by default, but sizes buffers
            // by max_write.
            put_u32(out, 20, u32_at(out, 20).min(PAYLOAD as u32));
            // And requests of at most that many bytes of pages: the kernel
            // sizes a ring entry by max_pages too.
            // SAFETY: sysconf has no memory arguments.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
            let pages = u16::from_le_bytes([out[28], out[29]]).min((PAYLOAD / page) as u16);
            out[28..30].copy_from_slice(&pages.to_le_bytes());
            if s.offered.load(Ordering::Relaxed) {
                put_u32(out, 12, u32_at(out, 12) | FUSE_INIT_EXT);
                put_u32(out, 32, u32_at(out, 32) | OVER_IO_URING2);
            } else {
                eprintln!("rcuvfs: the kernel offered no FUSE over io_uring: requests go through /dev/fuse");
            }
        }
        // A reply to a request the device gave. Errors are the kernel's to
        // report (an interrupted request's reply is
        // refused with ENOENT).
        let _ = writev(s.dev.as_raw_fd(), &[&buf[..n]]);
        if is_init && s.offered.load(Ordering::Relaxed) {
            s.init.store(0, Ordering::Relaxed);
            let (m, c) = &s.started;
            *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
            c.notify_all();
        }
    }
}

/// An SQE of the fuse ring command `op` for entry `i` of queue `q`.
fn command(op: u32, q: usize, commit: u64, ent: Option<&Ent>, i: usize) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    put_u64(&mut cmd, 8, commit);
    cmd[16..18].copy_from_slice(&(q as u16).to_le_bytes());
    let mut b = opcode::UringCmd80::new(types::Fixed(0), op).cmd(cmd);
    if let Some(e) = ent {
        b = b.addr(Some(e.iov.as_ptr() as u64));
    }
    let mut sqe = b.build().user_data(i as u64);
    if ent.is_some() {
        // The iovec count goes in the SQE's `len` (byte 24), which the
        // io-uring crate's UringCmd80 does not set.
        // SAFETY: an SQE is 128 plain bytes; `len` is a u32 at offset 24.
        unsafe { (&mut sqe as *mut squeue::Entry128).cast::<u8>().add(24).cast::<u32>().write_unaligned(2) };
    }
    sqe
}

/// The user data of the eventfd's poll.
const WAKE: u64 = u64::MAX;

fn queue_loop(s: &Shared, q: usize) -> io::Result<()> {
    {
        let (m, c) = &s.started;
        let mut started = m.lock().unwrap_or_else(|e| e.into_inner());
        while !*started {
            started = c.wait(started).unwrap_or_else(|e| e.into_inner());
        }
    }
    if q < libc::CPU_SETSIZE as usize {
        // SAFETY: a zeroed cpu_set_t is empty, q is within it, and the set
        // is passed with its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(q, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    let queue = &s.queues[q];
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
        IoUring::builder().setup_cqsize(4 * DEPTH as u32).build(2 * DEPTH as u32)?;
    ring.submitter().register_files(&[s.dev.as_raw_fd()])?;
    let poll = || {
        squeue::Entry128::from(
            opcode::PollAdd::new(types::Fd(queue.wake.as_raw_fd()), libc::POLLIN as u32).build().user_data(WAKE),
        )
    };
    let mut sqes: Vec<squeue::Entry128> =
        (0..DEPTH).map(|i| command(CMD_REGISTER, q, 0, Some(&queue.ents[i]), i)).collect();
    sqes.push(poll());
    // Each entry's last command and commit id, to send again if the
    // kernel asks (EAGAIN, EINTR).
    let mut last = [(CMD_REGISTER, 0u64); DEPTH];
    let mut out = Vec::with_capacity(4096);
    let mut forward = Vec::new();
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(4 * DEPTH);
    loop {
        for e in sqes.drain(..) {
            // SAFETY: every buffer an SQE names lives as long as `s`.
            while unsafe { ring.submission().push(&e) }.is_err() {
                ring.submit()?;
            }
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        cqes.clear();
        cqes.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(data, res) in &cqes {
            if data == WAKE {
                let mut v = 0u64;
                // SAFETY: 8 bytes into a live u64 (non-blocking).
                unsafe { libc::read(queue.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                for i in std::mem::take(&mut *queue.done.lock().unwrap_or_else(|e| e.into_inner())) {
                    // SAFETY: the pump handed the entry back through `done`.
                    let commit = u64_at(unsafe { header(&queue.ents[i]) }, ENT_IN_OUT + 8);
                    last[i] = (CMD_COMMIT_AND_FETCH, commit);
                    sqes.push(command(CMD_COMMIT_AND_FETCH, q, commit, None, i));
                }
                sqes.push(poll());
                continue;
            }
            let i = data as usize;
            if res == -libc::EAGAIN || res == -libc::EINTR {
                let (op, commit) = last[i];
                let ent = (op == CMD_REGISTER).then(|| &queue.ents[i]);
                sqes.push(command(op, q, commit, ent, i));
                continue;
            }
            if res < 0 {
                // Unmounted, or the connection aborted.
                return match -res {
                    libc::ENOTCONN | libc::ENODEV | libc::ECONNABORTED => Ok(()),
                    e => Err(io::Error::from_raw_os_error(e)),
                };
            }
            let served =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(s, q, i, &mut out, &mut forward)));
            let commit = match served {
                Ok(c) => c,
                // As fuser does: a request whose handler panicked is
                // answered EIO, and the queue goes on.
                Err(_) => Some(fail(&queue.ents[i], libc::EIO)),
            };
            if let Some(commit) = commit {
                last[i] = (CMD_COMMIT_AND_FETCH, commit);
                sqes.push(command(CMD_COMMIT_AND_FETCH, q, commit, None, i));
            }
        }
    }
}

/// A name argument: its bytes up to the NUL.
fn name(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b.split(|&c| c == 0).next().unwrap_or(&[]))
}

/// Writes an entry's answer into its header: the out header (`error`, a
/// negative errno or 0, and `n` bytes of payload) and the payload's size.
fn answer(hdr: &mut [u8], unique: u64, error: i32, n: usize) {
    put_u32(hdr, 0, (16 + n) as u32);
    put_u32(hdr, 4, error as u32);
    put_u64(hdr, 8, unique);
    put_u32(hdr, ENT_IN_OUT + 16, n as u32);
}

/// Makes entry `e`'s answer the error `errno`; returns its commit id.
fn fail(e: &Ent, errno: i32) -> u64 {
    // SAFETY: the kernel completed the entry: it is this thread's.
    let hdr = unsafe { header(e) };
    answer(hdr, u64_at(hdr, 8), -errno, 0);
    u64_at(hdr, ENT_IN_OUT + 8)
}

/// The entry's header page.
///
/// # Safety
/// The caller is the side that owns the entry now (see `Ent`), and holds
/// no other view of the page.
unsafe fn header<'a>(e: &Ent) -> &'a mut [u8] {
    // SAFETY: a 4096-byte mapping; the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(e.hdr, 4096) }
}

/// Serves entry `i`'s request: answers it here (returns its commit id) or
/// hands it to fuser (returns None; the pump answers it).
fn serve(s: &Shared, q: usize, i: usize, out: &mut Vec<u8>, forward: &mut Vec<u8>) -> Option<u64> {
    let e = &s.queues[q].ents[i];
    // SAFETY: the kernel completed the entry: it is this thread's.
    let hdr = unsafe { header(e) };
    let (len, opcode, unique, nodeid) = (u32_at(hdr, 0) as usize, u32_at(hdr, 4), u64_at(hdr, 8), u64_at(hdr, 16));
    let (uid, gid, pid) = (u32_at(hdr, 24), u32_at(hdr, 28), u32_at(hdr, 32));
    let commit = u64_at(hdr, ENT_IN_OUT + 8);
    let psz = (u32_at(hdr, ENT_IN_OUT + 16) as usize).min(PAYLOAD);
    // SAFETY: the entry is this thread's until it commits it.
    let payload = unsafe { std::slice::from_raw_parts_mut(e.payload, PAYLOAD) };
    let server = &s.server;
    out.clear();
    // No backing files over io_uring (`start` is not given passthrough).
    let no_backing = |_: &OwnedFd| Err(io::Error::from_raw_os_error(libc::ENOTSUP));
    let node = INodeNo(nodeid);
    // Ok(n): the answer is `out`, or n bytes already in the payload.
    let r: Result<usize, fuser::Errno> = match opcode {
        FUSE_LOOKUP => {
            let v = server.view_of(uid, gid, pid);
            server.lookup_name(&v, node, name(&payload[..psz])).map(|a| entry_out(out, &a, server.ttl))
        }
        FUSE_GETATTR => {
            let (flags, fh) = (u32_at(hdr, OP_IN), u64_at(hdr, OP_IN + 8));
            let fh = (flags & FUSE_GETATTR_FH != 0).then_some(FileHandle(fh));
            server.getattr_of(node, fh).map(|a| attr_out(out, &a, server.ttl))
        }
        FUSE_SETATTR => {
            let v = server.view_of(uid, gid, pid);
            let (set, fh) = set_attr_in(&hdr[OP_IN..OP_IN + 88]);
            server.set_attr(&v, node, set, fh).map(|a| attr_out(out, &a, server.ttl))
        }
        FUSE_OPEN => {
            let v = server.view_of(uid, gid, pid);
            server.open_node(&v, node, u32_at(hdr, OP_IN) as i32, no_backing).map(|(fh, _)| {
                open_out(out, fh, server.fopen_flags().bits());
                0
            })
        }
        FUSE_CREATE => {
            let (flags, mode) = (u32_at(hdr, OP_IN) as i32, u32_at(hdr, OP_IN + 4));
            let v = server.view_of(uid, gid, pid);
            server.create_node(&v, node, name(&payload[..psz]), mode, flags, no_backing).map(|(a, fh, _)| {
                entry_out(out, &a, server.ttl);
                open_out(out, fh, server.fopen_flags().bits());
                0
            })
        }
        FUSE_READ => {
            let (fh, offset, size) = (u64_at(hdr, OP_IN), u64_at(hdr, OP_IN + 8), u32_at(hdr, OP_IN + 16) as usize);
            // Straight into the reply's buffer.
            server.read_file(FileHandle(fh), offset, &mut payload[..size.min(PAYLOAD)])
        }
        FUSE_WRITE => {
            let (fh, offset, size) = (u64_at(hdr, OP_IN), u64_at(hdr, OP_IN + 8), u32_at(hdr, OP_IN + 16) as usize);
            server.write_file(node, FileHandle(fh), offset, &payload[..size.min(psz)]).map(|n| {
                out.extend_from_slice(&n.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                0
            })
        }
        FUSE_RELEASE => {
            server.release_file(FileHandle(u64_at(hdr, OP_IN)));
            Ok(0)
        }
        FUSE_FLUSH | FUSE_RELEASEDIR => Ok(0),
        // Linux sends forgets through /dev/fuse; should one come here, the
        // entry must still go back to the kernel (as libfuse does).
        FUSE_FORGET => {
            server.forget_node(node, u64_at(hdr, OP_IN));
            Ok(0)
        }
        FUSE_BATCH_FORGET => {
            let count = u32_at(hdr, OP_IN) as usize;
            for f in payload[..psz].chunks_exact(16).take(count) {
                server.forget_node(INodeNo(u64_at(f, 0)), u64_at(f, 8));
            }
            Ok(0)
        }
        FUSE_MKDIR => {
            let v = server.view_of(uid, gid, pid);
            server.make_dir(&v, node, name(&payload[..psz]), u32_at(hdr, OP_IN)).map(|a| entry_out(out, &a, server.ttl))
        }
        FUSE_UNLINK | FUSE_RMDIR => {
            let v = server.view_of(uid, gid, pid);
            server.remove_name(&v, node, name(&payload[..psz]), opcode == FUSE_RMDIR).map(|()| 0)
        }
        FUSE_RENAME | FUSE_RENAME2 => {
            let newdir = INodeNo(u64_at(hdr, OP_IN));
            let flags = if opcode == FUSE_RENAME2 { u32_at(hdr, OP_IN + 8) } else { 0 };
            let mut names = payload[..psz].split(|&c| c == 0);
            let (old, new) = (names.next().unwrap_or(&[]), names.next().unwrap_or(&[]));
            let v = server.view_of(uid, gid, pid);
            server.rename_names(&v, node, OsStr::from_bytes(old), newdir, OsStr::from_bytes(new), flags).map(|()| 0)
        }
        FUSE_ACCESS => server.check_access(&server.view_of(uid, gid, pid), node, u32_at(hdr, OP_IN)).map(|()| 0),
        FUSE_GETXATTR => {
            let size = u32_at(hdr, OP_IN) as usize;
            let v = server.view_of(uid, gid, pid);
            server.get_xattr(&v, node, name(&payload[..psz])).and_then(|value| {
                // Size 0 asks the length; a buffer too small is ERANGE.
                if size == 0 {
                    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                    out.extend_from_slice(&0u32.to_le_bytes());
                    Ok(0)
                } else if value.len() > size {
                    Err(fuser::Errno::ERANGE)
                } else {
                    payload[..value.len()].copy_from_slice(&value);
                    Ok(value.len())
                }
            })
        }
        FUSE_OPENDIR => server.open_dir(&server.view_of(uid, gid, pid), node).map(|flags| {
            open_out(out, FileHandle(0), flags.bits());
            0
        }),
        FUSE_READDIR => {
            let (offset, size) = (u64_at(hdr, OP_IN + 8), (u32_at(hdr, OP_IN + 16) as usize).min(PAYLOAD));
            let v = server.view_of(uid, gid, pid);
            server
                .list(&v, node, offset, |n, next, kind, name| !dirent(out, size, n.0, next, kind, name.as_bytes()))
                .map(|()| 0)
        }
        FUSE_READDIRPLUS => {
            let (offset, size) = (u64_at(hdr, OP_IN + 8), (u32_at(hdr, OP_IN + 16) as usize).min(PAYLOAD));
            let v = server.view_of(uid, gid, pid);
            server
                .list_plus(&v, node, offset, |next, name, a| {
                    // An entry_out, then the dirent; all or nothing.
                    if out.len() + 128 + dirent_len(name.len()) > size {
                        return true;
                    }
                    entry_out(out, a, server.ttl);
                    let fits = dirent(out, size, a.ino.0, next, a.kind, name.as_bytes());
                    debug_assert!(fits);
                    false
                })
                .map(|()| 0)
        }
        _ => {
            // In the device's layout: the header, the op header (the part
            // of `len` the payload does not hold), the payload.
            let arg0 = len.saturating_sub(40 + psz).min(OP_IN);
            forward.clear();
            forward.extend_from_slice(&hdr[..40]);
            put_u32(forward, 0, (40 + arg0 + psz) as u32);
            forward.extend_from_slice(&hdr[OP_IN..OP_IN + arg0]);
            s.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(unique, (q, i));
            if writev(s.bridge.as_raw_fd(), &[forward, &payload[..psz]]).is_ok() {
                return None;
            }
            s.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&unique);
            Err(fuser::Errno::EIO)
        }
    };
    let (error, n) = match r {
        Ok(0) if !out.is_empty() => {
            payload[..out.len()].copy_from_slice(out);
            (0, out.len())
        }
        Ok(n) => (0, n),
        Err(e) => (-(i32::from(e)), 0),
    };
    answer(hdr, unique, error, n);
    Some(commit)
}

fn secs(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// `fuse_attr`, 88 bytes.
fn attr(out: &mut Vec<u8>, a: &FileAttr) {
    let t = |t: std::time::SystemTime| match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
            if n == 0 {
                (-s, 0)
            } else {
                (-s - 1, 1_000_000_000 - n)
            }
        }
    };
    let (at, mt, ct) = (t(a.atime), t(a.mtime), t(a.ctime));
    let kind = file_mode(a.kind);
    // The last word (`flags`) is 0: Linux reads its bits as
    // FUSE_ATTR_SUBMOUNT and FUSE_ATTR_DAX.
    for v in [a.ino.0, a.size, a.blocks, at.0 as u64, mt.0 as u64, ct.0 as u64] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [at.1, mt.1, ct.1, kind | u32::from(a.perm), a.nlink, a.uid, a.gid, a.rdev, a.blksize, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// `fuse_entry_out`: the node, generation 0, the timeouts, the attributes.
fn entry_out(out: &mut Vec<u8>, a: &FileAttr, ttl: Duration) -> usize {
    let (s, n) = secs(ttl);
    for v in [a.ino.0, 0, s, s] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [n, n] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    attr(out, a);
    0
}

/// A `fuse_setattr_in`: what to change, and the open file it names.
fn set_attr_in(b: &[u8]) -> (rcuvfs::fs::SetAttr, Option<FileHandle>) {
    use rcuvfs::fs::{SetTime, Timespec};
    const MODE: u32 = 1;
    const UID: u32 = 2;
    const GID: u32 = 4;
    const SIZE: u32 = 8;
    const ATIME: u32 = 16;
    const MTIME: u32 = 32;
    const FH: u32 = 64;
    const ATIME_NOW: u32 = 128;
    const MTIME_NOW: u32 = 256;
    let valid = u32_at(b, 0);
    let has = |bit: u32| valid & bit != 0;
    let time = |now: u32, at: u32, sec: usize, nsec: usize| {
        if has(now) {
            Some(SetTime::Now)
        } else {
            has(at).then(|| SetTime::At(Timespec { sec: u64_at(b, sec) as i64, nsec: u32_at(b, nsec) }))
        }
    };
    let set = rcuvfs::fs::SetAttr {
        perm: has(MODE).then(|| u32_at(b, 68) & 0o7777),
        uid: has(UID).then(|| u32_at(b, 76)),
        gid: has(GID).then(|| u32_at(b, 80)),
        size: has(SIZE).then(|| u64_at(b, 16)),
        atime: time(ATIME_NOW, ATIME, 32, 56),
        mtime: time(MTIME_NOW, MTIME, 40, 60),
    };
    (set, has(FH).then(|| FileHandle(u64_at(b, 8))))
}

fn dirent_len(name: usize) -> usize {
    (24 + name + 7) & !7
}

/// Appends a `fuse_dirent` (padded to 8 bytes) if `out` stays within
/// `size` bytes; whether it did.
fn dirent(out: &mut Vec<u8>, size: usize, ino: u64, next: u64, kind: fuser::FileType, name: &[u8]) -> bool {
    let len = dirent_len(name.len());
    if out.len() + len > size {
        return false;
    }
    let at = out.len();
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&next.to_le_bytes());
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(&(file_mode(kind) >> 12).to_le_bytes());
    out.extend_from_slice(name);
    out.resize(at + len, 0);
    true
}

fn file_mode(kind: fuser::FileType) -> u32 {
    match kind {
        fuser::FileType::NamedPipe => libc::S_IFIFO,
        fuser::FileType::CharDevice => libc::S_IFCHR,
        fuser::FileType::BlockDevice => libc::S_IFBLK,
        fuser::FileType::Directory => libc::S_IFDIR,
        fuser::FileType::RegularFile => libc::S_IFREG,
        fuser::FileType::Symlink => libc::S_IFLNK,
        fuser::FileType::Socket => libc::S_IFSOCK,
    }
}

/// `fuse_open_out`: the handle and the kernel's flags for it.
fn open_out(out: &mut Vec<u8>, fh: FileHandle, flags: u32) {
    out.extend_from_slice(&fh.0.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// `fuse_attr_out`: the timeout, then the attributes.
fn attr_out(out: &mut Vec<u8>, a: &FileAttr, ttl: Duration) -> usize {
    let (s, n) = secs(ttl);
    out.extend_from_slice(&s.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    attr(out, a);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attributes_are_laid_out_as_the_kernel_reads_them() {
        let a = FileAttr {
            ino: INodeNo(7),
            size: 5,
            blocks: 1,
            atime: UNIX_EPOCH + Duration::new(10, 20),
            mtime: UNIX_EPOCH - Duration::new(1, 500),
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: fuser::FileType::RegularFile,
            perm: 0o4755,
            nlink: 2,
            uid: 3,
            gid: 4,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        };
        let mut e = Vec::new();
        entry_out(&mut e, &a, Duration::new(1, 5));
        assert_eq!(e.len(), 128, "fuse_entry_out");
        let at = &e[40..];
        assert_eq!((u64_at(at, 0), u64_at(at, 8), u64_at(at, 24)), (7, 5, 10));
        // 1.0000005 s before the epoch: -2 s and 999,999,500 ns.
        assert_eq!((u64_at(at, 32) as i64, u32_at(at, 52)), (-2, 999_999_500));
        assert_eq!(u32_at(at, 48), 20);
        assert_eq!(u32_at(at, 60), libc::S_IFREG | 0o4755);
        assert_eq!((u32_at(at, 64), u32_at(at, 68), u32_at(at, 72)), (2, 3, 4));
        assert_eq!(u32_at(at, 80), 4096);
        assert_eq!((u64_at(&e, 16), u32_at(&e, 32)), (1, 5));
        let mut o = Vec::new();
        attr_out(&mut o, &a, Duration::ZERO);
        assert_eq!(o.len(), 104, "fuse_attr_out");
        assert_eq!(o[16..], e[40..]);
    }

    #[test]
    fn a_listing_entry_is_padded_and_never_overruns_the_callers_buffer() {
        let mut out = Vec::new();
        assert!(dirent(&mut out, 64, 9, 3, fuser::FileType::Directory, b"abc"));
        assert_eq!(out.len(), 32, "24 bytes of header and 3 of name, padded to 8");
        assert_eq!((u64_at(&out, 0), u64_at(&out, 8), u32_at(&out, 16), u32_at(&out, 20)), (9, 3, 3, 4));
        assert_eq!(&out[24..32], b"abc\0\0\0\0\0");
        // 32 more would make 64: fits; then nothing more does.
        assert!(dirent(&mut out, 64, 1, 4, fuser::FileType::RegularFile, b"12345678"));
        assert_eq!(u32_at(&out, 52), 8, "DT_REG");
        assert!(!dirent(&mut out, 64, 1, 5, fuser::FileType::RegularFile, b"x"));
        assert_eq!(out.len(), 64);
    }

    #[test]
    fn a_setattr_changes_only_what_its_valid_bits_name() {
        use rcuvfs::fs::{SetTime, Timespec};
        let mut b = [0u8; 88];
        put_u32(&mut b, 0, 1 | 16 | 256 | 64); // mode, atime, mtime now, fh
        put_u64(&mut b, 8, 42);
        put_u64(&mut b, 16, 999); // size: not valid
        put_u64(&mut b, 32, 1_000);
        put_u32(&mut b, 56, 7);
        put_u32(&mut b, 68, 0o104755);
        put_u32(&mut b, 76, 5); // uid: not valid
        let (set, fh) = set_attr_in(&b);
        assert_eq!(set.perm, Some(0o4755));
        assert_eq!((set.uid, set.gid, set.size), (None, None, None));
        assert_eq!(set.atime, Some(SetTime::At(Timespec { sec: 1_000, nsec: 7 })));
        assert_eq!(set.mtime, Some(SetTime::Now));
        assert_eq!(fh, Some(FileHandle(42)));
    }
}
