#!/usr/bin/env bash
# cc-train --dp 2 on this host with its buffers registered (the default: the two ranks
# read each other's gradient buckets in place) against --no-register (through cc's
# staging), at 1 and 2 BLAS threads per rank, alternating run by run so that all see the
# same machine. Prints every run, then per setting the median tokens/s and gradient wait
# (the time the optimizer step waited for the last bucket).
#   bench/train_register.sh [rounds=3] [steps=20] [bucket-mb=2]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/stats.sh
. bench/stats.sh
loopback_mpi
rounds=${1:-3}
steps=${2:-20}
bucket=${3:-2}
model=(--layers 4 --heads 4 --width 256 --seq 128 --batch 8 --vocab 256)
field() { awk -v k="$1" '/^summary:/ { for (i = 1; i <= NF; i++) if ($i == k) print $(i + 1) }'; }
declare -A tokens waits
for round in $(seq "$rounds"); do
  for threads in 1 2; do
    for mode in registered --no-register; do
      flags=()
      [ "$mode" = registered ] || flags=(--no-register)
      out=$(mpirun --oversubscribe --bind-to none -np 2 build/bin/cc-train "${model[@]}" --dp 2 \
        --bucket-mb "$bucket" --steps $((steps + 1)) --threads "$threads" --print-every 1000000 \
        "${flags[@]}")
      t=$(field median_tokens_per_s <<<"$out")
      w=$(field median_gradient_wait_ms <<<"$out")
      echo "round $round threads $threads $mode: tokens/s $t gradient wait $w ms"
      tokens[$threads-$mode]+="$t "
      waits[$threads-$mode]+="$w "
    done
  done
done
for threads in 1 2; do
  for mode in registered --no-register; do
    echo "threads $threads $mode: median tokens/s $(median <<<"${tokens[$threads-$mode]}")" \
      "(${tokens[$threads-$mode]% }), median gradient wait $(median <<<"${waits[$threads-$mode]}") ms"
  done
done
