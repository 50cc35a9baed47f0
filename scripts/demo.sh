#!/usr/bin/env bash
# The main job on this machine: installs what is needed, builds, then
#   1. a 4-rank ring exchange under mpirun (every element checked), cc-topo, and
#   2. cc-bench p2p: one-way latency and streaming bandwidth over shm and tcp, beside this
#      machine's single-thread memcpy and Open MPI's ping-pong, in the same run, and a
#      cc-bench all-reduce sweep beside Open MPI and Gloo.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh --demo
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"

# Single host: sockets on loopback. mpirun may run as root here.
export CC_SOCKET_IFNAME=${CC_SOCKET_IFNAME:-lo}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
mkdir -p out

echo
echo "=== 1. mpirun -np 4 build/bin/cc-ring-exchange (ccCommInitFromEnv, shm between the ranks)"
CC_DEBUG=INFO mpirun --oversubscribe -np 4 build/bin/cc-ring-exchange 2>&1 | grep -E "^rank|transport to" | sort

echo
echo "=== 1b. cc-topo: this machine as cc sees it, and the rings and trees it plans"
build/bin/cc-topo
echo "(and a 4-host, 2-socket, 2-NIC cluster described by a topology file, 16 ranks:)"
build/bin/cc-topo --file tests/topology/files/four_hosts_2s_2nic.json -n 16 | sed -n '/^plan for/,$p'

echo
echo "=== 2. cc-bench p2p -np 2 --peer mpi (cc over shm and tcp, memcpy, Open MPI; rows in out/p2p.json)"
build/bin/cc-bench p2p -np 2 -b 8 -e 256M -f 4 --peer mpi --json out/p2p.json

echo
echo "=== 2b. cc-bench allreduce -np 2 --peer mpi,gloo (nccl-tests' table, then cc beside Open MPI and Gloo; curve in out/allreduce.svg)"
peers=mpi
[ -x build/bin/gloo-coll ] && peers=mpi,gloo
build/bin/cc-bench allreduce -np 2 -b 8 -e 256M -f 4 --peer "$peers" --json out/allreduce.json --plot out/allreduce.svg

echo
echo "=== 3. cc-train: the reference model (L=4, H=4, C=256, T=128, V=256) on synthetic data, one thread"
rm -f out/train.csv
build/bin/cc-train --steps 100 --warmup 10 --print-every 10 --eval-every 50 --log out/train.csv --plot out/train_loss.svg
echo "(every step in out/train.csv, the curve in out/train_loss.svg)"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo
  echo "=== 4. bench/train_compare.sh: cc-train beside PyTorch 1.13, same model, batch and threads"
  bench/train_compare.sh --rounds 3 --steps 15
fi

echo
echo "=== 5. mpirun -np 2 cc-train --dp 2 --zero 1: data parallel, the same model, 2 ranks x 8 rows"
mpirun --oversubscribe -np 2 build/bin/cc-train --dp 2 --zero 1 --bucket-mb 2 --steps 30 --warmup 5 --print-every 10

echo
echo "=== 6. mpirun -np 2 cc-train --tp 2 --sp: tensor and sequence parallel, the same model split across 2 ranks"
mpirun --oversubscribe -np 2 build/bin/cc-train --tp 2 --sp --steps 30 --warmup 5 --print-every 10

echo
echo "=== 7. mpirun -np 2 cc-train --pp 2 --schedule zb-h1: a 2-stage pipeline over 8 micro-batches of 1 row"
mpirun --oversubscribe -np 2 build/bin/cc-train --pp 2 --schedule zb-h1 --batch 1 --grad-accum 8 --steps 30 --warmup 5 --print-every 10
