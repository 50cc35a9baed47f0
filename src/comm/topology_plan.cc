// The job's topology, gathered when a communicator is created, and the plan the
// collectives follow (src/topology/planner.h).
//
// Every rank discovers its own host (cached per process), then the ranks exchange over
// their fresh channels what the others cannot see: each rank its NUMA node, and the
// lowest rank of each host that host's description. From that every rank builds the
// same System and the same Plan. CC_TOPO_FILE replaces the detected system (the ranks
// are then placed as the file says, or spread over its hosts), so that plans for
// machines we do not have can be tried; CC_TOPO_DUMP_FILE writes what was detected.
#include <algorithm>
#include <map>
#include <optional>

#include "comm/communicator.h"
#include "comm/executor.h"
#include "core/log.h"
#include "topology/discover.h"
#include "topology/file.h"

namespace cc::comm {
namespace {

// What a rank tells every other: its NUMA node and the size of its host's description
// (0 unless it is the lowest rank of its host).
struct TopologyHeader {
  int32_t numa = -1;
  uint32_t hostBytes = 0;
};

// Host descriptions are a few KiB; anything past this is not one.
constexpr uint32_t kMaxHostBytes = 1 << 20;

// Every rank sends `mine` to every other; all[peer] receives peer's (all[me] = mine).
template <typename T>
Status exchangeWithAll(Communicator& comm, T& mine, std::vector<T>& all) {
  all.assign(static_cast<size_t>(comm.size()), mine);
  std::vector<PointToPoint> ops;
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer == comm.rank()) continue;
    ops.push_back({&comm, true, reinterpret_cast<std::byte*>(&mine), sizeof(T), peer, "topology"});
    ops.push_back({&comm, false, reinterpret_cast<std::byte*>(&all[static_cast<size_t>(peer)]),
                   sizeof(T), peer, "topology"});
  }
  return execute(ops);
}

// FNV-1a over the rings and trees: what the collectives follow.
uint64_t planHash(const topology::Plan& plan) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](int64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= static_cast<uint64_t>(value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  mix(plan.hostCount);
  for (const topology::Ring& ring : plan.rings) {
    mix(-1);
    for (int rank : ring.ranks) mix(rank);
  }
  for (const topology::Tree& tree : plan.trees) {
    mix(-2);
    for (int parent : tree.parent) mix(parent);
  }
  mix(-3);
  for (int cpus : plan.cpusOfHost) mix(cpus);  // the tuner decides by it
  return hash;
}

}  // namespace

// Every rank must follow the same rings and trees, or they wait on each other until the
// timeout. They do when they see the same system, but CC_TOPO_FILE is read by each rank
// from its own disk and environment: compare, and fail everywhere on a difference.
Status Communicator::checkSamePlan(const topology::Plan& plan) {
  uint64_t mine = planHash(plan);
  std::vector<uint64_t> theirs;
  CC_TRY(exchangeWithAll(*this, mine, theirs).withContext("comparing topology plans"));
  for (int peer = 0; peer < nranks_; ++peer) {
    if (theirs[static_cast<size_t>(peer)] != mine) {
      return invalidArgument(
          "rank " + std::to_string(peer) + " planned different rings or trees than rank " +
          std::to_string(rank_) + " (is CC_TOPO_FILE set, and the same file, on every rank?)");
    }
  }
  return Status::ok();
}

Status Communicator::gatherTopology() {
  int64_t startNs = nowNanos();
  TrafficScope control(*this, ccTrafficControl);
  CC_ASSIGN_OR_RETURN(topology::Host local, topology::discoverLocalHost());
  const int n = nranks_;
  // Hosts in order of their lowest rank; the lowest rank of each speaks for it.
  std::vector<int> hostIndex(static_cast<size_t>(n));
  std::vector<int> leaders;
  std::map<uint64_t, int> seen;
  for (int r = 0; r < n; ++r) {
    auto [it, added] =
        seen.emplace(hosts_[static_cast<size_t>(r)], static_cast<int>(leaders.size()));
    if (added) leaders.push_back(r);
    hostIndex[static_cast<size_t>(r)] = it->second;
  }
  const bool iLead = leaders[static_cast<size_t>(hostIndex[static_cast<size_t>(rank_)])] == rank_;
  std::string myHost = iLead ? topology::hostToJson(local) : std::string();
  if (myHost.size() > kMaxHostBytes) return internalError("this host's description exceeds 1 MiB");

  TopologyHeader mine{topology::currentNumaNode(), static_cast<uint32_t>(myHost.size())};
  std::vector<TopologyHeader> headers;
  CC_TRY(exchangeWithAll(*this, mine, headers).withContext("exchanging NUMA placement"));

  std::vector<std::string> hostTexts(leaders.size());
  std::vector<PointToPoint> ops;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank_) continue;
    if (!myHost.empty()) {
      ops.push_back({this, true, reinterpret_cast<std::byte*>(myHost.data()), myHost.size(), peer,
                     "topology"});
    }
    uint32_t bytes = headers[static_cast<size_t>(peer)].hostBytes;
    bool peerLeads = leaders[static_cast<size_t>(hostIndex[static_cast<size_t>(peer)])] == peer;
    if (bytes > kMaxHostBytes || (bytes > 0) != peerLeads) {
      return remoteError("rank " + std::to_string(peer) +
                         " sent an unexpected host description size (" + std::to_string(bytes) +
                         " bytes)");
    }
    if (bytes == 0) continue;
    std::string& text = hostTexts[static_cast<size_t>(hostIndex[static_cast<size_t>(peer)])];
    text.resize(bytes);
    ops.push_back(
        {this, false, reinterpret_cast<std::byte*>(text.data()), bytes, peer, "topology"});
  }
  CC_TRY(execute(ops).withContext("exchanging host descriptions"));

  // A leader reads back its own text, as the others do, so that every rank plans from
  // the same bits.
  if (iLead) hostTexts[static_cast<size_t>(hostIndex[static_cast<size_t>(rank_)])] = myHost;
  topology::System detected;
  for (size_t h = 0; h < leaders.size(); ++h) {
    CC_ASSIGN_OR_RETURN(topology::Host host,
                        topology::parseHost(hostTexts[h], "host description from rank " +
                                                              std::to_string(leaders[h])));
    detected.hosts.push_back(std::move(host));
  }
  std::vector<topology::RankPlace> places(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    places[static_cast<size_t>(r)].host = hostIndex[static_cast<size_t>(r)];
    places[static_cast<size_t>(r)].numa = headers[static_cast<size_t>(r)].numa;
  }
  if (rank_ == 0) {
    Status dumped = topology::dumpToEnvironmentFile(detected);
    if (!dumped.isOk()) log::warn("CC_TOPO_DUMP_FILE: {}", dumped.message());
  }

  CC_ASSIGN_OR_RETURN(std::optional<topology::System> fromFile, topology::systemFromEnvironment());
  const topology::System& system = fromFile ? *fromFile : detected;
  if (fromFile) {
    if (fromFile->ranks.size() == static_cast<size_t>(n)) {
      places = fromFile->ranks;
    } else {
      CC_ASSIGN_OR_RETURN(places, topology::placeRanks(*fromFile, n));
    }
  }
  CC_ASSIGN_OR_RETURN(topology::Plan plan, topology::planCollectives(system, places));
  CC_TRY(checkSamePlan(plan));
  plan_ = std::make_shared<const topology::Plan>(std::move(plan));
  const std::vector<int>& ring = plan_->rings.front().ranks;
  ringPosition_ = static_cast<int>(std::find(ring.begin(), ring.end(), rank_) - ring.begin());
  ringIsIdentity_ = true;
  for (int p = 0; p < n; ++p)
    ringIsIdentity_ = ringIsIdentity_ && ring[static_cast<size_t>(p)] == p;
  if (rank_ == 0 && log::enabled(log::Level::kInfo)) {
    log::info("topology of {} ranks on {} host(s){} ({:.1f} ms):\n{}", n, leaders.size(),
              fromFile ? " from CC_TOPO_FILE" : "", static_cast<double>(nowNanos() - startNs) / 1e6,
              topology::describe(*plan_));
  }
  return Status::ok();
}

}  // namespace cc::comm
