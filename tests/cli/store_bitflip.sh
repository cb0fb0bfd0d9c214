#!/usr/bin/env bash
# No damaged byte crashes a reader (issue 35, item 1).  A one-rank run's store holds one
# checkpoint; single bits of its meta, branch and leaf pages (the pages LMDB trusts; overflow
# pages hold the chunks' bytes, which every read re-hashes) are flipped one at a time, each in a
# fresh copy of the run, and verify, inspect, resume and gc run on it (a gc that fails must
# leave the catalog as it was).  Each must end by itself
# (never by a signal, in the command or in a rank, never past its time limit) and, when it
# fails, name the store's data.mdb.  QE_FLIP_TRIALS positions (default 8) are drawn at random
# (seed QE_FLIP_SEED) among the bytes in use, and the flags bytes of the first leaf nodes are
# always taken (F_DUPDATA set on a chunk's node made every reader die by SIGSEGV in mdb_get);
# each position is flipped at all 8 bits.  QE_FLIP_TRIALS=all takes every byte in use.
set -u
Q=${1:?usage: store_bitflip.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
TRIALS=${QE_FLIP_TRIALS:-8}; SEED=${QE_FLIP_SEED:-35}
C="--preset tiny --pp 1 --chunks 1 --micro 2 --amax-history 4 --quiet --trace off"
# shellcheck disable=SC2086
"$Q" train $C --steps 2 --ckpt-every 2 --run-dir "$T/run" || { echo "FAIL: the run to damage"; exit 1; }
DB=stores/rank-0/data.mdb
[ -f "$T/run/$DB" ] || { echo "FAIL: no $DB"; exit 1; }
# positions: the bytes in use of the meta (flag 0x08), branch (0x01) and leaf (0x02) pages
python3 - "$T/run/$DB" "$TRIALS" "$SEED" >"$T/positions" <<'PY'
import struct, sys, random
path, trials, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(path, "rb").read()
ps = 4096
# MDB_meta after the 16-byte page header: magic, version, address, mapsize, two MDB_db (48 bytes
# each), last page number, txnid
META_LAST = 16 + 4 + 4 + 8 + 8 + 2 * 48
last = max(struct.unpack_from("<Q", data, p * ps + META_LAST)[0] for p in (0, 1))
offs, node_flags = [], []
p = 0
while p <= last and p < len(data) // ps:
    base = p * ps
    flags = struct.unpack_from("<H", data, base + 10)[0]
    if flags & 0x04:  # an overflow value: its pages hold chunk bytes (hash-checked); skip them all
        p += max(1, struct.unpack_from("<I", data, base + 12)[0])
        continue
    if flags & 0x08:  # meta: its header and fields
        offs += range(base, base + META_LAST + 16)
    elif flags & 0x03:  # branch or leaf: the header, the node pointers, the nodes
        lower, upper = struct.unpack_from("<HH", data, base + 12)
        if lower <= upper <= ps:
            offs += list(range(base, base + lower)) + list(range(base + upper, base + ps))
        if flags & 0x02:  # the flags byte of a leaf's first nodes (F_DUPDATA there crashed every reader)
            for k in range(min(2, max(0, (lower - 16) // 2))):
                ptr = struct.unpack_from("<H", data, base + 16 + 2 * k)[0]
                if ptr + 8 <= ps:
                    node_flags.append(base + ptr + 4)
    p += 1
if trials != "all":
    random.seed(seed)
    offs = sorted(set(random.sample(offs, min(int(trials), len(offs)))) | set(node_flags[:4]))
for o in offs:
    print(o)
PY
npos=$(wc -l <"$T/positions")
[ "$npos" -gt 0 ] || { echo "FAIL: no page to damage"; exit 1; }
fail=0; named=0; benign=0; n=0
flip() { python3 -c 'import sys; f=open(sys.argv[1],"r+b"); o=int(sys.argv[2]); f.seek(o); b=f.read(1)[0]; f.seek(o); f.write(bytes([b ^ (1 << int(sys.argv[3]))]))' "$@"; }
while read -r off; do
  for bit in 0 1 2 3 4 5 6 7; do
    n=$((n + 1))
    rm -rf "$T/copy"; cp -a "$T/run" "$T/copy"
    flip "$T/copy/$DB" "$off" "$bit"
    for cmd in "verify --run-dir $T/copy" "inspect --run-dir $T/copy" "resume --run-dir $T/copy --steps 3 --quiet" \
               "gc --run-dir $T/copy --keep-last 1 --grace 0"; do
      cat_before=$(md5sum <"$T/copy/catalog.db")
      # shellcheck disable=SC2086
      out=$(timeout -k 5 60 "$Q" $cmd 2>&1); st=$?
      what="byte $off bit $bit: qeffect ${cmd%% *}"
      if [ $st -ge 124 ] || grep -qi "by signal\|core dumped" <<<"$out"; then
        echo "$out" | tail -3; echo "FAIL: $what ended by a signal or its time limit (exit $st)"; fail=1
      elif [ $st -ne 0 ]; then
        if grep -q "data.mdb\|stores/rank-0" <<<"$out"; then named=$((named + 1))
        else echo "$out" | tail -3; echo "FAIL: $what failed without naming the store (exit $st)"; fail=1; fi
        if [ "${cmd%% *}" = gc ] && [ "$(md5sum <"$T/copy/catalog.db")" != "$cat_before" ]; then
          echo "FAIL: $what failed after changing the catalog"; fail=1
        fi
      else benign=$((benign + 1)); fi
    done
  done
done <"$T/positions"
echo "flipped $n bits at $npos positions: $named command runs refused naming the store, $benign ran (the bit changed nothing they read)"
[ $fail -eq 0 ] || exit 1
[ $named -gt 0 ] || { echo "FAIL: no flip was found (the test damaged nothing)"; exit 1; }
echo "ok: no signal, every refusal names the store"
