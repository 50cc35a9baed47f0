// The cost model. Each algorithm's time is latency × steps + bytes moved / bandwidth
// (+ bytes reduced / reduction bandwidth), with per-transport constants; the cheapest
// candidate wins. The constants are round figures chosen so that the model ranks the
// algorithms the way cc-bench found them ranked on the 2-core KVM guests cc is developed
// on (docs/PERFORMANCE.md); they are not measured at start-up and do not predict times.
#include "collectives/tuner.h"

#include <algorithm>
#include <cmath>

#include "collectives/algorithms.h"
#include "collectives/direct.h"
#include "collectives/reduce_kernels.h"
#include "core/log.h"

namespace cc::collectives {
namespace {

struct Link {
  double alphaMicros;    // per point-to-point step
  double bytesPerMicro;  // per step, one direction
};
constexpr Link kShmLink{1.5, 4000.0};
constexpr Link kTcpLink{40.0, 2500.0};
constexpr double kDirectSyncMicros = 0.4;        // one flag handshake in shared memory
constexpr double kCopyBytesPerMicro = 9000.0;    // memcpy into or out of staging, per rank
constexpr double kReduceBytesPerMicro = 8000.0;  // output bytes of a two-input reduction

constexpr size_t kMinChunkBytes = 32 << 10;
constexpr size_t kMaxChunkBytes = 1 << 20;
constexpr size_t kDirectBlockBytes = 512 << 10;
// A broadcast's root touches three blocks a round (its input, its staging, its output out
// of place): at 256 KiB they stay in a core's L2 while the peers read the staging, and np=2
// broadcast of 16 MiB ran at 13.7-14.6 GB/s against 9.4-9.9 with 512 KiB blocks (two runs;
// the other collectives gained nothing from smaller blocks, docs/PERFORMANCE.md).
constexpr size_t kDirectBroadcastBlockBytes = 256 << 10;
constexpr size_t kOneShotBytes = 64 << 10;
// When the ranks of a host outnumber its CPUs, the measured choices part from the model's
// (cc-bench's cc times, np=4, 6 and 8 on 2 vCPUs, medians of four to eight runs
// alternating the choices, docs/PERFORMANCE.md "All-reduce and reduce when ranks
// outnumber the CPUs"):
// - Every rank of a one-shot all-reduce reduces the whole vector, n times the work of the
//   sliced one, and with fewer cores than ranks that work is no longer done side by side.
//   One-shot only up to kOversubscribedAllReduceBytes x CPUs / ranks^2, a curve through
//   two measured points: np=4 on 2 CPUs 16 KiB (one-shot took 34-37 us against 43-44
//   sliced there, at 64 KiB 101-109 against 54-73), np=8 4 KiB (one-shot was faster at
//   2 KiB, 49 against 61 us; at 8 KiB the two sweeps disagreed, 96 against 70 and 87
//   against 90; at 16 KiB sliced took 80-96 against 133-157).
// - With at least kCrowdedRanksPerCpu ranks a CPU, a one-shot reduce goes only to
//   kCrowdedReduceOneShotBytes (np=8 at 64 KiB sliced took 98-155 us against 154-202).
//   Since the reduce takes the ring from that size (below), this limit decides only under
//   CC_ALGO=direct.
// - With more ranks than CPUs, a reduce of kOversubscribedRingReduceBytes or more takes the
//   ring (chain) toward the root: each ring rank waits for one neighbour and reduces what
//   arrives straight from the slot (ReduceOnArrival), where each direct rank waits for
//   every other rank twice a round. Six runs alternating the two in ABBA order, cc's time
//   per call, median ratio ring / direct against each of two direct runs (2026-12-07,
//   docs/PERFORMANCE.md "Reducing on arrival"): np=4 0.40-0.78 from 16 KiB to 4 MiB and
//   0.82-0.89 at 16 MiB; np=8 0.36-0.42 at 16 KiB, 0.58-1.01 at 64 KiB, 0.61-0.86 at 4 and
//   16 MiB (from 256 KiB to 1 MiB it had the ring already). 4 KiB was a draw, and below it
//   direct was ahead (np=8 in place at 64 B-1 KiB 1.43-1.58). At one rank a CPU (np=2) direct stays
//   ahead (the ring took 1.06-4.4x its time up to 1 MiB). On registered buffers direct
//   reads the inputs in place and the ring cannot: there the ring took 1.09-1.60x direct's
//   time at np=4 from 256 KiB (0.74 in place at 4 MiB) and 1.04-1.30x at np=8 from 4 MiB.
//   Every rank must choose alike, and whether a peer registered is not known when
//   choosing, so the staged case, the common one, decides; CC_ALGO=direct keeps direct.
// - With more ranks than CPUs, the pipelined algorithms (ring, tree: all but direct) cut
//   a vector into chunks of at least kOversubscribedMinChunkBytes, not kMinChunkBytes.
//   Each chunk is a hand-off from one rank to the next, and with fewer cores than ranks a
//   hand-off wakes a rank that may wait for a core. Back-to-back np=8 ring reduces, the old
//   and the new chunks alternating: 0.59-0.91 of the old time per call from 64 KiB to
//   1 MiB (the slowest rank's loop); beside Open MPI (cc-bench -a 1, three runs) np=8
//   reduce's medians went from 0.78-1.60x to 0.93-2.85x over 64 KiB-4 MiB, np=4's moved
//   within the runs' spread; forced ring and tree all-reduces and broadcasts 0.54-1.06 of
//   the old time at np=8, mostly below 1 at np=4 (docs/PERFORMANCE.md, "Pipelines when
//   ranks outnumber the CPUs"). From 4n x 256 KiB up the rule's chunks are larger anyway.
constexpr size_t kOversubscribedAllReduceBytes = 128 << 10;
constexpr int kCrowdedRanksPerCpu = 3;
constexpr size_t kCrowdedReduceOneShotBytes = 16 << 10;
constexpr size_t kOversubscribedRingReduceBytes = 16 << 10;
constexpr size_t kOversubscribedMinChunkBytes = 256 << 10;

// Ranks per CPU of the one host that holds every rank, the CPUs as the plan lists them:
// every rank reads the same figure (its own process could see another, in another
// cgroup), so they all choose alike. 0 when the description lists no CPUs, and when the
// plan spreads the ranks over several hosts: ranks on one machine can still share memory
// under a CC_TOPO_FILE of several hosts, and hosts of different sizes would give their
// ranks different figures.
double ranksPerCpu(const comm::Communicator& comm) {
  const topology::Plan& plan = comm.plan();
  if (plan.hostCount != 1) return 0;
  const int cpus =
      plan.cpusOfHost[static_cast<size_t>(plan.places[static_cast<size_t>(comm.rank())].host)];
  return cpus > 0 ? static_cast<double>(comm.size()) / cpus : 0;
}

Link linkOf(const comm::Communicator& comm) {
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer != comm.rank() && !comm.channel(peer)->isSharedMemory()) return kTcpLink;
  }
  return kShmLink;
}

// The most ranks any one host of the communicator holds.
int ranksPerHost(const comm::Communicator& comm) {
  int most = 1;
  for (int r = 0; r < comm.size(); ++r) {
    int here = 0;
    for (int other = 0; other < comm.size(); ++other) here += comm.hostOf(other) == comm.hostOf(r);
    most = std::max(most, here);
  }
  return most;
}

double log2Ceil(int n) { return std::ceil(std::log2(static_cast<double>(std::max(n, 1)))); }

// Predicted microseconds; `bytes` is the user-visible size: the vector for all-reduce,
// broadcast and reduce; the whole output (all-gather) or input (reduce-scatter,
// all-to-all) otherwise.
double cost(Algorithm algorithm, CollectiveKind kind, int n, double bytes, const Link& link,
            size_t chunkBytes, bool oneShot) {
  const double a = link.alphaMicros;
  const double b = link.bytesPerMicro;
  const double g = kReduceBytesPerMicro;
  const double m = kCopyBytesPerMicro;
  const double d = log2Ceil(n);
  const double share = (n - 1.0) / n;
  const double chunks = std::max(1.0, std::ceil(bytes / static_cast<double>(chunkBytes)));
  const double rounds = std::max(1.0, std::ceil(bytes / static_cast<double>(chunkBytes)));
  switch (kind) {
    case CollectiveKind::kAllReduce:
      switch (algorithm) {
        case Algorithm::kRing:
          return 2 * (n - 1) * a * std::max(1.0, chunks / n) + 2 * share * bytes / b +
                 share * bytes / g;
        case Algorithm::kTree:
          return 2 * (d + chunks - 1) * (a + bytes / chunks * d / b) + bytes / g;
        case Algorithm::kDoubleBinaryTree: {
          // Two trees of depth ~log2(n), each with half the vector; a node sends to two
          // children in one tree and one parent in the other per step.
          double halfChunks = std::max(1.0, chunks / 2);
          return 2 * (d + halfChunks - 1) * (a + bytes / 2 / halfChunks * 3 / b) + bytes / g;
        }
        case Algorithm::kHalvingDoubling: {
          int p = 1 << static_cast<int>(std::floor(std::log2(n)));
          double fold = p == n ? 0 : 2 * a + 2 * bytes / b;
          return 2 * std::log2(p) * a + 2 * bytes / b + bytes / g + fold;
        }
        case Algorithm::kHierarchical: {
          // Within a host: a chain over shm each way; across: the ring over the network
          // among one rank per host (hosts ~ n / ranksPerHost, taken as n / 2 here).
          double hosts = std::max(2.0, n / 2.0);
          double shareHosts = (hosts - 1) / hosts;
          double chain = 2 * (kShmLink.alphaMicros * chunks + bytes / kShmLink.bytesPerMicro);
          return chain + 2 * (hosts - 1) * a + 2 * shareHosts * bytes / b + bytes / g;
        }
        case Algorithm::kDirect:
          if (oneShot) return 2 * kDirectSyncMicros * rounds + bytes / m + (n - 1) * bytes / g;
          return 3 * kDirectSyncMicros * rounds + (2 * share + 1.0 / n) * bytes / m + bytes / g;
        default:
          break;
      }
      break;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce: {
      double reduce = kind == CollectiveKind::kReduce ? bytes / g : 0;
      switch (algorithm) {
        case Algorithm::kTree:
          return (d + chunks - 1) * (a + bytes / chunks * d / b) + reduce;
        case Algorithm::kRing:
          return (n - 1 + chunks - 1) * (a + bytes / chunks / b) + reduce;
        case Algorithm::kDirect:
          // One-shot reduce: one synchronisation, the root reduces every block.
          if (oneShot) return kDirectSyncMicros * rounds + bytes / m + (n - 1) * bytes / g;
          return 2 * kDirectSyncMicros * rounds + 2 * bytes / m + reduce;
        default:
          break;
      }
      break;
    }
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: {
      double reduce = kind == CollectiveKind::kReduceScatter ? bytes / n / g * (n - 1) : 0;
      switch (algorithm) {
        case Algorithm::kRing:
          return (n - 1) * a * std::max(1.0, chunks / n) + share * bytes / b + reduce;
        case Algorithm::kDirect:
          return 2 * kDirectSyncMicros * rounds + (share + 1.0 / n) * bytes / m + reduce;
        default:
          break;
      }
      break;
    }
    case CollectiveKind::kAllToAll:
      switch (algorithm) {
        case Algorithm::kPairwise:
          return (n - 1) * a + share * bytes / b;
        case Algorithm::kBruck:
          return d * a + d * bytes / 2 / b + 2 * bytes / m;
        case Algorithm::kDirect:
          return 2 * kDirectSyncMicros * rounds + 2 * share * bytes / m;
        default:
          break;
      }
      break;
    case CollectiveKind::kAllToAllv:
      if (algorithm == Algorithm::kPairwise) return (n - 1) * a + share * bytes / b;
      break;
  }
  return INFINITY;
}

double userBytes(const comm::Communicator& comm, const CollectiveArgs& args) {
  double element = static_cast<double>(dataTypeSize(args.type));
  double count = static_cast<double>(args.count);
  switch (args.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return count * element * comm.size();
    case CollectiveKind::kAllToAllv: {
      double total = 0;
      for (size_t c : args.sendCounts) total += static_cast<double>(c);
      return total * element;
    }
    default:
      return count * element;
  }
}

}  // namespace

Candidates candidates(const comm::Communicator& comm, CollectiveKind kind) {
  Candidates result;
  auto add = [&](Algorithm algorithm) { result.list[result.count++] = algorithm; };
  switch (kind) {
    case CollectiveKind::kAllReduce:
      add(Algorithm::kRing);
      add(Algorithm::kTree);
      add(Algorithm::kHalvingDoubling);
      add(Algorithm::kDoubleBinaryTree);
      break;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
      add(Algorithm::kRing);
      add(Algorithm::kTree);
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      add(Algorithm::kRing);
      break;
    case CollectiveKind::kAllToAll:
      add(Algorithm::kPairwise);
      add(Algorithm::kBruck);
      break;
    case CollectiveKind::kAllToAllv:
      add(Algorithm::kPairwise);
      break;
  }
  if (kind != CollectiveKind::kAllToAllv && directAvailable(comm)) add(Algorithm::kDirect);
  if (kind == CollectiveKind::kAllReduce && hierarchyUseful(comm)) add(Algorithm::kHierarchical);
  return result;
}

namespace {

// Whether the direct all-reduce or reduce goes one-shot (every rank exports its whole
// block; direct.cc) rather than sliced.
bool directOneShot(const comm::Communicator& comm, const CollectiveArgs& args, double bytes,
                   const Link& link, size_t blockBytes) {
  const int n = comm.size();
  const bool allReduce = args.kind == CollectiveKind::kAllReduce;
  if (!allReduce && args.kind != CollectiveKind::kReduce) return false;
  if (args.count < static_cast<size_t>(n)) return true;  // too few elements to slice
  const double perCpu = ranksPerCpu(comm);
  // (bytes x ranks x ranks per CPU: kOversubscribedAllReduceBytes x CPUs / ranks^2.)
  if (allReduce && perCpu > 1) return bytes * n * perCpu <= kOversubscribedAllReduceBytes;
  if (!allReduce && perCpu >= kCrowdedRanksPerCpu) return bytes <= kCrowdedReduceOneShotBytes;
  if (bytes <= kOneShotBytes) return true;
  if (allReduce) return false;
  // A large reduce goes one-shot where the model prices it below the sliced one: with
  // two ranks the root then reads 2 and writes 1 vector instead of reading 2 and
  // writing 1.5 with a second handshake a round (np=2, 256 KiB to 64 MiB, three runs:
  // 1.2-5x on registered buffers, staged 0.5-2.8x with 16-64 MiB faster in every run);
  // with four it would read 4 (np=4 measured no better).
  return cost(Algorithm::kDirect, args.kind, n, bytes, link, blockBytes, true) <=
         cost(Algorithm::kDirect, args.kind, n, bytes, link, blockBytes, false);
}

// Whether a reduce takes the ring whatever the model says (kOversubscribedRingReduceBytes
// above). Only where every rank shares one host (the direct algorithms run, and the plan
// has one host: ranksPerCpu), so that every rank decides alike.
bool oversubscribedReduceTakesRing(const comm::Communicator& comm, const CollectiveArgs& args,
                                   double bytes) {
  return args.kind == CollectiveKind::kReduce && bytes >= kOversubscribedRingReduceBytes &&
         directAvailable(comm) && ranksPerCpu(comm) > 1;
}

}  // namespace

Choice choose(const comm::Communicator& comm, const CollectiveArgs& args, Algorithm forced,
              size_t forcedChunkBytes) {
  const int n = comm.size();
  const double bytes = userBytes(comm, args);
  const Link link = linkOf(comm);
  const Candidates options = candidates(comm, args.kind);
  // Across hosts with several ranks each, a flat algorithm keeps every rank busy at once:
  // each host's ranks copy over shared memory and drive their sockets on the same cores as
  // the kernel's network stack, and its crossing links ran at about the link's rate over
  // the ranks per host (2 hosts x 2 ranks over tcp, docs/PERFORMANCE.md: the flat ring
  // moved its 1.5 vectors per crossing link at 1.2 GB/s where 1 + 1 ranks move theirs at
  // 1.9-2.4). The hierarchy crosses with one rank per host while the others wait.
  Link flat = link;
  if (hierarchyUseful(comm)) flat.bytesPerMicro /= ranksPerHost(comm);
  const bool explain = log::enabled(log::Level::kInfo);
  Choice best;
  best.predictedMicros = INFINITY;
  std::string considered;
  for (Algorithm algorithm : options) {
    size_t chunk = forcedChunkBytes;
    bool oneShot = false;
    if (chunk == 0) {
      if (algorithm == Algorithm::kDirect) {
        chunk = args.kind == CollectiveKind::kBroadcast ? kDirectBroadcastBlockBytes
                                                        : kDirectBlockBytes;
      } else {
        const size_t least = ranksPerCpu(comm) > 1 ? kOversubscribedMinChunkBytes : kMinChunkBytes;
        chunk = std::clamp(static_cast<size_t>(bytes / (4.0 * n)), least, kMaxChunkBytes);
      }
    }
    if (algorithm == Algorithm::kDirect) {
      chunk = std::min(chunk, directStagingHalfBytes(comm));
      oneShot = directOneShot(comm, args, bytes, flat, std::max<size_t>(chunk, 1));
    }
    if (forced == Algorithm::kAuto && algorithm != Algorithm::kRing &&
        oversubscribedReduceTakesRing(comm, args, bytes)) {
      if (explain)
        considered += fmt::format(" {}=not with more ranks than CPUs", algorithmName(algorithm));
      continue;
    }
    double predicted =
        cost(algorithm, args.kind, n, bytes, algorithm == Algorithm::kHierarchical ? link : flat,
             std::max<size_t>(chunk, 1), oneShot);
    if (explain) considered += fmt::format(" {}={:.1f}us", algorithmName(algorithm), predicted);
    bool take = forced == Algorithm::kAuto ? predicted < best.predictedMicros : algorithm == forced;
    if (take) {
      best.algorithm = algorithm;
      best.chunkBytes = chunk;
      best.oneShot = oneShot;
      best.predictedMicros = predicted;
    }
    if (forced == algorithm) break;
  }
  if (best.predictedMicros == INFINITY && forced != Algorithm::kAuto) {
    // The forced algorithm cannot run this collective: decide as if CC_ALGO were unset.
    Choice fallback = choose(comm, args, Algorithm::kAuto, forcedChunkBytes);
    fallback.why = fmt::format("CC_ALGO={} cannot run {} here; {}", algorithmName(forced),
                               collectiveName(args.kind), fallback.why);
    return fallback;
  }
  if (explain) {
    best.why =
        forced != Algorithm::kAuto
            ? fmt::format("CC_ALGO={}", algorithmName(forced))
            : fmt::format("cheapest by the cost model ({} link;{})",
                          link.alphaMicros == kShmLink.alphaMicros ? "shm" : "tcp", considered);
  }
  return best;
}

}  // namespace cc::collectives
