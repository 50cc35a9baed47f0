#!/usr/bin/env bash
# cc-bench's collective subcommands, end to end: every collective runs with -c 1, exits 0,
# reports no wrong element, prints one table row per size of the sweep, and --json, --csv
# and --plot write files that parse; --latency --busy 1 prints the per-call table with the
# load. With --peers (or CC_BENCH_TEST_PEERS=1) the Open MPI
# and Gloo peers join a short run and their rows must be checked and right too.
#
#   tests/bench/cc_bench_test.sh BUILD_BIN_DIR [--peers]
set -euo pipefail

bin=${1:?usage: cc_bench_test.sh BUILD_BIN_DIR [--peers]}
peers=${CC_BENCH_TEST_PEERS:-0}
[[ ${2:-} == --peers ]] && peers=1
bench="$bin/cc-bench"
[[ -x $bench ]] || { echo "FAIL: $bench is missing"; exit 1; }

export CC_SOCKET_IFNAME=lo OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# Data rows of the first table in $1: lines that start with a number.
table_rows() { awk '/^#/ { if (seen) exit; next } /^ *[0-9]/ { seen = 1; print }' "$1"; }

# run NAME EXPECTED_ROWS cc-bench-arguments...
run() {
  local name=$1 expected=$2
  shift 2
  local out="$work/$name.txt"
  if ! timeout 300 "$bench" "$@" >"$out" 2>&1; then
    fail "$name: cc-bench $* exited non-zero"
    sed 's/^/    /' "$out" | tail -20
    return
  fi
  local rows
  rows=$(table_rows "$out" | wc -l)
  [[ $rows -eq $expected ]] || fail "$name: $rows table rows, expected $expected"
  # Columns 9 and 13 are #wrong out of place and in place ("N/A" where there is no in place).
  if table_rows "$out" | awk '$9 != "0" || ($13 != "0" && $13 != "N/A") { bad = 1 } END { exit !bad }'; then
    fail "$name: wrong elements"
    table_rows "$out" | sed 's/^/    /'
  fi
  grep -q '^# Wrong elements *: 0 OK' "$out" || fail "$name: no '# Wrong elements : 0 OK' line"
  grep -q '^# Avg bus bandwidth' "$out" || fail "$name: no '# Avg bus bandwidth' line"
  echo "ok: $name ($rows rows)"
}

# 8 B .. 64 KiB by 4: 8 sizes. At 3 ranks the block collectives round each size to whole
# elements per rank, and the sizes stay distinct.
run allreduce_np2 8 allreduce -np 2 -b 8 -e 64K -f 4 -c 1 \
  --json "$work/ar.json" --csv "$work/ar.csv" --plot "$work/ar.svg"
for coll in alltoall allgather reducescatter broadcast reduce; do
  run "${coll}_np3" 8 "$coll" -np 3 -b 8 -e 64K -f 4 -c 1 -r 1
done
run sendrecv_np3 8 sendrecv -np 3 -b 8 -e 64K -f 4 -c 1
run allreduce_int8_max 4 allreduce -np 3 -b 8 -e 512 -f 4 -d int8 -o max -c 1
run allreduce_bf16_avg 4 allreduce -np 2 -b 8 -e 512 -f 4 -d bfloat16 -o avg -c 1
run allreduce_stream 4 allreduce -np 2 -b 8 -e 512 -f 4 -c 1 --stream

# --latency --busy 1: the per-call table has one row per size, p50 <= p99 <= worst, the
# preamble says the load was there, and no busy process outlives the run.
run allreduce_latency 4 allreduce -np 2 -b 8 -e 512 -f 4 -n 50 -c 1 --latency --busy 1
latency_rows=$(awk '/^# per-call time/ { on = 1; next } on && /^ *[0-9]/' "$work/allreduce_latency.txt")
[[ $(echo "$latency_rows" | grep -c .) -eq 4 ]] || fail "latency: $(echo "$latency_rows" | grep -c .) rows, expected 4"
echo "$latency_rows" | awk 'NF != 4 || $2 > $3 || $3 > $4 { bad = 1 } END { exit bad }' ||
  fail "latency: rows not 'size p50 p99 worst' in order: $latency_rows"
grep -q '^# load: 1 busy process' "$work/allreduce_latency.txt" || fail "latency: no '# load:' line"
sleep 0.5
if pgrep -f -- "-n 50 -c 1 --latency --busy 1" >/dev/null; then fail "a busy process outlived cc-bench"; fi
echo "ok: --latency --busy 1"

# -a, as nccl-tests': the preamble names how the ranks' times were combined; a mode outside
# 0..3 is refused with a message naming -a.
run reduce_slowest_rank 4 reduce -np 3 -b 8 -e 512 -f 4 -c 1 -a 3
grep -q '^# time: .*slowest.*(-a 3)' "$work/reduce_slowest_rank.txt" || fail "-a 3: the preamble does not say so"
if "$bench" reduce -np 2 -b 8 -e 8 -a 4 >"$work/a4.txt" 2>&1; then fail "-a 4 was accepted"; fi
grep -q -- '-a: bad value' "$work/a4.txt" || fail "-a 4: the error does not name -a: $(cat "$work/a4.txt")"
echo "ok: -a"

python3 - "$work/ar.json" "$work/ar.csv" "$work/ar.svg" <<'EOF' || fail "json/csv/svg files"
import csv, json, sys
import xml.etree.ElementTree as ET
rows = json.load(open(sys.argv[1]))
assert len(rows) == 16, f"json: {len(rows)} rows, expected 16 (8 sizes x 2 placements)"
keys = {"system", "collective", "bytes", "count", "type", "op", "root", "inplace",
        "time_us", "average", "algbw", "busbw", "wrong"}
for row in rows:
    assert keys <= row.keys(), f"json row lacks {keys - row.keys()}"
    assert row["system"] == "cc" and row["wrong"] == 0 and row["time_us"] > 0
    assert row["average"] == 1, "the default -a is nccl-tests' 1"
table = list(csv.DictReader(open(sys.argv[2])))
assert len(table) == 16, f"csv: {len(table)} rows"
assert keys <= set(table[0].keys())
svg = ET.parse(sys.argv[3]).getroot()
assert svg.tag.endswith("svg")
assert any(e.tag.endswith("polyline") for e in svg.iter()), "svg has no line"
print("ok: json, csv, svg")
EOF

if [[ $peers == 1 ]]; then
  run allreduce_peers 6 allreduce -np 2 -b 8 -e 1M -f 16 -c 1 --peer mpi,gloo --json "$work/peers.json" --latency
  # The peers report their per-call tails too: 1 + 3 x 3 numeric columns per size.
  awk '/^# per-call time/ { on = 1; next } on && /^ *[0-9]/ { rows++; if (NF != 10 || $0 ~ /N\/A/) bad = 1 }
       END { exit bad || rows != 6 }' "$work/allreduce_peers.txt" || fail "peers: latency table"
  # The peers take -a too (cc-bench passes it on): both report rows, none is left out
  # with a note, and every row says -a 0.
  run reduce_peers_rank0 4 reduce -np 2 -b 8 -e 512 -f 4 -c 1 --peer mpi,gloo -a 0 \
    --json "$work/peers_rank0.json"
  if grep -q '^# note:' "$work/reduce_peers_rank0.txt"; then
    fail "peers -a 0: $(grep '^# note:' "$work/reduce_peers_rank0.txt")"
  fi
  python3 - "$work/peers_rank0.json" <<'EOF' || fail "peers -a 0 rows"
import json, sys
rows = json.load(open(sys.argv[1]))
systems = {r["system"] for r in rows}
assert systems == {"cc", "mpi", "gloo"}, f"systems {systems}"
assert all(r["average"] == 0 and r["wrong"] == 0 for r in rows), "a row without -a 0 or with wrong elements"
print("ok: peers take -a")
EOF
  python3 - "$work/peers.json" <<'EOF' || fail "peer rows"
import json, sys
rows = json.load(open(sys.argv[1]))
systems = {r["system"] for r in rows}
assert systems == {"cc", "mpi", "gloo"}, f"systems {systems}"
assert all(r["wrong"] == 0 for r in rows), "a peer row has wrong elements"
print("ok: peers mpi and gloo")
EOF
fi

if [[ $failures -ne 0 ]]; then
  echo "cc_bench_test: $failures failure(s)"
  exit 1
fi
echo "cc_bench_test: all passed"
