// cc-topo: prints the topology cc detects here (or the one a topology file describes) as
// an indented tree, then the rings and trees the planner would use for N ranks; --dot
// draws both for Graphviz, --dump writes the topology file. docs/TOPOLOGY.md.
#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "topology/discover.h"
#include "topology/file.h"
#include "topology/planner.h"

namespace cc::topology::tool {
namespace {

constexpr const char* kUsage =
    R"(usage: cc-topo [--file F] [-n N] [--max-rings K] [--dot] [--dump F]
Prints the detected topology (or the one in a topology file) and the rings and trees
cc would use for N ranks (docs/TOPOLOGY.md).

  --file F       read the topology file F instead of detecting (default: $CC_TOPO_FILE)
  -n, --ranks N  plan for N ranks (default: the file's placement, else one rank per
                 GPU, else one per core), placed block-wise over hosts
  --max-rings K  at most K rings (one per NIC; default 4)
  --dot          print a Graphviz drawing (topology and ring 0) instead of text
  --dump F       also write the topology file F (the format CC_TOPO_FILE reads)
  -h, --help     this text
)";

struct Options {
  std::string file;
  std::string dumpPath;
  int ranks = 0;  // 0: the default described in kUsage
  int maxRings = PlanOptions{}.maxRings;
  bool dot = false;
  bool help = false;
};

Status parseCount(const std::string& flag, const std::string& text, int low, int high, int& out) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    return invalidArgument(
        fmt::format("{}: \"{}\" is not an integer in [{}, {}]", flag, text, low, high));
  }
  out = value;
  return Status::ok();
}

Result<Options> parseArguments(int argc, char** argv) {
  Options options;
  if (const char* file = std::getenv("CC_TOPO_FILE"); file != nullptr) options.file = file;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> Result<std::string> {
      if (i + 1 >= argc) return invalidArgument(flag + " needs a value");
      return std::string(argv[++i]);
    };
    if (flag == "-h" || flag == "--help") {
      options.help = true;
    } else if (flag == "--dot") {
      options.dot = true;
    } else if (flag == "--file") {
      CC_ASSIGN_OR_RETURN(options.file, value());
    } else if (flag == "--dump") {
      CC_ASSIGN_OR_RETURN(options.dumpPath, value());
    } else if (flag == "-n" || flag == "--ranks") {
      CC_ASSIGN_OR_RETURN(const std::string text, value());
      CC_TRY(parseCount(flag, text, 1, 1 << 16, options.ranks));
    } else if (flag == "--max-rings") {
      CC_ASSIGN_OR_RETURN(const std::string text, value());
      CC_TRY(parseCount(flag, text, 1, 64, options.maxRings));
    } else {
      return invalidArgument("unknown argument \"" + flag + "\" (cc-topo --help lists the flags)");
    }
  }
  return options;
}

// ---- the text tree -------------------------------------------------------------------

std::string describeNic(const Nic& nic) {
  std::string text = fmt::format("nic {} ({}", nic.name, toString(nic.kind));
  text += nic.speedGbps > 0 ? fmt::format(", {:g} Gb/s", nic.speedGbps) : ", speed unknown";
  text += nic.up ? ", up" : ", down";
  if (nic.isVirtual) text += ", virtual";
  if (nic.port > 0) text += fmt::format(", port {}", nic.port);
  if (!nic.pciBusId.empty()) text += ", pci " + nic.pciBusId;
  if (!nic.netdev.empty()) text += ", netdev " + nic.netdev;
  if (!nic.gid.empty()) text += ", gid " + nic.gid;
  return text + ")";
}

std::string describeGpu(const Gpu& gpu) {
  std::string text = fmt::format("gpu {} {}", gpu.index, gpu.name.empty() ? "(unnamed)" : gpu.name);
  if (gpu.memoryBytes > 0) text += ", " + formatBytes(gpu.memoryBytes);
  if (!gpu.pciBusId.empty()) text += ", pci " + gpu.pciBusId;
  return text;
}

void printDevicesOnNuma(const Host& host, int numa, const std::string& indent) {
  for (const Nic& nic : host.nics) {
    if (nic.numa == numa) std::printf("%s%s\n", indent.c_str(), describeNic(nic).c_str());
  }
  for (const Gpu& gpu : host.gpus) {
    if (gpu.numa == numa) std::printf("%s%s\n", indent.c_str(), describeGpu(gpu).c_str());
  }
}

std::string endpointName(const Endpoint& end) {
  return fmt::format("{}{}", toString(end.kind), end.index);
}

// Links grouped by kind and figures, so 28 NVLink pairs take one line.
void printLinks(const Host& host) {
  std::map<std::string, std::vector<std::string>> groups;
  for (const Link& link : host.links) {
    const std::string key =
        fmt::format("{} {:g} GB/s {:g} us", toString(link.kind), link.bandwidthGBs, link.latencyUs);
    groups[key].push_back(endpointName(link.a) + "-" + endpointName(link.b));
  }
  for (const auto& [key, pairs] : groups) {
    std::printf("  links %s: %s\n", key.c_str(), fmt::format("{}", fmt::join(pairs, " ")).c_str());
  }
}

void printHost(const Host& host, int index) {
  std::printf("host %d %s%s: %zu socket(s), %zu NUMA node(s), %d cores, %zu NIC(s), %zu GPU(s)\n",
              index, host.name.c_str(),
              host.identity.empty() ? "" : (" [" + host.identity + "]").c_str(),
              host.sockets.size(), host.numaNodes.size(), host.coreCount(), host.nics.size(),
              host.gpus.size());
  for (int socket = 0; socket < static_cast<int>(host.sockets.size()); ++socket) {
    const uint64_t l3 = host.sockets[socket].l3Bytes;
    std::printf("  socket %d%s\n", socket, l3 > 0 ? (" (L3 " + formatBytes(l3) + ")").c_str() : "");
    for (int numa : host.numaNodesOfSocket(socket)) {
      const NumaNode& node = host.numaNodes[numa];
      std::printf("    numa %d (node%d): cpus %s, %d cores, %s%s\n", numa, node.osIndex,
                  formatCpuList(node.cpus).c_str(), node.cores,
                  formatBytes(node.memoryBytes).c_str(),
                  node.l3Bytes > 0 ? (", L3 " + formatBytes(node.l3Bytes)).c_str() : "");
      printDevicesOnNuma(host, numa, "      ");
    }
  }
  bool anyUnplaced = false;
  for (const Nic& nic : host.nics) anyUnplaced = anyUnplaced || nic.numa < 0;
  for (const Gpu& gpu : host.gpus) anyUnplaced = anyUnplaced || gpu.numa < 0;
  if (anyUnplaced) {
    std::printf("  NUMA node unknown:\n");
    printDevicesOnNuma(host, -1, "    ");
  }
  printLinks(host);
}

void printSystem(const System& system) {
  for (int i = 0; i < static_cast<int>(system.hosts.size()); ++i) printHost(system.hosts[i], i);
  for (const NetworkLink& link : system.networkLinks) {
    std::printf("network: host %d %s <-> host %d %s: %g GB/s, %g us\n", link.hostA,
                system.hosts[link.hostA].nics[link.nicA].name.c_str(), link.hostB,
                system.hosts[link.hostB].nics[link.nicB].name.c_str(), link.bandwidthGBs,
                link.latencyUs);
  }
}

// ---- the Graphviz drawing --------------------------------------------------------------------

std::string nodeId(int host, const Endpoint& end) {
  return fmt::format("h{}_{}{}", host, toString(end.kind), end.index);
}

void printDotHost(const System& system, int h, const Plan& plan, bool drawRanks) {
  const Host& host = system.hosts[h];
  std::printf("  subgraph cluster_h%d {\n    label=\"host %d: %s\";\n", h, h, host.name.c_str());
  for (int socket = 0; socket < static_cast<int>(host.sockets.size()); ++socket) {
    std::printf("    subgraph cluster_h%d_s%d {\n      label=\"socket %d\";\n", h, socket, socket);
    for (int numa : host.numaNodesOfSocket(socket)) {
      const NumaNode& node = host.numaNodes[numa];
      std::printf("      %s [label=\"NUMA %d\\ncpus %s\\n%s\"];\n",
                  nodeId(h, {Endpoint::Kind::kNuma, numa}).c_str(), numa,
                  formatCpuList(node.cpus).c_str(), formatBytes(node.memoryBytes).c_str());
      for (size_t rank = 0; drawRanks && rank < plan.places.size(); ++rank) {
        if (plan.places[rank].host == h && plan.numaOfRank[rank] == numa) {
          std::printf("      r%zu [shape=circle,label=\"%zu\"];\n", rank, rank);
        }
      }
    }
    std::printf("    }\n");
  }
  for (int i = 0; i < static_cast<int>(host.nics.size()); ++i) {
    const Nic& nic = host.nics[i];
    std::printf("    %s [shape=ellipse,label=\"%s\\n%s %g Gb/s\"];\n",
                nodeId(h, {Endpoint::Kind::kNic, i}).c_str(), nic.name.c_str(),
                std::string(toString(nic.kind)).c_str(), nic.speedGbps);
  }
  for (int i = 0; i < static_cast<int>(host.gpus.size()); ++i) {
    std::printf("    %s [shape=box3d,label=\"GPU %d\"];\n",
                nodeId(h, {Endpoint::Kind::kGpu, i}).c_str(), i);
  }
  std::printf("  }\n");
  for (const Link& link : host.links) {
    std::printf("  %s -- %s [label=\"%s %g GB/s\"];\n", nodeId(h, link.a).c_str(),
                nodeId(h, link.b).c_str(), std::string(toString(link.kind)).c_str(),
                link.bandwidthGBs);
  }
}

void printDot(const System& system, const Plan& plan) {
  constexpr size_t kMostRanksDrawn = 128;  // beyond that the drawing is unreadable anyway
  const bool drawRanks = plan.places.size() <= kMostRanksDrawn;
  std::printf("graph cc_topology {\n  node [shape=box,fontsize=10];\n  edge [fontsize=8];\n");
  for (int h = 0; h < static_cast<int>(system.hosts.size()); ++h)
    printDotHost(system, h, plan, drawRanks);
  for (const NetworkLink& link : system.networkLinks) {
    std::printf("  %s -- %s [style=bold,label=\"%g GB/s\"];\n",
                nodeId(link.hostA, {Endpoint::Kind::kNic, link.nicA}).c_str(),
                nodeId(link.hostB, {Endpoint::Kind::kNic, link.nicB}).c_str(), link.bandwidthGBs);
  }
  if (drawRanks && !plan.rings.empty()) {
    const std::vector<int>& ring = plan.rings[0].ranks;
    for (size_t i = 0; i < ring.size() && ring.size() > 1; ++i) {
      std::printf("  r%d -- r%d [dir=forward,color=red,constraint=false];\n", ring[i],
                  ring[(i + 1) % ring.size()]);
    }
  }
  std::printf("}\n");
}

// ---- putting it together -------------------------------------------------------------------

Result<System> loadSystem(const Options& options, std::string& source) {
  if (!options.file.empty()) {
    source = "file " + options.file;
    return readSystemFile(options.file);
  }
  CC_ASSIGN_OR_RETURN(Host host, discoverLocalHost());
  const DiscoveryTiming timing = discoveryTiming();
  source = fmt::format(
      "detected in {:.1f} ms (hwloc init {:.1f} + load {:.1f} ms, NICs {:.1f} ms, GPUs {:.1f} ms)",
      timing.totalMs, timing.hwlocInitMs, timing.hwlocLoadMs, timing.nicsMs, timing.gpusMs);
  System system;
  system.hosts.push_back(std::move(host));
  return system;
}

Result<std::vector<RankPlace>> choosePlaces(const System& system, const Options& options,
                                            std::string& how) {
  if (options.ranks == 0 && !system.ranks.empty()) {
    how = "the file's placement";
    return system.ranks;
  }
  int count = options.ranks;
  how = fmt::format("{} ranks (-n)", count);
  if (count == 0) {
    int gpus = 0;
    int cores = 0;
    for (const Host& host : system.hosts) {
      gpus += static_cast<int>(host.gpus.size());
      cores += host.coreCount();
    }
    count = std::max(1, gpus > 0 ? gpus : cores);
    how = fmt::format("{} ranks, one per {}", count, gpus > 0 ? "GPU" : "core");
  }
  return placeRanks(system, count);
}

int fail(const Status& status) {
  std::fprintf(stderr, "cc-topo: %s\n", status.message().c_str());
  return 2;
}

int run(int argc, char** argv) {
  auto parsed = parseArguments(argc, argv);
  if (!parsed.isOk()) return fail(parsed.status());
  const Options& options = parsed.value();
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string source;
  auto system = loadSystem(options, source);
  if (!system.isOk()) return fail(system.status());
  if (!options.dumpPath.empty()) {
    const Status written = writeSystemFile(system.value(), options.dumpPath);
    if (!written.isOk()) return fail(written);
  }
  std::string how;
  auto places = choosePlaces(system.value(), options, how);
  if (!places.isOk()) return fail(places.status());
  auto plan = planCollectives(system.value(), places.value(), PlanOptions{options.maxRings});
  if (!plan.isOk()) return fail(plan.status());
  if (options.dot) {
    printDot(system.value(), plan.value());
    return 0;
  }
  std::printf("topology: %s\n", source.c_str());
  printSystem(system.value());
  std::printf("\nplacement: %s\n", how.c_str());
  std::fputs(describe(plan.value()).c_str(), stdout);
  if (!options.dumpPath.empty()) std::printf("\nwrote %s\n", options.dumpPath.c_str());
  return 0;
}

}  // namespace
}  // namespace cc::topology::tool

int main(int argc, char** argv) { return cc::topology::tool::run(argc, argv); }
