#!/usr/bin/env bash
# verify, gc, push and pull as 2-host jobs (ckpt/query/ckpt_job.h), on the simulated hosts of
# lib/hosts.sh: each host a mount namespace binding its own folder at one path, ranks started
# with the torchrun variables and the same command line.  After a two-host train with
# --ckpt-every:
#  1. verify (job) is clean; a chunk damaged in host B's store only is reported naming rank 1
#     and host B, and verify exits 1; host A alone (no job) cannot see that store;
#     a store that cannot be opened, and a rank killed during the job (QE_JOB_KILL), are
#     named the same way;
#  2. push (job) uploads each host's chunks from that host and writes one manifest carrying
#     the rows; pull (job) into two fresh hosts lands each rank's chunks in its own store
#     (stores/rank-R on its host, none in RUN/store) and the catalog on host A only; the
#     pulled run resumes bit-exact against the uninterrupted one (qeffect compare); a pull
#     without a launcher fills stores/rank-0, not the old shared RUN/store; after host B
#     loses its store, the same pull job refills it (recorded as copies) and the run resumes;
#  3. gc (job) after a resume to step 9 with --keep-last 1 drops two checkpoints and deletes
#     their chunks on both hosts; verify (job) then finds one intact checkpoint and no orphans.
# The S3 parts run against s3rver as the other S3 tests (SKIP without node unless
# QE_S3_REQUIRED=1).  unshare needs root; if it is refused the test fails rather than skipping.
set -u
Q=${1:?usage: two_hosts_jobs.sh QEFFECT [SHARED]}
. "$(dirname "$0")/lib/s3-hosts.sh"
export QE_COMM_TIMEOUT_MS=60000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=two-hosts-jobs-secret
C="--preset tiny --micro 4 --amax-history 4 --quiet"
AB="hostA:$T/a hostB:$T/b"

"$Q" train $C --pp 2 --steps 6 --run-dir "$T/ref" || fail "reference run"
job train "$AB" train $C --pp 2 --steps 6 --ckpt-every 3 --run-dir "$P" || { show train; fail "two-host training"; }
[ -f "$T/b/stores/rank-1/data.mdb" ] && [ ! -e "$T/b/catalog.db" ] || fail "layout: rank 1's store on host B, no catalog there"
"$Q" verify --help | grep -q -- "--nproc" || fail "verify --help does not describe the job form"

# --- 1. verify as a job --------------------------------------------------------------------
job v0 "$AB" verify --run-dir "$P" --json || { show v0; fail "verify (job) of an intact two-host run"; }
python3 - "$T/v0.rank0.log" <<'PY' || { cat "$T/v0.rank0.log"; fail "verify (job) did not check both hosts' stores"; }
import json, sys
d = json.load(open(sys.argv[1]))
hosts = {s["host"]: s for s in d["stores"]}
assert d["ok"] and d["ranks"] == 2, d
assert hosts["hostB"]["checked_by"] == 1 and hosts["hostB"]["chunks"] > 0, hosts
assert hosts["hostA"]["checked_by"] == 0 and hosts["hostA"]["chunks"] > 0, hosts
PY
[ ! -s "$T/v0.rank1.log" ] || { cat "$T/v0.rank1.log"; fail "rank 1 of verify printed something: only rank 0 reports"; }
echo "verify (job): $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['chunks'], 'chunks re-hashed on', len(d['stores']), 'stores')" "$T/v0.rank0.log")"

# damage one chunk of rank 1's store on host B only
cp -a "$T/b" "$T/b-intact"
# (dump the LMDB store, flip one hex digit in the body of its first chunk, load it back)
mdb_dump -a "$T/b/stores/rank-1" >"$T/dump.txt" || fail "mdb_dump of host B's store"
python3 - "$T/dump.txt" <<'PY' || fail "could not damage host B's store"
import sys
p = sys.argv[1]
lines = open(p).read().split('\n')
i = lines.index('database=chunks')
while lines[i] != 'HEADER=END':
    i += 1
v = i + 2                    # key line, then its value line; values start with a 16-byte header
pos = 1 + 2 * 16 + 40
c = lines[v][pos]
lines[v] = lines[v][:pos] + ('0' if c != '0' else '1') + lines[v][pos + 1:]
open(p, 'w').write('\n'.join(lines))
PY
mkdir "$T/reload" && mdb_load -f "$T/dump.txt" "$T/reload" 2>/dev/null && cp "$T/reload/data.mdb" "$T/b/stores/rank-1/data.mdb" \
  || fail "could not write the damaged store back"
job v1 "$AB" verify --run-dir "$P"; st=$?
[ "$st" -ne 0 ] || { show v1; fail "verify (job) passed with a damaged chunk on host B"; }
[ "$(cat "$T"/v1.rank0.log | grep -c '^BAD')" -ge 1 ] || { show v1; fail "verify (job) printed no fault"; }
grep '^BAD' "$T/v1.rank0.log" | grep -q "store of rank 1 on host 'hostB'" \
  || { cat "$T/v1.rank0.log"; fail "the fault does not name rank 1 and host B"; }
if grep '^BAD' "$T/v1.rank0.log" | grep -q "host 'hostA'"; then cat "$T/v1.rank0.log"; fail "a fault blamed host A"; fi
# exit status 1 (faults) on rank 0, 0 on rank 1: the statuses of the two processes
port=$(free_port)
on hostA "$T/a" 0 2 "$port" "$T/v2.rank0.log" verify --run-dir "$P" & p0=$!
sleep 0.3
on hostB "$T/b" 1 2 "$port" "$T/v2.rank1.log" verify --run-dir "$P" & p1=$!
wait $p0; s0=$?; wait $p1; s1=$?
[ "$s0" -eq 1 ] && [ "$s1" -eq 0 ] || { show v2; fail "verify (job) with a fault: rank 0 must exit 1 (got $s0), rank 1 0 (got $s1)"; }
echo "verify (job), damaged chunk on host B: $(grep '^BAD' "$T/v1.rank0.log" | head -1 | cut -c1-200)..."
rm -rf "$T/b"; mv "$T/b-intact" "$T/b"

# a rank that cannot open its store: named with its host, exit 1
cp -a "$T/b" "$T/b-intact"
rm -f "$T/b/stores/rank-1/data.mdb" && mkdir "$T/b/stores/rank-1/data.mdb"
if job v3 "$AB" verify --run-dir "$P"; then show v3; fail "verify (job) passed although host B's store cannot be opened"; fi
grep -q "rank 1 on host 'hostB'" "$T/v3.rank0.log" || { show v3; fail "the unreadable store's rank and host are not named"; }
echo "verify (job), host B's store unreadable: $(grep -o "rank 1 on host 'hostB'[^(]*" "$T/v3.rank0.log" | head -1 | cut -c1-160)"
rm -rf "$T/b"; mv "$T/b-intact" "$T/b"

# a rank that dies in the middle of the job: rank 0 names it and its host, exit 1
if QE_JOB_KILL=verify:1 job v4 "$AB" verify --run-dir "$P"; then show v4; fail "verify (job) passed although rank 1 died"; fi
grep -q "rank 1 on host 'hostB' did not answer" "$T/v4.rank0.log" || { show v4; fail "the dead rank and its host are not named"; }
echo "verify (job), rank 1 killed: $(grep -o "rank 1 on host 'hostB' did not answer.*" "$T/v4.rank0.log" | head -1 | cut -c1-160)"

# --- 2. push and pull as jobs -------------------------------------------------------------------
if s3_start_server; then
  s3_use_test_credentials
  R=s3://qe-test/jobs
  job push "$AB" push --run-dir "$P" --remote $R --endpoint "$EP" --step 3 --json \
    || { show push; fail "push (job) of step 3"; }
  grep -q '"step":3' "$T/push.rank0.log" || { show push; fail "push (job) reported nothing"; }
  python3 - "$T/s3data" <<'PY' || fail "the manifest does not carry both ranks' rows with their stores"
import json, sys, glob, os
m = [f for f in glob.glob(sys.argv[1] + "/**/*", recursive=True) if "manifest.json" in f and os.path.isfile(f) and not f.endswith("._S3rver_metadata.json")]
d = None
for f in m:
    try:
        d = json.load(open(f)); break
    except Exception:
        pass
assert d, m
stores = {t["store"][:3] for t in d["tensors"]}
assert {"r0-", "r1-"} <= stores, stores
PY
  job pull "hostA:$T/pa hostB:$T/pb" pull --run-dir "$P" --remote $R --endpoint "$EP" --step 3 --json \
    || { show pull; fail "pull (job) into two fresh hosts"; }
  [ -f "$T/pa/catalog.db" ] && [ ! -e "$T/pb/catalog.db" ] || fail "pull (job): the catalog must be on host A only"
  [ -f "$T/pa/stores/rank-0/data.mdb" ] && [ -f "$T/pb/stores/rank-1/data.mdb" ] && [ ! -e "$T/pa/store" ] \
    && [ ! -e "$T/pb/store" ] && [ ! -e "$T/pa/stores/rank-1" ] || { ls -R "$T/pa" "$T/pb"; fail "pull (job): chunks must land in each rank's own store"; }
  job pv "hostA:$T/pa hostB:$T/pb" verify --run-dir "$P" || { show pv; fail "verify (job) of the pulled run"; }
  # host B loses its store; the same pull (job) again fetches only host B's tensors, into a new
  # store there, recorded as copies, and the run is whole again
  rm -rf "$T/pb/stores"
  job pull2 "hostA:$T/pa hostB:$T/pb" pull --run-dir "$P" --remote $R --endpoint "$EP" --step 3 --json \
    || { show pull2; fail "pull (job) after host B lost its store"; }
  grep -q '"up_to_date":false' "$T/pull2.rank0.log" && [ -f "$T/pb/stores/rank-1/data.mdb" ] \
    || { show pull2; ls -R "$T/pb"; fail "pull (job) did not refill host B's store"; }
  job pv2 "hostA:$T/pa hostB:$T/pb" verify --run-dir "$P" || { show pv2; fail "verify (job) after the second pull"; }
  job pres "hostA:$T/pa hostB:$T/pb" resume --run-dir "$P" --steps 6 --quiet || { show pres; fail "resume of the pulled run"; }
  grep -q "served" "$T"/pres.rank*.log && { show pres; fail "the pulled run's ranks had to send each other their tensors"; }
  out=$("$Q" compare "$T/ref" "$T/pa" --steps 4:6) || { echo "$out"; fail "the pulled run resumed differently from the uninterrupted one"; }
  echo "push + pull (jobs) + resume: $(tail -1 <<<"$out")"
  # the one-process pull lands in rank 0's store, not in the old shared RUN/store
  "$Q" pull --run-dir "$T/one" --remote $R --endpoint "$EP" --step 3 --quiet || fail "pull (one process)"
  [ -f "$T/one/stores/rank-0/data.mdb" ] && [ ! -e "$T/one/store" ] || { ls -R "$T/one"; fail "pull (one process) must fill stores/rank-0"; }
  "$Q" verify --run-dir "$T/one" >/dev/null || fail "verify of the one-process pull"
else
  [ "${QE_S3_REQUIRED:-0}" = 1 ] && fail "s3rver could not be started (QE_S3_REQUIRED=1)"
  echo "SKIP (part 2): s3rver could not be installed or started: push/pull jobs not checked"
fi

# --- 3. gc as a job: chunks of dropped checkpoints on both hosts -----------------------------------
job more "$AB" resume --run-dir "$P" --steps 9 --quiet || { show more; fail "resume to step 9"; }
job g "$AB" gc --run-dir "$P" --keep-last 1 --grace 0 --json || { show g; fail "gc (job)"; }
python3 - "$T/g.rank0.log" <<'PY' || { cat "$T/g.rank0.log"; fail "gc (job) did not collect on both hosts"; }
import json, sys
t = open(sys.argv[1]).read()
d = json.loads(t[t.index("\n{") + 1 if not t.startswith("{") else 0:])  # past the ranks' log lines
assert d["dropped"] == 2, d["dropped"]
per = {s["host"]: s for s in d["stores"]}
assert per["hostA"]["deleted"] > 0 and per["hostB"]["deleted"] > 0, per
assert per["hostB"]["rank"] == 1 and per["hostA"]["rank"] == 0, per
PY
job gv "$AB" verify --run-dir "$P" --json || { show gv; fail "verify (job) after gc"; }
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['ok'] and d['orphans']==0 and d['checkpoints']==1 else 1)" "$T/gv.rank0.log" \
  || { cat "$T/gv.rank0.log"; fail "after gc (job): one checkpoint, intact, no orphans left on either host"; }
echo "gc (job): $(python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.index(chr(10)+'{')+1 if not t.startswith('{') else 0:]); print('; '.join('%s deleted %d chunks' % (s['host'], s['deleted']) for s in d['stores']))" "$T/g.rank0.log")"
echo "ok: verify, gc, push and pull as two-host jobs"
