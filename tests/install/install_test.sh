#!/usr/bin/env bash
# Installs cc from BUILD_DIR into a temporary prefix and builds and runs a program that
# finds it with find_package(cc) and with pkg-config.
set -euo pipefail
build=${1:?usage: install_test.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > /dev/null
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" cmake -S "$here/consumer" -B "$prefix/consumer-build" -G Ninja \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$prefix/consumer-build" > /dev/null
export CC_SOCKET_IFNAME=lo
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer-build/consumer_cmake"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer-build/consumer_pkgconfig"
test -f "$prefix/lib/libcc.a"
# The torch backend, when it was built: importable from the installed tree, linked to the
# installed libcc, working in a one-rank group over an explicit store.
if [ -f "$build/python/cc_torch/__init__.py" ]; then
  PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -c '
import cc_torch, torch, torch.distributed as dist
assert cc_torch.__file__.startswith("'"$prefix"'"), cc_torch.__file__
dist.init_process_group("cc", store=dist.HashStore(), rank=0, world_size=1)
t = torch.arange(4.0)
dist.all_reduce(t)
assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
dist.destroy_process_group()
'
  # Not `ldd | grep -q`: grep -q exits at the first match, and under pipefail the SIGPIPE
  # that ldd may then take fails the test (it did, once, in CI).
  libraries=$(ldd "$prefix"/lib/python3/dist-packages/cc_torch/_C*.so)
  grep -qF "=> $prefix/lib/python3/dist-packages/cc_torch/../../../libcc.so" <<< "$libraries"
fi
echo "install test: ok"
