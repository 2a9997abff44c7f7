# gdb script for scripts/count-ops: single-steps eight rounds of
# examples/one_op.rs (a create, a stat, an unlink, each round of a new
# name) and prints, per operation, the instructions and the atomic
# read-modify-writes and fences (lock-prefixed instructions, xchg with
# memory, mfence) of each round, and for the median round the functions
# they were in (inclusive counts, innermost two path segments).
import collections
import os
import re

import gdb

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("break one_op_mark")
gdb.execute("run " + os.environ.get("COUNT_OPS_ARGS", ""), to_string=True)
# Only this thread runs from here on. An operation single-stepped takes
# seconds, and the reclaimer thread (sync/reclaim.rs), ticking meanwhile,
# would find this thread's shard idle and hand its list to seize while
# this thread is in a read section (whose leave then frees the batch),
# and contend for its locks: work a real operation never meets (counted
# until 2026-11-29: 500-2,500 instructions of a create or an unlink). The
# reclaimer sleeps between ticks, so it is stopped holding nothing.
# (Set once the process runs.)
gdb.execute("set scheduler-locking on")
# Past the two warm-up rounds: to the third first mark (its argument,
# `kind`, is 1 there).
rounds = 0
while True:
    if int(gdb.parse_and_eval("$rdi")) == 1:
        rounds += 1
        if rounds == 3:
            break
    gdb.execute("continue", to_string=True)
ROUNDS = 8  # examples/one_op.rs's ROUNDS

ATOMIC = re.compile(r"\block\b|\bxchg\b.*\(|\bmfence\b")
# Functions listed per operation (COUNT_OPS_TOP in the environment).
TOP = int(os.environ.get("COUNT_OPS_TOP", "25"))
# With COUNT_OPS_SITES=k, also where each atomic is: its innermost k
# functions (the atomic's own and its callers'), in the median round.
SITES = int(os.environ.get("COUNT_OPS_SITES", "0"))


def short(name):
    name = name or "?"
    for _ in range(3):
        name = re.sub(r"<[^<>]*>", "", name)
    name = re.sub(r"\{[^{}]*\}", "", name)
    return "::".join(p for p in name.split("::")[-2:])[:70]


def in_mark():
    # By the linker's symbol at the pc: the debug info names the mark's one
    # instruction after the `black_box` inlined into it.
    return gdb.execute("info symbol $pc", to_string=True).startswith("one_op_mark ")


def one():
    while in_mark():
        gdb.execute("finish", to_string=True)  # back in main, after the mark
    incl, atoms, n = collections.Counter(), collections.Counter(), 0
    own = collections.Counter()
    sites = collections.Counter()
    while True:
        if in_mark():
            return n, incl, atoms, sites, own
        frame = gdb.selected_frame()
        name = frame.name() or "?"
        # The vDSO's clock read loops on a sequence count that moves while
        # we step: run it at full speed.
        if "clock_gettime" in name or "vdso" in name:
            gdb.execute("finish", to_string=True)
            continue
        insn = gdb.execute("x/i $pc", to_string=True)
        n += 1
        names, chain = set(), []
        f = frame
        while f is not None:
            fn = f.name() or "?"
            if fn.endswith("one_op::main"):
                break
            names.add(short(fn))
            chain.append(short(fn))
            f = f.older()
        is_atomic = bool(ATOMIC.search(insn))
        own[chain[0] if chain else "?"] += 1
        if is_atomic and SITES:
            sites[" < ".join(chain[:SITES])] += 1
        for s in names:
            incl[s] += 1
            if is_atomic:
                atoms[s] += 1
        if is_atomic:
            atoms["(all)"] += 1
        gdb.execute("stepi", to_string=True)


if os.environ.get("COUNT_OPS_ARGS") == "attr":
    OPS = ["chmod (Vfs::set_permissions)", "chown (Vfs::chown)", "link (Vfs::hard_link)"]
elif os.environ.get("COUNT_OPS_ARGS") == "stat":
    OPS = ["stat /d0/d1/d2/file", "stat /d2/f2", "stat /src/components/button/index.tsx"]
elif os.environ.get("COUNT_OPS_ARGS") == "open":
    OPS = ["create (Vfs::open with O_CREAT | O_TRUNC, then close)", "stat (Vfs::metadata)", "unlink (Vfs::remove_file)"]
else:
    OPS = ["create (Vfs::write of an empty file)", "stat (Vfs::metadata)", "unlink (Vfs::remove_file)"]
runs = {op: [] for op in OPS}
for r in range(ROUNDS):
    if r > 0:
        # From the round's last mark (4, after the unlink) to the next
        # round's first, over the making of its path.
        gdb.execute("continue", to_string=True)
    assert int(gdb.parse_and_eval("$rdi")) == 1, "at a round's first mark"
    for op in OPS:
        runs[op].append(one())
for op in OPS:
    counts = sorted(runs[op], key=lambda r: r[0])
    n, incl, atoms, sites, own = counts[len(counts) // 2]  # the median round's
    each = ", ".join(f"{r[0]}/{r[2]['(all)']}" for r in runs[op])
    print(f"== {op}: median {n} instructions, {atoms['(all)']} atomic RMWs and fences")
    print(f"   each round (instructions/atomics): {each}")
    print("   instructions  atomics     self  function (inclusive; self: in its own body), in the median round")
    for name, c in incl.most_common(TOP):
        print(f"   {c:12d}  {atoms[name]:7d}  {own[name]:7d}  {name}")
    print("   self  function (the most instructions in their own bodies)")
    for name, c in own.most_common(TOP):
        print(f"   {c:5d}  {name}")
    if SITES:
        print("   atomics  where (innermost first)")
        for site, c in sites.most_common():
            print(f"   {c:7d}  {site}")
gdb.execute("kill")
