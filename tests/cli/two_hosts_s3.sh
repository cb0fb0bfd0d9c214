#!/usr/bin/env bash
# A host loses its store after a commit, and the run was pushed: on two simulated hosts
# (lib/hosts.sh), `resume --remote` pulls on rank 0 what no store of its host holds, and the
# restore serves those chunks to the ranks that load them - bit-exact against the
# uninterrupted run.  Without --remote the same resume is refused (two_hosts.sh checks the
# message).  Against s3rver on 127.0.0.1, as the other S3 tests (SKIP without node unless
# QE_S3_REQUIRED=1).
# The push here is the one-process form from a copy of host A's folder that also holds host
# B's store (two_hosts_jobs.sh pushes as a two-host job).
set -u
Q=${1:?usage: two_hosts_s3.sh QEFFECT [SHARED]}
. "$(dirname "$0")/lib/s3-hosts.sh"
if ! s3_start_server; then
  skip "s3rver 3.7.1 could not be installed or started (see above)"
fi
s3_use_test_credentials
export QE_COMM_TIMEOUT_MS=60000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=two-hosts-s3-secret
C="--preset tiny --micro 4 --amax-history 4 --quiet"

"$Q" train $C --pp 2 --steps 6 --run-dir "$T/ref" || fail "reference run"
job train "hostA:$T/a hostB:$T/b" train $C --pp 2 --steps 6 --ckpt-every 3 --run-dir "$P" || { show train; fail "two-host training"; }

cp -a "$T/a" "$T/view" && cp -a "$T/b/stores/rank-1" "$T/view/stores/rank-1" || fail "copy"
"$Q" push --run-dir "$T/view" --remote s3://qe-test/two --endpoint "$EP" --step 3 --quiet || fail "push of step 3"

rm -rf "$T/b/stores"   # host B lost its store after the commit
job lost "hostA:$T/a hostB:$T/b" resume --run-dir "$P" --from 3 --steps 6 --quiet \
  --remote s3://qe-test/two --endpoint "$EP" || { show lost; fail "resume --remote after host B lost its store"; }
[ -d "$T/a/stores/rank-0" ] && [ ! -e "$T/a/store" ] || fail "rank 0 did not pull the missing chunks into its host's stores/rank-0"
[ ! -e "$T/b/catalog.db" ] || fail "a rank other than 0 created a catalog"
out=$("$Q" compare "$T/ref" "$T/a") || { echo "$out"; fail "resumed run differs from the uninterrupted one"; }
echo "ok: host B lost its store; resume --remote pulled what was missing and resumed bit-exact: $(tail -1 <<<"$out")"
