#!/usr/bin/env python3
"""conventions.py - habits of runtime/README.md's "Conventions here" and DESIGN.md section 2, checked.

1. QE_TRY (runtime/core/status.h) is the one macro that hides a return.  It is
   kept only where a hidden return can leak nothing: a function that uses it
   holds nothing to undo, so it has no goto cleanup chain and allocates
   nothing (no malloc, calloc, realloc, strdup, or a backend's alloc).  Every
   library source (.c, .cu) is read function by function.
2. A cleanup label in runtime/ is named for what it undoes ("free_rank",
   "close_listener"), never a generic "out", "fail", "done", "err", "error",
   "cleanup" or "bail".  The .cu files of runtime/backend/cuda/ are left out
   for now (two such labels remain there), as are ckpt/, store/, catalog/ and
   cli/, whose labels predate the rule.
3. The checkpoint service never calls a backend op (DESIGN.md section 2): no
   "ops->" in ckpt/, store/ or catalog/.  An item's bytes move through
   runtime/exec/pstate.h (qe_pstate_read/write, qe_pstate_host_alloc/free).

Before it checks the tree, the test checks itself: it plants one offence of
each kind in a scratch copy and fails unless every one is reported.

usage: conventions.py SOURCE_DIR
"""
import os
import re
import shutil
import sys
import tempfile

LIBRARY = ["runtime", "ckpt", "store", "catalog", "cli"]
GENERIC = {"out", "fail", "done", "err", "error", "cleanup", "bail"}
LABEL_SKIP = ("runtime/backend/cuda/",)
ALLOC = re.compile(r"\b(malloc|calloc|realloc|strdup|aligned_alloc)\s*\(|->alloc\s*\(|\bgoto\s+\w+\s*;")
NO_OPS = ("ckpt/", "store/", "catalog/")
OPS = re.compile(r"\bops->")
LABEL = re.compile(r"^([a-z_][a-z0-9_]*):\s*$")


def functions(lines):
    """(first line number, body lines) of each function: '{' at column 0 after a line ending in ')', to '}'."""
    i = 0
    while i < len(lines):
        if lines[i].startswith("{") and i > 0 and lines[i - 1].rstrip().endswith(")"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("}"):
                j += 1
            yield i, lines[i:j]
            i = j
        i += 1


def check(root):
    bad = []
    for top in LIBRARY:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for fn in sorted(filenames):
                if not fn.endswith((".c", ".cu")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, fn), root)
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    lines = f.read().split("\n")
                for start, body in functions(lines):
                    text = "\n".join(body)
                    if "QE_TRY(" in text:
                        m = ALLOC.search(text)
                        if m:
                            ln = start + 1 + text[: m.start()].count("\n")
                            bad.append(f"{rel}:{ln}: QE_TRY in a function that has something to undo "
                                       f"({m.group(0).strip()}): use the goto chain")
                    if rel.startswith(NO_OPS):
                        for k, line in enumerate(body):
                            if OPS.search(line):
                                bad.append(f"{rel}:{start + 1 + k}: the checkpoint service calls a backend op: "
                                           f"go through runtime/exec/pstate.h")
                    if rel.startswith("runtime/") and not rel.startswith(LABEL_SKIP):
                        for k, line in enumerate(body):
                            m = LABEL.match(line)
                            if m and m.group(1) in GENERIC:
                                bad.append(f"{rel}:{start + 1 + k}: cleanup label '{m.group(1)}': "
                                           f"name it for what it undoes")
    return bad


PLANTS = [
    ("runtime/core/zz_probe.c",
     "int zz_a(void)\n{\n\tvoid *p = malloc(4);\n\tQE_TRY(zz_b(p));\n\tfree(p);\n\treturn 0;\n}\n",
     "QE_TRY in a function"),
    ("runtime/sched/zz_probe.c",
     "int zz_c(void)\n{\n\tint rc = 0;\n\tgoto out;\nout:\n\treturn rc;\n}\n",
     "cleanup label 'out'"),
    ("ckpt/protocol/zz_probe.c",
     "int zz_d(qe_backend *b, void *d, const void *s)\n{\n\treturn b->ops->copy(NULL, d, s, 4, 0);\n}\n",
     "calls a backend op"),
]


def self_check(root):
    base = check(root)
    tmp = tempfile.mkdtemp(prefix="qe-conventions-")
    try:
        for top in LIBRARY:
            shutil.copytree(os.path.join(root, top), os.path.join(tmp, top))
        for rel, text, _ in PLANTS:
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        got = [v for v in check(tmp) if v not in base]
    finally:
        shutil.rmtree(tmp)
    ok = True
    for rel, _, want in PLANTS:
        hits = [v for v in got if v.startswith(rel + ":") and want in v]
        if len(hits) != 1:
            print(f"SELF-CHECK FAIL: planted {rel} ({want}) reported {len(hits)} times")
            ok = False
        else:
            got.remove(hits[0])
    for v in got:
        print(f"SELF-CHECK FAIL: unexpected report: {v}")
        ok = False
    return ok


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    root = sys.argv[1]
    ok = self_check(root)
    if ok:
        print(f"self-check: all {len(PLANTS)} planted offences found, nothing else")
    bad = check(root)
    for v in bad:
        print("VIOLATION: " + v)
    n = sum(1 for top in LIBRARY for _, _, fs in os.walk(os.path.join(root, top)) for f in fs
            if f.endswith((".c", ".cu")))
    print(f"{'ok' if ok and not bad else 'FAIL'}: {n} files checked, {len(bad)} violations")
    return 0 if ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
