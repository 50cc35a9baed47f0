#include "topology/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace cc::topology {

std::vector<int> usableNics(const Host& host) {
  std::vector<int> up;
  bool anyRdma = false;
  for (int i = 0; i < static_cast<int>(host.nics.size()); ++i) {
    if (!host.nics[i].up) continue;
    up.push_back(i);
    anyRdma = anyRdma || host.nics[i].kind != NicKind::kEthernet;
  }
  if (anyRdma) {
    std::erase_if(up, [&](int i) { return host.nics[i].kind == NicKind::kEthernet; });
  }
  double fastest = 0;
  for (int i : up) fastest = std::max(fastest, host.nics[i].speedGbps);
  std::erase_if(up, [&](int i) { return host.nics[i].speedGbps < fastest / 2; });
  return up;
}

int nicDistance(const Host& host, int numa, const Nic& nic) {
  if (numa < 0 || nic.numa < 0) return 2;
  if (numa == nic.numa) return 0;
  return host.numaNodes[numa].socket == host.numaNodes[nic.numa].socket ? 1 : 2;
}

int effectiveNuma(const Host& host, const RankPlace& place) {
  if (place.gpu >= 0 && host.gpus[place.gpu].numa >= 0) return host.gpus[place.gpu].numa;
  return place.numa;
}

namespace {

// The ranks of one host grouped by NUMA node (effective NUMA; -1 is a group of its own).
struct NumaGroup {
  int numa = -1;
  std::vector<int> ranks;  // by GPU, then rank
};

struct HostRanks {
  int host = 0;
  std::vector<NumaGroup> groups;  // by NUMA index, the unbound group last
  std::vector<int> nics;          // usableNics(host)
};

Status checkPlaces(const System& system, std::span<const RankPlace> places) {
  if (places.empty()) return invalidArgument("planner: no ranks to plan for");
  for (size_t rank = 0; rank < places.size(); ++rank) {
    const RankPlace& place = places[rank];
    const std::string where = "planner: rank " + std::to_string(rank);
    if (place.host < 0 || place.host >= static_cast<int>(system.hosts.size())) {
      return invalidArgument(where + ": host " + std::to_string(place.host) +
                             " is not in the system (" + std::to_string(system.hosts.size()) +
                             " hosts)");
    }
    const Host& host = system.hosts[place.host];
    if (place.numa < -1 || place.numa >= static_cast<int>(host.numaNodes.size())) {
      return invalidArgument(where + ": NUMA node " + std::to_string(place.numa) +
                             " is not on host " + std::to_string(place.host) + " (" +
                             std::to_string(host.numaNodes.size()) + " nodes)");
    }
    if (place.gpu < -1 || place.gpu >= static_cast<int>(host.gpus.size())) {
      return invalidArgument(where + ": GPU " + std::to_string(place.gpu) + " is not on host " +
                             std::to_string(place.host) + " (" + std::to_string(host.gpus.size()) +
                             " GPUs)");
    }
  }
  return Status::ok();
}

// The hosts that hold ranks, in host order, each with its ranks grouped by NUMA node.
std::vector<HostRanks> groupRanks(const System& system, std::span<const RankPlace> places) {
  std::map<int, std::map<int, std::vector<int>>> byHostAndNuma;
  for (int rank = 0; rank < static_cast<int>(places.size()); ++rank) {
    const RankPlace& place = places[rank];
    byHostAndNuma[place.host][effectiveNuma(system.hosts[place.host], place)].push_back(rank);
  }
  std::vector<HostRanks> hosts;
  for (auto& [host, byNuma] : byHostAndNuma) {
    HostRanks entry{host, {}, usableNics(system.hosts[host])};
    for (auto& [numa, ranks] : byNuma) {
      // Ranks with GPUs in GPU order, so that neighbours in the ring are neighbours
      // on the PCIe tree too; the stable sort keeps rank order otherwise.
      std::stable_sort(ranks.begin(), ranks.end(),
                       [&](int a, int b) { return places[a].gpu < places[b].gpu; });
      entry.groups.push_back(NumaGroup{numa, ranks});
    }
    // std::map put -1 first; the unbound ranks go last, away from any NIC's group.
    if (entry.groups.size() > 1 && entry.groups.front().numa < 0) {
      std::rotate(entry.groups.begin(), entry.groups.begin() + 1, entry.groups.end());
    }
    hosts.push_back(std::move(entry));
  }
  return hosts;
}

// One host's stretch of ring `slot`: its NUMA groups one after the other (so the ring
// crosses NUMA boundaries groups-1 times), starting with the group nearest the ring's
// NIC and, when there are three or more, ending with the next nearest, so that the ring
// both enters and leaves the host near that NIC.
std::vector<int> hostSegment(const System& system, const HostRanks& entry, int slot) {
  std::vector<NumaGroup> groups = entry.groups;
  if (!entry.nics.empty()) {
    const Host& host = system.hosts[entry.host];
    const Nic& nic = host.nics[entry.nics[slot % entry.nics.size()]];
    std::stable_sort(groups.begin(), groups.end(), [&](const NumaGroup& a, const NumaGroup& b) {
      return nicDistance(host, a.numa, nic) < nicDistance(host, b.numa, nic);
    });
    if (groups.size() >= 3) std::rotate(groups.begin() + 1, groups.begin() + 2, groups.end());
  }
  std::vector<int> segment;
  for (const NumaGroup& group : groups)
    segment.insert(segment.end(), group.ranks.begin(), group.ranks.end());
  return segment;
}

int ringCount(const std::vector<HostRanks>& hosts, const PlanOptions& options) {
  if (hosts.size() < 2) return 1;
  size_t mostNics = 1;
  for (const HostRanks& entry : hosts) mostNics = std::max(mostNics, entry.nics.size());
  return static_cast<int>(
      std::clamp<size_t>(mostNics, 1, static_cast<size_t>(std::max(1, options.maxRings))));
}

// ---- trees ---------------------------------------------------------------------------------

// A balanced binary tree over positions [low, high] in in-order layout: the middle is the
// root of its range. Writes each position's parent position (-1 at the top).
void buildBinaryTree(int low, int high, int parent, std::vector<int>& parentOf) {
  if (low > high) return;
  const int middle = low + (high - low) / 2;
  parentOf[middle] = parent;
  buildBinaryTree(low, middle - 1, middle, parentOf);
  buildBinaryTree(middle + 1, high, middle, parentOf);
}

// The second tree of a double binary tree uses the hosts in another order, so that most
// hosts that are leaves in one tree are inner nodes in the other: mirrored for an even
// count (in-order leaves sit at even positions; mirroring makes them odd), shifted by
// one for an odd count.
std::vector<int> hostOrderForTree(int hostCount, int tree) {
  std::vector<int> order(hostCount);
  for (int i = 0; i < hostCount; ++i) {
    if (tree == 0) {
      order[i] = i;
    } else {
      order[i] = hostCount % 2 == 0 ? hostCount - 1 - i : (i + 1) % hostCount;
    }
  }
  return order;
}

void addEdge(Tree& tree, int parent, int child) {
  tree.parent[child] = parent;
  tree.children[parent].push_back(child);
}

// Tree `index`: each host's ranks in a chain in the order of ring `index`'s stretch
// (so its leader, the chain's head, sits near the ring's NIC); the leaders in a
// binary tree.
Tree buildTree(const std::vector<std::vector<int>>& segments, int rankCount, int index) {
  Tree tree;
  tree.parent.assign(rankCount, -1);
  tree.children.assign(rankCount, {});
  for (const std::vector<int>& segment : segments) {
    for (size_t i = 1; i < segment.size(); ++i) addEdge(tree, segment[i - 1], segment[i]);
  }
  const int hostCount = static_cast<int>(segments.size());
  const std::vector<int> order = hostOrderForTree(hostCount, index);
  std::vector<int> parentPosition(hostCount, -1);
  buildBinaryTree(0, hostCount - 1, -1, parentPosition);
  for (int position = 0; position < hostCount; ++position) {
    const int leader = segments[order[position]].front();
    if (parentPosition[position] < 0) {
      tree.root = leader;
    } else {
      addEdge(tree, segments[order[parentPosition[position]]].front(), leader);
    }
  }
  return tree;
}

// ---- NIC affinity --------------------------------------------------------------------------

// Each rank's nearest usable NIC; among equally near ones, the one with the fewest ranks
// so far (lowest index first), which spreads ranks round-robin.
std::vector<int> assignNics(const System& system, std::span<const RankPlace> places) {
  std::vector<int> nicOfRank(places.size(), -1);
  std::map<std::pair<int, int>, int> load;  // (host, nic) -> ranks given to it
  for (size_t rank = 0; rank < places.size(); ++rank) {
    const Host& host = system.hosts[places[rank].host];
    const int numa = effectiveNuma(host, places[rank]);
    int best = -1;
    for (int nic : usableNics(host)) {
      if (best < 0) {
        best = nic;
        continue;
      }
      const int distance = nicDistance(host, numa, host.nics[nic]);
      const int bestDistance = nicDistance(host, numa, host.nics[best]);
      const int nicLoad = load[{places[rank].host, nic}];
      const int bestLoad = load[{places[rank].host, best}];
      if (distance < bestDistance || (distance == bestDistance && nicLoad < bestLoad)) best = nic;
    }
    if (best >= 0) ++load[{places[rank].host, best}];
    nicOfRank[rank] = best;
  }
  return nicOfRank;
}

}  // namespace

Result<Plan> planCollectives(const System& system, std::span<const RankPlace> places,
                             const PlanOptions& options) {
  CC_TRY(checkPlaces(system, places));
  Plan plan;
  plan.places.assign(places.begin(), places.end());
  const std::vector<HostRanks> hosts = groupRanks(system, places);
  plan.hostCount = static_cast<int>(hosts.size());
  const int rankCount = static_cast<int>(places.size());

  std::vector<std::vector<std::vector<int>>> segmentsOfRing;
  for (int slot = 0; slot < ringCount(hosts, options); ++slot) {
    std::vector<std::vector<int>> segments;
    Ring ring;
    ring.nicSlot = slot;
    for (const HostRanks& entry : hosts) {
      segments.push_back(hostSegment(system, entry, slot));
      ring.ranks.insert(ring.ranks.end(), segments.back().begin(), segments.back().end());
    }
    plan.rings.push_back(std::move(ring));
    segmentsOfRing.push_back(std::move(segments));
  }
  const int treeCount = plan.hostCount > 1 ? 2 : 1;
  for (int index = 0; index < treeCount; ++index) {
    plan.trees.push_back(
        buildTree(segmentsOfRing[index % segmentsOfRing.size()], rankCount, index));
  }

  plan.nicOfRank = assignNics(system, places);
  for (int rank = 0; rank < rankCount; ++rank) {
    const int nic = plan.nicOfRank[rank];
    plan.nicNames.push_back(nic < 0 ? "" : system.hosts[places[rank].host].nics[nic].name);
  }
  for (const Host& host : system.hosts) {
    plan.hostNames.push_back(host.name);
    plan.cpusOfHost.push_back(host.cpuCount());
  }
  for (const RankPlace& place : places) {
    plan.numaOfRank.push_back(effectiveNuma(system.hosts[place.host], place));
  }
  return plan;
}

namespace {

std::string describeRing(const Plan& plan, const Ring& ring) {
  std::string text;
  for (size_t i = 0; i < ring.ranks.size(); ++i) {
    const RankPlace& place = plan.places[ring.ranks[i]];
    const bool newHost = i == 0 || plan.places[ring.ranks[i - 1]].host != place.host;
    if (newHost) {
      text += fmt::format("{}[h{}: ", i == 0 ? "" : "] ", place.host);
    } else if (plan.numaOfRank[ring.ranks[i - 1]] != plan.numaOfRank[ring.ranks[i]]) {
      text += "/ ";
    }
    text +=
        std::to_string(ring.ranks[i]) +
        (i + 1 < ring.ranks.size() && plan.places[ring.ranks[i + 1]].host == place.host ? " " : "");
  }
  return text + "]";
}

std::string describeTree(const Tree& tree) {
  std::string text = fmt::format("root {}:", tree.root);
  for (size_t rank = 0; rank < tree.children.size(); ++rank) {
    if (tree.children[rank].empty()) continue;
    text += fmt::format(" {}->{}", rank, fmt::join(tree.children[rank], ","));
  }
  return text;
}

// "host 0 (node-a): mlx5_0 <- 0 1, mlx5_1 <- 2 3"
std::string describeNics(const Plan& plan) {
  std::map<int, std::map<std::string, std::vector<int>>> byHost;
  for (size_t rank = 0; rank < plan.places.size(); ++rank) {
    const std::string name = plan.nicNames[rank].empty() ? "(no NIC)" : plan.nicNames[rank];
    byHost[plan.places[rank].host][name].push_back(static_cast<int>(rank));
  }
  std::string text;
  for (const auto& [host, byNic] : byHost) {
    const std::string hostName =
        host < static_cast<int>(plan.hostNames.size()) ? plan.hostNames[host] : "";
    text += fmt::format("  host {} ({}):", host, hostName);
    bool first = true;
    for (const auto& [name, ranks] : byNic) {
      text += fmt::format("{} {} <- {}", first ? "" : ",", name, fmt::join(ranks, " "));
      first = false;
    }
    text += "\n";
  }
  return text;
}

}  // namespace

std::string describe(const Plan& plan) {
  std::string text =
      fmt::format("plan for {} ranks on {} host(s): {} ring(s), {} tree(s)\n", plan.places.size(),
                  plan.hostCount, plan.rings.size(), plan.trees.size());
  for (size_t i = 0; i < plan.rings.size(); ++i) {
    text += fmt::format("  ring {} (NIC slot {}): {}\n", i, plan.rings[i].nicSlot,
                        describeRing(plan, plan.rings[i]));
  }
  for (size_t i = 0; i < plan.trees.size(); ++i) {
    text += fmt::format("  tree {} {}\n", i, describeTree(plan.trees[i]));
  }
  text += "NICs:\n" + describeNics(plan);
  return text;
}

namespace {

// The NUMA nodes of a host that can run ranks (memory-only nodes cannot); all of them if
// none lists CPUs (a hand-written file may leave cpus empty).
std::vector<int> numaNodesWithCpus(const Host& host) {
  std::vector<int> nodes;
  for (int i = 0; i < static_cast<int>(host.numaNodes.size()); ++i) {
    if (!host.numaNodes[i].cpus.empty() || host.numaNodes[i].cores > 0) nodes.push_back(i);
  }
  if (nodes.empty()) {
    for (int i = 0; i < static_cast<int>(host.numaNodes.size()); ++i) nodes.push_back(i);
  }
  return nodes;
}

RankPlace placeOnHost(const Host& host, int hostIndex, int localRank) {
  const std::vector<int> nodes = numaNodesWithCpus(host);
  RankPlace place{hostIndex, nodes[localRank % nodes.size()], -1};
  if (!host.gpus.empty()) {
    place.gpu = localRank % static_cast<int>(host.gpus.size());
    if (host.gpus[place.gpu].numa >= 0) place.numa = host.gpus[place.gpu].numa;
  }
  return place;
}

}  // namespace

Result<std::vector<RankPlace>> placeRanks(const System& system, int rankCount) {
  if (rankCount < 1)
    return invalidArgument("placeRanks: rank count " + std::to_string(rankCount) + " is not >= 1");
  if (system.hosts.empty()) return invalidArgument("placeRanks: the system has no hosts");
  for (size_t h = 0; h < system.hosts.size(); ++h) {
    if (system.hosts[h].numaNodes.empty()) {
      return invalidArgument("placeRanks: host " + std::to_string(h) + " has no NUMA node");
    }
  }
  const int hostCount = static_cast<int>(system.hosts.size());
  std::vector<RankPlace> places;
  // Balanced blocks: the first rankCount % hostCount hosts take one rank more.
  for (int host = 0; host < hostCount; ++host) {
    const int ranksHere = rankCount / hostCount + (host < rankCount % hostCount ? 1 : 0);
    for (int local = 0; local < ranksHere; ++local) {
      places.push_back(placeOnHost(system.hosts[host], host, local));
    }
  }
  return places;
}

}  // namespace cc::topology
