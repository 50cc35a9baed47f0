#!/usr/bin/env bash
# cc-train under mpirun (-np 2 --dp 2 with zero 0 and 3, -np 4 --dp 4 --zero 2, -np 4 --dp 2
# --tp 2 --zero 1, -np 2 --tp 2, the last two with --sp, -np 2 --pp 2 with 1f1b and gpipe,
# -np 4 --dp 2 --pp 2 --zero 1, -np 2 --pp 2 interleaved with --trace, and a mixture-of-experts
# model at -np 2 --dp 2 --ep 2 and -np 2 --pp 2) logs the same loss at
# every step
# as the one-process run on the same global batch (8 rows), to the
# tolerance data_parallel_test.cc explains (1e-5 relative), widened to 3e-5
# because the CSV keeps 6 significant digits (up to 1e-5 relative at a loss near 1).
set -euo pipefail
train=${1:?cc-train path}
mpirun=${2:-mpirun}
command -v "$mpirun" >/dev/null || { echo "no mpirun: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--layers 2 --heads 4 --width 64 --seq 32 --vocab 200 --steps 50 --warmup 5 --lr 1e-2 --seed 7 --print-every 25)

# The loss logged at every step of run $2 is run $1's, to 3e-5 relative, for 50 steps.
compare() { "$(dirname "$0")/../support/compare_losses.sh" "$work/$1.csv" "$work/$2.csv" "$2" 50; }

"$train" "${model[@]}" --batch 8 --log "$work/one.csv" >"$work/one.out"
# dp 2 with zero 0 and 3, dp 4 with zero 2 (4 ranks x 2 rows), dp 2 x tp 2, tp 2, both
# again with sequence parallelism: the same 8 rows a step.
# The pipeline runs take the 8 rows as 4 micro-batches of 2 (of 1 per DP rank at dp 2): the
# one-process reference is then --batch 2 --grad-accum 4.
"$train" "${model[@]}" --batch 2 --grad-accum 4 --log "$work/one-m4.csv" >"$work/one-m4.out"
for run in "2 0 1 1" "2 3 1 1" "4 2 1 1" "2 1 2 1" "1 0 2 1" "2 1 2 1 --sp" "1 0 2 1 --sp" \
  "1 0 1 2 --schedule 1f1b" "1 0 1 2 --schedule gpipe" "2 1 1 2 --schedule 1f1b"; do
  read -r dp zero tp pp extra <<< "$run"
  np=$((dp * tp * pp))
  name=dp$dp-pp$pp-tp$tp-zero$zero${extra:+-${extra//[ -]/}}
  reference=one
  rows=(--batch $((8 / dp)))
  if [ "$pp" -gt 1 ]; then reference=one-m4; rows=(--batch $((2 / dp)) --grad-accum 4); fi
  # shellcheck disable=SC2086 # $extra is flags or nothing
  "$mpirun" --allow-run-as-root --oversubscribe -np "$np" "$train" "${model[@]}" --dp "$dp" --tp "$tp" \
    --pp "$pp" $extra --zero "$zero" "${rows[@]}" --bucket-mb 0.05 --log "$work/$name.csv" >"$work/$name.out" 2>&1 ||
    { cat "$work/$name.out"; exit 1; }
  grep -q "mesh: dp $dp x pp $pp x tp $tp" "$work/$name.out" || { echo "no placement table"; cat "$work/$name.out"; exit 1; }
  if [ "$pp" -gt 1 ]; then
    grep -q "^pipeline: .* measured_bubble" "$work/$name.out" || { echo "no bubble line"; cat "$work/$name.out"; exit 1; }
  fi
  grep -q "memory at start-up: expected_mib" "$work/$name.out" || { echo "no memory line"; exit 1; }
  grep -q "sent_mib_per_step" "$work/$name.out" || { echo "no bytes-per-step figure"; cat "$work/$name.out"; exit 1; }
  compare "$reference" "$name"
done

# Interleaved (2 chunks per stage: 4 layers) traced: the same losses as one process, and each
# rank's trace holds its forwards and backwards per micro-batch and chunk (F0, F0.1, BW0.1)
# on the user lane beside cc's sends and receives.
"$train" "${model[@]}" --layers 4 --batch 2 --grad-accum 4 --log "$work/one-m4-l4.csv" >"$work/one-m4-l4.out"
"$mpirun" --allow-run-as-root --oversubscribe -np 2 "$train" "${model[@]}" --layers 4 --pp 2 \
  --schedule interleaved --virtual-stages 2 --batch 2 --grad-accum 4 --trace "$work/trace" \
  --log "$work/interleaved.csv" >"$work/interleaved.out" 2>&1 || { cat "$work/interleaved.out"; exit 1; }
compare one-m4-l4 interleaved
for rank in 0 1; do
  for name in F0 F3 F0.1 F3.1 BW0 BW3.1 send recv; do
    jq -e --arg name "$name" '[.traceEvents[] | select(.name == $name and .ph == "X")] | length > 0' \
      "$work/trace.rank$rank.json" >/dev/null || { echo "rank $rank's trace has no $name"; exit 1; }
  done
done
echo "interleaved: traces hold the compute spans beside the transfers"

# Mixture of experts (4 experts, top-2, capacity 1.25 in both blocks): --dp 2 --ep 2 (each rank
# holds 2 experts, 2 rows a rank) and --pp 2 (all experts on each stage, 4 micro-batches of
# 2) log the one-process MoE run's loss with --batch 2 --grad-accum 2 (or 4) at every step,
# and the per-block routing columns of the CSV (tokens per expert, dropped) are the same.
moe=(--experts 4 --top-k 2 --capacity-factor 1.25 --heads 2)
"$train" "${model[@]}" "${moe[@]}" --batch 2 --grad-accum 2 --log "$work/moe-one.csv" >"$work/moe-one.out"
"$train" "${model[@]}" "${moe[@]}" --batch 2 --grad-accum 4 --log "$work/moe-one-m4.csv" >"$work/moe-one-m4.out"
"$mpirun" --allow-run-as-root --oversubscribe -np 2 "$train" "${model[@]}" "${moe[@]}" --dp 2 --ep 2 \
  --batch 2 --log "$work/moe-ep2.csv" >"$work/moe-ep2.out" 2>&1 || { cat "$work/moe-ep2.out"; exit 1; }
"$mpirun" --allow-run-as-root --oversubscribe -np 2 "$train" "${model[@]}" "${moe[@]}" --pp 2 \
  --batch 2 --grad-accum 4 --log "$work/moe-pp2.csv" >"$work/moe-pp2.out" 2>&1 || { cat "$work/moe-pp2.out"; exit 1; }
compare moe-one moe-ep2
compare moe-one-m4 moe-pp2
grep -q "| moe1 tokens .* imbalance .* dropped .* aux" "$work/moe-ep2.out" || { echo "no MoE statistics"; cat "$work/moe-ep2.out"; exit 1; }
# Columns 7.. of the CSV: per block min, max, imbalance, dropped (integers and their ratio).
for name in moe-ep2:moe-one moe-pp2:moe-one-m4; do
  run=${name%%:*} reference=${name##*:}
  # min, max and dropped of both blocks (columns 7, 8, 10, 13, 14, 16): exact integers.
  diff <(cut -d, -f1,7,8,10,13,14,16 "$work/$reference.csv") <(cut -d, -f1,7,8,10,13,14,16 "$work/$run.csv") ||
    { echo "$run routed tokens differently from $reference"; exit 1; }
done
echo "moe: ep 2 and pp 2 route and learn as the one-process run"
