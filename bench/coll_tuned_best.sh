#!/usr/bin/env bash
# cc's bus bandwidth over Open MPI's best coll_tuned algorithm, per collective and size.
# For every algorithm Open MPI 4.1's tuned component offers for a collective
# (OMPI_MCA_coll_tuned_<collective>_algorithm=k with dynamic rules on), one cc-bench
# `--peer mpi` sweep, cc and Open MPI interleaved row by row, so each ratio compares rows
# run side by side. Per size the best algorithm is the one whose median ratio over the
# runs is smallest (it moved most against the cc rows beside it); the table gives that
# median, each run's ratio against it, and its name. Out of place, then in place (all but
# all-to-all) from the same runs: for broadcast the in-place table is the equal-work one.
# glibc keeps freed memory for both systems (keep_heap in bench/stats.sh).
#
#   bench/coll_tuned_best.sh [runs=2] [np=2] [min-bytes=64K] [max-bytes=64M] [cc-flags]
#
# cc-flags go to cc-bench for cc's rows only, e.g. "-R 1" (cc on registered buffers).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/stats.sh
. bench/stats.sh
loopback_mpi
keep_heap
runs=${1:-2}
np=${2:-2}
min=${3:-64K}
max=${4:-64M}
read -r -a flags <<<"${5:-}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# cc-bench collective, the MCA parameter (bench/ompi_coll.cc calls MPI_Reduce_scatter_block)
# and the algorithms by number (ompi_info --param coll tuned --level 9).
declare -A parameter=(
  [allreduce]=allreduce [reducescatter]=reduce_scatter_block [allgather]=allgather
  [broadcast]=bcast [reduce]=reduce [alltoall]=alltoall)
declare -A algorithms=(
  [allreduce]="1:basic_linear 2:nonoverlapping 3:recursive_doubling 4:ring 5:segmented_ring 6:rabenseifner"
  [reducescatter]="1:basic_linear 2:recursive_doubling 3:recursive_halving 4:butterfly"
  [allgather]="1:linear 2:bruck 3:recursive_doubling 4:ring 5:neighbor 6:two_proc"
  [broadcast]="1:basic_linear 2:chain 3:pipeline 4:split_binary_tree 5:binary_tree 6:binomial 7:knomial 8:scatter_allgather 9:scatter_allgather_ring"
  [reduce]="1:linear 2:chain 3:pipeline 4:binary 5:binomial 6:in-order_binary 7:rabenseifner"
  [alltoall]="1:linear 2:pairwise 3:modified_bruck 4:linear_sync 5:two_proc")
collectives=(allreduce reducescatter allgather broadcast reduce alltoall)

for run in $(seq 1 "$runs"); do
  for collective in "${collectives[@]}"; do
    for entry in ${algorithms[$collective]}; do
      number=${entry%%:*}
      name=${entry#*:}
      # size cc/mpi mpi-busbw, one line per size; an algorithm that fails is left out.
      if ! env OMPI_MCA_coll_tuned_use_dynamic_rules=1 \
        "OMPI_MCA_coll_tuned_${parameter[$collective]}_algorithm=$number" \
        build/bin/cc-bench "$collective" -np "$np" -b "$min" -e "$max" -f 4 --peer mpi \
        "${flags[@]}" >"$out/raw" 2>&1; then
        echo "# $collective: Open MPI's $name failed; left out (run $run): $(tail -n 3 "$out/raw")" >&2
        continue
      fi
      for placement in out in; do
        comparison_rows "$out/raw" "$placement" | awk -v name="$name" '{ print $1, $2, name }' \
          >>"$out/$placement-$collective-$run.txt"
      done
    done
  done
done

mapfile -t sizes < <(awk '{ print $1 }' "$out/out-allreduce-1.txt" | sort -gu)
for placement in out in; do
  placement_heading "$placement"
  size_table_header "${sizes[@]}"
  for collective in "${collectives[@]}"; do
    [ -s "$out/$placement-$collective-1.txt" ] || continue  # no in-place all-to-all
    printf '| %s | %s |' "$collective" "$np"
    for size in "${sizes[@]}"; do
      # Per algorithm the median over runs; the best algorithm is the one with the
      # smallest (a minimum over single runs would pick the noisiest run, not the best).
      rows=$(cat "$out/$placement-$collective"-*.txt | awk -v s="$size" '$1 == s { print $3, $2 }')
      winner=$(awk '{ print $1 }' <<<"$rows" | sort -u | while read -r name; do
        echo "$name $(awk -v n="$name" '$1 == n { print $2 }' <<<"$rows" | median)"
      done | sort -g -k2 | awk 'NR == 1 { print $1 }')
      median=$(awk -v n="$winner" '$1 == n { print $2 }' <<<"$rows" | median)
      each=$(awk -v n="$winner" '$1 == n { printf "%s ", $2 }' <<<"$rows" | sed 's/ $//')
      printf ' %s (%s) %s |' "$median" "$each" "$winner"
    done
    echo
  done
done
