#!/usr/bin/env bash
# Whether run B logged run A's loss at every step: two cc-train --log CSVs, the loss in the
# second column, to 3e-5 relative (the CSV keeps 6 significant digits, up to 1e-5 relative
# at a loss near 1, and the parallel runs reorder their sums), over exactly STEPS steps.
#   tests/support/compare_losses.sh A.csv B.csv NAME STEPS
set -euo pipefail
paste -d, "${1:?reference CSV}" "${2:?run CSV}" | awk -F, -v name="${3:?name}" -v steps="${4:?steps}" '
  NR == 1 { next }
  { d = $2 - $8; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r
    if (r > 3e-5) { printf "step %s: reference %s, %s %s\n", $1, $2, name, $8; bad = 1 } }
  END { printf "%s: %d steps, largest relative loss difference %.3g\n", name, NR - 1, worst
        if (NR - 1 != steps) { printf "expected %d steps\n", steps; exit 1 }
        exit bad }'
