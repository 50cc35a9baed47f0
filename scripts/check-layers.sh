#!/usr/bin/env bash
# Fails, naming the file and the include, when a source under src/ includes a layer
# above its own (test.sh runs it after check-format.sh). The layers, lowest first; each
# may include only itself and the layers before it (transport and topology are peers):
#
#   core < transport, topology < comm < collectives < api < compress < parallel
#
# comm is the communicator, its connections, the executor and the one wait
# (comm/wait.h); the collectives are built on it; api/ is the C API over both.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [core]="core"
  [transport]="core transport"
  [topology]="core topology"
  [comm]="core transport topology comm"
  [collectives]="core transport topology comm collectives"
  [api]="core transport topology comm collectives api"
  [compress]="core transport topology comm collectives api compress"
  [parallel]="core transport topology comm collectives api compress parallel"
)

bad=0
checked=0
while IFS= read -r file; do
  layer=${file#src/}
  layer=${layer%%/*}
  [ -n "${allowed[$layer]:-}" ] || continue
  checked=$((checked + 1))
  while IFS= read -r line; do
    included=$(sed -E 's/^#include "([a-z_]+)\/.*/\1/' <<<"$line")
    [ -n "${allowed[$included]:-}" ] || continue # not a layer (a system or CUDA header)
    if ! grep -qw -- "$included" <<<"${allowed[$layer]}"; then
      echo "check-layers: $file ($layer) includes a layer above it: $line"
      bad=1
    fi
  done < <(grep -E '^#include "[a-z_]+/' "$file" || true)
done < <(git ls-files 'src/*.cc' 'src/*.h' 'src/*.cu' 'src/*.inc')
[ "$bad" -eq 0 ] || exit 1
echo "check-layers: $checked files include only their own layer and those below"
