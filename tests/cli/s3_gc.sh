#!/usr/bin/env bash
# Retention on the remote side, `qeffect gc --remote`, against s3rver 3.7.1
# on 127.0.0.1 (scripts/s3-test-env.sh installs and starts it):
#  1. 4 checkpoints pushed; a dry run of --keep-last 2 --pin <oldest> reports
#     one manifest and its chunks to drop and changes nothing (listing and
#     catalog identical);
#  2. the real run with the default grace deletes the manifest (and the local
#     catalog's record of that copy) but leaves the just-pushed chunks as young;
#     with --grace 0 the same chunks the dry run counted go, bytes reclaimed > 0;
#     the kept manifests remain, the dropped one is gone, every chunk each
#     remaining manifest lists is there with its size (checked from a listing
#     and the manifests fetched with curl, not through qeffect);
#  3. the pinned oldest checkpoint pulls and resumes byte-exact; the dropped
#     one cannot be pulled;
#  4. orphan chunks (uploaded with curl, no manifest) older than the grace are
#     collected, young ones survive until a later gc, other objects under the
#     prefix are never touched;
#  5. an unreadable manifest stops gc before anything is deleted.
# Without node/npm it prints SKIP and passes, unless QE_S3_REQUIRED=1.
set -u
Q=${1:?usage: s3_gc.sh QEFFECT [SHARED]}
Q=$(readlink -f "$Q")
. "$(dirname "$0")/../../scripts/s3-test-lib.sh"
command -v curl >/dev/null || skip "curl is not installed"
command -v python3 >/dev/null || skip "python3 is not installed"
s3_start_server || skip "s3rver 3.7.1 could not be installed or started"
echo "s3rver on $EP (pid $PID)"
s3_use_test_credentials
export QE_CKPT_CHUNK_BYTES=65536 # about 50 chunks a checkpoint
cd "$T"
R=s3://qe-test/g1

# Raw S3 requests through curl's own SigV4, independent of our client.
EMPTY_SHA=$(printf '' | sha256sum | cut -d' ' -f1)
s3curl() { # METHOD PATH [FILE]
  if [ -n "${3:-}" ]; then
    curl -s -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER \
      -H "x-amz-content-sha256: $(sha256sum "$3" | cut -d' ' -f1)" -X "$1" -T "$3" "$EP/$2"
  else
    curl -s -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER -H "x-amz-content-sha256: $EMPTY_SHA" -X "$1" "$EP/$2"
  fi
}
# "KEY SIZE" lines of everything under g1/, sorted (one page: the test stays below 1000 objects).
s3ls() {
  s3curl GET "qe-test?list-type=2&max-keys=1000&prefix=g1%2F" >ls.xml || return 1
  python3 - ls.xml <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = root.tag.split('}')[0] + '}' if root.tag.startswith('{') else ''
assert root.find(ns + 'IsTruncated').text == 'false', 'listing truncated'
rows = sorted((c.find(ns + 'Key').text, c.find(ns + 'Size').text) for c in root.findall(ns + 'Contents'))
for k, s in rows:
    print(k, s)
EOF
}
jget() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
nchunks() { grep -c '^g1/chunks/' "$1"; }
remotes() { sqlite3 A/catalog.db "select count(*) from remotes"; }
put_orphan() { # NAME: random bytes under chunks/NAME
  head -c $((1000 + RANDOM)) /dev/urandom >orphan.bin
  s3curl PUT "qe-test/g1/chunks/$1" orphan.bin >/dev/null || fail "uploading orphan $1 with curl"
}

"$Q" gc --remote $R --endpoint "$EP" 2>/dev/null; [ $? -eq 2 ] || fail "gc --remote without --keep-last is not a usage error"
"$Q" gc --help | grep -q -- '--remote' || fail "gc --help does not mention --remote"

# --- 1. four checkpoints pushed, a dry run --------------------------------------------------
"$Q" train --preset tiny --pp 2 --micro 4 --steps 8 --ckpt-every 2 --run-dir A --quiet || fail "training A"
"$Q" push --run-dir A --remote $R --endpoint "$EP" --all --quiet || fail "push --all"
s3ls >ls0.txt || fail "listing with curl"
[ "$(grep -c 'manifest.json ' ls0.txt)" = 4 ] || fail "4 manifests expected after push --all: $(grep manifest ls0.txt)"
[ "$(remotes)" = 4 ] || fail "the catalog records $(remotes) pushed copies, want 4"
echo "pushed: 4 manifests, $(nchunks ls0.txt) chunks"
"$Q" gc --remote $R --endpoint "$EP" --run-dir A --keep-last 2 --pin 2 --grace 0 --dry-run --json >dry.json \
  || fail "dry run"
[ "$(jget dry.json dropped)" = 1 ] && [ "$(jget dry.json kept)" = 3 ] || { cat dry.json; fail "dry run: want 1 dropped, 3 kept"; }
python3 - dry.json <<'EOF' || fail "dry run: not step 4 dropped"
import json, sys
d = json.load(open(sys.argv[1]))
drop = [c['step'] for c in d['checkpoints'] if c['dropped']]
assert drop == [4], drop
assert d['catalog_rows'] == 1, d['catalog_rows']
EOF
dry_del=$(jget dry.json chunks_deleted)
dry_bytes=$(jget dry.json bytes_reclaimed)
[ "$dry_del" -gt 0 ] && [ "$dry_bytes" -gt 0 ] || fail "dry run: $dry_del chunks, $dry_bytes bytes would go"
s3ls >ls1.txt
cmp -s ls0.txt ls1.txt || fail "the dry run changed the remote"
[ "$(remotes)" = 4 ] || fail "the dry run changed the catalog"
echo "dry run: would drop step 4, $dry_del chunks, $dry_bytes bytes; nothing changed"

# --- 2. the real run: default grace, then --grace 0 ----------------------------------------
"$Q" gc --remote $R --endpoint "$EP" --run-dir A --keep-last 2 --pin 2 --json >gc1.json || fail "gc (default grace)"
[ "$(jget gc1.json dropped)" = 1 ] && [ "$(jget gc1.json chunks_deleted)" = 0 ] \
  && [ "$(jget gc1.json chunks_young)" = "$dry_del" ] || { cat gc1.json; fail "gc with the default grace"; }
[ "$(remotes)" = 3 ] || fail "the catalog still records $(remotes) copies, want 3"
[ "$(sqlite3 A/catalog.db "select count(*) from remotes r join checkpoints c on c.id = r.checkpoint_id where c.step = 4")" = 0 ] \
  || fail "the catalog still records the dropped copy of step 4"
"$Q" gc --remote $R --endpoint "$EP" --keep-last 2 --pin 2 --grace 0 --json >gc2.json || fail "gc --grace 0"
cat gc2.json | grep -E '"(dropped|kept|chunks_listed|chunks_referenced|chunks_deleted|chunks_missing|bytes_reclaimed|chunk_bytes_deleted)"'
[ "$(jget gc2.json dropped)" = 0 ] && [ "$(jget gc2.json chunks_deleted)" = "$dry_del" ] \
  && [ "$(jget gc2.json chunks_missing)" = 0 ] || fail "gc --grace 0 did not delete the $dry_del chunks the dry run counted"
man_bytes=$(grep 'g1/checkpoints/.*/4/manifest.json ' ls0.txt | cut -d' ' -f2)
[ "$(jget gc2.json chunk_bytes_deleted)" -gt 0 ] \
  && [ $(( $(jget gc2.json bytes_reclaimed) + man_bytes )) = "$dry_bytes" ] || fail "bytes reclaimed disagree with the dry run"
s3ls >ls2.txt
grep manifest.json ls2.txt | sed 's#.*/\([0-9]*\)/manifest.json .*#\1#' | sort -n | tr '\n' ' ' >steps.txt
[ "$(cat steps.txt)" = "2 6 8 " ] || fail "manifests left: $(cat steps.txt), want 2 6 8"
[ $(( $(nchunks ls0.txt) - $(nchunks ls2.txt) )) = "$dry_del" ] || fail "listing: $(nchunks ls0.txt) -> $(nchunks ls2.txt) chunks"
for key in $(grep manifest.json ls2.txt | cut -d' ' -f1); do
  s3curl GET "qe-test/$key" >m.json || fail "fetching $key"
  python3 - m.json ls2.txt <<'EOF' || fail "$key lists chunks that are gone"
import json, sys
listed = dict(l.split() for l in open(sys.argv[2]))
m = json.load(open(sys.argv[1]))
need = {c['hash']: c['size'] for t in m['tensors'] for c in t['chunks']}
bad = [h for h, s in need.items() if listed.get('g1/chunks/' + h) != str(s)]
assert not bad, bad[:5]
EOF
done
echo "gc: dropped step 4; $(jget gc2.json chunks_deleted) chunks, $(jget gc2.json bytes_reclaimed) bytes reclaimed; every chunk of steps 2 6 8 present"

# --- 3. the pinned oldest checkpoint resumes ---------------------------------------------------
"$Q" pull --run-dir B --remote $R --endpoint "$EP" --step 2 --quiet || fail "pull of the pinned step 2"
"$Q" resume --run-dir B --steps 8 --quiet || fail "resume of step 2"
"$Q" compare A B --steps 3:8 >cmp.txt || { cat cmp.txt; fail "step 2 pulled after gc resumes differently"; }
echo "pull + resume of step 2: $(tail -1 cmp.txt)"
"$Q" pull --run-dir C --remote $R --endpoint "$EP" --step 4 2>err.txt && fail "pulled the dropped step 4"
grep -q "no checkpoint at step 4" err.txt || { cat err.txt; fail "pull of the dropped step: unclear error"; }

# --- 4. orphans and the grace period ---------------------------------------------------------------
printf 'not ours' >note.txt
s3curl PUT "qe-test/g1/notes/readme.txt" note.txt >/dev/null || fail "uploading a foreign object"
for h in 0000000000000000000000000000000a 0000000000000000000000000000000b 0000000000000000000000000000000c; do
  put_orphan $h
done
sleep 3
put_orphan ffffffffffffffffffffffffffffff01
put_orphan ffffffffffffffffffffffffffffff02
"$Q" gc --remote $R --endpoint "$EP" --keep-last 2 --pin 2 --grace 2 --json >gc3.json || fail "gc of orphans"
[ "$(jget gc3.json dropped)" = 0 ] && [ "$(jget gc3.json chunks_deleted)" = 3 ] && [ "$(jget gc3.json chunks_young)" = 2 ] \
  || { cat gc3.json; fail "want 3 old orphans deleted, 2 young kept"; }
s3ls >ls3.txt
grep -q 'g1/chunks/0000000000000000000000000000000[abc] ' ls3.txt && fail "an old orphan survived"
[ "$(grep -c 'g1/chunks/ffffffffffffffffffffffffffffff0[12] ' ls3.txt)" = 2 ] || fail "a young orphan was deleted"
sleep 2
"$Q" gc --remote $R --endpoint "$EP" --keep-last 2 --pin 2 --grace 1 --json >gc4.json || fail "second gc of orphans"
[ "$(jget gc4.json chunks_deleted)" = 2 ] && [ "$(jget gc4.json chunks_young)" = 0 ] || { cat gc4.json; fail "the young orphans were not collected later"; }
s3ls >ls4.txt
grep -q ' g1/chunks/ffff\|^g1/chunks/ffff' ls4.txt && fail "young orphans left after the later gc"
grep -q '^g1/notes/readme.txt ' ls4.txt || fail "gc deleted an object that is not a chunk"
diff <(grep -v '^g1/notes/' ls4.txt) ls2.txt >/dev/null || fail "gc of orphans touched checkpoint objects"
echo "orphans: 3 old deleted, 2 young kept then deleted later, foreign object untouched"

# --- 5. an unreadable manifest stops gc ----------------------------------------------------------------
put_orphan 0000000000000000000000000000000d
printf '{"format":"something else"}' >bad.json
s3curl PUT "qe-test/g1/checkpoints/bad/1/manifest.json" bad.json >/dev/null || fail "uploading a bad manifest"
sleep 1
"$Q" gc --remote $R --endpoint "$EP" --keep-last 1 --grace 0 2>bad.err; st=$?
[ $st = 1 ] && grep -q "QE_ECORRUPT" bad.err && grep -q "nothing was deleted" bad.err || { cat bad.err; fail "bad manifest: exit $st"; }
s3ls >ls5.txt
grep -q '^g1/chunks/0000000000000000000000000000000d ' ls5.txt || fail "gc deleted an orphan despite an unreadable manifest"
[ "$(grep -c 'manifest.json ' ls5.txt)" = 4 ] || fail "gc deleted a manifest despite an unreadable one"
echo "unreadable manifest: gc refused, nothing deleted"
echo ok
