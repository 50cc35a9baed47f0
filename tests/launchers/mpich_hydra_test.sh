#!/usr/bin/env bash
# MPICH's Hydra launches cc for real: Debian's mpich (mpiexec.hydra, beside Open MPI) speaks
# PMI-1 to each rank. 50 times in a row, each a short run and none may fail: 3 ranks of the
# ring exchange (every float checked), a cc-bench sweep (results checked, #wrong 0) and
# cc-train --dp 3, whose loss must be the one-process run's. Before cc finalized its PMI-1
# session at exit, Hydra killed a job now and then ("BAD TERMINATION ... EXIT CODE: 9") when
# a rank's connection closed without the handshake; one failure in the 50 fails the test.
#   tests/launchers/mpich_hydra_test.sh BUILD/bin [ROUNDS]
set -euo pipefail
bin=${1:?build/bin directory}
rounds=${2:-50}
hydra=$(command -v mpiexec.hydra || true)
[ -n "$hydra" ] || { echo "no mpiexec.hydra (Debian's mpich; ./scripts/install-deps.sh): skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Hydra's own variables only: nothing of Open MPI's or torchrun's may leak into the ranks.
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK PMIX_RANK PMIX_NAMESPACE RANK WORLD_SIZE
export CC_TIMEOUT_MS=${CC_TIMEOUT_MS:-60000}

model=(--layers 1 --heads 2 --width 32 --seq 16 --vocab 64 --steps 3 --warmup 1 --seed 5 --print-every 1000)
"$bin/cc-train" "${model[@]}" --batch 6 >"$work/one.out"
reference=$(awk '/^summary:/ { for (i = 1; i < NF; i++) if ($i == "final_loss") print $(i + 1) }' "$work/one.out")
[ -n "$reference" ] || { cat "$work/one.out"; exit 1; }

run() {  # name, command...: the round's run, its output kept on failure
  local name=$1
  shift
  if ! timeout 120 "$@" >"$work/$name.out" 2>&1; then
    echo "round $round: $name failed:"
    cat "$work/$name.out"
    exit 1
  fi
}

for round in $(seq "$rounds"); do
  run ring "$hydra" -n 3 "$bin/cc-ring-exchange" 4096
  [ "$(grep -c ', 0 wrong' "$work/ring.out")" -eq 3 ] || { echo "round $round: ring"; cat "$work/ring.out"; exit 1; }
  run bench "$hydra" -n 3 "$bin/cc-bench" allreduce -b 8 -e 64K -f 8 -n 2 -w 1 -c 1
  grep -q '# Wrong elements *: 0 OK' "$work/bench.out" || { echo "round $round: bench"; cat "$work/bench.out"; exit 1; }
  run train "$hydra" -n 3 "$bin/cc-train" "${model[@]}" --batch 2 --dp 3
  loss=$(awk '/^summary:/ { for (i = 1; i < NF; i++) if ($i == "final_loss") print $(i + 1) }' "$work/train.out")
  awk -v a="$loss" -v b="$reference" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 3e-5 * b) }' ||
    { echo "round $round: cc-train --dp 3 final loss $loss, one process $reference"; exit 1; }
done
echo "mpiexec.hydra: $rounds rounds of ring exchange, cc-bench and cc-train --dp 3 (loss $reference as one process), no failure"
