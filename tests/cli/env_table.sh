#!/usr/bin/env bash
# Every environment variable is read in one file (issue 36, item 2): runtime/core/env.c holds the
# table of the variables qeffect honours, with their meanings, and the only getenv and setenv.
#  1. no other source of the program (runtime, ckpt, store, catalog, cli) calls getenv, setenv,
#     unsetenv, putenv or secure_getenv;
#  2. every name the sources hand to qe_env / qe_env_set or to their own env helpers, and every
#     variable cli sets from a flag, is in the table (`qeffect env --json`);
#  3. README's table lists exactly the table's names;
#  4. the checkpoint layer, the catalog and the store read no variable at all (not even through
#     qe_env): cli hands them their options (ckpt/session/ckpt_options.h, store/remote.h's
#     store_remote_defaults, cli/storage_options.c);
#  5. nor does the runtime, which sets only NCCL's NCCL_NVLS_ENABLE;
#  6. in cli, only cli/storage_options.c reads variables (and `qeffect env`, whose job is to show
#     them all): every other cli file takes its setting from cli_storage.
set -u
Q=${1:?usage: env_table.sh QEFFECT [SHARED]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
cd "$ROOT" || fail "no source tree"

# 1.
bad=$(grep -rnE '\b(getenv|setenv|unsetenv|putenv|secure_getenv)[[:space:]]*\(' runtime ckpt store catalog cli \
  --include=*.c --include=*.h --include=*.cu --include=*.cuh | grep -v '^runtime/core/env\.c:' | grep -vE ':[0-9]+:\s*(/?\*|//)')
[ -z "$bad" ] || { echo "$bad"; fail "getenv/setenv outside runtime/core/env.c"; }
echo "ok: getenv and setenv only in runtime/core/env.c"

# 2.
"$Q" env --json >"${TMPDIR:-/tmp}/env.$$.json" || fail "qeffect env --json"
listed=$(python3 -c "import json,sys; print('\n'.join(v['name'] for v in json.load(open(sys.argv[1]))['variables']))" \
  "${TMPDIR:-/tmp}/env.$$.json")
rm -f "${TMPDIR:-/tmp}/env.$$.json"
used=$( (grep -rhoE '\b(qe_env|qe_env_set|env_int|env_long|env_size|env_str|first_env)\(\s*"[A-Z][A-Z0-9_]*"' runtime ckpt store catalog cli \
    --include=*.c --include=*.cu | grep -oE '"[A-Z][A-Z0-9_]*"'
  grep -hoE '\bTEXT\("[A-Z][A-Z0-9_]*"' cli/storage_options.c | grep -oE '"[A-Z][A-Z0-9_]*"'
  sed -n '/qe_launch_var_names\[\] = {/,/^};/p' runtime/comm/launch_vars.c | grep -oE '"[A-Z][A-Z0-9_]*"'
  grep -hoE '"[A-Z][A-Z0-9_]*=%' runtime/comm/launch.c | grep -oE '[A-Z][A-Z0-9_]*') | tr -d '"' | sort -u)
[ "$(grep -c . <<<"$used")" -ge 30 ] || fail "found only $(grep -c . <<<"$used") names in the sources: the pattern is stale"
missing=$(comm -23 <(echo "$used") <(sort -u <<<"$listed"))
[ -z "$missing" ] || { echo "$missing"; fail "read or set but not in runtime/core/env.c's table"; }
echo "ok: the $(grep -c . <<<"$used") names the sources use are all in the table of $(grep -c . <<<"$listed")"

# 3.
readme=$(sed -n '/^## Environment variables/,/^## /p' README.md | grep -oE '^\| `[A-Z][A-Z0-9_]*`' | grep -oE '[A-Z][A-Z0-9_]*' | sort -u)
diff <(sort -u <<<"$listed") <(echo "$readme") >/dev/null || { diff <(sort -u <<<"$listed") <(echo "$readme"); fail "README's table and the program's differ"; }
echo "ok: README's table lists the same $(grep -c . <<<"$readme") variables"
lib=$(grep -rnE '\bqe_env(_set)?[[:space:]]*\(' ckpt catalog store --include=*.c --include=*.h | grep -vE ':[0-9]+:\s*(/?\*|//)')
[ -z "$lib" ] || fail "ckpt, catalog or store reads a variable itself (cli should hand it an option): $lib"
echo "ok: ckpt, catalog and store read no variable"
# 5. the runtime reads none either (runtime/core/rt_options.h carries its knobs and test hooks,
#    runtime/comm/launch_vars.h the launcher's variables), but for NCCL's, which the cuda links set
#    for NCCL to read.
rt=$(grep -rnE '\bqe_env(_set)?[[:space:]]*\(' runtime --include=*.c --include=*.h --include=*.cu --include=*.cuh \
  | grep -vE ':[0-9]+:\s*(/?\*|//)' | grep -v '^runtime/core/env\.[ch]:' \
  | grep -vE '^runtime/backend/cuda/cuda_link\.cu:[0-9]+:.*qe_env_set\("NCCL_NVLS_ENABLE"')
[ -z "$rt" ] || fail "the runtime reads a variable itself (cli should hand it over: rt_options.h, launch_vars.h): $rt"
echo "ok: the runtime reads no variable (it sets only NCCL_NVLS_ENABLE, for NCCL)"

# 6.
cl=$(grep -rnE '\bqe_env(_set)?[[:space:]]*\(' cli --include=*.c --include=*.h \
  | grep -vE ':[0-9]+:\s*(/?\*|//)' | grep -vE '^cli/(storage_options|cmd_env)\.c:')
[ -z "$cl" ] || fail "a cli file reads a variable outside cli/storage_options.c (take it from cli_storage): $cl"
echo "ok: in cli only storage_options.c (and qeffect env) reads variables"
