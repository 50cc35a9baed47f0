#!/usr/bin/env bash
# cc as a torch.distributed backend against Gloo, on this machine, in one run:
#  1. dist.all_reduce on CPU float32 tensors, 8 B to 64 MiB, 2 ranks (bench/torch_allreduce.py:
#     cc and gloo interleaved at each size, median of the rounds, nccl-tests' busbw);
#  2. DDP on bench/torch_gpt.py's model, 2 processes x 1 thread (bench/torch_ddp.py), rounds of
#     backend cc, backend gloo and no communication at all (no_sync() on every step),
#     interleaved; the median tokens/s of each over the rounds, and each round's figures.
#   bench/torch_compare.sh [--rounds 3] [--steps 10]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
steps=10
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--steps N]" >&2; exit 2 ;;
  esac
done
python=/usr/bin/python3
[ -f build/python/cc_torch/__init__.py ] || { echo "build cc_torch first (cmake --build build)"; exit 1; }
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 CC_SOCKET_IFNAME=${CC_SOCKET_IFNAME:-lo} GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}

echo "== dist.all_reduce, 2 ranks"
"$python" bench/torch_allreduce.py --world 2 --rounds "$rounds" 2>&1 | grep -v "Warning\|warn("

echo "== DDP, 2 processes x 1 thread, $steps timed steps per run, $rounds rounds"
declare -A all
for round in $(seq "$rounds"); do
  line="round $round:"
  for mode in cc gloo no_sync; do
    case $mode in
      cc) flags=(--backend cc) ;;
      gloo) flags=(--backend gloo) ;;
      no_sync) flags=(--backend gloo --no-sync) ;;
    esac
    rate=$("$python" bench/torch_ddp.py --world 2 --threads 1 --steps "$steps" "${flags[@]}" 2>&1 |
           awk '/median_tokens_per_s/ { print $NF }')
    all[$mode]+="$rate "
    line+=" $mode $rate"
  done
  echo "$line"
done
# shellcheck source=bench/stats.sh
. bench/stats.sh
cc=$(echo "${all[cc]}" | median)
gloo=$(echo "${all[gloo]}" | median)
none=$(echo "${all[no_sync]}" | median)
awk -v cc="$cc" -v gloo="$gloo" -v none="$none" 'BEGIN {
  printf "median tokens/s: cc %.0f, gloo %.0f, no communication %.0f\n", cc, gloo, none
  printf "cc / gloo %.3f; cc / no communication %.3f; gloo / no communication %.3f\n", cc / gloo, cc / none, gloo / none
}'
