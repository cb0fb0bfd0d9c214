#!/usr/bin/env python3
"""include_order.py - the dependency order of the library, checked on every #include.

Dependencies point one way, folder by folder (DESIGN.md section 2, issue 17 item 2).
This file is where that order is written; CONTRIBUTING.md's "Layout and design" shows the
same lines, and this test fails if it stops doing so.  Every quoted #include of a
library source (runtime/, ckpt/, store/, catalog/, cli/: .c, .h and .cu; not tests/
or bench/) must name a file of its own folder or of a folder below it in its stack.
An include of a folder above, or of a peer on the same level (the braces: peers do
not know each other), is a violation, printed with file:line.  So is one that does not
name the file by its path from the repository root ("runtime/exec/rank_int.h", never
"rank_int.h" or "../exec/rank_int.h"): one include style everywhere (issue 17 item 9).

A unit may be split into rooms (ROOMS: ckpt/session, ckpt/protocol, ...; issue 36).
Its files then live in its rooms only, never at the unit's top or in a folder that is
not a room, and CMakeLists.txt builds every room.  Rooms of one unit may include each
other, but no room holds a circle of files: file A using a function file B defines
(through B's header or a *_int.h the room shares) while B, directly or through other
files of the room, uses one of A's.  Uses, not includes, make the edges: a shared
*_int.h declares several files' functions, so who includes it says nothing about whom
a file depends on.  Known circles are listed in CIRCLES with their reason; a listed circle
that is gone must leave the list too.

Before it checks the tree, the test checks itself: it copies the library into a
scratch directory, plants one upward include of each kind, a stray file of a unit
with rooms and a circle inside a room, and fails unless every planted one - and
nothing else - is reported.

usage: include_order.py SOURCE_DIR
"""
import os
import re
import shutil
import sys
import tempfile

# ---- the order ----------------------------------------------------------------------
# Each stack is a list of levels, lowest first; a level is one folder or a set of peers.
RUNTIME = [["core"], ["fp8", "contract", "sched", "comm"], ["backend"], ["model"], ["optim"],
           ["job"], ["exec"], ["train"]]
SERVICE = [["core"], ["store", "catalog"], ["ckpt"], ["cli"]]

# Where a unit's files are.
FOLDERS = {
    "core": "runtime/core", "fp8": "runtime/fp8", "contract": "runtime/contract",
    "sched": "runtime/sched", "comm": "runtime/comm", "backend": "runtime/backend",
    "model": "runtime/model", "optim": "runtime/optim", "job": "runtime/job",
    "exec": "runtime/exec", "train": "runtime/train",
    "store": "store", "catalog": "catalog", "ckpt": "ckpt", "cli": "cli",
}

# What a service unit may include of the runtime besides runtime/core.  DESIGN section 2:
# ckpt reaches runtime state only through the persistent-state interface, never through
# backend ops.  Since issue 36 item 4 that is one header, exec/pstate.h: the items, their
# copies and staging, the gate (qe_pstate_quiescent), the rank's place, and the comm calls
# its save and restore agree by (the rank and the comm opaque there), so no ckpt file
# includes exec/rank.h or comm/comm.h.  cli sits on top of both stacks: it runs training,
# so all of the runtime is below it.
BRIDGES = {
    "ckpt": ["runtime/exec/pstate.h"],
    "cli": ["runtime/"],
}

# Single includes tolerated today, each with its reason.  Anything not listed fails.
EXCEPTIONS = set()  # none left: inspect labels the FP8 meta rows through pstate.h

# Units split into rooms (ckpt/README.md is the index of ckpt's): the subfolders that hold
# all of the unit's files, each built by CMakeLists.txt's qe_module of the unit.
ROOMS = {
    "ckpt": ("qe_ckpt", ["session", "protocol", "tiers", "remote", "query"]),
}

# Circles of files inside a room tolerated, each as frozenset([file, ...]): "its reason".
# None today (issue 36 item 1 broke ckpt/protocol's two).  Anything not listed fails; a
# listed circle that no longer exists fails too.
CIRCLES = {
}

LIBRARY = ["runtime", "ckpt", "store", "catalog", "cli"]
SUFFIXES = (".c", ".h", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def order_lines():
    """The order as CONTRIBUTING.md shows it, one line per stack."""
    def fmt(stack):
        return " <- ".join(lv[0] if len(lv) == 1 else "{" + ", ".join(lv) + "}" for lv in stack)
    return [fmt(RUNTIME), fmt(SERVICE)]


def unit_of(rel):
    """The unit of a repository-relative path, or None outside the library."""
    best = None
    for unit, folder in FOLDERS.items():
        if rel.startswith(folder + "/") and (best is None or len(folder) > len(FOLDERS[best])):
            best = unit
    return best


def below(unit):
    """The units a unit may include, besides itself."""
    for stack in (RUNTIME, SERVICE):
        for i, level in enumerate(stack):
            if unit in level:
                return {u for lv in stack[:i] for u in lv}
    return set()


def peers(unit):
    for stack in (RUNTIME, SERVICE):
        for level in stack:
            if unit in level:
                return set(level) - {unit}
    return set()


def check(root):
    """Every violation in the tree at root, as 'file:line: message' lines; and the count of includes."""
    bad, n = [], 0
    for top in LIBRARY:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for fn in sorted(filenames):
                if not fn.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                src = unit_of(rel)
                if src is None:
                    bad.append(f"{rel}:1: not in any folder of the order")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                for ln, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    n += 1
                    inc = m.group(1)
                    # as the compiler looks: beside the file first, then from the root (-I SOURCE_DIR)
                    local = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                    if os.path.exists(os.path.join(root, local)) and local != inc:
                        bad.append(f'{rel}:{ln}: "{inc}" names {local}: include it by its path from the repository root')
                        continue
                    if os.path.exists(os.path.join(root, local)):
                        target = local
                    elif os.path.exists(os.path.join(root, inc)):
                        target = os.path.normpath(inc)
                    else:
                        bad.append(f'{rel}:{ln}: "{inc}" is not a file of the tree')
                        continue
                    dst = unit_of(target)
                    if dst is None:
                        bad.append(f"{rel}:{ln}: {src} includes {target}, which is outside the library")
                        continue
                    if dst == src or dst in below(src) or (rel, target) in EXCEPTIONS:
                        continue
                    if any(target.startswith(b) for b in BRIDGES.get(src, [])):
                        continue
                    if src in BRIDGES and dst in FOLDERS and FOLDERS[dst].startswith("runtime/") and dst != "core":
                        why = f"{src} reaches the runtime only through {', '.join(BRIDGES[src])} and runtime/core"
                    elif dst in peers(src):
                        why = f"{src} and {dst} are peers on one level"
                    else:
                        why = f"{dst} is above {src}"
                    bad.append(f"{rel}:{ln}: {src} includes {target}: {why}")
    bad += check_bridges(root)
    return bad, n


def check_bridges(root):
    """A bridge header of a service unit into the runtime passes nothing else of the runtime on.

    ckpt's one header (exec/pstate.h) would be no narrow interface if including it pulled in
    exec/rank.h or comm/comm.h: it may include runtime/core and nothing else of the library."""
    bad = []
    for unit, allowed in sorted(BRIDGES.items()):
        for rel in allowed:
            if not rel.endswith(".h") or not os.path.exists(os.path.join(root, rel)):
                continue
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                for ln, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and not m.group(1).startswith(FOLDERS["core"] + "/"):
                        bad.append(f"{rel}:{ln}: {rel} includes {m.group(1)}: the bridge of {unit} into the runtime "
                                   f"includes nothing of the library but {FOLDERS['core']}")
    return bad


# ---- rooms ----------------------------------------------------------------------------
DEFINITION = re.compile(r"^([A-Za-z_][^\n;(){}=]*?[\s*])(\w+)\s*\(", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def strip(text):
    """C text without comments, strings and preprocessor lines (their line count kept)."""
    text = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return "\n".join("" if ln.lstrip().startswith("#") else ln for ln in text.split("\n"))


def definitions(text):
    """Names of the functions a stripped .c text defines with external linkage."""
    names = set()
    for m in DEFINITION.finditer(text):
        head = m.group(1).split()
        if not head or head[0] in ("static", "typedef", "return", "else", "extern") or "static" in head:
            continue
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        rest = text[i:].lstrip()
        if rest.startswith("__attribute__"):
            continue
        if rest.startswith("{"):
            names.add(m.group(2))
    return names


def room_files(root, unit):
    """{room: [repository-relative .c files]} of a unit with rooms."""
    out = {}
    for room in ROOMS[unit][1]:
        d = os.path.join(root, FOLDERS[unit], room)
        out[room] = sorted(os.path.relpath(os.path.join(d, f), root)
                           for f in (os.listdir(d) if os.path.isdir(d) else []) if f.endswith(".c"))
    return out


def circles(root, files):
    """The circles among files (.c, one room): sets of two or more files each reaching the others.

    A reaches B when A uses a function B defines (declared in B's header or in a *_int.h the
    room's files share: a shared header's owner is whoever defines what it declares)."""
    defs, uses = {}, {}
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = strip(f.read())
        defs[rel] = definitions(text)
        uses[rel] = set(IDENT.findall(text))
    edge = {a: {b for b in files if b != a and uses[a] & defs[b] - defs[a]} for a in files}
    # strongly connected components (Tarjan), the ones of more than one file
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edge[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in files:
        if v not in index:
            visit(v)
    return out, edge


def check_rooms(root):
    """Stray files of units with rooms, rooms CMakeLists.txt does not build, and circles inside a room."""
    bad = []
    try:
        with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
            cmake = f.read()
    except OSError:
        cmake = None
    for unit, (target, rooms) in sorted(ROOMS.items()):
        top = os.path.join(root, FOLDERS[unit])
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, top)
            room = rel_dir.split(os.sep)[0]
            for fn in sorted(filenames):
                if fn.endswith(SUFFIXES) and (rel_dir == "." or room not in rooms or rel_dir != room):
                    rel = os.path.relpath(os.path.join(dirpath, fn), root)
                    bad.append(f"{rel}:1: {unit}'s files live in its rooms ({', '.join(FOLDERS[unit] + '/' + r for r in rooms)})")
        if cmake is not None:
            m = re.search(r"qe_module\(\s*" + re.escape(target) + r"\b([^)]*)\)", cmake)
            dirs = m.group(1).split() if m else []
            for r in rooms:
                if FOLDERS[unit] + "/" + r not in dirs:
                    bad.append(f"CMakeLists.txt:1: qe_module({target} DIRS ...) does not list {FOLDERS[unit]}/{r}")
        found = set()
        for room, files in sorted(room_files(root, unit).items()):
            comps, edge = circles(root, files)
            for comp in comps:
                found.add(comp)
                if comp in CIRCLES:
                    continue
                links = "; ".join(f"{a} uses {', '.join(sorted(edge[a] & comp))}" for a in sorted(comp))
                bad.append(f"{sorted(comp)[0]}:1: a circle of files in room {FOLDERS[unit]}/{room}: {links}")
        for comp in sorted(CIRCLES, key=sorted):
            if sorted(comp)[0].startswith(FOLDERS[unit] + "/") and comp not in found:
                bad.append(f"{sorted(comp)[0]}:1: the tolerated circle {' <-> '.join(sorted(comp))} is gone: "
                           f"take it out of CIRCLES")
    return bad


# The planted includes of the self-check: (file to create, include, what must be reported).
PLANTS = [
    ("runtime/core/zz_probe.h", "runtime/backend/backend.h", "backend is above core"),
    ("runtime/fp8/zz_probe.c", "runtime/sched/sched.h", "fp8 and sched are peers"),
    ("runtime/backend/cuda/zz_probe.cu", "runtime/model/model.h", "model is above backend"),
    ("runtime/exec/zz_probe.c", "runtime/train/train.h", "train is above exec"),
    ("runtime/job/data.c", "runtime/exec/rank.h", "exec is above job"),
    ("runtime/job/config.h", "runtime/train/train.h", "train is above job"),
    ("store/zz_probe.c", "ckpt/session/ckpt.h", "ckpt is above store"),
    ("ckpt/tiers/zz_probe.c", "runtime/backend/backend.h", "ckpt reaches the runtime only through"),
    ("ckpt/session/ckpt.h", "runtime/exec/rank.h", "ckpt reaches the runtime only through"),
    ("ckpt/query/ckpt_job.h", "runtime/comm/comm.h", "ckpt reaches the runtime only through"),
    ("runtime/exec/pstate.h", "runtime/exec/rank.h", "the bridge of ckpt into the runtime includes nothing"),
    ("runtime/model/zz_probe.c", "cli/cli.h", "cli is above model"),
    ("ckpt/session/zz_probe.c", "ckpt_int.h", "by its path from the repository root"),
    ("runtime/exec/zz_probe.h", "../core/status.h", "by its path from the repository root"),
]


# Planted for the rooms' check: (file to create, its text, what must be reported about it).
ROOM_PLANTS = [
    ("ckpt/zz_probe.c", "int zz_top(void)\n{\n\treturn 0;\n}\n", "ckpt's files live in its rooms"),
    ("ckpt/query/zz_loop_a.c", "int zz_loop_b(int n);\n\nint zz_loop_a(int n)\n{\n\treturn n ? zz_loop_b(n - 1) : 0;\n}\n",
     "a circle of files in room ckpt/query"),
    ("ckpt/query/zz_loop_b.c", "int zz_loop_a(int n);\n\nint zz_loop_b(int n)\n{\n\treturn n ? zz_loop_a(n - 1) : 1;\n}\n",
     None),
]


def self_check(root):
    """Plant PLANTS and ROOM_PLANTS in a scratch copy of the library; each must be found, and nothing else new."""
    base, _ = check(root)
    base += check_rooms(root)
    tmp = tempfile.mkdtemp(prefix="qe-include-order-")
    try:
        for top in LIBRARY:
            shutil.copytree(os.path.join(root, top), os.path.join(tmp, top))
        shutil.copy(os.path.join(root, "CMakeLists.txt"), tmp)
        for rel, inc, _ in PLANTS:
            with open(os.path.join(tmp, rel), "a") as f:
                f.write(f'\n#include "{inc}"\n')
        for rel, text, _ in ROOM_PLANTS:
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        got, _ = check(tmp)
        got += check_rooms(tmp)
    finally:
        shutil.rmtree(tmp)
    new = [v for v in got if v not in base]
    ok = True
    for rel, inc, want in PLANTS:
        hits = [v for v in new if v.startswith(rel + ":") and inc in v and want in v]
        if len(hits) != 1:
            print(f"SELF-CHECK FAIL: planted {rel} -> {inc} ({want}) was reported {len(hits)} times")
            ok = False
        else:
            new.remove(hits[0])
    for rel, _, want in ROOM_PLANTS:
        if want is None:
            continue
        hits = [v for v in new if v.startswith(rel + ":") and want in v]
        if len(hits) != 1:
            print(f"SELF-CHECK FAIL: planted {rel} ({want}) was reported {len(hits)} times")
            ok = False
        else:
            new.remove(hits[0])
    for v in new:
        print(f"SELF-CHECK FAIL: unexpected report: {v}")
        ok = False
    return ok


def readme_shows_order(root):
    with open(os.path.join(root, "CONTRIBUTING.md"), encoding="utf-8") as f:
        text = f.read()
    sec = text.split("## Layout and design", 1)
    if len(sec) < 2:
        print("FAIL: CONTRIBUTING.md has no 'Layout and design' section")
        return False
    sec = sec[1].split("\n## ", 1)[0]
    ok = True
    for line in order_lines():
        if line not in sec:
            print(f"FAIL: CONTRIBUTING.md's layout section does not show the order: {line}")
            ok = False
    return ok


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    root = sys.argv[1]
    print("dependency order (each folder may include only its own and those to its left):")
    for line in order_lines():
        print("  " + line)
    for unit, allowed in BRIDGES.items():
        print(f"{unit} may also include: {', '.join(allowed)}")
    for rel, inc in sorted(EXCEPTIONS):
        print(f"tolerated: {rel} -> {inc}")
    for unit, (_, rooms) in sorted(ROOMS.items()):
        print(f"{unit} lives in rooms: {', '.join(FOLDERS[unit] + '/' + r for r in rooms)}")
    for comp, why in sorted(CIRCLES.items(), key=lambda kv: sorted(kv[0])):
        print(f"tolerated circle: {' <-> '.join(sorted(comp))} ({why})")
    ok = self_check(root)
    if ok:
        print(f"self-check: all {len(PLANTS)} planted includes and "
              f"{sum(1 for p in ROOM_PLANTS if p[2])} planted room faults found, nothing else")
    bad, n = check(root)
    bad += check_rooms(root)
    for v in bad:
        print("VIOLATION: " + v)
    ok = readme_shows_order(root) and ok and not bad
    print(f"{'ok' if ok else 'FAIL'}: {n} includes checked, {len(bad)} violations")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
