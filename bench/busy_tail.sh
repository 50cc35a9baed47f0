#!/usr/bin/env bash
# Tail latency under load: np=2 all-reduce (float32 sum, out of place) beside N busy
# processes, cc and Open MPI interleaved row by row in one cc-bench invocation (cc-bench
# --busy N --latency), repeated; per size the slowest rank's p50, p99 and worst call of
# each system, every run's figures and their medians. The sizes are the issue's: 8 B,
# 64 KiB, 1 MiB and 16 MiB (the sweep runs every power of two between).
#
#   bench/busy_tail.sh [runs=3] [busy=1] [iterations=200]
#
# cc runs with its defaults (CC_SPIN_US and CC_SPIN_YIELD auto) unless the caller's
# environment sets them: a training job does not tune them either.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/stats.sh
. bench/stats.sh
loopback_mpi
runs=${1:-3}
busy=${2:-1}
iterations=${3:-200}
bench=build/bin/cc-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for run in $(seq 1 "$runs"); do
  $bench allreduce -np 2 -b 8 -e 16M -f 2 -n "$iterations" -w 20 --busy "$busy" --latency \
    --peer mpi >"$out/run$run.txt"
  # The latency table: size cc-p50 cc-p99 cc-worst mpi-p50 mpi-p99 mpi-worst.
  sed -n '/per-call time/,$p' "$out/run$run.txt" | awk '$1 ~ /^[0-9]+$/' >"$out/tail$run.txt"
done

echo "# np=2 all-reduce beside $busy busy process(es), $iterations calls a size, $runs runs;"
echo "# us, median over the runs [each run]; CC_SPIN_US=${CC_SPIN_US:-auto} CC_SPIN_YIELD=${CC_SPIN_YIELD:-auto}"
printf '| %s | %s | %s | %s | %s | %s | %s |\n' size "cc p50" "MPI p50" "cc p99" "MPI p99" \
  "cc worst" "MPI worst"
echo "|---|---|---|---|---|---|---|"
for size in 8 65536 1048576 16777216; do
  row="| $size"
  for column in 2 5 3 6 4 7; do
    values=$(awk -v size="$size" -v c="$column" '$1 == size { print $c }' "$out"/tail*.txt)
    median=$(median <<<"$values")
    row+=" | $median [$(tr '\n' ' ' <<<"$values" | sed 's/ $//')]"
  done
  echo "$row |"
done
