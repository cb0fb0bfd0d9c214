#!/usr/bin/env bash
# After a full disk, gc makes room (issue 35, item 3).  On a 12 MiB tmpfs (a mount namespace of
# our own: unshare -rm, no root needed) a run checkpointing every step fills the disk: checkpoint S
# aborts with QE_ENOSPC.  gc --keep-last 2 --grace 0 frees the pages of the older checkpoints
# inside the stores' files; a resume to step S must then commit checkpoint S in those pages
# (the store reserved disk blocks past the end of data.mdb for the whole write, though LMDB
# reuses the freed pages first, so the resume failed at step S again), and verify passes.
set -u
Q=${1:?usage: disk_full_gc.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
unshare -rm --propagation private true 2>/dev/null || { echo "SKIP: unshare -rm is refused here"; exit 77; }
mkdir -p "$T/mnt"
cat >"$T/inside.sh" <<'IN'
set -u
Q=$1 M=$2 L=$3
mount -t tmpfs -o size=12m tmpfs "$M" || { echo "FAIL: mount a tmpfs"; exit 1; }
C="--preset tiny --pp 1 --chunks 4 --micro 4 --amax-history 4 --ckpt-every 1 --quiet --trace off"
"$Q" train $C --steps 40 --run-dir "$M/r" >"$L/train.log" 2>&1 && { echo "FAIL: 40 checkpoints fitted on 12 MiB"; exit 1; }
grep -q "QE_ENOSPC" "$L/train.log" || { cat "$L/train.log"; echo "FAIL: the full disk was not QE_ENOSPC"; exit 1; }
S=$("$Q" list --run-dir "$M/r" | awk '$3 == "aborted" {print $1; exit}')
[ -n "$S" ] || { "$Q" list --run-dir "$M/r"; echo "FAIL: no aborted checkpoint"; exit 1; }
"$Q" gc --run-dir "$M/r" --keep-last 2 --grace 0 >"$L/gc.log" 2>&1 || { cat "$L/gc.log"; echo "FAIL: gc"; exit 1; }
grep -q "bytes reusable inside the stores" "$L/gc.log" || { cat "$L/gc.log"; echo "FAIL: gc reclaimed nothing"; exit 1; }
"$Q" resume --run-dir "$M/r" --steps "$S" --quiet >"$L/resume.log" 2>&1 ||
  { tail -3 "$L/resume.log"; echo "FAIL: after gc, the resume to step $S did not fit in the freed pages"; exit 1; }
"$Q" list --run-dir "$M/r" | awk -v s="$S" '$1 == s && $3 == "committed" {found=1} END {exit !found}' ||
  { "$Q" list --run-dir "$M/r"; echo "FAIL: checkpoint $S is not committed after the resume"; exit 1; }
"$Q" verify --run-dir "$M/r" >"$L/verify.log" 2>&1 || { cat "$L/verify.log"; echo "FAIL: verify after the resume"; exit 1; }
echo "ok: the disk filled at checkpoint $S; after gc ($(grep -o "[0-9]* bytes reusable inside the stores" "$L/gc.log")) the resume committed it and verify passes"
IN
unshare -rm --propagation private bash "$T/inside.sh" "$Q" "$T/mnt" "$T"
