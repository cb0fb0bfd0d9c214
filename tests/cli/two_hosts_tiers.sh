#!/usr/bin/env bash
# Tiered checkpoints on two simulated hosts (lib/hosts.sh) against s3rver on 127.0.0.1:
#  1. --ckpt-persist-every must be a multiple of --ckpt-every (refused naming both, nothing
#     written);
#  2. train with --ckpt-every 2 --ckpt-async --ckpt-persist-every 4 --ckpt-persist-keep 2
#     --ckpt-keep 2: the first push (step 4) is held before its manifest
#     (QE_CKPT_PERSIST_PAUSE) and the test releases it only after training has snapshot
#     step 12 - a push that stalled training would never get there (structural, no timer);
#     rank 0's --json counts the steps done while it pushed.  The end of training pushes
#     8 and 12, in order.  Then the remote holds exactly the manifests of steps 8 and 12 (4
#     dropped by the remote retention), every chunk they list is there, the catalog records
#     the copy of 12, and the local catalog keeps steps 10 and 12;
#  3. host B loses its stores (R = 0): a resume whose endpoint is unreachable refuses,
#     naming the tensors, rank 1's store on host 'hostB' and S3's error, and loads nothing;
#  4. with the right endpoint (no pull) the restore fetches rank 1's tensors from the pushed
#     copy and the resumed run is bit-exact (`qeffect compare`) against an uninterrupted one;
#     it keeps pushing (--ckpt-persist-every on resume: step 16 appears);
#  5. S3 goes down while a background push is held: training finishes, reports the
#     failure (stderr: step, URL, error; --json persist_failed), exits non-zero saying how
#     many pushes failed and which steps, and every local
#     checkpoint is committed (nothing lost).
# SKIP without node (s3rver) unless QE_S3_REQUIRED=1.
set -u
Q=${1:?usage: two_hosts_tiers.sh QEFFECT [SHARED]}
. "$(dirname "$0")/lib/s3-hosts.sh"
command -v curl >/dev/null || skip "curl is not installed"
command -v python3 >/dev/null || skip "python3 is not installed"
s3_start_server || skip "s3rver 3.7.1 could not be installed or started (see above)"
s3_use_test_credentials
export QE_COMM_TIMEOUT_MS=60000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=two-hosts-tiers-secret
export QE_CKPT_KEEP_GRACE_S=0 QE_CKPT_PERSIST_GRACE_S=0
C="--preset tiny --micro 4 --amax-history 4"
R=s3://qe-test/tiers

# The remote's keys under tiers/ ("KEY SIZE"), listed with curl's own SigV4, not through qeffect.
EMPTY_SHA=$(printf '' | sha256sum | cut -d' ' -f1)
s3ls() {
  curl -s -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER -H "x-amz-content-sha256: $EMPTY_SHA" \
    "$EP/qe-test?list-type=2&max-keys=1000&prefix=tiers%2F" >"$T/ls.xml" || return 1
  python3 - "$T/ls.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = root.tag.split('}')[0] + '}' if root.tag.startswith('{') else ''
assert root.find(ns + 'IsTruncated').text == 'false', 'listing truncated'
for c in sorted(root.findall(ns + 'Contents'), key=lambda c: c.find(ns + 'Key').text):
    print(c.find(ns + 'Key').text, c.find(ns + 'Size').text)
EOF
}
# wait_for FILE PATTERN SECONDS: 0 once FILE has a line matching PATTERN.
wait_for() {
  for _ in $(seq $(($3 * 10))); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
wait_file() { for _ in $(seq $(($2 * 10))); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
committed() { sqlite3 "$1/catalog.db" "select group_concat(step, ' ') from (select step from checkpoints where status='committed' order by step)"; }
json_of() { grep '^{"rank":0' "$1" | tail -1; }
jfield() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(json.dumps(d[sys.argv[2]]))" "$1" "$2"; }

# --- 1. the flags ---------------------------------------------------------------------------
"$Q" train $C --steps 8 --ckpt-every 2 --ckpt-persist-every 3 --remote $R --run-dir "$T/bad" 2>"$T/bad.err"
[ $? -eq 2 ] || fail "--ckpt-persist-every 3 with --ckpt-every 2 is not a usage error"
grep -q -- "--ckpt-persist-every 3 is not a multiple of --ckpt-every 2" "$T/bad.err" || { cat "$T/bad.err"; fail "the refusal does not name both flags"; }
[ ! -e "$T/bad/catalog.db" ] || fail "a refused train wrote a catalog"
"$Q" train $C --steps 8 --ckpt-every 2 --ckpt-persist-every 4 --run-dir "$T/bad" 2>"$T/bad.err"
[ $? -eq 2 ] && grep -q -- "needs --remote" "$T/bad.err" || fail "--ckpt-persist-every without --remote is not refused"
"$Q" resume --help | grep -q -- "--ckpt-persist-every" || fail "resume --help does not mention --ckpt-persist-every"

# --- 2. train: local every 2 (async, keep 2), pushed every 4 (keep 2) --------------------------
"$Q" train $C --quiet --pp 2 --steps 16 --run-dir "$T/ref" || fail "reference run"
(export QE_CKPT_PERSIST_PAUSE="4:$T/pause"; job train "hostA:$T/a hostB:$T/b" train $C --pp 2 --steps 12 --ckpt-every 2 --ckpt-async --ckpt-keep 2 \
  --ckpt-persist-every 4 --ckpt-persist-keep 2 --remote $R --endpoint "$EP" --json --run-dir "$P") &
jobpid=$!
wait_file "$T/pause" 120 || { kill $jobpid; show train; fail "the push of step 4 never reached its manifest"; }
# The push is held; training must go on past it.
wait_for "$T/train.rank0.log" "checkpoint step 12: .* snapshot" 120 \
  || { rm -f "$T/pause"; wait $jobpid; show train; fail "training did not reach step 12 while the push of step 4 was held: the push stalls training"; }
s3ls >"$T/ls0.txt" || fail "listing the remote"
grep -q "checkpoints/.*/4/manifest" "$T/ls0.txt" && fail "the manifest of step 4 is there while its push is held"
rm -f "$T/pause"
wait $jobpid || { show train; fail "two-host training with the persistent tier"; }
grep -q "checkpoint step 12 pushed to s3://qe-test/tiers/checkpoints/.*/12/manifest.json" "$T/train.rank0.log" \
  || { show train; fail "rank 0 did not report the push of step 12"; }
J=$(json_of "$T/train.rank0.log")
[ "$(jfield "$J" persist_pushed)" = "[4, 8, 12]" ] || fail "persist_pushed is $(jfield "$J" persist_pushed), want [4, 8, 12]"
[ "$(jfield "$J" persist_failed)" = "[]" ] || fail "pushes failed: $(jfield "$J" persist_failed)"
w=$(jfield "$J" persist_steps_while_pushing)
[ "$w" -ge 6 ] || fail "rank 0 counted $w training steps while pushing, want at least 6 (steps 7 to 12 ran while step 4 was held)"
s3ls >"$T/ls1.txt" || fail "listing the remote"
steps=$(grep -o 'checkpoints/[^/]*/[0-9]*/manifest.json' "$T/ls1.txt" | cut -d/ -f3 | sort -n | tr '\n' ' ')
[ "$steps" = "8 12 " ] || { cat "$T/ls1.txt"; fail "the remote holds manifests of steps '$steps', want '8 12 ' (persist every 4, keep 2)"; }
# every chunk the remaining manifests list is on the remote with its size
for m in $(grep -o 'tiers/checkpoints/[^ ]*manifest.json' "$T/ls1.txt"); do
  curl -s -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER -H "x-amz-content-sha256: $EMPTY_SHA" \
    "$EP/qe-test/$m" >"$T/m.json" || fail "fetching $m"
  cp "$T/m.json" "$T/m$(cut -d/ -f4 <<<"$m").json"
  python3 - "$T/m.json" "$T/ls1.txt" <<'EOF' || fail "manifest $m lists chunks the remote lacks"
import json, sys
m = json.load(open(sys.argv[1]))
have = dict(l.split() for l in open(sys.argv[2]))
for t in m['tensors']:
    for c in t['chunks']:
        k = 'tiers/chunks/' + c['hash']
        assert have.get(k) == str(c['size']), (k, c['size'], have.get(k))
EOF
done
# the remote retention (grace 0 here) left no chunk that no remaining manifest lists
python3 - "$T/ls1.txt" "$T"/m8.json "$T"/m12.json <<'EOF' || fail "the remote keeps chunks no manifest lists (retention did not collect step 4's)"
import json, sys
listed = {l.split()[0] for l in open(sys.argv[1]) if l.startswith('tiers/chunks/')}
ref = {'tiers/chunks/' + c['hash'] for f in sys.argv[2:] for t in json.load(open(f))['tensors'] for c in t['chunks']}
assert listed == ref, (len(listed), len(ref))
EOF
[ "$(jfield "$J" keep_chunks_deleted)" -gt 0 ] || fail "--ckpt-keep deleted no chunk from rank 0's store"
n=$(sqlite3 "$T/a/catalog.db" "select group_concat(c.step) from remotes r join checkpoints c on c.id = r.checkpoint_id")
[ "$n" = 12 ] || fail "the catalog records pushed copies of steps '$n', want '12' (10 was never due; 8 was dropped locally)"
[ "$(committed "$T/a")" = "10 12" ] || fail "local checkpoints are '$(committed "$T/a")', want '10 12' (--ckpt-keep 2)"
echo "ok: pushed 4, 8, 12 in the background ($w steps while pushing); remote keeps 8 12; local keeps 10 12"

# --- 3. host B lost its stores; S3 unreachable: refused --------------------------------------
rm -rf "$T/b/stores"
dead="http://127.0.0.1:$(free_port)"
job dead "hostA:$T/a hostB:$T/b" resume --run-dir "$P" --from 12 --steps 16 --quiet --endpoint "$dead" \
  && fail "resume with host B's stores lost and S3 unreachable succeeded"
err=$(cat "$T"/dead.rank*.log)
grep -q "cannot be restored, nothing loaded" <<<"$err" || { echo "$err"; fail "the refusal does not say nothing was loaded"; }
grep -q "of rank 1 on host 'hostB'" <<<"$err" || { echo "$err"; fail "the refusal does not name rank 1's store on hostB"; }
grep -q "the pushed copy s3://qe-test/tiers/checkpoints/.*/12/manifest.json cannot serve it either (.*Couldn't connect.*127.0.0.1" <<<"$err" \
  || { echo "$err"; fail "the refusal does not give S3's error"; }
[ "$(committed "$T/a")" = "10 12" ] || fail "a refused resume changed the catalog: $(committed "$T/a")"
echo "ok: S3 unreachable: refused naming rank 1's store on hostB and the S3 error"

# --- 4. the same with S3 reachable: rank 1's tensors come from the pushed copy ----------------
job s3 "hostA:$T/a hostB:$T/b" resume --run-dir "$P" --from 12 --steps 16 --quiet --endpoint "$EP" \
  --ckpt-persist-every 4 --remote $R || { show s3; fail "resume falling back to the pushed copy"; }
s3ls >"$T/ls2.txt" || fail "listing the remote"
grep -q "checkpoints/.*/16/manifest.json" "$T/ls2.txt" || fail "the resumed job did not push step 16 (--ckpt-persist-every on resume)"
grep -q "fetched .* from s3://qe-test/tiers" "$T/s3.rank1.log" || { show s3; fail "rank 1 did not fetch from S3"; }
out=$("$Q" compare "$T/ref" "$T/a") || { echo "$out"; fail "the run resumed from S3 differs from the uninterrupted one"; }
echo "ok: host B lost its stores; restore fetched its tensors from S3 and resumed bit-exact: $(tail -1 <<<"$out")"

# --- 5. S3 goes down during a background push --------------------------------------------------
export QE_S3_RETRIES=1 QE_S3_BACKOFF_MS=50
(export QE_CKPT_PERSIST_PAUSE="4:$T/pause2"; job down "hostA:$T/c hostB:$T/d" train $C --pp 2 --steps 8 \
  --ckpt-every 2 --ckpt-persist-every 4 --remote s3://qe-test/down --endpoint "$EP" --json --run-dir "$P") &
jobpid=$!
wait_file "$T/pause2" 120 || { kill $jobpid; show down; fail "the push of step 4 never reached its manifest"; }
bash "$(dirname "$0")/../../scripts/s3-test-env.sh" stop "$PID" >/dev/null 2>&1
PID=""
rm -f "$T/pause2"
wait $jobpid && { show down; fail "the run exited 0 although its background pushes failed"; }
grep -Eq "[0-9]+ background push(es)? to s3://qe-test/down failed \(steps? 4[,)]" "$T/down.rank0.log" \
  || { show down; fail "the run's end does not say how many background pushes failed and which steps"; }
grep -q "the background push of checkpoint step 4 to s3://qe-test/down failed: .*127.0.0.1" "$T/down.rank0.log" \
  || { show down; fail "the failed push is not reported with its step, URL and error"; }
J=$(json_of "$T/down.rank0.log")
python3 -c "import json,sys; f=json.loads(sys.argv[1])['persist_failed']; assert f and f[0]['step']==4 and 's3://qe-test/down' in f[0]['url'] and f[0]['error'], f" "$J" \
  || fail "--json does not report the failed push: $(jfield "$J" persist_failed)"
[ "$(committed "$T/c")" = "2 4 6 8" ] || fail "local checkpoints are '$(committed "$T/c")', want '2 4 6 8': a failed push lost data"
n=$(sqlite3 "$T/c/catalog.db" "select count(*) from remotes")
[ "$n" = 0 ] || fail "the catalog records $n pushed copies although every push failed"
echo "ok: S3 down during a background push: training finished, the failure was reported, the exit was non-zero, every local checkpoint kept"
