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

Before it checks the tree, the test checks itself: it copies the library into a
scratch directory, plants one upward include of each kind, and fails unless every
planted one - and nothing else - is reported.

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
# ckpt reaches runtime state only through the persistent-state interface (exec/pstate)
# and the gate (qe_rank_quiescent in exec/rank.h), never through backend ops; its save
# and restore move rows and chunks between ranks over the comm.  cli sits on top of
# both stacks: it runs training, so all of the runtime is below it.
BRIDGES = {
    "ckpt": ["runtime/exec/pstate.h", "runtime/exec/rank.h", "runtime/comm/comm.h"],
    "cli": ["runtime/"],
}

# Single includes tolerated today, each with its reason.  Anything not listed fails.
EXCEPTIONS = {
    # inspect labels each scaling-state row with the role and linear layer it belongs
    # to; the names come from fp8 and the model, not through pstate.
    ("ckpt/ckpt_query.c", "runtime/fp8/fp8.h"),
    ("ckpt/ckpt_query.c", "runtime/model/model.h"),
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
    return bad, n


# The planted includes of the self-check: (file to create, include, what must be reported).
PLANTS = [
    ("runtime/core/zz_probe.h", "runtime/backend/backend.h", "backend is above core"),
    ("runtime/fp8/zz_probe.c", "runtime/sched/sched.h", "fp8 and sched are peers"),
    ("runtime/backend/cuda/zz_probe.cu", "runtime/model/model.h", "model is above backend"),
    ("runtime/exec/zz_probe.c", "runtime/train/train.h", "train is above exec"),
    ("runtime/job/data.c", "runtime/exec/rank.h", "exec is above job"),
    ("runtime/job/config.h", "runtime/train/train.h", "train is above job"),
    ("store/zz_probe.c", "ckpt/ckpt.h", "ckpt is above store"),
    ("ckpt/zz_probe.c", "runtime/backend/backend.h", "ckpt reaches the runtime only through"),
    ("runtime/model/zz_probe.c", "cli/cli.h", "cli is above model"),
    ("ckpt/zz_probe.c", "ckpt_int.h", "by its path from the repository root"),
    ("runtime/exec/zz_probe.h", "../core/status.h", "by its path from the repository root"),
]


def self_check(root):
    """Plant PLANTS in a scratch copy of the library; each must be found, and nothing else new."""
    base, _ = check(root)
    tmp = tempfile.mkdtemp(prefix="qe-include-order-")
    try:
        for top in LIBRARY:
            shutil.copytree(os.path.join(root, top), os.path.join(tmp, top))
        for rel, inc, _ in PLANTS:
            with open(os.path.join(tmp, rel), "a") as f:
                f.write(f'\n#include "{inc}"\n')
        got, _ = check(tmp)
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
    ok = self_check(root)
    if ok:
        print(f"self-check: all {len(PLANTS)} planted includes found, nothing else")
    bad, n = check(root)
    for v in bad:
        print("VIOLATION: " + v)
    ok = readme_shows_order(root) and ok and not bad
    print(f"{'ok' if ok else 'FAIL'}: {n} includes checked, {len(bad)} violations")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
