#!/usr/bin/env bash
# gc --compact (issue 38, item 7): gc frees pages inside the stores (reported as "reusable inside
# the stores": data.mdb keeps its blocks); --compact rewrites each store with LMDB's compacting
# copy and a durable rename, so the files shrink on disk, by the bytes it reports (text and
# --json).  After it verify passes and a resume continues bit-exact (compare == an uninterrupted
# run).  It is refused while a writer holds the run (RUN/lock) and while any process has a store
# open (LMDB's lock.mdb), naming the pid; and every failure part-way - an injected write (a full
# disk), fsync or rename failure at each call, and a real full disk on a small tmpfs - leaves
# each store whole: verify passes and no temporary file stays.
set -u
Q=${1:?usage: gc_compact.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
bg=
trap '[ -n "$bg" ] && kill $bg 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 4 --amax-history 4 --ckpt-every 1 --quiet"
disk() { local s=0 f; for f in "$1"/stores/rank-*/data.mdb; do s=$((s + $(stat -c '%b * %B' "$f"))); done; echo $s; }
jget() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
leftovers() { ls "$1"/stores/rank-*/data.mdb.compact 2>/dev/null; }

"$Q" train $C --steps 12 --run-dir "$T/ref" >/dev/null 2>&1 || fail "reference run"
"$Q" train $C --steps 8 --run-dir "$T/r" >/dev/null 2>&1 || fail "train"

# 1. gc: the pages are free inside the stores, the files keep their blocks
d0=$(disk "$T/r")
"$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 >"$T/gc.log" 2>&1 || { cat "$T/gc.log"; fail "gc"; }
grep -q "bytes reusable inside the stores (the files keep their size; --compact frees them on disk)" "$T/gc.log" ||
  { cat "$T/gc.log"; fail "gc does not say the bytes stay inside the stores"; }
grep -q "bytes reclaimed" "$T/gc.log" && fail "gc still says 'bytes reclaimed'"
d1=$(disk "$T/r")
[ "$d1" -ge "$d0" ] || fail "gc alone shrank the stores on disk ($d0 -> $d1): the wording would be wrong"
echo "ok: gc: $(grep -o '[0-9]* bytes reusable inside the stores' "$T/gc.log"); on disk still $d1 bytes"

# 2. refused while a writer holds the run; refused while a process has a store open
"$Q" resume --run-dir "$T/r" --steps 100000 --quiet >"$T/bg.log" 2>&1 &
bg=$!
for _ in $(seq 50); do grep -q "qeffect resume" "$T/r/lock" 2>/dev/null && break; sleep 0.1; done
out=$(timeout 20 "$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 --compact 2>&1) && fail "gc --compact ran beside a writer"
grep -q "pid $bg" <<<"$out" || { echo "$out"; fail "gc --compact beside a writer does not name it"; }
kill -9 $bg; wait $bg 2>/dev/null; bg=
sleep 0.5 # its forked ranks die with it
python3 - "$T/r/stores/rank-1/lock.mdb" "$T/reader.ready" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_SH, 1, 0)  # what every LMDB opener holds: byte 0 of lock.mdb, shared
open(sys.argv[2], "w").close()
time.sleep(60)
PY
bg=$!
for _ in $(seq 50); do [ -e "$T/reader.ready" ] && break; sleep 0.1; done
out=$(timeout 60 "$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 --compact 2>&1) && fail "gc --compact ran while a reader had a store open"
grep -q "QE_EBUSY" <<<"$out" && grep -q "is open in another process (pid $bg)" <<<"$out" ||
  { echo "$out"; fail "the refusal does not say a process has the store open, naming it"; }
kill $bg; wait $bg 2>/dev/null; bg=
[ -z "$(leftovers "$T/r")" ] || fail "a refused compaction left a temporary file"
"$Q" verify --run-dir "$T/r" >/dev/null 2>&1 || fail "verify after a refused compaction"
echo "ok: refused beside a writer (RUN/lock) and while a process has a store open: $(grep -o 'store .* is open in another process (pid [0-9]*)' <<<"$out" | sed "s|$T/||")"

# 3. failures part-way, at every call of each kind: the old store stays whole
"$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 >/dev/null 2>&1 || fail "gc after the writer died"
# Two stores (rank-0, then rank-1), each: one copy (write), fsync of the copy, rename, fsync of the
# folder.  FAULT:STORE, STORE the rank whose store the fault hits before its rename ('-': after it,
# the folder's fsync: that store is already the compacted one).  Stores compacted before the
# failure stay compacted.  (A failed one keeps its data.mdb: the same inode.  Its bytes may differ:
# gc's writable open sizes a compacted file back to its map, sparse.)
for case in write:1:0 write:2:1 fsync:1:0 fsync:2:- fsync:3:1 fsync:4:- rename:1:0 rename:2:1; do
  f=${case%:*} k=${case##*:}
  [ "$k" = - ] || before=$(stat -c %i "$T/r/stores/rank-$k/data.mdb")
  QE_FAULT=$f "$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 --compact >"$T/fault.log" 2>&1 && st=0 || st=$?
  [ $st -ne 0 ] || { cat "$T/fault.log"; fail "$f: no failure"; }
  grep -q "injected fault" "$T/fault.log" || { cat "$T/fault.log"; fail "$f: failed without naming the fault"; }
  [ -z "$(leftovers "$T/r")" ] || fail "$f: a temporary file stayed"
  [ "$k" = - ] || [ "$(stat -c %i "$T/r/stores/rank-$k/data.mdb")" = "$before" ] ||
    fail "$f: the failed compaction replaced the store of rank $k"
  "$Q" verify --run-dir "$T/r" >"$T/verify.log" 2>&1 || { cat "$T/fault.log" "$T/verify.log"; fail "$f: verify after the failure"; }
  echo "ok: $f: stores whole after: $(grep '^qeffect gc:' "$T/fault.log" | sed "s|$T/||g; s|.*compacted): ||")"
done
# they may have compacted some stores: start again from a gc'd run whose files are large
rm -rf "$T/r"
"$Q" train $C --steps 8 --run-dir "$T/r" >/dev/null 2>&1 || fail "train again"
"$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 >/dev/null 2>&1 || fail "gc again"

# 4. --compact shrinks the files by what it reports; verify passes; the resume is exact
d1=$(disk "$T/r")
"$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 --compact --json >"$T/compact.json" 2>"$T/compact.err" ||
  { cat "$T/compact.json" "$T/compact.err"; fail "gc --compact"; }
d2=$(disk "$T/r")
freed=$(jget "$T/compact.json" disk_bytes_freed)
[ "$(jget "$T/compact.json" compacted_stores)" = 2 ] || fail "compacted $(jget "$T/compact.json" compacted_stores) stores, want 2"
[ "$d2" -lt "$d1" ] || fail "the stores did not shrink on disk ($d1 -> $d2)"
[ "$freed" = $((d1 - d2)) ] || fail "reported $freed bytes freed, the files went from $d1 to $d2"
[ -z "$(leftovers "$T/r")" ] || fail "a temporary file stayed"
"$Q" verify --run-dir "$T/r" >"$T/verify.log" 2>&1 || { cat "$T/verify.log"; fail "verify after gc --compact"; }
"$Q" gc --run-dir "$T/r" --keep-last 2 --grace 0 --compact >"$T/again.log" 2>&1 || { cat "$T/again.log"; fail "a second --compact"; }
grep -q "compacted 2 stores: .* bytes freed on disk" "$T/again.log" || { cat "$T/again.log"; fail "the text report"; }
"$Q" resume --run-dir "$T/r" --steps 12 --quiet >"$T/resume.log" 2>&1 || { cat "$T/resume.log"; fail "resume after gc --compact"; }
out=$("$Q" compare "$T/ref" "$T/r") || { echo "$out"; fail "the resume after gc --compact differs from the uninterrupted run"; }
"$Q" verify --run-dir "$T/r" >/dev/null 2>&1 || fail "verify after the resume"
echo "ok: gc --compact: $d1 -> $d2 bytes on disk ($freed freed, as reported); verify passes; resume == uninterrupted: $(tail -1 <<<"$out")"
"$Q" gc --run-dir "$T/r" --keep-last 1 --compact --dry-run >/dev/null 2>&1 && fail "--compact --dry-run accepted"

# 5. a real full disk: the copy does not fit; the old store stays whole, and compaction works once there is room
unshare -rm --propagation private true 2>/dev/null || { echo "SKIP (part): unshare -rm is refused here: no full-disk case"; exit 0; }
mkdir -p "$T/mnt"
cat >"$T/inside.sh" <<'IN'
set -u
Q=$1 M=$2 C=$3
fail() { echo "FAIL: $*"; exit 1; }
sums() { stat -c %i "$1"/stores/rank-*/data.mdb; } # the same files: not replaced
mount -t tmpfs -o size=24m tmpfs "$M" || fail "mount a tmpfs"
"$Q" train $C --steps 6 --run-dir "$M/r" >/dev/null 2>&1 || fail "train on the tmpfs"
"$Q" gc --run-dir "$M/r" --keep-last 1 --grace 0 >/dev/null 2>&1 || fail "gc on the tmpfs"
dd if=/dev/zero of="$M/filler" bs=64k 2>/dev/null # until the disk is full,
truncate -s -512K "$M/filler"                      # then room for the catalog's journal, not for a copy
s0=$(sums "$M/r")
"$Q" gc --run-dir "$M/r" --keep-last 1 --grace 0 --compact >"$M/../full.log" 2>&1 && fail "gc --compact succeeded on a full disk"
grep -q "QE_ENOSPC" "$M/../full.log" || { cat "$M/../full.log"; fail "a full disk was not QE_ENOSPC"; }
[ "$(sums "$M/r")" = "$s0" ] || fail "the failed compaction changed a store"
ls "$M"/r/stores/rank-*/data.mdb.compact 2>/dev/null && fail "the failed copy stayed"
rm -f "$M/filler" # (verify itself needs room: the catalog's journal)
"$Q" verify --run-dir "$M/r" >"$M/../v.log" 2>&1 || { cat "$M/../v.log"; fail "verify after the full disk"; }
"$Q" gc --run-dir "$M/r" --keep-last 1 --grace 0 --compact >"$M/../room.log" 2>&1 || { cat "$M/../room.log"; fail "gc --compact with room"; }
"$Q" verify --run-dir "$M/r" >/dev/null 2>&1 || fail "verify after compaction on the tmpfs"
echo "ok: full disk: $(grep "^qeffect gc:" "$M/../full.log" | sed "s|$M/||g; s|.*compacted): ||"); store whole; then $(grep -o '[0-9]* bytes freed on disk' "$M/../room.log")"
IN
unshare -rm --propagation private bash "$T/inside.sh" "$Q" "$T/mnt" "$C" || exit 1
