#!/usr/bin/env bash
# Fails, naming the files, when a C/C++/CUDA source differs from what clang-format makes
# of it with the repository's .clang-format (test.sh runs it first). `--fix` rewrites
# them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp' '*.hpp')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
# One clang-format over every file; each difference is reported as "FILE:LINE:COL: error".
if report=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
  echo "check-format: ${#files[@]} files formatted"
  exit 0
fi
mapfile -t unformatted < <(grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' <<<"$report" | cut -d: -f1 | sort -u)
echo "check-format: ${#unformatted[@]} file(s) differ from clang-format (run scripts/check-format.sh --fix):"
printf '  %s\n' "${unformatted[@]}"
[ ${#unformatted[@]} -gt 0 ] || echo "$report"
exit 1
