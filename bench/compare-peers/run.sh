#!/usr/bin/env bash
# bench/compare-peers/run.sh - qeffect side by side with what users would pick instead (issue 9):
# PyTorch pipelining and PyTorch distributed checkpointing, same model, data and GPUs, one
# device call, one table.
#
#   bash bench/compare-peers/run.sh BUILD_DIR DATA_DIR
#     BUILD_DIR  holds the qeffect binary (gpu-pkg, carried); DATA_DIR holds brown.jsonl (gpu-data)
#
# Parts, in this order, each time-boxed with `timeout` and with time reserved for the parts after
# it (the whole call stays under TOTAL seconds, default 560 = 9 min 20 s):
#   qstep  qeffect bench step --backend cuda --presets h4096:8 --configs captured_zbv_direct,
#          reference_eager --trials 2 --repl 0 --steps 12 --warmup 3 --floor off --budget-s ...
#   pstep  PyTorch pipelining (bench/peers/run_peers.py step): ScheduleZBVZeroBubble and
#          ScheduleInterleaved1F1B, bf16 autocast and FP8 (_scaled_mm), same preset and M; trial 1
#          of every configuration first, then trial 2, as the budget allows
#   qckpt  qeffect checkpoints of the same preset, --pp 2 zbv captured (the configuration timed):
#          train --steps 4 --ckpt-every 2 (two synchronous saves), resume to step 4 after dropping
#          the store from the page cache (restore only), train --ckpt-async (two async saves)
#   pckpt  PyTorch DCP (bench/peers/run_peers.py ckpt): dcp.save / dcp.load / dcp.async_save of a
#          state of the same shapes and bytes, on the same disk (CKPT_DIR)
#   gpt2   (issue 20; not in the default PARTS: run it in a call of its own, PARTS=gpt2) GPT-2 on one
#          GPU, seq 1024, against the PyTorch GPT-2 peer, on an llm.c token shard: for every item of
#          GPT2_MODELS (PRESET:M:B), first qeffect bench step --pp 1 --presets PRESET:M:B --precision
#          fp8,bf16 --configs captured_direct, then bench/peers/gpt2_torch.py --model PRESET --micro M
#          --batch B (bf16 autocast, SDPA flash, fused AdamW, torch.compile), each its fresh-process
#          trials under its share of the part's time; bench/compare-peers/gpt2_table.py prints the table
#          (model, seq, batch, micro, tokens/s of qeffect fp8, qeffect bf16, PyTorch; llm.c's earlier
#          number; ratios to the faster peer) last.  The data is GPT2_SHARD, else the first *_train.bin
#          in DATA_DIR, else in BUILD_DIR: a package folder holding qeffect and a shard serves as both,
#            PARTS=gpt2 bash bench/compare-peers/run.sh PKG PKG
# then bench/compare-peers/table.py prints the table (system, schedule, precision, step ms,
# ratio to qeffect captured zbv direct, checkpoint save GB/s, restore GB/s, training stall ms,
# each with its trial count).  $OUT gets summary.txt, compare.json and compare-peers.tar.gz
# (every report and log).  Peers are skipped, and say so, where python3 cannot import torch.
#
# Knobs (environment): OUT (/tmp/compare-peers-out), BACKEND (cuda; cpu with QE_PRESETS=tiny:2
# to try the script here), PARTS (qstep,pstep,qckpt,pckpt), QE_PRESETS (h4096:8; add ,h2048:4
# when time allows), QE_CONFIGS, QE_TRIALS (2), PEER_CONFIGS (zbv:bf16,interleaved:bf16,
# zbv:fp8,interleaved:fp8), PEER_TRIALS (2), STEPS (12), WARMUP (3), TOTAL (560), budgets per
# part QE_STEP_BUDGET (130) PEER_BUDGET (170) QE_CKPT_LIMIT (160) DCP_LIMIT (100), minimum time
# kept for later parts PEER_MIN (100) QCKPT_MIN (90) DCP_MIN (70), RUN_LIMIT (90: one qeffect
# training run), PEER_RUN_LIMIT (100: one torchrun job), CKPT_DIR (/tmp/compare-peers-ckpt),
# DCP_REPS (2), DCP_VARIANTS, DCP_NPROC (2: DCP's ranks, one a GPU; 1 beside bench/ckpt/e2e.sh
# RANKS=1 on a one-GPU machine), COLD (1: restores read from disk, not the page cache).
# gpt2 knobs: GPT2_MODELS (gpt2:1:16,gpt2-medium:1:16,gpt2-xl:1:8), GPT2_SHARD, GPT2_PRECISIONS
# (fp8,bf16), GPT2_CONFIGS (captured_direct; the table reads captured_direct), GPT2_QE_TRIALS (3),
# GPT2_STEPS (20), GPT2_WARMUP (5), GPT2_PEER_TRIALS (2), GPT2_PEER_STEPS (30), GPT2_PEER_WARMUP (10),
# GPT2_COMPILE (model|blocks|none), GPT2_QE_SHARE (40: percent of a model's time for qeffect),
# GPT2_RUN_LIMIT (120: one qeffect run), GPT2_PEER_LIMIT (240: one PyTorch trial), GPT2_QE_FLAGS and
# GPT2_PEER_FLAGS (extra flags, e.g. a tiny shape to try the part on the cpu), PYTHON (python3).
set -u
B=${1:-gpu-pkg}; DATA=${2:-gpu-data}
OUT=${OUT:-/tmp/compare-peers-out}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BACKEND=${BACKEND:-cuda}
PARTS=${PARTS:-qstep,pstep,qckpt,pckpt}
QE_PRESETS=${QE_PRESETS:-h4096:8}; QE_PRESETS=${QE_PRESETS// /,}
QE_CONFIGS=${QE_CONFIGS:-captured_zbv_direct,reference_eager}
QE_TRIALS=${QE_TRIALS:-2}
PEER_CONFIGS=${PEER_CONFIGS:-zbv:bf16,interleaved:bf16,zbv:fp8,interleaved:fp8}
PEER_TRIALS=${PEER_TRIALS:-2}
STEPS=${STEPS:-12}; WARMUP=${WARMUP:-3}
TOTAL=${TOTAL:-560}
QE_STEP_BUDGET=${QE_STEP_BUDGET:-130}; PEER_BUDGET=${PEER_BUDGET:-170}
QE_CKPT_LIMIT=${QE_CKPT_LIMIT:-160}; DCP_LIMIT=${DCP_LIMIT:-100}
PEER_MIN=${PEER_MIN:-100}; QCKPT_MIN=${QCKPT_MIN:-90}; DCP_MIN=${DCP_MIN:-70}
RUN_LIMIT=${RUN_LIMIT:-90}; PEER_RUN_LIMIT=${PEER_RUN_LIMIT:-100}
CKPT_DIR=${CKPT_DIR:-/tmp/compare-peers-ckpt}
DCP_REPS=${DCP_REPS:-2}; DCP_VARIANTS=${DCP_VARIANTS:-save,load,async,async_pinned,async_stager,save_t8}
COLD=${COLD:-1}
export NCCL_NVLS_ENABLE=0

T0=$(date +%s)
mkdir -p "$OUT"
W=$(mktemp -d); R=$W/compare-peers
mkdir -p "$R/qstep" "$R/qckpt" "$R/peers" "$CKPT_DIR"
S=$R/summary.txt
say() { echo "$*" | tee -a "$S"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
# limit BUDGET RESERVE PARTS_LEFT: the part's seconds: min(BUDGET, what is left minus RESERVE kept
# for later parts), but never less than an even share of what is left (when TOTAL is small)
limit() {
  local left=$(( TOTAL - $(elapsed) )); local l=$1 r=$(( left - $2 )) fair=$(( left / $3 ))
  [ "$r" -lt "$l" ] && l=$r
  [ "$l" -lt "$fair" ] && l=$fair
  [ "$l" -gt "$1" ] && l=$1
  echo "$l"
}
has() { case ",$PARTS," in *,$1,*) return 0;; esac; return 1; }
first=${QE_PRESETS%%,*}; CK_PRESET=${CK_PRESET:-${first%%:*}}; CK_M=${CK_M:-${first##*:}}

Q=$(readlink -f "$B/qeffect" 2>/dev/null || echo "$B/qeffect")
PY=${PYTHON:-python3}
DATAF=$(readlink -f "$DATA/brown.jsonl" 2>/dev/null || echo "$DATA/brown.jsonl")
say "== compare-peers $(date -u +%FT%TZ): parts $PARTS, backend $BACKEND, presets $QE_PRESETS, total budget $TOTAL s"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4 | tee -a "$S"
else
  say "no nvidia-smi"
fi
say "checkpoint disk: $CKPT_DIR ($(df -h "$CKPT_DIR" | awk 'NR==2 {print $4 " free of " $2 " on " $1}'))"
[ -x "$Q" ] || say "no qeffect binary at $Q: the qeffect parts will fail"
if has qstep || has pstep || has qckpt; then [ -r "$DATAF" ] || say "no data at $DATAF"; fi
HAVE_TORCH=0
if ! has pstep && ! has pckpt; then
  : # the gpt2 part checks its own $PY
elif python3 -c 'import torch' 2>/dev/null; then
  HAVE_TORCH=1
  say "torch $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1)"
else
  say "peers skipped: no torch (python3 -c 'import torch' failed)"
  echo "peers skipped: no torch (python3 -c 'import torch' failed)" >"$R/peers/skipped.txt"
fi

# ---- 1. qeffect bench step
if has qstep; then
  L=$(limit "$QE_STEP_BUDGET" $((PEER_MIN + QCKPT_MIN + DCP_MIN)) 4)
  if [ "$L" -lt 20 ]; then say "-- qeffect bench step skipped: ${L} s left for it"; else
    t=$(date +%s)
    timeout -k 5 $((L + 25)) "$Q" bench step --backend "$BACKEND" --presets "$QE_PRESETS" --configs "$QE_CONFIGS" \
      --trials "$QE_TRIALS" --repl 0 --steps "$STEPS" --warmup "$WARMUP" --data "$DATAF" --floor off \
      --budget-s "$L" --timeout-s "$RUN_LIMIT" --out "$R/qstep" >"$R/qstep.txt" 2>&1
    rc=$?
    say "-- qeffect bench step: exit $rc in $(( $(date +%s) - t )) s (budget $L s)$([ $rc -eq 124 ] && echo ', KILLED')"
    grep -E ' main [0-9]+/[0-9]+:|failed|cut short' "$R/qstep.txt" | tee -a "$S"
  fi
fi

# ---- 2. PyTorch pipelining
if has pstep && [ $HAVE_TORCH = 1 ]; then
  L=$(limit "$PEER_BUDGET" $((QCKPT_MIN + DCP_MIN)) 3)
  PD=$(( $(elapsed) + L ))
  for pm in ${QE_PRESETS//,/ }; do
    preset=${pm%%:*}; M=${pm##*:}
    PL=$(( PD - $(elapsed) ))
    if [ "$PL" -lt 30 ]; then say "-- peers $preset skipped: ${PL} s left for them"; continue; fi
    t=$(date +%s)
    timeout -k 5 $((PL + 20)) python3 "$ROOT/bench/peers/run_peers.py" step --preset "$preset" --micro "$M" \
      --configs "$PEER_CONFIGS" --trials "$PEER_TRIALS" --steps "$STEPS" --warmup "$WARMUP" --data "$DATAF" \
      --out "$R/peers/$preset" --budget-s "$PL" --timeout-s "$PEER_RUN_LIMIT" >"$R/peers-$preset.txt" 2>&1
    rc=$?
    say "-- peers $preset: exit $rc in $(( $(date +%s) - t )) s (budget $PL s)$([ $rc -eq 124 ] && echo ', KILLED')"
    grep -E '^peer|cut short' "$R/peers-$preset.txt" | tee -a "$S"
  done
fi

# ---- 3. qeffect checkpoints (same preset, zbv captured, --pp 2)
if has qckpt; then
  L=$(limit "$QE_CKPT_LIMIT" "$DCP_MIN" 2)
  PD=$(( $(elapsed) + L ))
  QD=$CKPT_DIR/qe
  echo "$CK_PRESET" >"$R/qckpt/preset.txt"
  rm -rf "$QD"; mkdir -p "$QD"
  common=(--backend "$BACKEND" --preset "$CK_PRESET" --pp 2 --micro "$CK_M" --schedule zbv --exec graph --grad direct
          --trace off --log-every 1 --data "$DATAF")
  exe=(--backend "$BACKEND" --pp 2 --schedule zbv --exec graph --grad direct --trace off --log-every 1)
  qrun() { # NAME ARGS...: one qeffect command under what is left of the part's time
    local name=$1; shift
    local lim=$(( PD - $(elapsed) )); [ "$lim" -gt "$RUN_LIMIT" ] && lim=$RUN_LIMIT
    if [ "$lim" -lt 15 ]; then say "-- qeffect $name skipped: ${lim} s left"; return 1; fi
    local t=$(date +%s)
    timeout -k 5 "$lim" "$Q" "$@" >"$R/qckpt/$name.log" 2>&1
    local rc=$?
    say "-- qeffect $name: exit $rc in $(( $(date +%s) - t )) s (limit $lim s)$([ $rc -eq 124 ] && echo ', KILLED')"
    grep -E 'checkpoint step|resumed from|error|refused|failed' "$R/qckpt/$name.log" | head -8 | tee -a "$S"
    return $rc
  }
  say "checkpoint disk before qeffect: $(df -h "$CKPT_DIR" | awk 'NR==2 {print $4}') free"
  if qrun sync train "${common[@]}" --steps 4 --ckpt-every 2 --run-dir "$QD/sync"; then
    if [ "$COLD" = 1 ]; then python3 "$HERE/dropcache.py" "$QD/sync" >"$R/qckpt/dropped.txt" 2>&1; cat "$R/qckpt/dropped.txt" | tee -a "$S"; fi
    qrun resume resume --run-dir "$QD/sync" --steps 4 "${exe[@]}"
  fi
  rm -rf "$QD/sync"
  qrun async train "${common[@]}" --steps 4 --ckpt-every 2 --ckpt-async --run-dir "$QD/async"
  rm -rf "$QD"
fi

# ---- 4. PyTorch DCP
if has pckpt && [ $HAVE_TORCH = 1 ]; then
  L=$(limit "$DCP_LIMIT" 8 1)
  if [ "$L" -lt 30 ]; then say "-- DCP skipped: ${L} s left for it"; else
    say "checkpoint disk before DCP: $(df -h "$CKPT_DIR" | awk 'NR==2 {print $4}') free"
    DB=$(( L - 40 )); [ "$DB" -lt 10 ] && DB=10
    t=$(date +%s)
    timeout -k 5 $((L + 10)) python3 "$ROOT/bench/peers/run_peers.py" ckpt --preset "$CK_PRESET" --dir "$CKPT_DIR/dcp" \
      --out "$R/peers" --reps "$DCP_REPS" --variants "$DCP_VARIANTS" --cold "$COLD" --budget-s "$DB" \
      --timeout-s "$L" --nproc "${DCP_NPROC:-2}" >"$R/peers-ckpt.txt" 2>&1
    rc=$?
    say "-- DCP: exit $rc in $(( $(date +%s) - t )) s (limit $L s, reps started until $DB s)$([ $rc -eq 124 ] && echo ', KILLED')"
    grep -E '^dcp' "$R/peers-ckpt.txt" | tee -a "$S"
    rm -rf "$CKPT_DIR/dcp"
  fi
fi

# ---- 5. GPT-2 on one GPU: qeffect bench step --pp 1 and the PyTorch GPT-2 peer, model by model
if has gpt2; then
  GPT2_MODELS=${GPT2_MODELS:-gpt2:1:16,gpt2-medium:1:16,gpt2-xl:1:8}; GPT2_MODELS=${GPT2_MODELS// /,}
  GPT2_PRECISIONS=${GPT2_PRECISIONS:-fp8,bf16}; GPT2_CONFIGS=${GPT2_CONFIGS:-captured_direct}
  GPT2_QE_TRIALS=${GPT2_QE_TRIALS:-3}; GPT2_STEPS=${GPT2_STEPS:-20}; GPT2_WARMUP=${GPT2_WARMUP:-5}
  GPT2_PEER_TRIALS=${GPT2_PEER_TRIALS:-2}; GPT2_PEER_STEPS=${GPT2_PEER_STEPS:-30}; GPT2_PEER_WARMUP=${GPT2_PEER_WARMUP:-10}
  GPT2_COMPILE=${GPT2_COMPILE:-model}; GPT2_QE_SHARE=${GPT2_QE_SHARE:-40}
  GPT2_RUN_LIMIT=${GPT2_RUN_LIMIT:-120}; GPT2_PEER_LIMIT=${GPT2_PEER_LIMIT:-240}
  G=$R/gpt2; mkdir -p "$G/peer"
  SHARD=${GPT2_SHARD:-}
  if [ -z "$SHARD" ]; then
    for d in "$DATA" "$B"; do
      SHARD=$(ls "$d"/*_train.bin 2>/dev/null | head -1); [ -n "$SHARD" ] && break
    done
  fi
  [ -n "$SHARD" ] && SHARD=$(readlink -f "$SHARD")
  GT=0
  if $PY -c 'import torch' 2>/dev/null; then GT=1
    say "gpt2: torch $($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no gpu")' 2>&1)"
  else say "gpt2: PyTorch peer skipped: $PY cannot import torch"; fi
  if [ -z "$SHARD" ] || [ ! -r "$SHARD" ]; then
    say "-- gpt2 skipped: no llm.c shard (GPT2_SHARD, or *_train.bin in $DATA or $B; make one with qeffect tokenize)"
  else
    say "gpt2: shard $SHARD ($(( $(stat -c %s "$SHARD") / 2 - 512 )) tokens), models $GPT2_MODELS, precisions $GPT2_PRECISIONS"
    # a model's weight in the part's time: deeper models take longer to set up, step and compile
    weight() { case $1 in gpt2) echo 2;; gpt2-medium) echo 3;; gpt2-large) echo 4;; gpt2-xl) echo 5;; *) echo 2;; esac; }
    IFS=, read -ra items <<<"$GPT2_MODELS"; wleft=0
    for pm in "${items[@]}"; do wleft=$(( wleft + $(weight "${pm%%:*}") )); done
    for pm in "${items[@]}"; do
      preset=${pm%%:*}; rest=${pm#*:}; M=${rest%%:*}; Bt=${rest#*:}; [ "$Bt" = "$rest" ] && Bt=1
      tag=$preset-m$M-b$Bt
      # this model's share of what is left (8 s kept for the table), by weight;
      # time a model does not use goes to the models after it; a share under 40 s is raised to
      # 40 s (or what is left), taking from the models after it rather than skipping this one
      left=$(( TOTAL - $(elapsed) - 8 ))
      w=$(weight "$preset"); share=$(( left * w / wleft )); wleft=$(( wleft - w ))
      [ "$share" -lt 40 ] && share=$(( left < 40 ? left : 40 ))
      if [ "$share" -lt 20 ]; then say "-- gpt2 $tag skipped: ${share} s left for it"; continue; fi
      LQ=$(( share * GPT2_QE_SHARE / 100 )); [ $GT = 1 ] || LQ=$share
      t=$(date +%s)
      # shellcheck disable=SC2086
      timeout -k 5 $((LQ + 25)) "$Q" bench step --backend "$BACKEND" --pp 1 --presets "$pm" --precision "$GPT2_PRECISIONS" \
        --configs "$GPT2_CONFIGS" --trials "$GPT2_QE_TRIALS" --repl 0 --steps "$GPT2_STEPS" --warmup "$GPT2_WARMUP" \
        --data "$SHARD" --budget-s "$LQ" --timeout-s "$GPT2_RUN_LIMIT" --out "$G/qe-$tag" ${GPT2_QE_FLAGS:-} >"$G/qe-$tag.txt" 2>&1
      rc=$?
      say "-- gpt2 qeffect $tag: exit $rc in $(( $(date +%s) - t )) s (budget $LQ s)$([ $rc -eq 124 ] && echo ', KILLED')"
      grep -E ' main [0-9]+/[0-9]+:|failed|cut short' "$G/qe-$tag.txt" | tee -a "$S"
      [ $GT = 1 ] || continue
      # the peer gets the rest of this model's share (the qeffect runs may have taken less)
      LP=$(( share - ($(date +%s) - t) ))
      if [ "$LP" -lt 30 ]; then say "-- gpt2 PyTorch $tag skipped: ${LP} s left for it"; continue; fi
      t=$(date +%s)
      # shellcheck disable=SC2086
      timeout -k 5 $((LP + 30)) $PY "$ROOT/bench/peers/gpt2_torch.py" --model "$preset" --micro "$M" --batch "$Bt" \
        --seq 1024 --steps "$GPT2_PEER_STEPS" --warmup "$GPT2_PEER_WARMUP" --data "$SHARD" --compile "$GPT2_COMPILE" \
        --trials "$GPT2_PEER_TRIALS" --budget-s "$LP" --timeout-s "$GPT2_PEER_LIMIT" --out "$G/peer" ${GPT2_PEER_FLAGS:-} \
        >"$G/peer-$tag.txt" 2>&1
      rc=$?
      say "-- gpt2 PyTorch $tag: exit $rc in $(( $(date +%s) - t )) s (budget $LP s)$([ $rc -eq 124 ] && echo ', KILLED')"
      grep -E '^peer' "$G/peer-$tag.txt" | tee -a "$S"
    done
  fi
fi

say "== total $(elapsed) s (before the tables)"
if has qstep || has pstep || has qckpt || has pckpt; then say ""; say "== table"; fi
if has qstep || has pstep || has qckpt || has pckpt; then
  python3 "$HERE/table.py" "$R" "$R/compare.json" 2>&1 | tee -a "$S"
fi
if has gpt2; then
  say ""
  say "== GPT-2 table"
  python3 "$HERE/gpt2_table.py" "$R/gpt2" "$R/gpt2-compare.json" 2>&1 | tee -a "$S"
fi
cp "$S" "$OUT/summary.txt"
cp "$R/compare.json" "$OUT/compare.json" 2>/dev/null
cp "$R/gpt2-compare.json" "$OUT/gpt2-compare.json" 2>/dev/null
tar -C "$W" -czf "$OUT/compare-peers.tar.gz" compare-peers && echo "wrote $OUT/compare-peers.tar.gz ($(du -k "$OUT/compare-peers.tar.gz" | cut -f1) KiB)"
rm -rf "$W"
rmdir "$CKPT_DIR" 2>/dev/null
exit 0
