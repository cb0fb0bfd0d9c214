#!/usr/bin/env bash
# The qeffect workflow on the CPU, end to end:
#   1. train the small model with periodic checkpoints (two rank processes, zbv schedule)
#   2. list and inspect the saved checkpoints
#   3. resume from the step-4 checkpoint in fresh processes up to step 12
#   4. compare the resumed run with the uninterrupted one, bit for bit
#   5. plot both loss curves
set -euo pipefail
Q=${1:-build/qeffect}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${QE_DEMO_DIR:-$here/runs/demo}
rm -rf "$out"
mkdir -p "$out"
common=(--preset small --pp 2 --micro 4 --schedule zbv --amax-history 4 --eval-every 4 --log-every 2 --seed 7)

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. train 12 steps with a checkpoint every 4 steps (uninterrupted run)"
"$Q" train "${common[@]}" --steps 12 --ckpt-every 4 --run-dir "$out/full"

step "2. a second run that stops at step 4 (its checkpoint is what we resume from)"
"$Q" train "${common[@]}" --steps 4 --ckpt-every 4 --run-dir "$out/resumed"

step "3. list and inspect its checkpoints"
"$Q" list --run-dir "$out/resumed"
# the whole listing goes to a file first: head closing the pipe early would stop inspect by SIGPIPE
"$Q" inspect --run-dir "$out/resumed" --stage 3 >"$out/inspect.txt"
head -40 "$out/inspect.txt"

step "4. resume in fresh processes from step 4 to step 12"
"$Q" resume --run-dir "$out/resumed" --steps 12 --ckpt-every 4

step "5. compare the resumed run with the uninterrupted one (steps 5-12)"
"$Q" compare "$out/full" "$out/resumed" --steps 5:12

step "6. verify every stored chunk, and plot both loss curves"
"$Q" verify --run-dir "$out/resumed"
"$Q" plot --run-dir "$out/full" --vs "$out/resumed" -o "$out/loss.png"
echo "plot: $out/loss.png"
