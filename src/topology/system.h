// The topology data model: a System of Hosts (sockets, NUMA nodes, NICs, GPUs and the
// links inside each host) joined by network links, plus, when known, where the job's
// ranks sit. Discovery (discover.h) fills one Host; the communicator gathers every
// rank's Host into a System; a topology file (file.h) stores one; the planner
// (planner.h) reads one. Plain structs on purpose: everything above is free functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cc::topology {

struct Socket {
  int osIndex = 0;       // the package number the kernel uses
  uint64_t l3Bytes = 0;  // sum of the L3 caches in this socket (0: unknown)

  bool operator==(const Socket&) const = default;
};

struct NumaNode {
  int osIndex = 0;        // the kernel's node number (/sys/devices/system/node/nodeN)
  int socket = 0;         // index into Host::sockets
  std::vector<int> cpus;  // OS numbers of the processing units (hardware threads)
  int cores = 0;          // physical cores among them
  uint64_t memoryBytes = 0;
  uint64_t l3Bytes = 0;  // L3 cache within this node (0: unknown)

  bool operator==(const NumaNode&) const = default;
};

enum class NicKind { kEthernet, kInfiniband, kRoce };

struct Nic {
  std::string name;  // interface (eth0) or RDMA device (mlx5_0)
  NicKind kind = NicKind::kEthernet;
  int numa = -1;           // index into Host::numaNodes; -1 when the kernel does not say
  double speedGbps = 0;    // link rate in Gb/s; 0 when unknown (virtual, or virtio)
  bool up = false;         // link up (Ethernet operstate, or IB port ACTIVE)
  bool isVirtual = false;  // no PCI device behind it (veth, bridge)
  std::string pciBusId;    // 0000:17:00.0, or empty
  int port = 0;            // RDMA port number (1-based); 0 for plain Ethernet
  std::string gid;         // RDMA: GID index 0 of the port
  std::string netdev;      // RoCE / IPoIB: the Ethernet-side interface name, if any

  bool operator==(const Nic&) const = default;
};

struct Gpu {
  int index = 0;  // CUDA device ordinal
  std::string name;
  std::string pciBusId;
  int numa = -1;  // index into Host::numaNodes; -1 when unknown
  uint64_t memoryBytes = 0;

  bool operator==(const Gpu&) const = default;
};

// One end of a link inside a host.
struct Endpoint {
  enum class Kind { kNuma, kNic, kGpu };
  Kind kind = Kind::kNuma;
  int index = 0;  // into Host::numaNodes, nics or gpus
  bool operator==(const Endpoint&) const = default;
};

enum class LinkKind {
  kMemory,   // NUMA node to NUMA node (the socket or inter-socket fabric)
  kPcie,     // a NIC or GPU to the NUMA node its PCI root sits on
  kGpuPeer,  // GPU to GPU through PCIe peer-to-peer
  kNvlink,   // GPU to GPU through NVLink / NVSwitch
};

// A link inside a host. Bandwidth and latency are what a cost model should assume:
// discovery fills in estimates per kind (documented in docs/TOPOLOGY.md), a file may
// state measured ones.
struct Link {
  Endpoint a;
  Endpoint b;
  LinkKind kind = LinkKind::kMemory;
  double bandwidthGBs = 0;  // GB/s, one direction
  double latencyUs = 0;

  bool operator==(const Link&) const = default;
};

// A host-to-host path through the network, from a NIC of one host to a NIC of the other.
struct NetworkLink {
  int hostA = 0;
  int nicA = 0;  // index into hosts[hostA].nics
  int hostB = 0;
  int nicB = 0;
  double bandwidthGBs = 0;
  double latencyUs = 0;

  bool operator==(const NetworkLink&) const = default;
};

struct Host {
  std::string name;      // hostname, or CC_HOSTNAME
  std::string identity;  // equal on two ranks exactly when they share the host
  std::vector<Socket> sockets;
  std::vector<NumaNode> numaNodes;
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
  std::vector<Link> links;

  int coreCount() const;
  // The processing units (hardware threads) its NUMA nodes list: the job's, where a cgroup
  // limits them.
  int cpuCount() const;
  // NUMA nodes of one socket, in index order.
  std::vector<int> numaNodesOfSocket(int socket) const;

  bool operator==(const Host&) const = default;
};

// Where a rank runs: indices into a System. numa is -1 when the rank is not bound to a
// single NUMA node; gpu is -1 for a CPU rank.
struct RankPlace {
  int host = 0;
  int numa = -1;
  int gpu = -1;
  bool operator==(const RankPlace&) const = default;
};

struct System {
  std::vector<Host> hosts;
  std::vector<NetworkLink> networkLinks;
  std::vector<RankPlace> ranks;  // the job's placement, when known (may be empty)

  bool operator==(const System&) const = default;
};

// Names used in the topology file, in logs and in cc-topo.
std::string_view toString(NicKind kind);
std::string_view toString(LinkKind kind);
std::string_view toString(Endpoint::Kind kind);
std::optional<NicKind> nicKindFromString(std::string_view text);
std::optional<LinkKind> linkKindFromString(std::string_view text);
std::optional<Endpoint::Kind> endpointKindFromString(std::string_view text);

// Linux cpulist format ("0-3,8,10-11") both ways; parse returns nullopt on bad text.
std::string formatCpuList(const std::vector<int>& cpus);
std::optional<std::vector<int>> parseCpuList(std::string_view text);

// "64 GiB", "512 KiB": for people, not for parsing.
std::string formatBytes(uint64_t bytes);

// Checks that every index in `system` points at something that exists (a NIC's NUMA
// node, a link's ends, a rank's host, ...). Messages name the field as the topology
// file spells it: "hosts[1].nics[0].numa: 3 is not a NUMA node of the host (it has 2)".
Status validate(const System& system);

// Rough figures for links discovery cannot measure (docs/TOPOLOGY.md lists them).
inline constexpr double kPcieBandwidthGBs = 24.0;  // PCIe 4.0 x16, one direction
inline constexpr double kPcieLatencyUs = 1.0;
inline constexpr double kSameSocketMemoryGBs = 60.0;   // between NUMA nodes of one socket
inline constexpr double kCrossSocketMemoryGBs = 30.0;  // across the socket interconnect
inline constexpr double kMemoryLatencyUs = 0.1;
inline constexpr double kCrossSocketLatencyUs = 0.2;
inline constexpr double kRdmaLatencyUs = 2.0;
inline constexpr double kEthernetLatencyUs = 15.0;

// Adds the links discovery can infer from placement alone: every pair of NUMA nodes
// (memory), every NIC and GPU to its NUMA node (PCIe). GPU-to-GPU links need CUDA or a
// file. Links already present between the same endpoints are kept as they are.
void addDefaultHostLinks(Host& host);

// Adds a NetworkLink between every pair of hosts that both have a NIC that is up,
// through each host's fastest such NIC, unless the pair is linked already. The
// bandwidth is the slower end's rate; unknown rates (virtual NICs) count as 10 Gb/s.
void addDefaultNetworkLinks(System& system);

}  // namespace cc::topology
