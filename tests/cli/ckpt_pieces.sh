#!/usr/bin/env bash
# ckpt_pieces.sh - saves and restores move device bytes in pieces through a ring of reused
# buffers (ckpt_pipe.c); this checks that the pieces change nothing a checkpoint records:
#  - the catalog's tensor rows and chunk hashes of a run saved in pieces of 3 chunks through the
#    ring, of one chunk in place, and whole (the default piece is larger than every tensor here)
#    are byte-identical;
#  - a resume read through device staging (QE_CKPT_STAGING=device: the cpu backend's "device"
#    memory, so the staging, ring and load code of the cuda path runs here) in small pieces
#    matches the uninterrupted run bit for bit (`compare`), under the same mapping and another;
#  - a damaged chunk makes that resume fail naming the chunk, and nothing of it commits.
set -u
Q=${1:?usage: ckpt_pieces.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
C="--preset small --micro 2 --amax-history 4 --quiet"
export QE_CKPT_CHUNK_BYTES=4096
rows() { # the checkpoint rows of a run, without its random store ids
	sqlite3 -separator ' ' "$1/catalog.db" "select c.step,t.stage,t.name,t.dtype,t.shape,t.bytes,t.kind,k.idx,hex(k.hash),k.size
	  from tensor_chunks k join tensors t on t.id=k.tensor_id join checkpoints c on c.id=t.checkpoint_id
	  order by c.step,t.stage,t.name,k.idx"
}
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 is needed to read the catalogs"; exit 1; }
"$Q" train $C --pp 2 --steps 4 --run-dir "$T/full" || exit 1
# 12288: 3-chunk pieces copied through the ring's slots (the device path, forced on cpu); 1: one-chunk
# pieces handed over in place (host items); 0: the default piece, larger than any tensor here
for p in 12288 1 0; do
	staging=host
	[ "$p" = 12288 ] && staging=device
	QE_CKPT_STAGING=$staging QE_CKPT_PIECE_BYTES=$p "$Q" train $C --pp 2 --steps 4 --ckpt-every 2 --run-dir "$T/p$p" ||
		{ echo "FAIL: train with pieces of $p bytes"; exit 1; }
	rows "$T/p$p" >"$T/rows$p"
done
n=$(wc -l <"$T/rows0")
[ "$n" -gt 1000 ] || { echo "FAIL: only $n chunk rows: the tensors did not span several pieces"; exit 1; }
cmp "$T/rows12288" "$T/rows0" && cmp "$T/rows1" "$T/rows0" || { echo "FAIL: pieces changed the checkpoint's rows or chunk hashes"; exit 1; }
echo "ok: $n chunk rows, identical for pieces of 3 chunks, 1 chunk and whole tensors"

export QE_CKPT_STAGING=device QE_CKPT_PIECE_BYTES=12288
cp -a "$T/p0" "$T/remap"
"$Q" resume --run-dir "$T/p0" --from 2 --steps 4 --quiet || { echo "FAIL: resume through device staging"; exit 1; }
"$Q" compare "$T/full" "$T/p0" --steps 1:4 >"$T/cmp" || { cat "$T/cmp"; echo "FAIL: the resumed run differs"; exit 1; }
"$Q" resume --run-dir "$T/remap" --from 2 --steps 4 --pp 1 --quiet || { echo "FAIL: remapped resume through device staging"; exit 1; }
"$Q" compare "$T/full" "$T/remap" --steps 1:4 >"$T/cmp" || { cat "$T/cmp"; echo "FAIL: the remapped resumed run differs"; exit 1; }
echo "ok: resumed through device staging in 3-chunk pieces, bit-exact under pp 2 and pp 1"

# every chunk payload of rank 1's store damaged (a flipped byte): the resume fails naming a chunk, and
# records nothing
cp -a "$T/p1" "$T/bad"
python3 - "$T/bad/stores/rank-1/data.mdb" <<'EOF' || { echo "FAIL: found no chunk to damage"; exit 1; }
import sys
# a 4096-byte chunk is an LMDB overflow value: a page whose 16-byte page header is followed by
# the value's header ("QEC1", 4 bytes of flags, the length as u64) and then the payload
n = 0
with open(sys.argv[1], "r+b") as f:
    data = bytearray(f.read())
    for off in range(16, len(data) - 4096, 4096):
        if data[off:off + 4] == b"QEC1" and int.from_bytes(data[off + 8:off + 16], "little") == 4096:
            data[off + 16 + 100] ^= 0x10
            n += 1
    f.seek(0)
    f.write(data)
print("damaged %d chunks" % n)
sys.exit(0 if n else 1)
EOF
before=$(sqlite3 "$T/bad/catalog.db" "select count(*) from losses")
out=$("$Q" resume --run-dir "$T/bad" --steps 6 --quiet 2>&1) && { echo "$out"; echo "FAIL: resume from damaged chunks succeeded"; exit 1; }
grep -Eq "chunk [0-9]+ of [0-9]+ \([0-9a-f]{32}\) is corrupt" <<<"$out" || { echo "$out"; echo "FAIL: the error does not name the damaged chunk"; exit 1; }
after=$(sqlite3 "$T/bad/catalog.db" "select count(*) from losses")
[ "$before" = "$after" ] || { echo "FAIL: the failed resume recorded steps ($before -> $after loss rows)"; exit 1; }
echo "ok: damaged chunks fail the resume through device staging, naming one; nothing recorded"
