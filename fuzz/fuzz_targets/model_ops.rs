//! Random operation sequences against the reference model (the same model
//! and operations as `crates/rcuvfs/tests/model.rs`), decoded from bytes:
//! every result and errno must match.
#![no_main]

#[path = "../../crates/rcuvfs/tests/reference/mod.rs"]
mod reference;

use libfuzzer_sys::fuzz_target;
use rcuvfs::{Cred, Vfs};
use reference::*;

/// A path of one to three components from "a", "b", "c", ".", "..".
fn path_of(x: u8) -> String {
    const C: [&str; 5] = ["a", "b", "c", ".", ".."];
    let depth = 1 + (x % 3) as usize;
    let mut y = (x / 3) as usize;
    let mut comps = Vec::new();
    for _ in 0..depth {
        comps.push(C[y % 5]);
        y /= 5;
    }
    format!("/{}", comps.join("/"))
}

fn op_of(b: &[u8]) -> Op {
    let (k, x, y, z) = (b[0], b[1], b[2], b[3]);
    let base = match k % 15 {
        0 => Op::Mkdir(path_of(x)),
        1 => Op::Write(path_of(x), y),
        2 => Op::Unlink(path_of(x)),
        3 => Op::Rmdir(path_of(x)),
        4 => Op::Rename(path_of(x), path_of(y), z % 3),
        5 => Op::Link(path_of(x), path_of(y)),
        6 => Op::Symlink(path_of(x), path_of(y)),
        7 => Op::Stat(path_of(x)),
        8 => Op::Lstat(path_of(x)),
        9 => Op::Read(path_of(x)),
        10 => Op::ReadDir(path_of(x)),
        11 => Op::ReadLink(path_of(x)),
        12 => Op::Chmod(path_of(x), [0o755, 0o700, 0o777, 0o1777, 0o644, 0o000, 0o311][z as usize % 7]),
        13 => Op::Hold(path_of(x)),
        _ => Op::ReadHeld(y as usize % 4),
    };
    if k >= 200 {
        Op::AsUser(Box::new(base))
    } else {
        base
    }
}

fuzz_target!(|data: &[u8]| {
    let root = Vfs::builder().dcache_target(32).build().unwrap();
    let user = root.with_cred(Cred::new(USER, USER, &[]));
    let mut sut = Sut { root, user, held: Vec::new(), held_model: Vec::new() };
    let mut model = Model::new();
    let mut held_model = Vec::new();
    for chunk in data.chunks_exact(4).take(64) {
        let op = op_of(chunk);
        let want = run_model(&mut model, &mut held_model, &op, &Who { uid: 0 });
        let got = run_vfs(&mut sut, &op, false);
        assert_eq!(got, want, "{op:?}");
    }
});
