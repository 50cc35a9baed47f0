#!/usr/bin/env bash
# Installs the Debian 12 packages cc needs to build, test and benchmark. Safe to re-run:
# apt-get skips what is already installed. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libfmt-dev libssl-dev libpmix-dev          # formatting, HMAC for the bootstrap, PMIx for mpirun
  libgtest-dev libgmock-dev libbenchmark-dev # tests and micro-benchmarks
  libopenmpi-dev openmpi-bin                 # mpirun, and Open MPI as the peer in cc-bench
  mpich                                      # MPICH's mpiexec.hydra (PMI-1) in the launcher tests
  python3-torch                              # torchrun in the launcher tests (and PyTorch for the demo)
  libtorch-dev pybind11-dev                  # cc_torch, the torch.distributed backend (python/)
  slurm-wlm munge                            # a one-node Slurm cluster in the launcher tests
  iproute2 gawk                              # network namespaces for the two-host tests
  jq                                         # the tests read CC_TRACE files
  clang libclang-rt-14-dev                   # libFuzzer
  clang-format                               # test.sh refuses unformatted sources
  libopenblas-dev                            # GEMMs of the reference model
  nlohmann-json3-dev                         # safetensors headers of the model checkpoints
  libyaml-cpp-dev                            # cc-train --config files
  libhwloc-dev libibverbs-dev                # topology discovery: cores, caches, NUMA, NICs
  libucx-dev                                 # the UCX transport
  libgloo-dev                                # Gloo, cc-bench's second peer (its test runs both peers)
)
# ./scripts/install-deps.sh --demo adds what the demo's training comparison needs.
if [ "${1:-}" = "--demo" ]; then
  packages+=(
    libopenblas0-pthread                     # PyTorch's OpenBLAS for the training comparison
  )
fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
