//! loom model of the lockless page read (seed 001's successor): a reader
//! copying a page word by word while a writer rewrites it gets one whole
//! version of the page, never a mix. (Reader and writer are both spawned
//! threads: with the reader on the model's main thread, loom explored 31
//! executions and missed a torn copy when the sequence check was removed;
//! this way it explores 332 and finds it.) Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rcuvfs --release --test loom_filemap`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rcuvfs::filemap::{CacheMode, PageCache, PAGE};
use rcuvfs::sync::atomic::loom_model as model;

#[test]
fn loom_lockless_read_sees_one_whole_version() {
    model(|| {
        let pc = Arc::new(PageCache::new(CacheMode::Lockless));
        pc.write(Some(0), &[1; PAGE]).unwrap();
        let w = {
            let pc = pc.clone();
            thread::spawn(move || {
                pc.write(Some(0), &[2; PAGE]).unwrap();
            })
        };
        let r = {
            let pc = pc.clone();
            thread::spawn(move || {
                let mut buf = [0u8; PAGE];
                assert_eq!(pc.read(0, &mut buf), PAGE);
                assert!(buf == [1; PAGE] || buf == [2; PAGE], "torn page: {buf:?}");
            })
        };
        w.join().unwrap();
        r.join().unwrap();
        let mut buf = [0u8; PAGE];
        assert_eq!(pc.read(0, &mut buf), PAGE);
        assert_eq!(buf, [2; PAGE], "a write that returned is visible");
    });
}

/// A frame is zeroed only where readers may look (under loom every new
/// frame holds old bytes, 0xA5): a page published into a hole reads as
/// zeros until its write lands, and a file that grows zeroes its last
/// page's tail before the new size lets a reader in.
#[test]
fn loom_stale_frame_bytes_are_never_read() {
    model(|| {
        let pc = Arc::new(PageCache::new(CacheMode::Lockless));
        // Page 0 is a hole below the end; page 1 holds 4 written bytes
        // and old ones past them.
        pc.write(Some(PAGE as u64), &[1; 4]).unwrap();
        let w = {
            let pc = pc.clone();
            thread::spawn(move || {
                pc.write(Some(8), &[2; 4]).unwrap();
                pc.set_len(PAGE as u64 + 12).unwrap();
            })
        };
        let r = {
            let pc = pc.clone();
            thread::spawn(move || {
                let mut buf = [9u8; 2 * PAGE];
                let n = pc.read(0, &mut buf);
                assert!(n == PAGE + 4 || n == PAGE + 12, "size {n}");
                let hole_ok = buf[..PAGE].iter().enumerate().all(|(i, &b)| b == 0 || (b == 2 && (8..12).contains(&i)));
                assert!(hole_ok, "old bytes read in the hole: {:?}", &buf[..PAGE]);
                assert_eq!(&buf[PAGE..PAGE + 4], &[1; 4]);
                assert!(buf[PAGE + 4..n].iter().all(|&b| b == 0), "old bytes past the old end: {:?}", &buf[PAGE..n]);
            })
        };
        w.join().unwrap();
        r.join().unwrap();
    });
}

/// A file of `pages` pages of 1s; a writer truncates it to nothing and
/// writes 4 bytes of 2s at the start of each page again (under loom each
/// page a frame of old bytes, 0xA5), racing a reader of the whole old
/// size. The reader reads the old data, zeros, the new data or less, never
/// a frame's old bytes.
fn a_reader_with_a_size_from_before_a_truncate(pages: usize) {
    model(move || {
        let pc = Arc::new(PageCache::new(CacheMode::Lockless));
        pc.write(Some(0), &vec![1; pages * PAGE]).unwrap();
        let w = {
            let pc = pc.clone();
            thread::spawn(move || {
                pc.set_len(0).unwrap();
                for k in 0..pages {
                    pc.write(Some((k * PAGE) as u64), &[2; 4]).unwrap();
                }
            })
        };
        let r = {
            let pc = pc.clone();
            thread::spawn(move || {
                let mut buf = vec![9u8; pages * PAGE];
                let n = pc.read(0, &mut buf);
                assert!(buf[..n].iter().all(|&b| b <= 2), "old frame bytes read: n={n} {:?}", &buf[..n]);
            })
        };
        w.join().unwrap();
        r.join().unwrap();
    });
}

/// One page (the first review's model: without the truncate count the
/// reader got 0xA5).
#[test]
fn loom_a_reader_with_a_size_from_before_a_truncate_reads_no_old_bytes() {
    a_reader_with_a_size_from_before_a_truncate(1);
}

/// Two pages: the reader may fall back to the writer's lock half-way (a
/// writer stayed in the second page), and what it copied before the
/// fallback is checked too (a second review's model: it returned 16 bytes
/// of 0xA5).
#[test]
fn loom_a_reader_falling_back_after_a_truncate_reads_no_old_bytes() {
    a_reader_with_a_size_from_before_a_truncate(2);
}
