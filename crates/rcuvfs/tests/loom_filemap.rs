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
