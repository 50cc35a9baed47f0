#!/usr/bin/env bash
# Before/after check for a change that must not change training: runs two cc-train
# binaries (say, one built from main before a refactor and one after) on the same fixed
# seeds and says whether each run's loss CSV (every column but tokens_per_s) and saved
# checkpoint bytes (model and optimizer files) are identical. Runs: one process (with
# gradient accumulation and an evaluation), and dp=2 under mpirun at zero 0, 1, 2 and 3.
# Then, with --speed, the default model on one process, each binary three times
# interleaved, and the median tokens/s of each.
#
#   scripts/compare-train-runs.sh BEFORE/cc-train AFTER/cc-train [--speed]
#
# To get a "before" binary: git worktree add /tmp/before <rev> && cmake -S /tmp/before
# -B /tmp/before/build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build
# /tmp/before/build --target cc-train. Exits non-zero on the first difference.
set -euo pipefail
before=${1:?usage: compare-train-runs.sh BEFORE_CC_TRAIN AFTER_CC_TRAIN [--speed]}
after=${2:?usage: compare-train-runs.sh BEFORE_CC_TRAIN AFTER_CC_TRAIN [--speed]}
speed=${3:-}
export CC_SOCKET_IFNAME=${CC_SOCKET_IFNAME:-lo}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--layers 2 --heads 2 --width 64 --seq 32 --vocab 200 --steps 30 --warmup 5 --lr 1e-2 --seed 7
  --print-every 1000 --threads 1)

run() {  # run NAME BINARY NP ARGS...
  local name=$1 binary=$2 np=$3
  shift 3
  local out=$work/$name
  mkdir -p "$out"
  if [ "$np" -eq 1 ]; then
    "$binary" "${model[@]}" --log "$out/loss.csv" --save "$out/model.safetensors" "$@" >"$out/stdout" 2>&1
  else
    mpirun --allow-run-as-root --oversubscribe -np "$np" "$binary" "${model[@]}" --log "$out/loss.csv" \
      --save "$out/model.safetensors" "$@" >"$out/stdout" 2>&1
  fi || { echo "$name failed:"; cat "$out/stdout"; exit 1; }
  cut -d, -f1-4,6 "$out/loss.csv" >"$out/loss-columns.csv"
}

compare() {  # compare CASE
  local status=0
  for file in loss-columns.csv model.safetensors model.optim.safetensors; do
    if cmp -s "$work/before-$1/$file" "$work/after-$1/$file"; then
      echo "$1: $file identical ($(wc -c <"$work/after-$1/$file") bytes)"
    else
      echo "$1: $file DIFFERS"
      status=1
    fi
  done
  return $status
}

failed=0
cases=("one:1:--batch 8 --grad-accum 2 --eval-every 10")
for zero in 0 1 2 3; do cases+=("dp2-zero$zero:2:--dp 2 --zero $zero --batch 4 --bucket-mb 0.05"); done
for spec in "${cases[@]}"; do
  IFS=: read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  run "before-$name" "$before" "$np" $flags
  # shellcheck disable=SC2086
  run "after-$name" "$after" "$np" $flags
  compare "$name" || failed=1
done

if [ "$speed" = "--speed" ]; then
  for round in 1 2 3; do
    for side in before after; do
      binary=$before
      [ "$side" = after ] && binary=$after
      "$binary" --steps 20 --threads 1 --print-every 1000 | awk -v side=$side '/^summary:/ {
        for (i = 1; i <= NF; ++i) if ($i == "median_tokens_per_s") print side, $(i + 1) }' >>"$work/speed"
    done
  done
  for side in before after; do
    printf '%s tokens/s (3 runs): %s, median ' "$side" "$(awk -v s=$side '$1 == s { printf "%s ", $2 }' "$work/speed")"
    awk -v s=$side '$1 == s { print $2 }' "$work/speed" | sort -n | sed -n 2p
  done
fi
exit $failed
