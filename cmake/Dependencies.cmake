# Libraries cc builds on; all are Debian packages (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED)  # HMAC-SHA256 for the bootstrap's challenge-response
find_package(fmt REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PMIX IMPORTED_TARGET pmix)  # ccCommInitFromEnv under mpirun / srun --mpi=pmix
if(PMIX_FOUND)
  message(STATUS "cc: PMIx ${PMIX_VERSION} found: ccCommInitFromEnv works under Open MPI's mpirun")
else()
  message(WARNING "cc: PMIx not found (libpmix-dev): ccCommInitFromEnv will not work under mpirun")
endif()

# Topology discovery (src/topology): hwloc for sockets, NUMA nodes, cores and caches;
# libibverbs for RDMA NICs (it finds none where there are none); nlohmann-json for the
# topology file. All three are required: scripts/install-deps.sh installs them.
pkg_check_modules(HWLOC IMPORTED_TARGET hwloc>=2.0)
if(NOT HWLOC_FOUND)
  message(FATAL_ERROR "cc: hwloc >= 2.0 not found (libhwloc-dev; scripts/install-deps.sh): "
                      "topology discovery needs it")
endif()
pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
if(NOT IBVERBS_FOUND)
  message(FATAL_ERROR "cc: libibverbs not found (libibverbs-dev; scripts/install-deps.sh): "
                      "RDMA NIC discovery needs it, even on hosts without RDMA NICs")
endif()
message(STATUS "cc: hwloc ${HWLOC_VERSION} and libibverbs ${IBVERBS_VERSION} for topology discovery")
find_package(nlohmann_json 3 REQUIRED)  # the topology file (and the model's checkpoints)

# The ucx transport (src/transport/ucx): UCP over whatever UCX finds (RDMA, tcp, shared
# memory). Required: scripts/install-deps.sh installs libucx-dev.
pkg_check_modules(UCX IMPORTED_TARGET ucx)
if(NOT UCX_FOUND)
  message(FATAL_ERROR "cc: UCX not found (libucx-dev; scripts/install-deps.sh): the ucx transport needs it")
endif()
message(STATUS "cc: UCX ${UCX_VERSION} for the ucx transport")

if(CC_WITH_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CC_WITH_CUDA ON)
  else()
    set(CC_WITH_CUDA OFF)
  endif()
endif()
if(CC_WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "cc: building with CUDA ${CUDAToolkit_VERSION}")
endif()
