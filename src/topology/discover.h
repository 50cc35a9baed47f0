// Discovery of the host this process runs on: sockets, NUMA nodes, cores and L3 caches
// through hwloc; Ethernet NICs through sysfs; RDMA NICs (InfiniBand, RoCE) through
// libibverbs; GPUs through CUDA when cc is built with it. What a host lacks is simply
// absent from the result: no NIC of a kind, no GPU, is not an error.
//
// Cost: the hardware part runs once per process and is cached (about 5 ms here, most of
// it hwloc; docs/TOPOLOGY.md). hwloc's own PCI discovery is left off: it costs ~10 ms
// more and sysfs already says which NUMA node a NIC or GPU hangs off.
#pragma once

#include "core/status.h"
#include "topology/system.h"

namespace cc::topology {

// The local host. The first call discovers (and caches); later calls copy the cache and
// refresh only name and identity, which CC_HOSTNAME may change between communicators.
Result<Host> discoverLocalHost();

// The NUMA node (index into Host::numaNodes) the calling process is bound to: 0 on a
// single-node host; -1 when it is bound to CPUs of several nodes, or not bound at all,
// on a multi-node host.
int currentNumaNode();

// What the first discovery cost, for CC_DEBUG=INFO and cc-topo (runs it if it has not run).
struct DiscoveryTiming {
  double hwlocInitMs = 0;  // hwloc_topology_init (loads hwloc's components)
  double hwlocLoadMs = 0;  // hwloc_topology_load
  double nicsMs = 0;       // sysfs and libibverbs
  double gpusMs = 0;       // CUDA (0 without it)
  double totalMs = 0;
};
DiscoveryTiming discoveryTiming();

}  // namespace cc::topology
