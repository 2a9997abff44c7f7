# gdb script for scripts/count-ops: single-steps the last round of
# examples/one_op.rs (a create, a stat, an unlink) and prints, per
# operation, its instructions, its atomic read-modify-writes and fences
# (lock-prefixed instructions, xchg with memory, mfence), and the
# functions they were in (inclusive counts, innermost two path segments).
import collections
import re

import gdb

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("break one_op_mark")
gdb.execute("run", to_string=True)
# Up to the last round's first mark (its argument, `kind`, is 1 there).
rounds = 0
while True:
    if int(gdb.parse_and_eval("$rdi")) == 1:
        rounds += 1
        if rounds == 3:
            break
    gdb.execute("continue", to_string=True)

ATOMIC = re.compile(r"\block\b|\bxchg\b.*\(|\bmfence\b")
TOP = 25


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
    while True:
        if in_mark():
            return n, incl, atoms
        frame = gdb.selected_frame()
        name = frame.name() or "?"
        # The vDSO's clock read loops on a sequence count that moves while
        # we step: run it at full speed.
        if "clock_gettime" in name or "vdso" in name:
            gdb.execute("finish", to_string=True)
            continue
        insn = gdb.execute("x/i $pc", to_string=True)
        n += 1
        names = set()
        f = frame
        while f is not None:
            fn = f.name() or "?"
            if fn.endswith("one_op::main"):
                break
            names.add(short(fn))
            f = f.older()
        is_atomic = bool(ATOMIC.search(insn))
        for s in names:
            incl[s] += 1
            if is_atomic:
                atoms[s] += 1
        if is_atomic:
            atoms["(all)"] += 1
        gdb.execute("stepi", to_string=True)


for op in ["create (Vfs::write of an empty file)", "stat (Vfs::metadata)", "unlink (Vfs::remove_file)"]:
    n, incl, atoms = one()
    print(f"== {op}: {n} instructions, {atoms['(all)']} atomic RMWs and fences")
    print("   instructions  atomics  function (inclusive)")
    for name, c in incl.most_common(TOP):
        print(f"   {c:12d}  {atoms[name]:7d}  {name}")
gdb.execute("kill")
