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
echo "install test: ok"
