#!/usr/bin/env bash
# Each module's tests link against that module's libraries alone at -O0, as in a Debug build
# (issue 15, item 5): at -O0 the compiler keeps every static helper a test header defines,
# used or not, so a header that pulls in another library (tests/store/store_testutil.h and
# LMDB) breaks the link of tests that never call it.  Here: every catalog test, compiled at
# -O0 and linked with qe_catalog, qe_core, SQLite and nothing else.
set -u
CC=${1:?usage: debug_link.sh CC SOURCE_DIR QE_CATALOG_LIB QE_CORE_LIB SQLITE_LIB SQLITE_INC}
SRC=$2 CAT=$3 CORE=$4 SQL=$5 SQLINC=$6
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0 n=0
for t in "$SRC"/tests/catalog/test_*.c; do
  n=$((n + 1))
  # shellcheck disable=SC2086 # QE_EXTRA_CFLAGS (the build's own C flags, e.g. sanitizers) is a list
  if ! "$CC" -std=gnu11 -O0 -g ${QE_EXTRA_CFLAGS:-} -I"$SRC" -I"$SRC/tests" -I"$SQLINC" -DQE_SHARED_DIR='""' -DQE_BIN='""' \
       -DQE_SOURCE_DIR='""' -o "$T/t" "$t" "$SRC/tests/testlib.c" "$CAT" "$CORE" "$SQL" -ldl -lpthread -lm \
       >"$T/log" 2>&1; then
    grep -E "undefined reference|error" "$T/log" | head -5
    echo "FAIL: $(basename "$t") does not link at -O0 with the catalog's libraries alone"
    fail=1
  fi
done
[ $fail -eq 0 ] || exit 1
echo "ok: $n catalog tests link at -O0 with qe_catalog, qe_core and SQLite alone"
