#include "topology/discover.h"

#include <hwloc.h>
#include <infiniband/verbs.h>
#include <net/if.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>

#include "core/bootstrap.h"
#include "core/log.h"

#ifdef CC_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cc::topology {
namespace {

namespace fs = std::filesystem;

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// ---- sysfs helpers -------------------------------------------------------------------

std::string readFirstLine(const fs::path& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

std::optional<long> readNumber(const fs::path& path) {
  const std::string text = readFirstLine(path);
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 0);  // base 0: "0x1003" flags too
  if (end == text.c_str()) return std::nullopt;
  return value;
}

bool isPciBusId(const std::string& name) {  // dddd:bb:dd.f
  return name.size() == 12 && name[4] == ':' && name[7] == ':' && name[10] == '.';
}

// The PCI address behind a sysfs device link. Virtio NICs sit one level below their PCI
// function (.../0000:00:03.0/virtio2), so the path is walked up to the nearest one.
std::string pciBusIdOf(const fs::path& deviceLink) {
  std::error_code error;
  fs::path path = fs::canonical(deviceLink, error);
  if (error) return "";
  for (; path.has_filename(); path = path.parent_path()) {
    if (isPciBusId(path.filename().string())) return path.filename().string();
  }
  return "";
}

// The kernel's NUMA node of a device, from its own numa_node or its PCI function's.
int osNumaNodeOf(const fs::path& deviceDir, const std::string& pciBusId) {
  if (auto node = readNumber(deviceDir / "numa_node")) return static_cast<int>(*node);
  if (pciBusId.empty()) return -1;
  return static_cast<int>(
      readNumber(fs::path("/sys/bus/pci/devices") / pciBusId / "numa_node").value_or(-1));
}

// Host::numaNodes index of a kernel node number. Single-node hosts (and VMs) often
// report -1 for their devices; there the one node is the right answer.
int numaIndexOf(const Host& host, int osNode) {
  for (int i = 0; i < static_cast<int>(host.numaNodes.size()); ++i) {
    if (host.numaNodes[i].osIndex == osNode) return i;
  }
  return host.numaNodes.size() == 1 ? 0 : -1;
}

// ---- hwloc: sockets, NUMA nodes, cores, L3 ---------------------------------------------

struct TopologyDeleter {
  void operator()(hwloc_topology* topology) const { hwloc_topology_destroy(topology); }
};
using TopologyHandle = std::unique_ptr<hwloc_topology, TopologyDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* bitmap) const { hwloc_bitmap_free(bitmap); }
};
using BitmapHandle = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Result<TopologyHandle> loadHwloc(DiscoveryTiming& timing) {
  auto start = std::chrono::steady_clock::now();
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return systemError("hwloc_topology_init", errno);
  TopologyHandle topology(raw);
  // Instruction caches and L1/L2 are never used; I/O objects are off by default
  // (sysfs gives device placement for less: see the file comment in discover.h).
  hwloc_topology_set_icache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_L1CACHE, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_L2CACHE, HWLOC_TYPE_FILTER_KEEP_NONE);
  timing.hwlocInitMs = millisecondsSince(start);
  start = std::chrono::steady_clock::now();
  if (hwloc_topology_load(raw) != 0) return systemError("hwloc_topology_load", errno);
  timing.hwlocLoadMs = millisecondsSince(start);
  return topology;
}

std::vector<int> bitmapToList(hwloc_const_bitmap_t bitmap) {
  std::vector<int> items;
  if (bitmap == nullptr) return items;
  for (int id = hwloc_bitmap_first(bitmap); id >= 0; id = hwloc_bitmap_next(bitmap, id)) {
    items.push_back(id);
  }
  return items;
}

// Sum of the L3 caches that serve any CPU of `cpus`.
uint64_t l3BytesServing(hwloc_topology_t topology, hwloc_const_cpuset_t cpus) {
  uint64_t bytes = 0;
  const int count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_L3CACHE);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t cache =
        hwloc_get_obj_by_type(topology, HWLOC_OBJ_L3CACHE, static_cast<unsigned>(i));
    if (cpus != nullptr && hwloc_bitmap_intersects(cache->cpuset, cpus))
      bytes += cache->attr->cache.size;
  }
  return bytes;
}

// Packages (sockets). A VM may show none; then the whole machine is one socket.
void readSockets(hwloc_topology_t topology, Host& host) {
  const int count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t package =
        hwloc_get_obj_by_type(topology, HWLOC_OBJ_PACKAGE, static_cast<unsigned>(i));
    host.sockets.push_back(
        // hwloc says (unsigned)-1 when the kernel gives no package number.
        Socket{package->os_index == HWLOC_UNKNOWN_INDEX ? 0 : static_cast<int>(package->os_index),
               l3BytesServing(topology, package->cpuset)});
  }
  if (host.sockets.empty()) {
    host.sockets.push_back(
        Socket{0, l3BytesServing(topology, hwloc_topology_get_topology_cpuset(topology))});
  }
}

// The socket a NUMA node belongs to: the first package sharing a CPU with it (a node
// without CPUs, such as CXL memory, is put on socket 0).
int socketOf(hwloc_topology_t topology, hwloc_obj_t node) {
  const int count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t package =
        hwloc_get_obj_by_type(topology, HWLOC_OBJ_PACKAGE, static_cast<unsigned>(i));
    if (hwloc_bitmap_intersects(package->cpuset, node->cpuset)) return i;
  }
  return 0;
}

void readNumaNodes(hwloc_topology_t topology, Host& host) {
  const int count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t node =
        hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    NumaNode numa;
    numa.osIndex = node->os_index == HWLOC_UNKNOWN_INDEX ? 0 : static_cast<int>(node->os_index);
    numa.socket = socketOf(topology, node);
    numa.cpus = bitmapToList(node->cpuset);
    numa.cores = hwloc_get_nbobjs_inside_cpuset_by_type(topology, node->cpuset, HWLOC_OBJ_CORE);
    numa.memoryBytes = node->attr->numanode.local_memory;
    numa.l3Bytes = l3BytesServing(topology, node->cpuset);
    host.numaNodes.push_back(std::move(numa));
  }
}

// ---- NICs: Ethernet through sysfs, RDMA through libibverbs ---------------------------

bool interfaceIsUp(const fs::path& dir) {
  const std::string state = readFirstLine(dir / "operstate");
  if (state == "up") return true;
  // Some virtual devices never report a state; administratively up and running is up.
  const long flags = readNumber(dir / "flags").value_or(0);
  return state == "unknown" && (flags & IFF_UP) != 0 && (flags & IFF_RUNNING) != 0;
}

constexpr long kArphrdEther = 1;  // /sys/class/net/<if>/type of Ethernet devices

void discoverEthernetNics(Host& host) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/sys/class/net", error)) {
    const fs::path dir = entry.path();
    const std::string name = dir.filename().string();
    if (name == "lo" || readNumber(dir / "type").value_or(-1) != kArphrdEther) continue;
    Nic nic;
    nic.name = name;
    nic.kind = NicKind::kEthernet;
    nic.up = interfaceIsUp(dir);
    nic.isVirtual = !fs::exists(dir / "device");
    // Virtual devices (bridges, veth, docker) count only when up: a veth pair is how
    // the multi-host tests join their namespaces.
    if (nic.isVirtual && !nic.up) continue;
    if (!nic.isVirtual) {
      nic.pciBusId = pciBusIdOf(dir / "device");
      nic.numa = numaIndexOf(host, osNumaNodeOf(dir / "device", nic.pciBusId));
    }
    const long megabits = readNumber(dir / "speed").value_or(-1);  // -1: down or unknown
    nic.speedGbps = megabits > 0 ? static_cast<double>(megabits) / 1000.0 : 0;
    host.nics.push_back(std::move(nic));
  }
}

// Gb/s of one lane for ibv_port_attr::active_speed (the IBTA encoding).
double laneGbps(uint8_t activeSpeed) {
  switch (activeSpeed) {
    case 1:
      return 2.5;  // SDR
    case 2:
      return 5.0;  // DDR
    case 4:
      return 10.0;  // QDR
    case 8:
      return 10.0;  // FDR10
    case 16:
      return 14.0;  // FDR
    case 32:
      return 25.0;  // EDR
    case 64:
      return 50.0;  // HDR
    case 128:
      return 100.0;  // NDR
    default:
      return 0;
  }
}

int laneCount(uint8_t activeWidth) {
  switch (activeWidth) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
    default:
      return 0;
  }
}

std::string formatGid(const ibv_gid& gid) {
  std::string text;
  for (int i = 0; i < 16; i += 2) {
    char group[8];
    std::snprintf(group, sizeof(group), "%s%02x%02x", i == 0 ? "" : ":", gid.raw[i],
                  gid.raw[i + 1]);
    text += group;
  }
  return text;
}

// The Ethernet-side interface of a RoCE or IPoIB device, if the kernel shows one.
std::string netdevOf(const fs::path& deviceDir) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(deviceDir / "net", error)) {
    return entry.path().filename().string();
  }
  return "";
}

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* context) const { ibv_close_device(context); }
};

void addRdmaPorts(Host& host, ibv_context* context, const std::string& name) {
  ibv_device_attr attributes{};
  if (ibv_query_device(context, &attributes) != 0) {
    log::info("topology: ibv_query_device({}) failed; device skipped", name);
    return;
  }
  const fs::path deviceDir = fs::path("/sys/class/infiniband") / name / "device";
  for (int port = 1; port <= attributes.phys_port_cnt; ++port) {
    ibv_port_attr portAttributes{};
    if (ibv_query_port(context, static_cast<uint8_t>(port), &portAttributes) != 0) continue;
    Nic nic;
    nic.name = name;
    nic.port = port;
    nic.kind = portAttributes.link_layer == IBV_LINK_LAYER_ETHERNET ? NicKind::kRoce
                                                                    : NicKind::kInfiniband;
    nic.up = portAttributes.state == IBV_PORT_ACTIVE;
    nic.speedGbps = laneGbps(portAttributes.active_speed) * laneCount(portAttributes.active_width);
    ibv_gid gid{};
    if (ibv_query_gid(context, static_cast<uint8_t>(port), 0, &gid) == 0) nic.gid = formatGid(gid);
    nic.pciBusId = pciBusIdOf(deviceDir);
    nic.numa = numaIndexOf(host, osNumaNodeOf(deviceDir, nic.pciBusId));
    nic.netdev = netdevOf(deviceDir);
    host.nics.push_back(std::move(nic));
  }
}

void discoverRdmaNics(Host& host) {
  // Without RDMA devices, skip libibverbs altogether: loading its providers costs
  // milliseconds and some print warnings.
  std::error_code error;
  if (!fs::exists("/sys/class/infiniband", error)) return;
  int count = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
  if (!list) return;
  for (int i = 0; i < count; ++i) {
    const std::string name = ibv_get_device_name(list.get()[i]);
    std::unique_ptr<ibv_context, ContextDeleter> context(ibv_open_device(list.get()[i]));
    if (!context) {
      log::info("topology: cannot open RDMA device {}; skipped", name);
      continue;
    }
    addRdmaPorts(host, context.get(), name);
  }
}

// A RoCE (or IPoIB) port and its Ethernet interface are one NIC: keep the RDMA entry,
// which says more, and remember the interface's name on it.
void mergeRdmaAndEthernet(Host& host) {
  std::vector<Nic> merged;
  for (const Nic& nic : host.nics) {
    auto rdma = std::find_if(host.nics.begin(), host.nics.end(), [&](const Nic& other) {
      return other.kind != NicKind::kEthernet && !nic.pciBusId.empty() &&
             other.pciBusId == nic.pciBusId;
    });
    if (nic.kind == NicKind::kEthernet && rdma != host.nics.end()) {
      if (rdma->netdev.empty()) rdma->netdev = nic.name;
      continue;
    }
    merged.push_back(nic);
  }
  host.nics = std::move(merged);
}

void discoverNics(Host& host) {
  discoverEthernetNics(host);
  discoverRdmaNics(host);
  mergeRdmaAndEthernet(host);
  // A stable order (by name, then port) so that every rank of a host numbers them alike.
  std::sort(host.nics.begin(), host.nics.end(), [](const Nic& a, const Nic& b) {
    return a.name != b.name ? a.name < b.name : a.port < b.port;
  });
}

// ---- GPUs (CUDA builds only) ------------------------------------------------------------

#ifdef CC_WITH_CUDA
constexpr double kNvlinkBandwidthGBs = 150.0;

void addGpuPeerLinks(Host& host) {
  const int count = static_cast<int>(host.gpus.size());
  for (int i = 0; i < count; ++i) {
    for (int j = i + 1; j < count; ++j) {
      int forward = 0;
      int backward = 0;
      if (cudaDeviceCanAccessPeer(&forward, i, j) != cudaSuccess ||
          cudaDeviceCanAccessPeer(&backward, j, i) != cudaSuccess || !forward || !backward) {
        continue;
      }
      // Without NVML, native peer atomics are the sign of NVLink: PCIe peers lack them.
      int atomics = 0;
      (void)cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, i, j);
      const bool nvlink = atomics != 0;
      host.links.push_back(Link{{Endpoint::Kind::kGpu, i},
                                {Endpoint::Kind::kGpu, j},
                                nvlink ? LinkKind::kNvlink : LinkKind::kGpuPeer,
                                nvlink ? kNvlinkBandwidthGBs : kPcieBandwidthGBs,
                                nvlink ? 0.5 : kPcieLatencyUs});
    }
  }
}

void discoverGpus(Host& host) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: no GPUs, not an error
    return;
  }
  for (int i = 0; i < count; ++i) {
    Gpu gpu;
    gpu.index = i;
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, i) == cudaSuccess) {
      gpu.name = properties.name;
      gpu.memoryBytes = properties.totalGlobalMem;
    }
    char busId[32] = {};
    if (cudaDeviceGetPCIBusId(busId, sizeof(busId), i) == cudaSuccess) {
      gpu.pciBusId = busId;
      // CUDA prints hex digits in upper case, sysfs in lower case.
      std::transform(gpu.pciBusId.begin(), gpu.pciBusId.end(), gpu.pciBusId.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    }
    const fs::path deviceDir = fs::path("/sys/bus/pci/devices") / gpu.pciBusId;
    gpu.numa = numaIndexOf(host, gpu.pciBusId.empty() ? -1 : osNumaNodeOf(deviceDir, gpu.pciBusId));
    host.gpus.push_back(std::move(gpu));
  }
  addGpuPeerLinks(host);
}
#else
void discoverGpus(Host&) {}
#endif

// ---- the per-process cache ----------------------------------------------------------------

struct LocalTopology {
  TopologyHandle hwloc;              // kept for currentNumaNode()
  std::optional<Result<Host>> host;  // the hardware part; name and identity are refreshed
  DiscoveryTiming timing;
};

Result<Host> discoverHardware(LocalTopology& local) {
  const auto start = std::chrono::steady_clock::now();
  CC_ASSIGN_OR_RETURN(local.hwloc, loadHwloc(local.timing));
  Host host;
  readSockets(local.hwloc.get(), host);
  readNumaNodes(local.hwloc.get(), host);
  auto step = std::chrono::steady_clock::now();
  discoverNics(host);
  local.timing.nicsMs = millisecondsSince(step);
  step = std::chrono::steady_clock::now();
  discoverGpus(host);
  local.timing.gpusMs = millisecondsSince(step);
  addDefaultHostLinks(host);
  local.timing.totalMs = millisecondsSince(start);
  log::info(
      "topology: discovered {} socket(s), {} NUMA node(s), {} cores, {} NIC(s), {} GPU(s) in "
      "{:.1f} ms (hwloc init {:.1f} + load {:.1f} ms, NICs {:.1f} ms, GPUs {:.1f} ms)",
      host.sockets.size(), host.numaNodes.size(), host.coreCount(), host.nics.size(),
      host.gpus.size(), local.timing.totalMs, local.timing.hwlocInitMs, local.timing.hwlocLoadMs,
      local.timing.nicsMs, local.timing.gpusMs);
  return host;
}

LocalTopology& localTopology() {
  static LocalTopology local;
  static std::once_flag once;
  std::call_once(once, [] { local.host = discoverHardware(local); });
  return local;
}

std::string identityText() {
  char text[24];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(bootstrap::hostHash()));
  return text;
}

}  // namespace

Result<Host> discoverLocalHost() {
  Result<Host> cached = *localTopology().host;
  if (!cached.isOk()) return cached.status().withContext("topology discovery");
  Host host = std::move(cached).value();
  host.name = bootstrap::hostName();
  host.identity = identityText();
  return host;
}

int currentNumaNode() {
  LocalTopology& local = localTopology();
  if (!local.hwloc) return -1;
  hwloc_topology_t topology = local.hwloc.get();
  const int nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  if (nodes <= 1) return 0;
  BitmapHandle binding(hwloc_bitmap_alloc());
  if (!binding || hwloc_get_cpubind(topology, binding.get(), HWLOC_CPUBIND_PROCESS) != 0) return -1;
  int found = -1;
  for (int i = 0; i < nodes; ++i) {
    hwloc_obj_t node =
        hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (!hwloc_bitmap_intersects(node->cpuset, binding.get())) continue;
    if (found >= 0) return -1;  // bound across nodes (or not bound at all)
    found = i;
  }
  return found;
}

DiscoveryTiming discoveryTiming() { return localTopology().timing; }

}  // namespace cc::topology
