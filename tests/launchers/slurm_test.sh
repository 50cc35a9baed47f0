#!/usr/bin/env bash
# cc under a real Slurm: a one-node cluster started here (slurm_cluster.sh; skipped with its
# reason where the daemons cannot run), then
# - srun --mpi=pmix: a cc-bench sweep with -c 1 (every result checked) and cc-train --dp 2,
#   whose losses must be the one-process run's;
# - srun --mpi=pmi2 (Slurm's PMI-2 plugin, which also answers PMI-1, what cc speaks on
#   PMI_FD): the ring exchange, every float checked;
# - srun with no MPI plugin: cc refuses with a message that says what to use;
# - sbatch of examples/slurm/train.sbatch runs to completion and its output is checked;
# - one rank of a running srun step killed (SIGKILL, as the OOM killer or a dead node would),
#   and, with each rank in a step of its own, scancel of rank 1's: the other exits non-zero
#   within CC_TIMEOUT_MS, naming the dead rank.
#   tests/launchers/slurm_test.sh BUILD/bin
set -euo pipefail
bin=$(cd "${1:?build/bin directory}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
rc=0
"$here/slurm_cluster.sh" start "$work/cluster" >"$work/start.out" || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$work/start.out"
  rm -rf "$work"
  exit "$rc"
fi
trap '"$here/slurm_cluster.sh" stop "$work/cluster"; rm -rf "$work"' EXIT
export SLURM_CONF=$work/cluster/slurm.conf
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK PMIX_RANK PMIX_NAMESPACE PMI_FD PMI_RANK RANK WORLD_SIZE \
  MASTER_ADDR MASTER_PORT CC_BOOTSTRAP_SECRET
export CC_TIMEOUT_MS=10000

fail() { echo "$1"; cat "$2"; exit 1; }

timeout 120 srun --mpi=pmix -n 2 "$bin/cc-bench" allreduce -b 8 -e 1M -f 8 -n 2 -w 1 -c 1 \
  >"$work/bench.out" 2>&1 || fail "srun --mpi=pmix cc-bench failed:" "$work/bench.out"
grep -q '# Wrong elements *: 0 OK' "$work/bench.out" || fail "cc-bench under srun:" "$work/bench.out"

model=(--layers 1 --heads 2 --width 32 --seq 16 --vocab 64 --steps 20 --warmup 2 --seed 5 --print-every 1000)
"$bin/cc-train" "${model[@]}" --batch 4 --log "$work/one.csv" >"$work/one.out"
timeout 120 srun --mpi=pmix -n 2 "$bin/cc-train" "${model[@]}" --batch 2 --dp 2 --log "$work/dp2.csv" \
  >"$work/train.out" 2>&1 || fail "srun --mpi=pmix cc-train --dp 2 failed:" "$work/train.out"
"$here/../support/compare_losses.sh" "$work/one.csv" "$work/dp2.csv" "srun --mpi=pmix cc-train --dp 2" 20

timeout 120 srun --mpi=pmi2 -n 2 "$bin/cc-ring-exchange" 4096 >"$work/pmi2.out" 2>&1 ||
  fail "srun --mpi=pmi2 failed:" "$work/pmi2.out"
[ "$(grep -c ', 0 wrong' "$work/pmi2.out")" -eq 2 ] || fail "ring exchange under --mpi=pmi2:" "$work/pmi2.out"

if timeout 60 srun --mpi=none -n 2 "$bin/cc-ring-exchange" 4096 >"$work/none.out" 2>&1; then
  fail "srun without an MPI plugin ran, but nothing tells the ranks the id:" "$work/none.out"
fi
grep -q -- "--mpi=pmix" "$work/none.out" || fail "srun --mpi=none: no advice:" "$work/none.out"

(cd "$work" && CC_BIN=$bin timeout 180 sbatch --wait -o "$work/sbatch.out" --chdir="$work" \
  "$repo/examples/slurm/train.sbatch" >"$work/submit.out" 2>&1) || fail "sbatch --wait failed:" "$work/submit.out"
grep -q "^summary: steps 30 final_loss" "$work/sbatch.out" || fail "the sbatch job's output:" "$work/sbatch.out"
grep -q "mesh: dp 2 x pp 1 x tp 1" "$work/sbatch.out" || fail "the sbatch job's placement:" "$work/sbatch.out"

# A step whose rank 1 is killed: rank 0 must fail, naming it, within the timeout.
srun --mpi=pmix -n 2 "$bin/cc-train" "${model[@]}" --batch 2 --dp 2 --steps 1000000 \
  >"$work/kill.out" 2>&1 &
step=$!
victim=
for _ in $(seq 300); do
  victim=$(awk '/rank 1: dp/ { for (i = 1; i < NF; i++) if ($i == "pid") print $(i + 1) }' "$work/kill.out")
  [ -n "$victim" ] && grep -q "^step 1/" "$work/kill.out" && break
  sleep 0.1
done
[ -n "$victim" ] || { kill "$step"; fail "no placement table from the step:" "$work/kill.out"; }
kill -9 "$victim"
killed=$(date +%s%N)
status=0
wait "$step" || status=$?
seconds=$(( ($(date +%s%N) - killed) / 1000000000 ))
[ "$status" -ne 0 ] || fail "the step exited 0 with a dead rank:" "$work/kill.out"
grep -q "rank 0: .*rank 1" "$work/kill.out" || fail "rank 0 did not name rank 1:" "$work/kill.out"
[ "$seconds" -le $((CC_TIMEOUT_MS / 1000 + 5)) ] || fail "rank 0 took ${seconds} s:" "$work/kill.out"
# Each rank its own step (torchrun-style variables, as a workflow that starts ranks with
# separate srun calls does); scancel of rank 1's step: rank 0 fails within the timeout.
port=$((30000 + $$ % 20000))
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CC_BOOTSTRAP_SECRET=slurm-$$ \
    srun -J "cc-rank$rank-$$" -n 1 "$bin/cc-train" "${model[@]}" --batch 2 --dp 2 --steps 1000000 \
    >"$work/step$rank.out" 2>&1 &
  eval "step$rank=\$!"
done
job=
for _ in $(seq 300); do
  job=$(squeue -h -n "cc-rank1-$$" -o %i)
  [ -n "$job" ] && grep -q "^step 1/" "$work/step0.out" && break
  sleep 0.1
done
[ -n "$job" ] || { kill "$step0" "$step1"; fail "rank 1's job never ran:" "$work/step1.out"; }
scancel "$job"
cancelled=$(date +%s%N)
status=0
wait "$step0" || status=$?
wait "$step1" || true
seconds=$(( ($(date +%s%N) - cancelled) / 1000000000 ))
[ "$status" -ne 0 ] || fail "rank 0 exited 0 after rank 1's step was cancelled:" "$work/step0.out"
grep -q "rank 0: .*rank 1" "$work/step0.out" || fail "rank 0 did not name rank 1:" "$work/step0.out"
[ "$seconds" -le $((CC_TIMEOUT_MS / 1000 + 5)) ] || fail "rank 0 took ${seconds} s after scancel:" "$work/step0.out"
echo "slurm: srun --mpi=pmix and pmi2, sbatch, a killed rank and a cancelled rank's step named in time"
