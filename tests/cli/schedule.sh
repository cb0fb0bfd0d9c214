#!/usr/bin/env bash
# schedule.sh - `qeffect schedule` as a user and a script see it.
#
# Usage: bash tests/cli/schedule.sh QEFFECT [SHARED_DIR]
# Checks: --help; the text listing of interleaved P=2 V=2 M=4 matches the order
# worked out by hand in tests/sched/test_sched_build.c; --json parses and holds
# every action (3 x V x M compute actions per rank in split mode, sends and recvs
# pairing up across ranks); --backward full has B and no DW; ZB-V's stats show
# deferred DW; impossible combinations and bad flags exit 2 with a message.
set -u
Q=${1:?usage: schedule.sh QEFFECT [SHARED_DIR]}
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# 1. help
"$Q" schedule --help >"$tmp/help" || fail "schedule --help exited $?"
grep -q -- '--schedule interleaved|zbv' "$tmp/help" || fail "help lacks the --schedule line"

# 2. text: compute-only order of interleaved P=2 V=2 M=4 (hand-derived, see the C test)
"$Q" schedule --pp 2 --micro 4 --schedule interleaved --compute-only >"$tmp/txt" || fail "interleaved text exited $?"
want0="rank 0: F0.0 F0.1 F1.0 F1.1 F0.2 I1.0 W1.0 F0.3 I1.1 W1.1 F1.2 I0.0 W0.0 F1.3 I0.1 W0.1 I1.2 W1.2 I1.3 W1.3 I0.2 W0.2 I0.3 W0.3"
want1="rank 1: F0.0 F0.1 F1.0 I1.0 W1.0 F1.1 I1.1 W1.1 F0.2 I0.0 W0.0 F0.3 I0.1 W0.1 F1.2 I1.2 W1.2 F1.3 I1.3 W1.3 I0.2 W0.2 I0.3 W0.3"
grep -qxF "$want0" "$tmp/txt" || { fail "interleaved rank 0 order differs:"; grep '^rank 0' "$tmp/txt" >&2; }
grep -qxF "$want1" "$tmp/txt" || { fail "interleaved rank 1 order differs:"; grep '^rank 1' "$tmp/txt" >&2; }
grep -q '^legend:' "$tmp/txt" || fail "text output lacks the legend"

# 3. JSON, for each kind and backward mode
for kind in interleaved zbv; do
	for bw in split full; do
		for pm in "1 4" "2 4" "4 8"; do
			set -- $pm
			P=$1 M=$2
			out="$tmp/$kind-$bw-$P-$M.json"
			if ! "$Q" schedule --pp "$P" --micro "$M" --schedule "$kind" --backward "$bw" --json --stats >"$out"; then
				fail "$kind $bw P=$P M=$M --json exited non-zero"
				continue
			fi
			per=$((2 * M)) # V=2 chunks x M microbatches of each compute kind per rank
			if [ "$bw" = split ]; then
				bad=$(jq --argjson n "$per" '[.ranks[] | select(([.actions[] | select(.kind=="F")] | length) != $n
					or ([.actions[] | select(.kind=="DI")] | length) != $n
					or ([.actions[] | select(.kind=="DW")] | length) != $n)] | length' "$out")
			else
				bad=$(jq --argjson n "$per" '[.ranks[] | select(([.actions[] | select(.kind=="B")] | length) != $n
					or ([.actions[] | select(.kind=="DW" or .kind=="DI")] | length) != 0)] | length' "$out")
			fi
			[ "$bad" = 0 ] || fail "$kind $bw P=$P M=$M: $bad ranks with wrong compute counts"
			sends=$(jq '[.ranks[].actions[] | select(.kind|startswith("SEND"))] | length' "$out")
			recvs=$(jq '[.ranks[].actions[] | select(.kind|startswith("RECV"))] | length' "$out")
			[ "$sends" = "$recvs" ] || fail "$kind $bw P=$P M=$M: $sends sends vs $recvs recvs"
			[ "$(jq -r '.valid and (.ranks | length) == '"$P" "$out")" = true ] || fail "$kind $bw P=$P M=$M: bad header"
			if [ "$P" = 1 ] && [ "$sends" != 0 ]; then fail "$kind P=1 has $sends messages"; fi
		done
	done
done

# 4. ZB-V defers DW, interleaved does not
d=$(jq '[.ranks[].stats.delayed_dw] | add' "$tmp/zbv-split-2-4.json")
[ "${d:-0}" -gt 0 ] || fail "zbv P=2 M=4: no delayed DW in stats ($d)"
d=$(jq '[.ranks[].stats.delayed_dw] | add' "$tmp/interleaved-split-2-4.json")
[ "$d" = 0 ] || fail "interleaved P=2 M=4: $d delayed DW"
"$Q" schedule --pp 2 --micro 4 --schedule zbv --stats >"$tmp/zstats" || fail "zbv --stats exited $?"
grep -q 'delayed_dw' "$tmp/zstats" && grep -q '^makespan' "$tmp/zstats" || fail "zbv --stats text lacks the table"

# 5. bad usage: exit 2 and a message naming the problem
expect2() {
	local needle=$1
	shift
	"$Q" schedule "$@" >/dev/null 2>"$tmp/err"
	local rc=$?
	[ "$rc" -eq 2 ] || fail "schedule $* exited $rc, expected 2"
	grep -q -- "$needle" "$tmp/err" || { fail "schedule $*: stderr lacks '$needle':"; cat "$tmp/err" >&2; }
}
expect2 'multiple' --pp 2 --micro 3 --schedule interleaved
expect2 '2 chunks' --pp 2 --micro 4 --schedule zbv --chunks 3
expect2 'unknown schedule' --pp 2 --micro 4 --schedule gpipe
expect2 'backward' --pp 2 --micro 4 --schedule zbv --backward half
expect2 '--micro is required' --pp 2 --schedule zbv
expect2 'needs an integer' --pp two --micro 4 --schedule zbv
expect2 '--pp must be' --pp 0 --micro 4 --schedule zbv
expect2 'unknown flag' --pp 2 --micro 4 --schedule zbv --fast
expect2 'needs a value' --pp 2 --micro 4 --schedule

if [ "$fails" -ne 0 ]; then
	echo "schedule.sh: $fails checks FAILED" >&2
	exit 1
fi
echo "schedule.sh: all checks passed"
