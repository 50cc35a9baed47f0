#!/usr/bin/env bash
# Data-parallel throughput on this host, in one run, the programs alternating round by
# round so that all see the same machine: cc-train on one process (one thread), cc-train
# --dp 2 under mpirun (overlapped and --no-overlap, one thread per rank), and PyTorch DDP
# over gloo (bench/torch_ddp.py, 2 processes x 1 thread), same model and per-rank batch.
# Prints the medians, the dp=2 speed-up, and how much of the gradient communication the
# overlap hides (1 - wait at the optimizer step with overlap / wait without).
#   bench/dp_compare.sh [--rounds R] [--steps S] [--build DIR] [--bucket-mb X]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 steps=20 build=build bucket=25
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --bucket-mb) bucket=$2; shift 2 ;;
    *) echo "dp_compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
model="--layers 4 --heads 4 --width 256 --seq 128 --batch 8 --vocab 256"
train="$build/bin/cc-train"
python=/usr/bin/python3
have_torch=1
"$python" -c "import torch" 2>/dev/null || { have_torch=0; echo "dp_compare: no torch: skipping DDP"; }
field() { awk -v k="$1" '/^summary:/ { for (i = 1; i <= NF; i++) if ($i == k) print $(i + 1) }'; }
# shellcheck source=bench/stats.sh
. bench/stats.sh
loopback_mpi
one=() dp=() dpno=() wait=() waitno=() ddp=()
for round in $(seq "$rounds"); do
  out=$("$train" $model --steps $((steps + 1)) --threads 1 --print-every 1000000)
  one+=("$(echo "$out" | field median_tokens_per_s)")
  out=$(mpirun --oversubscribe -np 2 "$train" $model --dp 2 --bucket-mb "$bucket" --steps $((steps + 1)) --print-every 1000000)
  dp+=("$(echo "$out" | field median_tokens_per_s)"); wait+=("$(echo "$out" | field median_gradient_wait_ms)")
  out=$(mpirun --oversubscribe -np 2 "$train" $model --dp 2 --bucket-mb "$bucket" --no-overlap --steps $((steps + 1)) --print-every 1000000)
  dpno+=("$(echo "$out" | field median_tokens_per_s)"); waitno+=("$(echo "$out" | field median_gradient_wait_ms)")
  line="round $round: one ${one[-1]} dp2 ${dp[-1]} (wait ${wait[-1]} ms) dp2-no-overlap ${dpno[-1]} (wait ${waitno[-1]} ms)"
  if [ "$have_torch" = 1 ]; then
    # One BLAS thread per process, as cc-train's ranks (torch.set_num_threads does not
    # reach Debian's OpenBLAS pthread build).
    r=$(OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$python" bench/torch_ddp.py --world 2 --steps "$steps" --bucket-mb "$bucket" | awk '/median_tokens_per_s/ { print $NF }')
    ddp+=("$r"); line="$line torch-ddp $r"
  fi
  echo "$line tokens/s"
done
m() { printf '%s\n' "$@" | median; }
one_m=$(m "${one[@]}") dp_m=$(m "${dp[@]}") dpno_m=$(m "${dpno[@]}") wait_m=$(m "${wait[@]}") waitno_m=$(m "${waitno[@]}")
echo "medians over $rounds rounds ($model, bucket $bucket MiB):"
echo "  cc-train one process, 1 thread:   $one_m tokens/s"
echo "  cc-train dp 2 (overlap):          $dp_m tokens/s  ($(awk -v a="$dp_m" -v b="$one_m" 'BEGIN { printf "%.2fx", a / b }') the one-process run)"
echo "  cc-train dp 2 --no-overlap:       $dpno_m tokens/s"
echo "  gradient wait at the step: $wait_m ms with overlap, $waitno_m ms without: $(awk -v a="$wait_m" -v b="$waitno_m" 'BEGIN { printf "%.0f%%", (b > 0 ? 100 * (1 - a / b) : 0) }') of the communication hidden"
if [ "$have_torch" = 1 ]; then
  ddp_m=$(m "${ddp[@]}")
  echo "  torch DDP gloo, 2 x 1 thread:     $ddp_m tokens/s  (cc / torch $(awk -v a="$dp_m" -v b="$ddp_m" 'BEGIN { printf "%.2f", a / b }'))"
fi
