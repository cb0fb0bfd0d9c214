#!/usr/bin/env bash
# train --init-from (issue 37, items 3 and 4).
#  1. Round trips are byte-identical, for both formats, at --pp 1 and --pp 2, tied (the gpt2
#     preset's default: the safetensors file has no lm_head.weight, llm.c's needs no --untied-ok)
#     and untied (--tie-embeddings off): export a trained run (safetensors folder, llm.c file),
#     train one step at --lr 0 from the export, export that run's checkpoint again: the model
#     files equal byte for byte.
#  2. The run records where its weights came from (inspect: path, format, hash; JSON config).
#  3. A safetensors file with bare names (h.N...) and no lm_head.weight loads; an untied model says
#     the head starts as a copy of wte, a tied one says nothing of it (the head is wte), and the
#     head's bytes then equal wte's (inspect --tensor hashes).
#  4. resume never reads the file again: with it moved away, the resumed run equals an
#     uninterrupted one byte for byte.
#  5. Bad inputs - a truncated safetensors file, a header lying about offsets, a wrong shape, an
#     llm.c file with a bad magic, a truncated llm.c file, a file of too many layers - are each
#     refused with a message naming the file and the tensor, and create no run directory.
#  6. A tied model and a file with lm_head.weight: the same bytes as its wte load (and export back
#     to the file without it); other bytes are refused, naming the file and --tie-embeddings off,
#     creating nothing; with --tie-embeddings off that file loads its own head.
set -u
Q=${1:?usage: init_from.sh QEFFECT SHARED}
D="${2:?usage: init_from.sh QEFFECT SHARED}/data/brown.jsonl"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset gpt2 --layers 2 --hidden 128 --heads 4 --seq 64 --micro 2 --amax-history 4 --data $D --quiet"
# shellcheck disable=SC2086
"$Q" train $C --pp 2 --steps 2 --ckpt-every 2 --run-dir "$T/a" || fail "train the original"
"$Q" export --run-dir "$T/a" --format safetensors -o "$T/st1/" >/dev/null || fail "export safetensors"
"$Q" export --run-dir "$T/a" --format llmc -o "$T/m1.bin" >/dev/null || fail "export llmc of a tied model"
# shellcheck disable=SC2086
"$Q" train $C --tie-embeddings off --pp 2 --steps 2 --ckpt-every 2 --run-dir "$T/au" || fail "train the untied original"
"$Q" export --run-dir "$T/au" --format safetensors -o "$T/stu1/" >/dev/null || fail "export safetensors, untied"
"$Q" export --run-dir "$T/au" --format llmc --untied-ok -o "$T/mu1.bin" >/dev/null 2>&1 || fail "export llmc, untied"
python3 - "$T/st1" "$T/stu1" <<'EOF' || fail "the tied export holds its head once, the untied one twice"
import json, struct, sys
def names(d):
    b = open(d + "/model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    return set(json.loads(b[8:8 + n])) - {"__metadata__"}, json.load(open(d + "/config.json"))["tie_word_embeddings"]
(t, tt), (u, ut) = names(sys.argv[1]), names(sys.argv[2])
assert tt is True and ut is False, (tt, ut)
assert "lm_head.weight" not in t and u == t | {"lm_head.weight"}, sorted(u ^ t)
EOF

# 1. round trips: tied (the preset's default) and untied, each at --pp 1 and 2
for tie in on off; do
	st=$T/st1 mb=$T/m1.bin untied_ok=
	[ $tie = off ] && st=$T/stu1 mb=$T/mu1.bin untied_ok=--untied-ok
	for pp in 1 2; do
		# shellcheck disable=SC2086
		"$Q" train $C --tie-embeddings $tie --pp $pp --steps 1 --ckpt-every 1 --lr 0 --init-from "$st" \
			--run-dir "$T/s$tie$pp" 2>"$T/err" || { cat "$T/err"; fail "--init-from the safetensors folder, tie $tie, --pp $pp"; }
		"$Q" export --run-dir "$T/s$tie$pp" --format safetensors -o "$T/st2_$tie$pp/" >/dev/null || fail "export again"
		cmp "$st/model.safetensors" "$T/st2_$tie$pp/model.safetensors" ||
			fail "safetensors round trip, tie $tie, --pp $pp is not byte-identical"
		# shellcheck disable=SC2086
		"$Q" train $C --tie-embeddings $tie --pp $pp --steps 1 --ckpt-every 1 --lr 0 --init-from "$mb" \
			--run-dir "$T/l$tie$pp" 2>"$T/err" || { cat "$T/err"; fail "--init-from the llm.c file, tie $tie, --pp $pp"; }
		"$Q" export --run-dir "$T/l$tie$pp" --format llmc $untied_ok -o "$T/m2_$tie$pp.bin" >/dev/null 2>&1 ||
			fail "export llmc again, tie $tie"
		cmp "$mb" "$T/m2_$tie$pp.bin" || fail "llm.c round trip, tie $tie, --pp $pp is not byte-identical"
	done
done
echo "ok: export -> --init-from, one step at --lr 0 -> export: byte-identical for safetensors and llm.c, tied and untied, at --pp 1 and 2"

# 2. provenance
"$Q" inspect --run-dir "$T/son2" >"$T/insp" || fail "inspect"
grep -q "weights from: $T/st1 (safetensors, xxh3-128 [0-9a-f]\{32\})" "$T/insp" || { grep weights "$T/insp"; fail "inspect does not show the init file"; }
"$Q" inspect --run-dir "$T/lon1" | grep -q "weights from: $T/m1.bin (llmc, " || fail "inspect: the llm.c file"
"$Q" inspect --run-dir "$T/a" | grep -q "weights from: random initialization" || fail "inspect: a run from seed"
"$Q" inspect --run-dir "$T/son2" --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["config"]["init_from"]
assert c["format"] == "safetensors" and c["path"].endswith("/st1") and len(c["xxh3_128"]) == 32, c' ||
	fail "the run config's init_from"
echo "ok: the run records the file, its format and hash; inspect shows them"

# 3. bare names, no lm_head.weight: an untied head starts as wte's copy; a tied one is wte
python3 - "$T/st1/model.safetensors" "$T/bare.safetensors" <<'EOF' || fail "write the bare file"
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
hdr = json.loads(blob[8:8 + n]); data = blob[8 + n:]
out, parts, off = {}, [], 0
for k, v in hdr.items():
    if k == "__metadata__" or k == "lm_head.weight":
        continue
    b, e = v["data_offsets"]
    out[k[len("transformer."):]] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + e - b]}
    parts.append(data[b:e]); off += e - b
h = json.dumps(out).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(parts))
EOF
# shellcheck disable=SC2086
"$Q" train $C --tie-embeddings off --steps 1 --ckpt-every 1 --lr 0 --init-from "$T/bare.safetensors" --run-dir "$T/t" \
	2>"$T/err" || { cat "$T/err"; fail "--init-from bare names without lm_head.weight"; }
grep -q "copy of wte" "$T/err" || { cat "$T/err"; fail "a tied head must be announced"; }
hw=$("$Q" inspect --run-dir "$T/t" --tensor wte | grep -o "xxh3-128 [0-9a-f]*")
hh=$("$Q" inspect --run-dir "$T/t" --tensor lm_head.weight | grep -o "xxh3-128 [0-9a-f]*")
[ -n "$hw" ] && [ "$hw" = "$hh" ] || fail "the head ($hh) is not a copy of wte ($hw)"
"$Q" export --run-dir "$T/t" --format safetensors -o "$T/te/" >/dev/null || fail "export the tied run"
python3 - "$T/bare.safetensors" "$T/te/model.safetensors" <<'EOF' || fail "bare-name import: tensors differ"
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
bare, ex = load(sys.argv[1]), load(sys.argv[2])
for k, v in bare.items():
    assert ex["transformer." + k] == v, k
assert ex["lm_head.weight"] == bare["wte.weight"], "lm_head.weight"
assert len(ex) == len(bare) + 1, sorted(ex)
EOF
# shellcheck disable=SC2086
"$Q" train $C --steps 1 --ckpt-every 1 --lr 0 --init-from "$T/bare.safetensors" --run-dir "$T/tt" 2>"$T/err" ||
	{ cat "$T/err"; fail "--init-from bare names into a tied model"; }
grep -q "copy of wte" "$T/err" && { cat "$T/err"; fail "a tied model's head is wte: no note"; }
"$Q" export --run-dir "$T/tt" --format safetensors -o "$T/tte/" >/dev/null || fail "export the tied run from bare names"
cmp "$T/st1/model.safetensors" "$T/tte/model.safetensors" || fail "bare names into a tied model: the export differs from the tied original"
echo "ok: bare names and no lm_head.weight: an untied head starts as wte's copy, announced; a tied one is wte"

# 4. resume does not load the file again
# shellcheck disable=SC2086
"$Q" train $C --pp 2 --steps 3 --ckpt-every 1 --init-from "$T/st1" --run-dir "$T/u" || fail "uninterrupted"
# shellcheck disable=SC2086
"$Q" train $C --pp 2 --steps 1 --ckpt-every 1 --init-from "$T/st1" --run-dir "$T/r" || fail "first part"
mv "$T/st1" "$T/st1.moved"
"$Q" resume --run-dir "$T/r" --steps 3 --quiet || fail "resume with the init file gone"
mv "$T/st1.moved" "$T/st1"
"$Q" export --run-dir "$T/u" --format safetensors -o "$T/eu/" >/dev/null || fail "export u"
"$Q" export --run-dir "$T/r" --format safetensors -o "$T/er/" >/dev/null || fail "export r"
cmp "$T/eu/model.safetensors" "$T/er/model.safetensors" || fail "resumed run differs from the uninterrupted one"
"$Q" export --run-dir "$T/u" --format safetensors -o "$T/eu1/" --step 1 >/dev/null || fail "export u step 1"
cmp -s "$T/st1/model.safetensors" "$T/eu1/model.safetensors" && fail "a step at --lr 1e-3 left the weights unchanged"
echo "ok: resume restores the checkpoint and never reads the init file (moved away); == uninterrupted"

# 5. bad inputs: refused, named, nothing created
python3 - "$T/st1/model.safetensors" "$T/m1.bin" "$T" <<'EOF' || fail "write the bad files"
import json, struct, sys
st = open(sys.argv[1], "rb").read(); ll = open(sys.argv[2], "rb").read(); d = sys.argv[3]
open(d + "/trunc.safetensors", "wb").write(st[: len(st) // 2])
open(d + "/hdrlen.safetensors", "wb").write(struct.pack("<Q", len(st)) + st[8:])
n = struct.unpack("<Q", st[:8])[0]
hdr = json.loads(st[8:8 + n]); data = st[8 + n:]
def write(name, h):
    j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
    open(d + "/" + name, "wb").write(struct.pack("<Q", len(j)) + j + data)
lie = json.loads(st[8:8 + n]); b, e = lie["transformer.h.1.mlp.c_fc.bias"]["data_offsets"]
lie["transformer.h.1.mlp.c_fc.bias"]["data_offsets"] = [b + len(data), e + len(data)]
write("lie.safetensors", lie)
shp = json.loads(st[8:8 + n]); shp["transformer.h.0.attn.c_proj.weight"]["shape"] = [64, 256]
write("shape.safetensors", shp)
deep = json.loads(st[8:8 + n]); deep["transformer.h.2.ln_1.weight"] = deep["transformer.h.1.ln_1.weight"]
write("deep.safetensors", deep)
bad = bytearray(ll); struct.pack_into("<i", bad, 0, 20240520)
open(d + "/magic.bin", "wb").write(bad)
open(d + "/trunc.bin", "wb").write(ll[: len(ll) - 4096])
EOF
refuse() { # FILE RUN_NAME PATTERN...: refused, each pattern in the error, no run directory
	local f=$1 run=$2; shift 2
	# shellcheck disable=SC2086
	"$Q" train $C --steps 1 --ckpt-every 1 --lr 0 --init-from "$T/$f" --run-dir "$T/$run" >"$T/out" 2>"$T/err"
	local rc=$?
	[ $rc -ne 0 ] || fail "$f was accepted"
	for p in "$T/$f" "$@"; do
		grep -qF -- "$p" "$T/err" || { cat "$T/err"; fail "$f: the error does not say '$p'"; }
	done
	[ -e "$T/$run" ] && fail "$f: a refused --init-from created the run directory"
	echo "ok: $f refused (rc $rc): $(head -c 240 "$T/err")"
}
refuse trunc.safetensors bad1 "transformer." "data_offsets"
refuse hdrlen.safetensors bad10 "its header says it is"
refuse lie.safetensors bad2 "transformer.h.1.mlp.c_fc.bias" "data_offsets"
refuse shape.safetensors bad3 "transformer.h.0.attn.c_proj.weight" "[64, 256]" "[128, 128]"
refuse deep.safetensors bad4 "transformer.h.2.ln_1.weight" "h.0 .. h.1"
refuse magic.bin bad5 "bad magic 20240520"
refuse trunc.bin bad6 "truncated" "fcprojw (h.N.mlp.c_proj.weight"
refuse nothing.safetensors bad7 "No such file"
# config.json beside it is checked too: n_head is in no tensor's shape
cp -r "$T/st1" "$T/h8"
python3 -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["n_head"]=8; json.dump(c,open(p,"w"))' "$T/h8/config.json"
refuse h8 bad9 "config.json" "n_head is 8"
# the model differs from the file: its first differing tensor is named (wte: hidden 64)
"$Q" train ${C/--hidden 128/--hidden 64} --steps 1 --ckpt-every 1 --init-from "$T/st1" --run-dir "$T/bad8" 2>"$T/err" &&
	fail "a model of another hidden size was accepted"
grep -qF "tensor 'transformer.wte.weight' is [50257, 128] in the file" "$T/err" || { cat "$T/err"; fail "wte not named"; }
[ -e "$T/bad8" ] && fail "a refused --init-from created the run directory"
"$Q" resume --run-dir "$T/r" --init-from "$T/st1" --steps 4 >/dev/null 2>&1 && fail "resume accepted --init-from"
echo "ok: every bad input refused with the file and tensor named; no run directory created"

# 6. a tied model and a file with lm_head.weight: wte's bytes load, other bytes are refused
python3 - "$T/st1/model.safetensors" "$T" <<'EOF' || fail "write the headed files"
import json, struct, sys
st = open(sys.argv[1], "rb").read(); d = sys.argv[2]
n = struct.unpack("<Q", st[:8])[0]
hdr = json.loads(st[8:8 + n]); data = st[8 + n:]
b, e = hdr["transformer.wte.weight"]["data_offsets"]
wte = data[b:e]
def write(name, head):
    h = dict(hdr); h["lm_head.weight"] = {"dtype": "F32", "shape": hdr["transformer.wte.weight"]["shape"],
                                          "data_offsets": [len(data), len(data) + len(head)]}
    j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
    open(d + "/" + name, "wb").write(struct.pack("<Q", len(j)) + j + data + head)
write("same.safetensors", wte)
diff = bytearray(wte); diff[4 * (3 * 128 + 5)] ^= 1     # row 3, column 5
write("differ.safetensors", bytes(diff))
EOF
# shellcheck disable=SC2086
"$Q" train $C --steps 1 --ckpt-every 1 --lr 0 --init-from "$T/same.safetensors" --run-dir "$T/same" 2>"$T/err" ||
	{ cat "$T/err"; fail "a tied model refused a file whose lm_head.weight is its wte"; }
"$Q" export --run-dir "$T/same" --format safetensors -o "$T/samee/" >/dev/null || fail "export the run from same.safetensors"
cmp "$T/st1/model.safetensors" "$T/samee/model.safetensors" || fail "same.safetensors: the tied export is not the original"
refuse differ.safetensors bad11 "lm_head.weight" "wte.weight" "row 3, column 5" "--tie-embeddings off"
# shellcheck disable=SC2086
"$Q" train $C --tie-embeddings off --steps 1 --ckpt-every 1 --lr 0 --init-from "$T/differ.safetensors" --run-dir "$T/du" \
	2>"$T/err" || { cat "$T/err"; fail "--tie-embeddings off refused a file with its own head"; }
hw=$("$Q" inspect --run-dir "$T/du" --tensor wte | grep -o "xxh3-128 [0-9a-f]*")
hh=$("$Q" inspect --run-dir "$T/du" --tensor lm_head.weight | grep -o "xxh3-128 [0-9a-f]*")
[ -n "$hw" ] && [ -n "$hh" ] && [ "$hw" != "$hh" ] || fail "untied: the file's own head was not loaded ($hh, wte $hw)"
echo "ok: a tied model takes a file's lm_head.weight only when it is its wte; another is refused, creating nothing"
