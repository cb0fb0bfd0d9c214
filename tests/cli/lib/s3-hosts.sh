# s3-hosts.sh - the prologue of the two-host tests that also talk to s3rver: Q made
# absolute (ranks run in other mount namespaces), scripts/s3-test-lib.sh (T, fail, skip,
# the server helpers), the shared path P, lib/hosts.sh, and a failure - not a skip - when
# mount namespaces cannot be made.  Source it with Q set; start the server afterwards.
Q=$(readlink -f "$Q")
. "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/s3-test-lib.sh"
P="$T/mnt"
mkdir -p "$P"
. "$(dirname "${BASH_SOURCE[0]}")/hosts.sh"
hosts_usable || fail "unshare -m is refused here (needs root): the two-host simulation cannot run"
