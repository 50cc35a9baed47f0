// Ranks on several "hosts" of one machine (CC_HOSTNAME gives each rank its host): shm
// within a host, tcp across. The hierarchical all-reduce against the reference for
// uneven host sizes, every algorithm still right across hosts, broadcast and reduce
// along the planned chain and tree from every root, and the tuner offering the
// hierarchy only when it helps.
#include <cc/cc.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/collective.h"
#include "collectives/tuner.h"
#include "comm/handles.h"
#include "reference.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

struct HostsParam {
  std::vector<int> hostOfRank;
  const char* name;
};

class Hierarchical : public ::testing::TestWithParam<HostsParam> {};

// This rank joins as a rank of host param.hostOfRank[rank] (CC_HOSTNAME).
ccComm_t initOnHost(const RankContext& context, const HostsParam& param) {
  std::string host = "host" + std::to_string(param.hostOfRank[static_cast<size_t>(context.rank)]);
  setenv("CC_HOSTNAME", host.c_str(), 1);
  return context.initComm();
}

TEST_P(Hierarchical, AllReduceMatchesTheReferenceOnEveryRank) {
  const HostsParam param = GetParam();
  const int n = static_cast<int>(param.hostOfRank.size());
  runRanks(n, [&](RankContext& context) {
    ccComm_t comm = initOnHost(context, param);
    auto impl = comm::communicatorOf(comm);
    ASSERT_NE(impl, nullptr);
    bool hierOffered = false;
    for (collectives::Algorithm a :
         collectives::candidates(*impl, collectives::CollectiveKind::kAllReduce)) {
      hierOffered = hierOffered || a == collectives::Algorithm::kHierarchical;
    }
    EXPECT_TRUE(hierOffered);
    const auto me = static_cast<size_t>(context.rank);
    uint64_t seed = 1;
    for (const char* algorithm : {"hier", "ring", "tree", "dbt", "hd"}) {
      impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm(algorithm));
      for (ccDataType_t type : {ccFloat32, ccInt64, ccBfloat16, ccUint8}) {
        for (ccRedOp_t op : {ccSum, ccMax, ccAvg}) {
          for (size_t count : {size_t{1}, size_t{7}, size_t{1031}, size_t{300007}}) {
            if (count > 1031 && type != ccFloat32) continue;
#if defined(__SANITIZE_THREAD__)
            // Each rank builds every rank's input for the reference: at 300007 floats that
            // is most of the test's time under TSan, so there the large count runs sum only.
            if (count > 1031 && op != ccSum) continue;
#endif
            const size_t size = collectives::dataTypeSize(type);
            std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(n));
            for (int r = 0; r < n; ++r) {
              inputs[static_cast<size_t>(r)].resize(count * size);
              fillInput(inputs[static_cast<size_t>(r)].data(), count, type, op, r, seed);
            }
            ++seed;
            std::vector<std::byte> out(count * size);
            CC_ASSERT_OK(
                ccAllReduce(inputs[me].data(), out.data(), count, type, op, comm, nullptr));
            for (size_t i = 0; i < count; i += (count > 5000 ? 37 : 1)) {
              std::string error = checkReduced(out.data(), i, inputs, i, type, op);
              ASSERT_TRUE(error.empty())
                  << algorithm << " " << collectives::dataTypeName(type) << " "
                  << collectives::redOpName(op) << " count " << count << ": " << error;
            }
            // In place too.
            std::vector<std::byte> inPlace = inputs[me];
            CC_ASSERT_OK(
                ccAllReduce(inPlace.data(), inPlace.data(), count, type, op, comm, nullptr));
            ASSERT_EQ(inPlace, out) << algorithm << ": in place differs from out of place";
          }
        }
      }
    }
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

// The ring follows the topology plan: each host's ranks together, so the ring crosses
// between hosts once per host however the ranks are numbered, and the ring collectives
// (whose blocks then travel in ring order, not rank order) still give every rank its
// own block.
TEST_P(Hierarchical, RingFollowsThePlanAndStaysCorrect) {
  const HostsParam param = GetParam();
  const int n = static_cast<int>(param.hostOfRank.size());
  int hosts = 0;
  for (int host : param.hostOfRank) hosts = std::max(hosts, host + 1);
  runRanks(n, [&](RankContext& context) {
    ccComm_t comm = initOnHost(context, param);
    auto impl = comm::communicatorOf(comm);
    ASSERT_NE(impl, nullptr);
    const std::vector<int>& ring = impl->plan().rings.front().ranks;
    ASSERT_EQ(ring.size(), static_cast<size_t>(n));
    std::vector<int> sorted = ring;
    std::sort(sorted.begin(), sorted.end());
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(sorted[static_cast<size_t>(r)], r) << "the ring misses or repeats a rank";
    int crossings = 0;
    for (int p = 0; p < n; ++p) {
      int from = ring[static_cast<size_t>(p)];
      int to = ring[static_cast<size_t>((p + 1) % n)];
      crossings +=
          param.hostOfRank[static_cast<size_t>(from)] != param.hostOfRank[static_cast<size_t>(to)]
              ? 1
              : 0;
    }
    EXPECT_EQ(crossings, hosts) << "ring crosses between hosts more often than once per host";

    impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm("ring"));
    const size_t count = 1031;
    std::vector<float> whole(count * static_cast<size_t>(n));
    for (size_t i = 0; i < whole.size(); ++i)
      whole[i] = static_cast<float>(context.rank * 1000 + static_cast<int>(i % 977));
    std::vector<float> mine(count);
    CC_ASSERT_OK(
        ccReduceScatter(whole.data(), mine.data(), count, ccFloat32, ccSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      size_t global = static_cast<size_t>(context.rank) * count + i;
      float expected =
          static_cast<float>(1000 * (n * (n - 1) / 2) + n * static_cast<int>(global % 977));
      ASSERT_EQ(mine[i], expected) << "reduce-scatter element " << i << " on rank " << context.rank;
    }
    std::vector<float> gathered(count * static_cast<size_t>(n), -1.0f);
    CC_ASSERT_OK(ccAllGather(mine.data(), gathered.data(), count, ccFloat32, comm, nullptr));
    for (size_t i = 0; i < gathered.size(); ++i) {
      float expected = static_cast<float>(1000 * (n * (n - 1) / 2) + n * static_cast<int>(i % 977));
      ASSERT_EQ(gathered[i], expected) << "all-gather element " << i << " on rank " << context.rank;
    }
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

// Broadcast and reduce across hosts follow the plan from whatever root: the chain is the
// planned ring cut before the root, so it crosses between hosts at most once per host
// however the ranks are numbered, and the tree is the planned tree hung from the root,
// a spanning tree that crosses hosts-1 times. Both give every rank the reference result
// from every root, out of place and in place.
TEST_P(Hierarchical, BroadcastAndReduceFollowThePlanFromEveryRoot) {
  const HostsParam param = GetParam();
  const int n = static_cast<int>(param.hostOfRank.size());
  int hosts = 0;
  for (int host : param.hostOfRank) hosts = std::max(hosts, host + 1);
  auto hostOf = [&](int rank) { return param.hostOfRank[static_cast<size_t>(rank)]; };
  runRanks(n, [&](RankContext& context) {
    ccComm_t comm = initOnHost(context, param);
    auto impl = comm::communicatorOf(comm);
    ASSERT_NE(impl, nullptr);
    for (int root = 0; root < n; ++root) {
      // Every rank's links, as every rank computes them.
      int chainCrossings = 0;
      int treeCrossings = 0;
      int chainHeads = 0;
      int treeRoots = 0;
      for (int r = 0; r < n; ++r) {
        collectives::ChainLinks chain = collectives::chainFromRoot(*impl, r, root);
        collectives::TreeLinks tree = collectives::treeFromRoot(*impl, r, root);
        chainHeads += chain.prev < 0 ? 1 : 0;
        treeRoots += tree.parent < 0 ? 1 : 0;
        if (chain.prev >= 0) {
          ASSERT_EQ(collectives::chainFromRoot(*impl, chain.prev, root).next, r);
          chainCrossings += hostOf(chain.prev) != hostOf(r) ? 1 : 0;
        }
        if (tree.parent >= 0) {
          std::vector<int> siblings = collectives::treeFromRoot(*impl, tree.parent, root).children;
          ASSERT_NE(std::find(siblings.begin(), siblings.end(), r), siblings.end())
              << "rank " << r << " is not a child of its parent " << tree.parent;
          treeCrossings += hostOf(tree.parent) != hostOf(r) ? 1 : 0;
          // Following parents reaches the root within n steps (no cycle).
          int steps = 0;
          for (int up = r; up != root && steps <= n; ++steps)
            up = collectives::treeFromRoot(*impl, up, root).parent;
          ASSERT_LE(steps, n) << "rank " << r << " never reaches root " << root;
        }
      }
      EXPECT_EQ(chainHeads, 1);
      EXPECT_EQ(treeRoots, 1);
      EXPECT_LE(chainCrossings, hosts) << "root " << root;
      EXPECT_EQ(treeCrossings, hosts - 1) << "root " << root;
    }

    const size_t count = 1031;
    for (const char* algorithm : {"ring", "tree"}) {
      impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm(algorithm));
      for (int root = 0; root < n; ++root) {
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i)
          data[i] = static_cast<float>(context.rank * 1000 + static_cast<int>(i % 977));
        std::vector<float> out(count, -1.0f);
        CC_ASSERT_OK(ccBroadcast(data.data(), out.data(), count, ccFloat32, root, comm, nullptr));
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], static_cast<float>(root * 1000 + static_cast<int>(i % 977)))
              << algorithm << " broadcast from " << root << ", element " << i;
        }
        std::vector<float> inPlace = data;
        CC_ASSERT_OK(
            ccBroadcast(inPlace.data(), inPlace.data(), count, ccFloat32, root, comm, nullptr));
        ASSERT_EQ(inPlace, out) << algorithm << " in-place broadcast from " << root;
        std::fill(out.begin(), out.end(), -1.0f);
        CC_ASSERT_OK(
            ccReduce(data.data(), out.data(), count, ccFloat32, ccSum, root, comm, nullptr));
        if (context.rank != root) continue;
        for (size_t i = 0; i < count; ++i) {
          float expected =
              static_cast<float>(1000 * (n * (n - 1) / 2) + n * static_cast<int>(i % 977));
          ASSERT_EQ(out[i], expected) << algorithm << " reduce to " << root << ", element " << i;
        }
      }
    }
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

// Ranks that plan different rings (here: one rank reads a topology file the others do
// not have) would wait on each other until the timeout; creation fails on every rank
// instead, naming the difference.
TEST(TopologyPlan, RanksThatPlanDifferentlyAreRefusedEverywhere) {
  runRanks(3, [](RankContext& context) {
    if (context.rank == 1) setenv("CC_TOPO_FILE", CC_TOPOLOGY_FILES "/two_hosts_uneven.json", 1);
    ccComm_t comm = nullptr;
    ccResult_t result = ccCommInitRank(&comm, 3, context.id, context.rank);
    EXPECT_NE(result, ccSuccess) << "rank " << context.rank;
    EXPECT_EQ(comm, nullptr);
    std::string error = ccGetLastError(nullptr);
    EXPECT_TRUE(error.find("planned different rings or trees") != std::string::npos ||
                error.find("closed the connection") != std::string::npos ||
                error.find("gone") != std::string::npos)
        << "rank " << context.rank << ": " << error;
  });
}

INSTANTIATE_TEST_SUITE_P(
    Hosts, Hierarchical,
    ::testing::Values(HostsParam{{0, 0, 1, 1}, "two_hosts_of_two"},
                      HostsParam{{0, 0, 0, 1, 2, 2}, "three_hosts_of_three_one_two"},
                      HostsParam{{0, 1, 0, 1, 1}, "interleaved_hosts"}),
    [](const ::testing::TestParamInfo<HostsParam>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace cc::testing
