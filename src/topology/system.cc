#include "topology/system.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <numeric>

namespace cc::topology {

int Host::coreCount() const {
  return std::accumulate(numaNodes.begin(), numaNodes.end(), 0,
                         [](int sum, const NumaNode& node) { return sum + node.cores; });
}

int Host::cpuCount() const {
  return std::accumulate(numaNodes.begin(), numaNodes.end(), 0, [](int sum, const NumaNode& node) {
    return sum + static_cast<int>(node.cpus.size());
  });
}

std::vector<int> Host::numaNodesOfSocket(int socket) const {
  std::vector<int> nodes;
  for (int i = 0; i < static_cast<int>(numaNodes.size()); ++i) {
    if (numaNodes[i].socket == socket) nodes.push_back(i);
  }
  return nodes;
}

namespace {

// One table per enum, so that the names in files, logs and parsing cannot drift apart.
template <typename Enum, size_t N>
struct NameTable {
  std::pair<Enum, std::string_view> entries[N];

  std::string_view name(Enum value) const {
    for (const auto& [entry, text] : entries) {
      if (entry == value) return text;
    }
    return "?";
  }
  std::optional<Enum> parse(std::string_view text) const {
    for (const auto& [entry, name] : entries) {
      if (name == text) return entry;
    }
    return std::nullopt;
  }
};

constexpr NameTable<NicKind, 3> kNicKinds{{{NicKind::kEthernet, "ethernet"},
                                           {NicKind::kInfiniband, "infiniband"},
                                           {NicKind::kRoce, "roce"}}};
constexpr NameTable<LinkKind, 4> kLinkKinds{{{LinkKind::kMemory, "memory"},
                                             {LinkKind::kPcie, "pcie"},
                                             {LinkKind::kGpuPeer, "gpu-peer"},
                                             {LinkKind::kNvlink, "nvlink"}}};
constexpr NameTable<Endpoint::Kind, 3> kEndpointKinds{{{Endpoint::Kind::kNuma, "numa"},
                                                       {Endpoint::Kind::kNic, "nic"},
                                                       {Endpoint::Kind::kGpu, "gpu"}}};

}  // namespace

std::string_view toString(NicKind kind) { return kNicKinds.name(kind); }
std::string_view toString(LinkKind kind) { return kLinkKinds.name(kind); }
std::string_view toString(Endpoint::Kind kind) { return kEndpointKinds.name(kind); }
std::optional<NicKind> nicKindFromString(std::string_view text) { return kNicKinds.parse(text); }
std::optional<LinkKind> linkKindFromString(std::string_view text) { return kLinkKinds.parse(text); }
std::optional<Endpoint::Kind> endpointKindFromString(std::string_view text) {
  return kEndpointKinds.parse(text);
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string text;
  for (size_t i = 0; i < sorted.size();) {
    size_t last = i;
    while (last + 1 < sorted.size() && sorted[last + 1] == sorted[last] + 1) ++last;
    if (!text.empty()) text += ',';
    text += std::to_string(sorted[i]);
    if (last > i) text += '-' + std::to_string(sorted[last]);
    i = last + 1;
  }
  return text;
}

namespace {

std::optional<int> parseCpuNumber(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::vector<int>> parseCpuList(std::string_view text) {
  std::vector<int> cpus;
  // An empty list is valid (a memory-only NUMA node has no CPUs).
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t dash = item.find('-');
    const auto first = parseCpuNumber(item.substr(0, dash));
    const auto last =
        dash == std::string_view::npos ? first : parseCpuNumber(item.substr(dash + 1));
    // The bound keeps a typo like "0-99999999" from filling memory.
    if (!first || !last || *last < *first || *last - *first > (1 << 20)) return std::nullopt;
    for (int64_t cpu = *first; cpu <= *last; ++cpu) cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

std::string formatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (value == static_cast<double>(static_cast<uint64_t>(value))) {
    std::snprintf(text, sizeof(text), "%.0f %s", value, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

namespace {

bool hasLinkBetween(const Host& host, const Endpoint& a, const Endpoint& b) {
  return std::any_of(host.links.begin(), host.links.end(), [&](const Link& link) {
    return (link.a == a && link.b == b) || (link.a == b && link.b == a);
  });
}

void addLinkOnce(Host& host, const Link& link) {
  if (!hasLinkBetween(host, link.a, link.b)) host.links.push_back(link);
}

}  // namespace

void addDefaultHostLinks(Host& host) {
  using Kind = Endpoint::Kind;
  const int numaCount = static_cast<int>(host.numaNodes.size());
  for (int i = 0; i < numaCount; ++i) {
    for (int j = i + 1; j < numaCount; ++j) {
      const bool sameSocket = host.numaNodes[i].socket == host.numaNodes[j].socket;
      addLinkOnce(host, Link{{Kind::kNuma, i},
                             {Kind::kNuma, j},
                             LinkKind::kMemory,
                             sameSocket ? kSameSocketMemoryGBs : kCrossSocketMemoryGBs,
                             sameSocket ? kMemoryLatencyUs : kCrossSocketLatencyUs});
    }
  }
  for (int i = 0; i < static_cast<int>(host.nics.size()); ++i) {
    const Nic& nic = host.nics[i];
    if (nic.numa < 0) continue;
    // A NIC cannot move more than its wire rate, whatever its PCIe slot allows.
    const double bandwidth =
        nic.speedGbps > 0 ? std::min(kPcieBandwidthGBs, nic.speedGbps / 8) : kPcieBandwidthGBs;
    addLinkOnce(
        host,
        Link{{Kind::kNic, i}, {Kind::kNuma, nic.numa}, LinkKind::kPcie, bandwidth, kPcieLatencyUs});
  }
  for (int i = 0; i < static_cast<int>(host.gpus.size()); ++i) {
    if (host.gpus[i].numa < 0) continue;
    addLinkOnce(host, Link{{Kind::kGpu, i},
                           {Kind::kNuma, host.gpus[i].numa},
                           LinkKind::kPcie,
                           kPcieBandwidthGBs,
                           kPcieLatencyUs});
  }
}

namespace {

// The host's fastest NIC that is up (RDMA before Ethernet at equal rates), or -1.
int fastestUpNic(const Host& host) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(host.nics.size()); ++i) {
    const Nic& nic = host.nics[i];
    if (!nic.up) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const Nic& current = host.nics[best];
    const bool faster = nic.speedGbps > current.speedGbps;
    const bool sameButRdma = nic.speedGbps == current.speedGbps && nic.kind != NicKind::kEthernet &&
                             current.kind == NicKind::kEthernet;
    if (faster || sameButRdma) best = i;
  }
  return best;
}

bool hostsLinked(const System& system, int a, int b) {
  return std::any_of(
      system.networkLinks.begin(), system.networkLinks.end(), [&](const NetworkLink& link) {
        return (link.hostA == a && link.hostB == b) || (link.hostA == b && link.hostB == a);
      });
}

}  // namespace

void addDefaultNetworkLinks(System& system) {
  constexpr double kUnknownRateGbps = 10;
  const int hostCount = static_cast<int>(system.hosts.size());
  for (int a = 0; a < hostCount; ++a) {
    const int nicA = fastestUpNic(system.hosts[a]);
    for (int b = a + 1; b < hostCount && nicA >= 0; ++b) {
      const int nicB = fastestUpNic(system.hosts[b]);
      if (nicB < 0 || hostsLinked(system, a, b)) continue;
      const Nic& first = system.hosts[a].nics[nicA];
      const Nic& second = system.hosts[b].nics[nicB];
      const auto rate = [&](const Nic& nic) {
        return nic.speedGbps > 0 ? nic.speedGbps : kUnknownRateGbps;
      };
      const bool rdma = first.kind != NicKind::kEthernet && second.kind != NicKind::kEthernet;
      system.networkLinks.push_back(NetworkLink{a, nicA, b, nicB,
                                                std::min(rate(first), rate(second)) / 8,
                                                rdma ? kRdmaLatencyUs : kEthernetLatencyUs});
    }
  }
}

}  // namespace cc::topology

namespace cc::topology {
namespace {

std::string indexed(const std::string& where, const char* field, size_t index) {
  return where + "." + field + "[" + std::to_string(index) + "]";
}

// `value` must be an index into a list of `count` things, or -1 where that is allowed.
Status checkIndex(const std::string& field, int value, size_t count, const char* what,
                  bool allowNone) {
  if ((allowNone && value == -1) || (value >= 0 && static_cast<size_t>(value) < count)) {
    return Status::ok();
  }
  return invalidArgument(field + ": " + std::to_string(value) + " is not " + what + " (there are " +
                         std::to_string(count) + (allowNone ? "; -1 for none)" : ")"));
}

size_t endpointCount(const Host& host, Endpoint::Kind kind) {
  switch (kind) {
    case Endpoint::Kind::kNuma:
      return host.numaNodes.size();
    case Endpoint::Kind::kNic:
      return host.nics.size();
    case Endpoint::Kind::kGpu:
      return host.gpus.size();
  }
  return 0;
}

const char* endpointWhat(Endpoint::Kind kind) {
  switch (kind) {
    case Endpoint::Kind::kNuma:
      return "a NUMA node of the host";
    case Endpoint::Kind::kNic:
      return "a NIC of the host";
    case Endpoint::Kind::kGpu:
      return "a GPU of the host";
  }
  return "?";
}

Status validateHostLinks(const Host& host, const std::string& where) {
  for (size_t i = 0; i < host.links.size(); ++i) {
    const Link& link = host.links[i];
    const std::string field = indexed(where, "links", i);
    for (const auto& [end, name] : {std::pair{link.a, ".a"}, std::pair{link.b, ".b"}}) {
      CC_TRY(checkIndex(field + name, end.index, endpointCount(host, end.kind),
                        endpointWhat(end.kind), false));
    }
    if (link.a == link.b) return invalidArgument(field + ": both ends are the same");
    if (link.bandwidthGBs < 0 || link.latencyUs < 0) {
      return invalidArgument(field + ": bandwidth and latency must not be negative");
    }
  }
  return Status::ok();
}

Status validateHost(const Host& host, const std::string& where) {
  if (host.sockets.empty())
    return invalidArgument(where + ".sockets: a host needs at least one socket");
  if (host.numaNodes.empty()) {
    return invalidArgument(where + ".numa_nodes: a host needs at least one NUMA node");
  }
  for (size_t i = 0; i < host.numaNodes.size(); ++i) {
    const NumaNode& node = host.numaNodes[i];
    CC_TRY(checkIndex(indexed(where, "numa_nodes", i) + ".socket", node.socket, host.sockets.size(),
                      "a socket of the host", false));
    if (node.cores < 0)
      return invalidArgument(indexed(where, "numa_nodes", i) + ".cores: negative");
  }
  for (size_t i = 0; i < host.nics.size(); ++i) {
    CC_TRY(checkIndex(indexed(where, "nics", i) + ".numa", host.nics[i].numa, host.numaNodes.size(),
                      "a NUMA node of the host", true));
    if (host.nics[i].speedGbps < 0) {
      return invalidArgument(indexed(where, "nics", i) + ".speed_gbps: negative");
    }
  }
  for (size_t i = 0; i < host.gpus.size(); ++i) {
    CC_TRY(checkIndex(indexed(where, "gpus", i) + ".numa", host.gpus[i].numa, host.numaNodes.size(),
                      "a NUMA node of the host", true));
  }
  return validateHostLinks(host, where);
}

Status validateNetwork(const System& system) {
  const size_t hostCount = system.hosts.size();
  for (size_t i = 0; i < system.networkLinks.size(); ++i) {
    const NetworkLink& link = system.networkLinks[i];
    const std::string field = "network[" + std::to_string(i) + "]";
    CC_TRY(checkIndex(field + ".hosts[0]", link.hostA, hostCount, "a host", false));
    CC_TRY(checkIndex(field + ".hosts[1]", link.hostB, hostCount, "a host", false));
    if (link.hostA == link.hostB)
      return invalidArgument(field + ".hosts: both ends are the same host");
    CC_TRY(checkIndex(field + ".nics[0]", link.nicA, system.hosts[link.hostA].nics.size(),
                      "a NIC of hosts[0]", false));
    CC_TRY(checkIndex(field + ".nics[1]", link.nicB, system.hosts[link.hostB].nics.size(),
                      "a NIC of hosts[1]", false));
    if (link.bandwidthGBs < 0 || link.latencyUs < 0) {
      return invalidArgument(field + ": bandwidth and latency must not be negative");
    }
  }
  return Status::ok();
}

Status validateRanks(const System& system) {
  for (size_t i = 0; i < system.ranks.size(); ++i) {
    const RankPlace& place = system.ranks[i];
    const std::string field = "ranks[" + std::to_string(i) + "]";
    CC_TRY(checkIndex(field + ".host", place.host, system.hosts.size(), "a host", false));
    const Host& host = system.hosts[place.host];
    CC_TRY(checkIndex(field + ".numa", place.numa, host.numaNodes.size(), "a NUMA node of its host",
                      true));
    CC_TRY(checkIndex(field + ".gpu", place.gpu, host.gpus.size(), "a GPU of its host", true));
  }
  return Status::ok();
}

}  // namespace

Status validate(const System& system) {
  if (system.hosts.empty()) return invalidArgument("hosts: a system needs at least one host");
  for (size_t i = 0; i < system.hosts.size(); ++i) {
    CC_TRY(validateHost(system.hosts[i], "hosts[" + std::to_string(i) + "]"));
  }
  CC_TRY(validateNetwork(system));
  return validateRanks(system);
}

}  // namespace cc::topology
