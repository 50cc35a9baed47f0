#!/usr/bin/env bash
# Gradient compression against float32 at dp 2, all from the same seed: every kind of
# --compress (PowerSGD at --compress-rank 4, also after 30 float32 steps), 1-bit Adam, and
# --local-sgd K for K = 2 and 4, each S steps
# (300) on the synthetic data under `mpirun -np 2`; per run the final loss (the mean of the
# last 10 steps' losses, less noisy than one step's), its distance from float32's, and the
# bytes each rank sent per step (cc-train's sent_mib_per_step, the mean over the steps).
#   bench/compress_convergence.sh [--steps S] [--build DIR] [MODEL FLAGS...]
# The model flags default to a small model (2 layers of width 128, 4 heads, sequence 64,
# batch 8 per rank) so that the nine runs take minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=300 build=build
model=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) model+=("$1"); shift ;;
  esac
done
[ ${#model[@]} -gt 0 ] || model=(--layers 2 --width 128 --heads 4 --seq 64 --batch 8)
train="$build/bin/cc-train"
[ -x "$train" ] || { echo "compress_convergence: $train not built" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name: cc-train flags
runs=("none:--compress none" "fp16:--compress fp16" "bf16:--compress bf16"
      "onebit:--compress onebit" "powersgd:--compress powersgd"
      "powersgd, 30 float32 steps first:--compress powersgd --compress-start 30"
      "1-bit Adam, frozen at step 30:--optimizer onebit-adam --freeze-step 30"
      "local SGD, K = 2:--local-sgd 2" "local SGD, K = 4:--local-sgd 4")
echo "dp 2, $steps steps, model: ${model[*]}, seed 1337"
printf '| run | final loss (mean of the last 10 steps) | vs float32 | MiB sent per step per rank | vs float32 |\n|---|---|---|---|---|\n'
base_loss= base_bytes=
for entry in "${runs[@]}"; do
  run=${entry%%:*}
  read -r -a flags <<< "${entry#*:}"
  name=$(echo "$run" | tr -c 'a-zA-Z0-9' _)
  mpirun --oversubscribe --bind-to none -np 2 "$train" "${model[@]}" --dp 2 --steps "$steps" \
    --warmup 20 --print-every 1000000 "${flags[@]}" --log "$work/$name.csv" >"$work/$name.out" 2>&1 ||
    { cat "$work/$name.out"; exit 1; }
  loss=$(tail -n 10 "$work/$name.csv" | awk -F, '{ s += $2 } END { printf "%.4f", s / NR }')
  bytes=$(grep '^summary:' "$work/$name.out" | awk '{ for (i = 1; i < NF; i++) if ($i == "sent_mib_per_step") print $(i + 1) }')
  [ -n "$base_loss" ] || { base_loss=$loss; base_bytes=$bytes; }
  printf '| %s | %s | %+.2f%% | %s | %.1f%% |\n' "$run" "$loss" \
    "$(awk -v a="$loss" -v b="$base_loss" 'BEGIN { print 100 * (a - b) / b }')" "$bytes" \
    "$(awk -v a="$bytes" -v b="$base_bytes" 'BEGIN { print 100 * a / b }')"
done
