#!/usr/bin/env bash
# Pipeline parallelism beside one process, in one run with the runs interleaved so that all
# see the same machine: the default model with --grad-accum M micro-batches of --batch B rows,
# on one process with one BLAS thread, and under `mpirun -np 2 cc-train --pp 2` with 1f1b,
# gpipe, zb-h1 and interleaved with 2 model chunks per stage (one thread each). Per run: median tokens/s over the rounds and its ratio to one
# process; per pipeline run the measured bubble per stage beside the simulator's prediction
# at the costs the stages measured (medians over the rounds), and the activation memory (cc-train's accounting of the most
# micro-batches a stage holds) and peak RSS of the largest rank.
#   bench/pp_compare.sh [--rounds R] [--steps S] [--batch B] [--micro-batches M] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 steps=6 batch=8 micro=8 build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --micro-batches) micro=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "pp_compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
train="$build/bin/cc-train"
[ -x "$train" ] || { echo "pp_compare: $train not built" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "pp_compare: no mpirun (./scripts/install-deps.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

field() { awk -v key="$1" '{ for (i = 1; i < NF; i++) if ($i == key) { print $(i + 1); exit } }'; }
# shellcheck source=bench/stats.sh
. bench/stats.sh

args=(--batch "$batch" --grad-accum "$micro" --steps $((steps + 1)) --print-every 1000000 --threads 1)
echo "model: default (L=4 H=4 C=256 T=128 V=256), $micro micro-batches of $batch rows a step"
runs=(one pp2-1f1b pp2-gpipe pp2-zb-h1 pp2-interleaved)
declare -A rates
for round in $(seq "$rounds"); do
  line="round $round:"
  for run in "${runs[@]}"; do
    case "$run" in
      one) command=("$train" "${args[@]}") ;;
      pp2-1f1b) command=(mpirun --oversubscribe --bind-to none -np 2 "$train" "${args[@]}" --pp 2 --schedule 1f1b) ;;
      pp2-gpipe) command=(mpirun --oversubscribe --bind-to none -np 2 "$train" "${args[@]}" --pp 2 --schedule gpipe) ;;
      pp2-zb-h1) command=(mpirun --oversubscribe --bind-to none -np 2 "$train" "${args[@]}" --pp 2 --schedule zb-h1) ;;
      pp2-interleaved) command=(mpirun --oversubscribe --bind-to none -np 2 "$train" "${args[@]}" --pp 2 --schedule interleaved --virtual-stages 2) ;;
    esac
    "${command[@]}" >"$work/$run.out" 2>&1 || { cat "$work/$run.out"; exit 1; }
    rate=$(grep '^summary:' "$work/$run.out" | field median_tokens_per_s)
    rates[$run]+="$rate "
    grep '^pipeline:' "$work/$run.out" >>"$work/$run.pipeline" || true
    line="$line $run $rate"
  done
  echo "$line tok/s"
done
base=$(echo "${rates[one]}" | tr ' ' '\n' | grep . | median)
for run in "${runs[@]}"; do
  rate=$(echo "${rates[$run]}" | tr ' ' '\n' | grep . | median)
  memory=$(grep '^memory: peak_rss_mib' "$work/$run.out")
  activations=$(echo "$memory" | sed -nE 's/.*activations ([0-9.]+) MiB.*/\1/p')
  [ -n "$activations" ] || activations=$(echo "$memory" | sed -nE 's/.*\+ 4 bytes x ([0-9]+) activations.*/\1/p' | awk '{ printf "%.1f", 4 * $1 / 1048576 }')
  printf '%-10s median %7s tok/s  x%s  activations %s MiB  peak_rss %s MiB\n' "$run" "$rate" \
    "$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }')" "$activations" \
    "$(echo "$memory" | field peak_rss_mib)"
  # The bubble per stage, measured and predicted at measured costs: the median over the rounds.
  if [ -s "$work/$run.pipeline" ]; then
    awk '{ for (i = 1; i <= NF; i++) {
             if ($i == "measured_bubble") { m = 0; for (j = i + 1; $j ~ /^[0-9.]+$/; j++) { m++; measured[m] = measured[m] " " $j } }
             if ($i == "at_measured_costs") { p = 0; for (j = i + 1; $j ~ /^[0-9.]+$/; j++) { p++; predicted[p] = predicted[p] " " $j } }
             if ($i == "link_ms") link = link " " $(i + 1) } }
         function med(list,   n, v, k, t, a, b) { n = split(list, v, " "); for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++) if (v[b] + 0 < v[a] + 0) { t = v[a]; v[a] = v[b]; v[b] = t }
                                return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
         END { line = "           bubble per stage (median of " NR " rounds): measured"
               for (k = 1; k <= m; k++) line = line sprintf(" %.3f", med(measured[k]))
               line = line ", predicted at measured costs"
               for (k = 1; k <= p; k++) line = line sprintf(" %.3f", med(predicted[k]))
               print line sprintf(", link %.3f ms", med(link)) }' "$work/$run.pipeline"
  fi
done
