#!/usr/bin/env bash
# Tensor parallelism beside what a user of two cores would try first, in one run with the
# runs interleaved so that all see the same machine: one process on one BLAS thread, one
# process on two, `mpirun -np 2 cc-train --tp 2`, and the same with --sp. Per run: median
# tokens/s over rounds, and step times (p50, p99, worst) over every round's steps but the
# first; ratios against one process on one thread.
#   bench/tp_compare.sh [--rounds R] [--steps S] [--load] [--build DIR]
# --load puts a busy process (`yes > /dev/null`) beside the ranks for the whole run.
#
#   bench/tp_compare.sh --memory [--build DIR]
# instead runs a model whose activations dominate (L=4 H=4 C=256 T=128, batch 32) for three
# steps at tp 2 and 4, without and with --sp, and prints cc-train's own accounting of the
# activations per rank and the largest rank's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 steps=15 build=build load=0 memory=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --load) load=1; shift ;;
    --memory) memory=1; shift ;;
    *) echo "tp_compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
train="$build/bin/cc-train"
[ -x "$train" ] || { echo "tp_compare: $train not built" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "tp_compare: no mpirun (./scripts/install-deps.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
work=$(mktemp -d)
busy=
cleanup() { [ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

field() { awk -v key="$1" '{ for (i = 1; i < NF; i++) if ($i == key) { print $(i + 1); exit } }'; }

if [ "$memory" = 1 ]; then
  model=(--layers 4 --heads 4 --width 256 --seq 128 --batch 32 --vocab 256 --steps 3 --print-every 1000)
  echo "model: ${model[*]}"
  printf '%-12s %16s %16s %14s\n' run activations_mib expected_mib peak_rss_mib
  for run in "2" "2 --sp" "4" "4 --sp"; do
    read -r tp sp <<< "$run"
    # shellcheck disable=SC2086 # $sp is one flag or nothing
    "${mpirun[@]}" -np "$tp" "$train" "${model[@]}" --tp "$tp" $sp >"$work/out" 2>&1 ||
      { cat "$work/out"; exit 1; }
    line=$(grep '^memory: peak_rss_mib' "$work/out")
    activations=$(echo "$line" | sed -E 's/.*adam [0-9.]+ \+ activations ([0-9.]+) MiB.*/\1/')
    printf '%-12s %16s %16s %14s\n' "tp $tp${sp:+ sp}" "$activations" \
      "$(echo "$line" | field expected_mib)" "$(echo "$line" | field peak_rss_mib)"
  done
  exit 0
fi

model=(--layers 4 --heads 4 --width 256 --seq 128 --batch 8 --vocab 256)
if [ "$load" = 1 ]; then
  yes >/dev/null &
  busy=$!
  echo "load: one busy process (yes > /dev/null, pid $busy) beside the ranks"
fi
runs=(one1 one2 tp2 tp2sp)
declare -A rates
for round in $(seq "$rounds"); do
  line="round $round:"
  for run in "${runs[@]}"; do
    args=("${model[@]}" --steps $((steps + 1)) --print-every 1000000 --log "$work/$run-$round.csv")
    case "$run" in
      one1) command=("$train" "${args[@]}" --threads 1) ;;
      one2) command=("$train" "${args[@]}" --threads 2) ;;
      tp2) command=("${mpirun[@]}" -np 2 "$train" "${args[@]}" --tp 2) ;;
      tp2sp) command=("${mpirun[@]}" -np 2 "$train" "${args[@]}" --tp 2 --sp) ;;
    esac
    rate=$("${command[@]}" 2>&1 | grep '^summary:' | field median_tokens_per_s)
    rates[$run]+="$rate "
    line="$line $run $rate"
  done
  echo "$line tok/s"
done

# shellcheck source=bench/stats.sh
. bench/stats.sh
tokens=$((8 * 128))
base=$(echo "${rates[one1]}" | tr ' ' '\n' | grep . | median)
printf '%-6s %12s %9s %10s %10s %10s\n' run median_tok/s vs_one1 p50_ms p99_ms worst_ms
for run in "${runs[@]}"; do
  rate=$(echo "${rates[$run]}" | tr ' ' '\n' | grep . | median)
  # Step times from every round's CSV (the first step of each left out).
  times=$(for csv in "$work/$run"-*.csv; do
    awk -F, -v tokens="$tokens" 'NR > 2 { printf "%.1f\n", 1000 * tokens / $5 }' "$csv"
  done | sort -n)
  count=$(echo "$times" | wc -l)
  p50=$(echo "$times" | awk -v n="$count" 'NR == int((n + 1) / 2)')
  p99=$(echo "$times" | awk -v n="$count" 'NR == int(n * 0.99 + 0.999)')
  worst=$(echo "$times" | tail -1)
  printf '%-6s %12s %9s %10s %10s %10s\n' "$run" "$rate" \
    "$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }')" "$p50" "$p99" "$worst"
done
