#!/usr/bin/env bash
# cc's bus bandwidth over Open MPI's for every collective at np=2 and np=4 (or the rank
# counts given) on this host, 64 KiB (or min-bytes) to 64 MiB (or max-bytes) by 4, out of
# place and in place, the two interleaved row by row in one cc-bench invocation, repeated: per
# (collective, np, size) the median ratio and each run's (> 1: cc moves more). Both with
# their defaults, glibc keeping freed memory for both (keep_heap in bench/stats.sh;
# KEEP_HEAP=0 to measure with glibc's defaults).
#
#   bench/coll_ratios.sh [runs=3] [max-bytes=64M] [rank-counts="2 4"] [min-bytes=64K] [cc-flags]
#
# cc-flags go to cc-bench, e.g. "-R 1" (cc on registered buffers; -a, the way the ranks' times
# combine, reaches the peers too); cc's
# environment too (CC_SHM_USE_CMA=1 ...: Open MPI reads none of it). COLLECTIVES="broadcast
# allgather" measures only those.
# Two tables come from the same runs: out of place, then in place for the collectives that
# have an in-place form (all but all-to-all). For broadcast the in-place one is the
# equal-work comparison: cc's out-of-place root also copies its input to its output, and
# MPI_Bcast has one buffer.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/stats.sh
. bench/stats.sh
loopback_mpi
keep_heap
runs=${1:-3}
max=${2:-64M}
read -r -a nps <<<"${3:-2 4}"
min=${4:-64K}
read -r -a flags <<<"${5:-}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
read -r -a collectives <<<"${COLLECTIVES:-allreduce reducescatter allgather broadcast reduce alltoall}"
for run in $(seq 1 "$runs"); do
  for np in "${nps[@]}"; do
    for collective in "${collectives[@]}"; do
      build/bin/cc-bench "$collective" -np "$np" -b "$min" -e "$max" -f 4 --peer mpi "${flags[@]}" >"$out/raw"
      for placement in out in; do
        comparison_rows "$out/raw" "$placement" >"$out/$placement-$collective-$np-$run.txt"
      done
    done
  done
done
mapfile -t sizes < <(awk '{ print $1 }' "$out/out-${collectives[0]}-${nps[0]}-1.txt")
for placement in out in; do
  placement_heading "$placement"
  size_table_header "${sizes[@]}"
  for np in "${nps[@]}"; do
    for collective in "${collectives[@]}"; do
      [ -s "$out/$placement-$collective-$np-1.txt" ] || continue  # no in-place all-to-all
      printf '| %s | %s |' "$collective" "$np"
      for size in "${sizes[@]}"; do
        values=$(cat "$out/$placement-$collective-$np"-*.txt | awk -v s="$size" '$1 == s { print $2 }')
        median=$(median <<<"$values")
        printf ' %s (%s) |' "$median" "$(tr '\n' ' ' <<<"$values" | sed 's/ $//')"
      done
      echo
    done
  done
done
