#!/usr/bin/env bash
# The collective measurements behind docs/PERFORMANCE.md: cc beside Open MPI (and Gloo
# where it is built) in the same cc-bench invocation, interleaved row by row, repeated
# so that medians can be taken; then every collective's ratio to Open MPI at np=2, 4 and 8
# (bench/coll_ratios.sh; also on registered buffers), against Open MPI's best coll_tuned
# algorithm per size (bench/coll_tuned_best.sh), and all-reduce's per-call tail beside a
# busy process (bench/busy_tail.sh). Rows go to out/bench/*.json; the tables to stdout.
#
#   ./scripts/bench-collectives.sh [runs]     (default 3 runs; about 10 minutes each)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
export CC_SOCKET_IFNAME=${CC_SOCKET_IFNAME:-lo}
# cc runs with its defaults throughout (CC_SPIN_US and CC_SPIN_YIELD auto): a training job
# does not tune them either, and a faster row from a longer spin would measure the setting.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
bench=build/bin/cc-bench
peers=mpi
[ -x build/bin/gloo-coll ] && peers=mpi,gloo
mkdir -p out/bench

for run in $(seq 1 "$runs"); do
  echo "=== run $run: np=2 all-reduce, 8 B to 256 MiB"
  $bench allreduce -np 2 -b 8 -e 256M -f 4 --peer "$peers" --json "out/bench/allreduce-np2-run$run.json" |
    sed -n '/cc against/,$p'
  for np in 4 8; do
    echo "=== run $run: np=$np all-reduce (more ranks than cores)"
    $bench allreduce -np "$np" -b 8 -e 64M -f 64 --peer mpi --json "out/bench/allreduce-np$np-run$run.json" |
      sed -n '/cc against/,$p'
  done
  for collective in allgather reducescatter alltoall broadcast; do
    echo "=== run $run: np=2 $collective, 1 MiB and 64 MiB"
    $bench "$collective" -np 2 -b 1M -e 64M -f 64 --peer mpi --json "out/bench/$collective-np2-run$run.json" |
      sed -n '/cc against/,$p'
  done
done
# Every collective's bus bandwidth over Open MPI's at np=2 and np=4, 64 KiB to 64 MiB, and
# at np=8 (more ranks than cores) from 8 KiB, with both systems' defaults: medians and
# every run's ratio (bench/coll_ratios.sh).
echo "=== every collective, cc / Open MPI bus bandwidth, np=2 and np=4"
bench/coll_ratios.sh "$runs"
echo "=== every collective, cc / Open MPI bus bandwidth, np=8"
bench/coll_ratios.sh "$runs" 8M 8 8K
echo "=== every collective, cc on registered buffers (-R 1) / Open MPI, np=2 and np=4"
bench/coll_ratios.sh "$runs" 64M "2 4" 64K "-R 1"
# Against each of Open MPI's coll_tuned algorithms in turn, the best per size.
echo "=== every collective, cc / Open MPI's best coll_tuned algorithm, np=2"
bench/coll_tuned_best.sh "$runs" 2 64K 64M
echo "=== the same, cc on registered buffers"
bench/coll_tuned_best.sh "$runs" 2 64K 64M "-R 1"
# Under load: per-call p50, p99 and worst
# of np=2 all-reduce beside one busy process, at 8 B, 64 KiB, 1 MiB and 16 MiB.
echo "=== np=2 all-reduce beside one busy process, per-call times"
bench/busy_tail.sh "$runs"
echo "=== memcpy (the memory-bandwidth yardstick)"
$bench p2p -np 2 -b 1M -e 256M -f 16 --transport shm | grep -iE "memcpy|size" | head -20
