#!/usr/bin/env bash
# fp8_cast.sh - `qeffect fp8 cast` against the H200's conversion vectors.
#
# Usage: bash tests/cli/fp8_cast.sh QEFFECT SHARED_DIR
# The --bits mode must reproduce columns 2-5 of data/fp8-vectors.txt for every
# conversion line (the C test checks the library; this checks the command a
# user runs).  Without the vector file it says SKIP and still checks a few
# literal values, the JSON output and the exit status of bad input.
set -u
Q=${1:?usage: fp8_cast.sh QEFFECT SHARED_DIR}
SHARED=${2:-}
V="$SHARED/data/fp8-vectors.txt"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# 1. The whole vector file.  Conversion lines are everything but '#' comments
#    and 'd ' decode lines (a float's bits may themselves start with hex 'd').
if [ -r "$V" ]; then
	grep -Ev '^(#|d )' "$V" >"$tmp/conv"
	cut -d' ' -f1 "$tmp/conv" | "$Q" fp8 cast --bits >"$tmp/got"
	rc=$?
	[ "$rc" -eq 0 ] || fail "fp8 cast --bits exited $rc on the vector file"
	cut -d' ' -f2-5 "$tmp/conv" >"$tmp/want"
	n=$(wc -l <"$tmp/want")
	[ "$n" -gt 1000 ] || fail "only $n conversion lines in $V"
	if ! diff "$tmp/want" "$tmp/got" >"$tmp/diff"; then
		fail "fp8 cast --bits differs from $V in $(grep -c '^<' "$tmp/diff") of $n lines; first differences:"
		head -20 "$tmp/diff" >&2
	else
		echo "fp8 cast --bits: all $n conversion lines of $V match"
	fi
else
	echo "SKIP: $V not found; checking literal values only"
fi

# 2. Literal values (always): 448 max, 464 tie rounds to even 448, one ulp
#    above it overflows without saturation, 61440 E5M2 tie overflows, +inf,
#    a negative NaN, -0, the smallest E4M3 subnormal 2^-9.
printf '43e00000\n43e80000\n43e80001\n47700000\n7f800000\nffc00000\n80000000\n3b000000\n' |
	"$Q" fp8 cast --bits >"$tmp/lit" || fail "fp8 cast --bits on literal values exited $?"
cat >"$tmp/litwant" <<'W'
7e 5f 7e 5f
7e 5f 7e 5f
7e 5f 7f 5f
7e 7b 7f 7c
7e 7b 7f 7c
7f 7f 7f 7f
80 80 80 80
01 18 01 18
W
diff "$tmp/litwant" "$tmp/lit" >&2 || fail "fp8 cast --bits literal values differ (want < got >)"

# 3. JSON: 448 is max in both saturating columns; 1e9 saturates to 7e / 7b and
#    without saturation becomes E4M3 NaN 7f and E5M2 inf 7c.
if ! "$Q" fp8 cast 448 1e9 --json >"$tmp/json"; then
	fail "fp8 cast 448 1e9 --json exited non-zero"
elif command -v python3 >/dev/null 2>&1; then
	python3 - "$tmp/json" <<'PY' || fail "fp8 cast --json output is not what was expected: $(cat "$tmp/json")"
import json, sys
d = json.load(open(sys.argv[1]))
v = d["values"]
assert len(v) == 2, v
a, b = v
assert a["input"] == "448" and a["f32_bits"] == "43e00000" and a["value"] == 448
assert a["e4m3"]["sat"] == {"code": "7e", "value": 448} and a["e4m3"]["nosat"]["code"] == "7e"
assert a["e5m2"]["sat"] == {"code": "5f", "value": 448} and a["e5m2"]["nosat"]["code"] == "5f"
assert b["input"] == "1e9" and b["f32_bits"] == "4e6e6b28"
assert b["e4m3"]["sat"] == {"code": "7e", "value": 448}
assert b["e5m2"]["sat"] == {"code": "7b", "value": 57344}
assert b["e4m3"]["nosat"] == {"code": "7f", "value": "nan"}
assert b["e5m2"]["nosat"] == {"code": "7c", "value": "inf"}
assert a["bf16"] == {"code": "43e0", "value": 448}
assert b["bf16"] == {"code": "4e6e", "value": 998244352}, b["bf16"]
PY
else
	for pat in '"f32_bits": ?"43e00000"' '"code": ?"7e"' '"code": ?"5f"' '"code": ?"7b"' \
		'"code": ?"7f", ?"value": ?"nan"' '"code": ?"7c", ?"value": ?"inf"'; do
		grep -Eq "$pat" "$tmp/json" || fail "fp8 cast --json lacks $pat: $(cat "$tmp/json")"
	done
fi

# 3b. The table's bf16 column: a tie to even (1 + 2^-8 -> 3f80), one that
#     rounds up (1 + 3*2^-8 -> 3f82), FLT_MAX past the largest bf16 to inf,
#     and a negative NaN to the canonical 7fff.
"$Q" fp8 cast 0x1.01p0 0x1.03p0 0x1.fffffep127 -nan >"$tmp/table" || fail "fp8 cast table exited $?"
for want in 'bf16$' '3f80 = 1$' '3f82 = 1.015625$' '7f80 = inf$' '7fff = nan$'; do
	grep -Eq "$want" "$tmp/table" || fail "fp8 cast table lacks /$want/: $(cat "$tmp/table")"
done

# 4. Bad input exits 2 and names the value; so does a bad --bits line.
"$Q" fp8 cast 448 12x >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "fp8 cast 12x exited $rc, want 2"
grep -q "'12x'" "$tmp/err" || fail "fp8 cast 12x error does not name the value: $(cat "$tmp/err")"
printf '3f800000\nnotbits\n' | "$Q" fp8 cast --bits >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "fp8 cast --bits with a bad line exited $rc, want 2"
grep -q "'notbits'" "$tmp/err" || fail "fp8 cast --bits error does not name the line: $(cat "$tmp/err")"
"$Q" fp8 --help >"$tmp/help" || fail "fp8 --help exited $?"
grep -q -- '--bits' "$tmp/help" || fail "fp8 --help does not document --bits"

if [ "$fails" -ne 0 ]; then
	echo "fp8_cast.sh: $fails check(s) FAILED" >&2
	exit 1
fi
echo "fp8_cast.sh: all checks passed"
