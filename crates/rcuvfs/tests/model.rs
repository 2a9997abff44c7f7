//! Model-based test: random operation sequences run against the Vfs and
//! against a plain reference model (a tree of nodes with its own path walk,
//! in `reference/`), comparing every result and errno. Includes directory
//! renames, hard links, symlinks, open/unlink/close, and permission checks
//! as an unprivileged user.

mod common;
mod reference;

use proptest::prelude::*;
use rcuvfs::{CacheMode, Cred, Layout, ListMode, RefMode, RenameFlags, Vfs};

use reference::*;

fn path() -> impl Strategy<Value = String> {
    // Names on both sides of what a dentry and a memfs entry keep inline
    // (7 bytes): "seven_7" inline, "eight__8" in a block of its own, so
    // renames move names between the two forms.
    let comp = prop_oneof![
        4 => Just("a"), 4 => Just("b"), 2 => Just("c"), 1 => Just("seven_7"), 2 => Just("eight__8"),
        1 => Just("."), 1 => Just("..")
    ];
    (prop::collection::vec(comp, 1..4), prop::bool::weighted(0.1))
        .prop_map(|(c, slash)| format!("/{}{}", c.join("/"), if slash { "/" } else { "" }))
}

fn op() -> impl Strategy<Value = Op> {
    let perm = prop_oneof![Just(0o755), Just(0o700), Just(0o777), Just(0o1777), Just(0o644), Just(0o000), Just(0o311)];
    let base = prop_oneof![
        4 => path().prop_map(Op::Mkdir),
        4 => (path(), any::<u8>()).prop_map(|(p, b)| Op::Write(p, b)),
        2 => path().prop_map(Op::Unlink),
        2 => path().prop_map(Op::Rmdir),
        3 => (path(), path(), 0u8..3).prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        1 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (path(), path()).prop_map(|(a, b)| Op::Symlink(a, b)),
        2 => path().prop_map(Op::Stat),
        1 => path().prop_map(Op::Lstat),
        1 => path().prop_map(Op::Read),
        1 => path().prop_map(Op::ReadDir),
        1 => path().prop_map(Op::ReadLink),
        1 => (path(), perm).prop_map(|(p, m)| Op::Chmod(p, m)),
        1 => path().prop_map(Op::Hold),
        1 => (0usize..4).prop_map(Op::ReadHeld),
    ];
    prop_oneof![4 => base.clone(), 1 => base.prop_map(|o| Op::AsUser(Box::new(o)))]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { std::env::var("RCUVFS_MODEL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(512) },
        ..ProptestConfig::default()
    })]

    #[test]
    fn vfs_matches_the_reference_model(
        ops in prop::collection::vec(op(), 1..if cfg!(miri) { 12 } else { 60 }),
        mode in prop::sample::select(RefMode::ALL.to_vec()),
        layout in prop::sample::select(Layout::ALL.to_vec()),
        list in prop::sample::select(ListMode::ALL.to_vec()),
        cache in prop::sample::select(CacheMode::ALL.to_vec()),
        target in prop::option::of(16usize..48),
        drop_caches_at in prop::option::of(0usize..60),
    ) {
        let root = Vfs::builder().mode(mode).layout(layout).inode_list(list).page_cache(cache).hash_buckets(64).dcache_target(target.unwrap_or(1 << 20)).build().unwrap();
        let user = root.with_cred(Cred::new(USER, USER, &[]));
        let counters = root.live_counters();
        let mut sut = Sut { root, user, held: Vec::new(), held_model: Vec::new() };
        let mut model = Model::new();
        let mut held_model = std::mem::take(&mut sut.held_model);
        for (i, op) in ops.iter().enumerate() {
            let want = run_model(&mut model, &mut held_model, op, &Who { uid: 0 });
            let got = run_vfs(&mut sut, op, false);
            prop_assert_eq!(&got, &want, "op #{}: {:?} in {:?} {:?}", i, op, mode, layout);
            if drop_caches_at == Some(i) {
                // The dcache is a cache: emptied, it must refill from memfs.
                sut.root.drop_caches();
            }
        }
        // Every name the model has is visible, with the model's attributes.
        let mut stack = vec![(0usize, String::new())];
        while let Some((dir, path)) = stack.pop() {
            for (name, &id) in model.entries(dir).clone().iter() {
                let p = format!("{}/{}", path, String::from_utf8_lossy(name));
                prop_assert_eq!(to_out(sut.root.symlink_metadata(&p).map(stat_out)), model.stat(id), "{}", p);
                if model.is_dir(id) {
                    stack.push((id, p));
                }
            }
        }
        drop(sut);
        prop_assert_eq!((counters.dentries(), counters.inodes()), (0, 0), "teardown leaked");
    }
}

/// The model itself must agree with a fixed scenario, so that a model bug
/// cannot hide a Vfs bug behind the same mistake.
#[test]
fn model_sanity() {
    let mut m = Model::new();
    let root = Who { uid: 0 };
    assert_eq!(m.mkdir(&root, b"/a", 0o022), Ok(Out::Unit));
    assert_eq!(m.mkdir(&root, b"/a", 0o022), Err(libc::EEXIST));
    assert_eq!(m.write(&root, b"/a/f", b"x", &mut 0), Ok(Out::Unit));
    assert_eq!(m.rmdir(&root, b"/a"), Err(libc::ENOTEMPTY));
    assert_eq!(m.rename(&root, b"/a", b"/a/b", RenameFlags::NONE), Err(libc::EINVAL));
    assert_eq!(m.unlink(&root, b"/a/f/"), Err(libc::ENOTDIR));
}
