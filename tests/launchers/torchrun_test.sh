#!/usr/bin/env bash
# The real torchrun (Debian's python3-torch, torch 1.13 on Python 3.11) launches cc programs:
# 2 ranks of the ring exchange (every float checked) and cc-train --dp 2, whose losses must be
# the one-process run's. Debian's torchrun dies at start with its default --redirects/--tee
# ("'NoneType' object has no attribute 'get'": Python 3.11 changed the enum it parses them
# with); --redirects 1 --tee 1 (each rank's stdout to a log file, tee'd to the console with a
# "[default<R>]:" prefix) starts it, which docs/LAUNCHERS.md tells users too.
#   tests/launchers/torchrun_test.sh BUILD/bin
set -euo pipefail
bin=${1:?build/bin directory}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
"$python" -c 'import torch.distributed.run' 2>/dev/null ||
  { echo "no torch for $python (Debian's python3-torch; ./scripts/install-deps.sh): skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK PMIX_RANK PMIX_NAMESPACE PMI_FD PMI_RANK SLURM_PROCID
export CC_BOOTSTRAP_SECRET=torchrun-test-$$
torchrun=("$python" -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 2
          --master_addr 127.0.0.1 --master_port $((29500 + $$ % 1000)) --log_dir "$work/logs" --no_python)

timeout 120 "${torchrun[@]}" "$bin/cc-ring-exchange" 4096 >"$work/ring.out" 2>&1 || { cat "$work/ring.out"; exit 1; }
[ "$(grep -c ', 0 wrong' "$work/ring.out")" -eq 2 ] || { echo "ring exchange under torchrun:"; cat "$work/ring.out"; exit 1; }

model=(--layers 1 --heads 2 --width 32 --seq 16 --vocab 64 --steps 20 --warmup 2 --seed 5 --print-every 1000)
"$bin/cc-train" "${model[@]}" --batch 4 --log "$work/one.csv" >"$work/one.out"
timeout 120 "${torchrun[@]}" "$bin/cc-train" "${model[@]}" --batch 2 --dp 2 --log "$work/dp2.csv" \
  >"$work/train.out" 2>&1 || { cat "$work/train.out"; exit 1; }
grep -q "mesh: dp 2 x pp 1 x tp 1" "$work/train.out" || { echo "no placement table"; cat "$work/train.out"; exit 1; }
"$here/../support/compare_losses.sh" "$work/one.csv" "$work/dp2.csv" "torchrun cc-train --dp 2" 20
echo "torchrun: the ring exchange and cc-train --dp 2 ran"
