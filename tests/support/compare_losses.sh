#!/usr/bin/env bash
# Whether run B logged run A's loss at every step: two cc-train --log CSVs, the loss in the
# second column (whatever columns follow it), to 3e-5 relative (the CSV keeps 6 significant digits, up to 1e-5 relative
# at a loss near 1, and the parallel runs reorder their sums), over exactly STEPS steps.
#   tests/support/compare_losses.sh A.csv B.csv NAME STEPS
set -euo pipefail
paste -d, <(cut -d, -f1,2 "${1:?reference CSV}") <(cut -d, -f1,2 "${2:?run CSV}") | awk -F, -v name="${3:?name}" -v steps="${4:?steps}" '
  NR == 1 { next }
  { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r
    if (r > 3e-5) { printf "step %s: reference %s, %s %s\n", $1, $2, name, $4; bad = 1 } }
  END { printf "%s: %d steps, largest relative loss difference %.3g\n", name, NR - 1, worst
        if (NR - 1 != steps) { printf "expected %d steps\n", steps; exit 1 }
        exit bad }'
