#!/usr/bin/env bash
# Tied embeddings (issue 37, item 4) on a 2-layer GPT-2 shape (--layers 2 --hidden 128 --heads 4, the
# GPT-2 vocabulary); the gradient arithmetic itself is tests/exec/test_tie.c.
#  1. the gpt2 preset ties by default and says so in its run config; --tie-embeddings off unties it;
#  2. tied runs are byte-identical under --pp 1, --pp 2, --backward full (split == reference) and
#     --exec graph, and so are untied runs; tied and untied runs differ;
#  3. --dp 2 with --pp 2 (wte and head on different ranks of each replica) equals --dp 2 with --pp 1,
#     with the copies checked after the last step (--check-replicas, the default);
#  4. the checkpoint's wte.weight and lm_head.weight, and their moments, are the same bytes
#     (inspect --tensor's hash); for an untied run they differ;
#  5. a tied run resumed from step 2 to 4 equals the uninterrupted run, at a new mapping too; a
#     resume that asks for --tie-embeddings off is refused, naming the flag; an untied run resumed
#     with --preset gpt2 stays untied.
set -u
Q=${1:?usage: tied_embeddings.sh QEFFECT SHARED}
S=${2:?usage: tied_embeddings.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset gpt2 --layers 2 --hidden 128 --heads 4 --seq 32 --micro 2 --amax-history 4 --steps 4 --data $S/data/brown.jsonl --quiet"
run() { # NAME FLAGS...
  local n=$1; shift
  # shellcheck disable=SC2086
  "$Q" train $C "$@" --run-dir "$T/$n" >"$T/$n.out" 2>&1 || { cat "$T/$n.out"; fail "train $n"; }
}
same() { out=$("$Q" compare "$T/$1" "$T/$2" 2>&1) || { echo "$out" | tail -3; fail "$1 and $2 differ"; }; }
hash_of() { "$Q" inspect --run-dir "$T/$1" --tensor "$2" 2>&1 | sed -n 's/.*xxh3-128 \([0-9a-f]*\).*/\1/p'; }

# 1.
run t1 --pp 1 --ckpt-every 4
run u1 --pp 1 --tie-embeddings off --ckpt-every 4
python3 - "$T/t1" "$T/u1" <<'EOF' || fail "the run config's model.tie_embeddings"
import glob, json, sqlite3, sys
def tie(d):
    db = sqlite3.connect(glob.glob(d + "/catalog.db")[0])
    for (cfg,) in db.execute("SELECT config_json FROM runs"):
        return json.loads(cfg)["model"]["tie_embeddings"]
assert tie(sys.argv[1]) is True and tie(sys.argv[2]) is False, (tie(sys.argv[1]), tie(sys.argv[2]))
EOF
echo "ok: --preset gpt2 ties by default; --tie-embeddings off does not"

# 2.
run t2 --pp 2
run tf --pp 2 --backward full
run tg --pp 1 --exec graph
run u2 --pp 2 --tie-embeddings off
for x in t2 tf tg; do same t1 $x; done
same u1 u2
! "$Q" compare "$T/t1" "$T/u1" >/dev/null 2>&1 || fail "tied and untied runs have the same bytes"
echo "ok: tied runs identical under pp1, pp2, --backward full, graph; untied pp1 == pp2; tied != untied"

# 3.
run td1 --pp 1 --dp 2 --nproc 2
run td2 --pp 2 --dp 2 --nproc 4
same td1 td2
! "$Q" compare "$T/t1" "$T/td1" >/dev/null 2>&1 || fail "--dp 2 gave the one-replica bytes"
echo "ok: --dp 2: --pp 2 == --pp 1, copies checked"

# 4.
for t in wte.weight wte.weight.exp_avg wte.weight.exp_avg_sq; do
  h=${t/wte/lm_head}
  a=$(hash_of t1 "$t"); b=$(hash_of t1 "$h")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "tied run: $t $a, $h $b"
done
[ "$(hash_of u1 wte.weight)" != "$(hash_of u1 lm_head.weight)" ] || fail "the untied run's wte and head are the same bytes"
echo "ok: the tied checkpoint's wte and lm_head (and moments) are the same bytes; untied ones differ"

# 5.
# shellcheck disable=SC2086
"$Q" train ${C/--steps 4/--steps 2} --pp 1 --ckpt-every 2 --run-dir "$T/h" >/dev/null 2>&1 || fail "first half"
"$Q" resume --run-dir "$T/h" --steps 4 --pp 2 --quiet >"$T/h.out" 2>&1 || { cat "$T/h.out"; fail "resume at --pp 2"; }
same t1 h
err=$("$Q" resume --run-dir "$T/h" --steps 6 --tie-embeddings off 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--tie-embeddings off conflicts with the run" <<<"$err" || { echo "$err"; fail "resume --tie-embeddings off: rc $rc"; }
# shellcheck disable=SC2086
"$Q" train ${C/--steps 4/--steps 2} --tie-embeddings off --ckpt-every 2 --run-dir "$T/uh" >/dev/null 2>&1 || fail "untied first half"
"$Q" resume --run-dir "$T/uh" --steps 4 --preset gpt2 --layers 2 --hidden 128 --heads 4 --seq 32 --quiet \
  >"$T/uh.out" 2>&1 || { cat "$T/uh.out"; fail "untied resume with --preset gpt2"; }
same u1 uh
echo "ok: resume 2 -> 4 (pp 1 -> 2) exact; --tie-embeddings off refused: $(head -1 <<<"$err" | cut -c1-100)"
