#!/usr/bin/env bash
# Expert parallelism beside the one-process MoE run, interleaved in one run so that all see
# the same machine: the MoE model (E experts, top-K, every block MoE, expert width 4C) on one
# process with one BLAS thread, and `mpirun -np 2 cc-train --dp 2 --ep 2` (2 processes x 1
# thread, each with the same --batch), and for scale `--dp 2` with every expert on both
# ranks (--ep 1). Per run: median tokens/s over rounds and the ratio to one process. Then
# one traced ep 2 run: the time of dispatch + combine per step (every all-to-all and
# all-to-allv on the EP communicator, from CC_TRACE) and its share of the step.
#   bench/ep_compare.sh [--rounds R] [--steps S] [--experts E] [--top-k K]
#                       [--capacity-factor X] [--build DIR]
#
#   bench/ep_compare.sh --balance [--steps S] [--experts E] [--top-k K] [--capacity-factor X]
# instead trains the one-process MoE model for S (200) steps with --aux-loss-coef 0.01 and
# with 0, and prints both runs' expert imbalance (max / mean tokens per expert, the mean over
# the MoE blocks) every 20 steps, and the mean of the last 50 steps.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 steps=20 build=build experts=4 topk=2 capacity=1.25 balance=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --experts) experts=$2; shift 2 ;;
    --top-k) topk=$2; shift 2 ;;
    --capacity-factor) capacity=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --balance) balance=1; shift ;;
    *) echo "ep_compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
train="$build/bin/cc-train"
[ -x "$train" ] || { echo "ep_compare: $train not built" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
field() { awk -v key="$1" '{ for (i = 1; i < NF; i++) if ($i == key) { print $(i + 1); exit } }'; }
# shellcheck source=bench/stats.sh
. bench/stats.sh
model=(--layers 4 --heads 4 --width 256 --seq 128 --batch 8 --vocab 256 --experts "$experts" --top-k "$topk"
  --capacity-factor "$capacity")

if [ "$balance" = 1 ]; then
  [ "$steps" = 20 ] && steps=200
  for coef in 0.01 0; do
    "$train" "${model[@]}" --steps "$steps" --aux-loss-coef "$coef" --print-every 1000000 \
      --log "$work/aux$coef.csv" >/dev/null
  done
  # The imbalance columns: every 6th from the 9th (moe{L}_imbalance).
  imbalance() {
    awk -F, 'NR > 1 { s = 0; n = 0; for (i = 9; i <= NF; i += 6) { s += $i; n++ } printf "%d %.4f\n", $1, s / n }' "$1"
  }
  printf '%6s %18s %18s\n' step imbalance_aux0.01 imbalance_aux0
  paste -d' ' <(imbalance "$work/aux0.01.csv") <(imbalance "$work/aux0.csv") |
    awk '$1 % 20 == 0 || $1 == 1 { printf "%6d %18.3f %18.3f\n", $1, $2, $4 }'
  tail50() { imbalance "$1" | tail -50 | awk '{ s += $2 } END { printf "%.3f", s / NR }'; }
  echo "mean imbalance over the last 50 steps: aux 0.01 $(tail50 "$work/aux0.01.csv"), aux 0 $(tail50 "$work/aux0.csv")"
  exit 0
fi

command -v mpirun >/dev/null || { echo "ep_compare: no mpirun (./scripts/install-deps.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
echo "model: ${model[*]} (expert width 4C)"
runs=(one ep2 dp2)
declare -A rates
for round in $(seq "$rounds"); do
  line="round $round:"
  for run in "${runs[@]}"; do
    args=("${model[@]}" --steps $((steps + 1)) --print-every 1000000 --threads 1)
    case "$run" in
      one) command=("$train" "${args[@]}") ;;
      ep2) command=("${mpirun[@]}" -np 2 "$train" "${args[@]}" --dp 2 --ep 2) ;;
      dp2) command=("${mpirun[@]}" -np 2 "$train" "${args[@]}" --dp 2) ;;
    esac
    rate=$("${command[@]}" 2>&1 | grep '^summary:' | field median_tokens_per_s)
    rates[$run]+="$rate "
    line="$line $run $rate"
  done
  echo "$line tok/s"
done
base=$(echo "${rates[one]}" | tr ' ' '\n' | grep . | median)
printf '%-28s %12s %8s\n' run median_tok/s vs_one
for run in "${runs[@]}"; do
  rate=$(echo "${rates[$run]}" | tr ' ' '\n' | grep . | median)
  case "$run" in
    one) name="one process, 1 thread" ;;
    ep2) name="dp 2 x ep 2 (2 x 1 thread)" ;;
    dp2) name="dp 2, ep 1 (2 x 1 thread)" ;;
  esac
  printf '%-28s %12s %8s\n' "$name" "$rate" "$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }')"
done

# Dispatch + combine from the trace: the EP communicator's all-to-alls (the operation spans,
# peer -1; the per-peer spans inside them are not added again), per step, against the step.
"${mpirun[@]}" -np 2 "$train" "${model[@]}" --steps $((steps + 1)) --print-every 1000000 \
  --dp 2 --ep 2 --trace "$work/trace" --log "$work/trace.csv" >"$work/trace.out" 2>&1 ||
  { cat "$work/trace.out"; exit 1; }
step_ms=$(awk -F, -v tokens=$((2 * 8 * 128)) 'NR > 2 { printf "%.3f\n", 1000 * tokens / $5 }' "$work/trace.csv" | median)
for rank in 0 1; do
  # The first step (connection set-up, first touches) left out: spans after the second F0.
  jq -r --argjson steps "$steps" '
    [.traceEvents[] | select(.ph == "X" and .name == "F0") | .ts] | sort | .[1] as $start
    | [input.traceEvents[] | select(.ph == "X" and (.name == "alltoall" or .name == "alltoallv")
        and .args.peer == -1 and .ts >= $start) | .dur] | (add / 1000 / $steps)' \
    "$work/trace.rank$rank.json" "$work/trace.rank$rank.json" |
    awk -v rank="$rank" -v step="$step_ms" '{ printf "rank %s: dispatch + combine %.2f ms per step of %.2f ms (%.1f%%)\n", rank, $1, step, 100 * $1 / step }'
done
