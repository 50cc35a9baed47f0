#!/usr/bin/env bash
# Training throughput of cc-train against PyTorch on the same model, the same batch and
# the same thread count, in one run, alternating the two so that both see the same
# machine: tokens/s of each (median over rounds) and their ratio.
#   bench/train_compare.sh [--threads N] [--rounds R] [--steps S] [--build DIR]
# Model: 4 layers, C=256, H=4, T=128, batch 8, V=256 (ANCHORS.md's training line).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=1 rounds=3 steps=20 build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "train_compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
model="--layers 4 --heads 4 --width 256 --seq 128 --batch 8 --vocab 256"
train="$build/bin/cc-train"
[ -x "$train" ] || { echo "train_compare: $train not built" >&2; exit 1; }

# Debian's torch lives in the system python, not in a pyenv/venv python on the PATH.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
have_torch=1
if ! "$python" -c "import torch" 2>/dev/null; then
  have_torch=0
  echo "train_compare: python3-torch is not importable: skipping PyTorch (./scripts/install-deps.sh --demo)"
fi

# shellcheck source=bench/stats.sh
. bench/stats.sh
cc_rates=() torch_rates=()
for round in $(seq "$rounds"); do
  rate=$("$train" $model --steps $((steps + 1)) --threads "$threads" --print-every 1000000 | awk '/^summary:/ { for (i = 1; i <= NF; i++) if ($i == "median_tokens_per_s") print $(i + 1) }')
  cc_rates+=("$rate")
  line="round $round: cc-train $rate tok/s"
  if [ "$have_torch" = 1 ]; then
    # torch.set_num_threads does not reach Debian's OpenBLAS (pthread build): without
    # these, torch's GEMMs use every core while cc-train uses --threads.
    output=$(OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" "$python" bench/torch_gpt.py $model --steps "$steps" --threads "$threads")
    [ "$round" = 1 ] && echo "$output" | grep -E "^torch (config|BLAS)|^torch [0-9]"
    trate=$(echo "$output" | awk '/median_tokens_per_s/ { print $NF }')
    torch_rates+=("$trate")
    line="$line, torch $trate tok/s"
  fi
  echo "$line"
done
cc_median=$(printf '%s\n' "${cc_rates[@]}" | median)
echo "cc-train: median $cc_median tokens/s ($rounds rounds, $threads thread(s), $model)"
if [ "$have_torch" = 1 ]; then
  torch_median=$(printf '%s\n' "${torch_rates[@]}" | median)
  echo "torch:    median $torch_median tokens/s"
  awk -v a="$cc_median" -v b="$torch_median" 'BEGIN { printf "ratio cc-train / torch: %.2f\n", a / b }'
fi
