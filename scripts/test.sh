#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite: the release build, then
# the multi-rank tests again under ASan+UBSan (with the reduction kernels and the model)
# and under TSan, then a short fuzzing run of every bootstrap parser. Exits non-zero on
# the first failure.
#
#   ./scripts/test.sh            everything (25-35 minutes on 2 cores, half of it building)
#   ./scripts/test.sh --quick    release build and tests only
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
[ "${1:-}" = "--quick" ] && quick=1

./scripts/install-deps.sh
./scripts/check-format.sh
./scripts/check-layers.sh

# Tests use loopback only; mpirun may run as root here (CI does).
export CC_SOCKET_IFNAME=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
jobs=$(nproc)
# Sanitizer reports stop the rank at once, so a report inside a forked rank fails the test.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"

run_preset() {  # run_preset PRESET TARGET CTEST_ARGS...
  local preset=$1 target=$2
  shift 2
  echo "=== $preset: configure and build ($target)"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs" --target "$target"
  echo "=== $preset: test"
  ctest --preset "$preset" --timeout 600 "$@"
}

run_preset release all
if [ "$quick" -eq 0 ]; then
  run_preset asan all -L "multirank|kernels|model"
  # Not the copy kernels' test: one thread, nothing for TSan to find, and its byte-by-byte
  # checks ran 47 s under TSan (10 s under ASan, which runs it).
  run_preset tsan cc_multirank_tests -L "multirank|threads" -E '^Copy\.'
  echo "=== fuzz: every bootstrap parser for 30 s"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$jobs" --target wire_fuzz
  corpus=$(mktemp -d)
  cp fuzz/corpus/wire/* "$corpus"/
  ./build-fuzz/bin/wire_fuzz -max_total_time=30 -print_final_stats=1 "$corpus" 2>&1 | tail -n 12
  rm -rf "$corpus"
fi
echo "=== all tests passed"
