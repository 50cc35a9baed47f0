#!/usr/bin/env bash
# cc as a torch.distributed backend (python/, docs/TORCH.md), with Debian's torch:
#  - every operation x dtype x reduce op at 1, 2, 3 and 4 ranks under the real torchrun, and
#    at 2 ranks under mpirun (ranks and the rendezvous from Open MPI's environment);
#  - DDP unchanged on bench/torch_gpt.py's model for 20 steps, backend cc against gloo: the
#    same losses to 1e-5 relative with no hook, fp16_compress_hook and powerSGD_hook; with
#    bf16_compress_hook (Gloo has no bfloat16) against gloo without a hook, to bfloat16's
#    rounding of the gradients;
#  - a rank killed mid all-reduce, and one stopped there (SIGSTOP): the others raise cc's
#    error, at once for the dead rank, at init_process_group's timeout for the silent one.
#   tests/torch/torch_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build directory}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
"$python" -c 'import torch.distributed.run' 2>/dev/null ||
  { echo "no torch for $python (Debian's python3-torch; ./scripts/install-deps.sh): skipped"; exit 77; }
[ -f "$build/python/cc_torch/__init__.py" ] ||
  { echo "cc_torch was not built (libtorch-dev and pybind11-dev; cmake says what is missing): skipped"; exit 77; }
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export CC_SOCKET_IFNAME=${CC_SOCKET_IFNAME:-lo} GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK PMIX_RANK PMIX_NAMESPACE PMI_FD PMI_RANK SLURM_PROCID RANK WORLD_SIZE
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$((29700 + $$ % 200))
torchrun() {
  local n=$1
  shift
  port=$((port + 1))
  timeout 300 "$python" -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node "$n" \
    --master_addr 127.0.0.1 --master_port "$port" --log_dir "$work/logs-$port" "$@"
}
run() {  # run NAME COMMAND...: the output only when it fails
  local name=$1
  shift
  local start=$SECONDS
  if ! "$@" >"$work/$name.out" 2>&1; then
    echo "FAILED: $name"
    grep -v "UserWarning\|warnings.warn" "$work/$name.out" | tail -40
    exit 1
  fi
  echo "ok: $name ($((SECONDS - start)) s)"
}

for n in 1 2 3 4; do
  run "ops-torchrun-$n" torchrun "$n" "$here/ops_test.py"
  grep -h "ops_test:" "$work/ops-torchrun-$n.out"
done
if command -v mpirun >/dev/null; then
  run ops-mpirun-2 timeout 300 mpirun -np 2 --oversubscribe --bind-to none "$python" "$here/ops_test.py"
  grep -h "ops_test:" "$work/ops-mpirun-2.out"
else
  echo "no mpirun: the mpirun case is skipped"
fi

# One launch a backend runs every hook in turn, each from a fresh model (Gloo has no bfloat16).
run ddp-cc torchrun 2 "$here/ddp_test.py" --backend cc --hooks none,fp16,powersgd,bf16 --out "$work/loss-cc"
run ddp-gloo torchrun 2 "$here/ddp_test.py" --backend gloo --hooks none,fp16,powersgd --out "$work/loss-gloo"
compare() {  # compare A B RELATIVE_TOLERANCE WHAT
  "$python" - "$@" <<'PY'
import sys
a, b = ([float(x) for x in open(p)] for p in sys.argv[1:3])
tol, what = float(sys.argv[3]), sys.argv[4]
assert len(a) == len(b) == 20, f"{what}: {len(a)} and {len(b)} steps"
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"{what}: 20 steps, largest relative difference {worst:.2e} (bound {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
for hook in none fp16 powersgd; do
  compare "$work/loss-cc-$hook.txt" "$work/loss-gloo-$hook.txt" 1e-5 "DDP hook $hook, cc against gloo"
done
# bfloat16 keeps 8 bits of each averaged gradient: AdamW's step moves by up to ~2^-8 of lr.
compare "$work/loss-cc-bf16.txt" "$work/loss-gloo-none.txt" 1e-3 "DDP bf16 hook (cc) against gloo in float32"

run kill timeout 200 "$python" "$here/kill_test.py" --ranks 3 --timeout 20 --mode kill
grep -h "raised after" "$work/kill.out"
run stop timeout 200 "$python" "$here/kill_test.py" --ranks 3 --timeout 5 --mode stop
grep -h "raised after" "$work/stop.out"
echo "torch backend: all cases passed"
