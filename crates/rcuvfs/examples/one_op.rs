//! One create, one stat and one unlink of a file, each between two calls
//! of a marker function, after a warm-up: the subject of `scripts/count-ops`,
//! which single-steps each operation in gdb and counts its instructions,
//! its atomic read-modify-writes and fences, and where they are. What a
//! profile cannot show on a machine without hardware counters (this
//! project's VM has none): how much work an operation is, not how long it
//! waited.
//!
//! `cargo build --release -p rcuvfs --example one_op && scripts/count-ops`
//!
//! With the argument `attr` (`scripts/count-ops attr`), the three are a
//! chmod, a chown and a hard link of an existing file instead; with
//! `stat`, three stats of cached paths (depth 4, short, a source tree's);
//! with `open`, the create is an open (`O_CREAT | O_TRUNC`) and a close.

use rcuvfs::{OpenOptions, Permissions, Vfs};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Where the operations begin and end: `count-ops` breaks here. `kind`:
/// 1 before the create, 2 before the stat, 3 before the unlink, 4 after.
#[inline(never)]
#[no_mangle]
pub extern "C" fn one_op_mark(kind: usize) -> usize {
    std::hint::black_box(kind)
}

/// The rounds `count-ops` counts (it skips two before them).
const ROUNDS: usize = 8;

fn main() -> std::io::Result<()> {
    let v = Vfs::builder().build()?;
    for d in 0..10 {
        v.create_dir(format!("/d{d}"))?;
    }
    // Warm: the directories' indexes past their first sizes, the
    // allocator's pages in use, every path taken once.
    for i in 0..2000 {
        v.write(format!("/d{}/w{i}", i % 10), b"")?;
    }
    for i in 0..1000 {
        v.remove_file(format!("/d{}/w{i}", i % 10))?;
    }
    // Rounds of a create, a stat and an unlink, each of its own name (a
    // new one: no negative dentry of it is cached). `count-ops` skips the
    // first two and counts the others: a single operation may also pay
    // for work shared by many (the allocator refilling a page, the
    // reclaimer freeing a batch), and the rounds show how often.
    if std::env::args().nth(1).as_deref() == Some("attr") {
        // Changes of files that exist (the warm-up's survivors, two levels
        // down as the creates' are): a chmod, a chown, a link.
        for r in 0..2 + ROUNDS {
            let p = format!("/d{}/w{}", r % 10, 1000 + r);
            let l = format!("/d{}/l{r}", r % 10);
            one_op_mark(1);
            v.set_permissions(&p, Permissions::from_mode(0o600 + r as u32 % 2))?;
            one_op_mark(2);
            v.chown(&p, Some(r as u32), None)?;
            one_op_mark(3);
            v.hard_link(&p, &l)?;
            one_op_mark(4);
        }
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("stat") {
        // Stats of cached paths of three shapes, every round the same
        // (examples/hot_stat.rs times them): depth 4 (`stat-same`'s), a
        // short one, a source tree's.
        let paths = ["/d0/d1/d2/file", "/d2/f2", "/src/components/button/index.tsx"];
        for p in paths {
            v.create_dir_all(p.rsplit_once('/').expect("absolute").0)?;
            v.write(p, b"x")?;
        }
        for _ in 0..2 + ROUNDS {
            one_op_mark(1);
            for (k, p) in paths.iter().enumerate() {
                v.metadata(p)?;
                one_op_mark(k + 2);
            }
        }
        return Ok(());
    }
    // `open`: the create is an open with O_CREAT | O_TRUNC and a close
    // (the lab's `files` workload, and the host's way), not `Vfs::write`.
    let open = std::env::args().nth(1).as_deref() == Some("open");
    for r in 0..2 + ROUNDS {
        let p = format!("/d{}/f{r}", r % 10);
        one_op_mark(1);
        if open {
            drop(v.open(&p, OpenOptions::new().write(true).create(true).truncate(true))?);
        } else {
            v.write(&p, b"")?;
        }
        one_op_mark(2);
        v.metadata(&p)?;
        one_op_mark(3);
        v.remove_file(&p)?;
        one_op_mark(4);
    }
    Ok(())
}
