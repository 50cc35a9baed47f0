// The traffic counters (ccCommGetTraffic) against what each algorithm must move: a ring
// or direct all-reduce sends and receives 2(N-1)/N of the vector per rank, all-gather
// and reduce-scatter (N-1)/N of the whole, point-to-point exactly its bytes, and
// nothing is charged to a collective that did not run. Catching accidental extra
// traffic is the point, so the checks are equalities, not bounds.
#include <cc/cc.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "comm/handles.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

ccTraffic_t trafficOf(ccComm_t comm, ccTrafficKind_t kind) {
  ccTraffic_t traffic{};
  EXPECT_EQ(ccCommGetTraffic(comm, kind, &traffic), ccSuccess);
  return traffic;
}

struct Param {
  int ranks;
  const char* algorithm;
  const char* transport;
};

class Traffic : public ::testing::TestWithParam<Param> {};

// A communicator whose collectives all run `algorithm` (CC_ALGO's names), or null.
ccComm_t initWithAlgorithm(const RankContext& context, const char* algorithm) {
  ccComm_t comm = context.initComm();
  auto impl = comm::communicatorOf(comm);
  if (impl == nullptr) return nullptr;
  impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm(algorithm));
  return comm;
}

TEST_P(Traffic, AllReduceMovesTwiceTheShareOfTheOthers) {
  const Param param = GetParam();
  const int n = param.ranks;
  runRanks(
      n,
      [&](RankContext& context) {
        ccComm_t comm = initWithAlgorithm(context, param.algorithm);
        ASSERT_NE(comm, nullptr);
        // Divisible by every N here, and large enough for several chunks and rounds.
        const size_t count = size_t{3} * 4 * 5 * 4096;
        std::vector<float> data(count, 1.0f);
        const ccTraffic_t before = trafficOf(comm, ccTrafficAllReduce);
        constexpr int kCalls = 3;
        for (int call = 0; call < kCalls; ++call) {
          CC_ASSERT_OK(
              ccAllReduce(data.data(), data.data(), count, ccFloat32, ccSum, comm, nullptr));
        }
        const ccTraffic_t after = trafficOf(comm, ccTrafficAllReduce);
        const uint64_t bytes = count * sizeof(float);
        const uint64_t expected =
            kCalls * 2 * (static_cast<uint64_t>(n) - 1) * bytes / static_cast<uint64_t>(n);
        EXPECT_EQ(after.calls - before.calls, static_cast<uint64_t>(kCalls));
        // Slices cut from chunks that N does not divide differ by an element between ranks:
        // each rank is within a few elements per chunk, and the ranks together are exact.
        uint64_t moved[2] = {after.bytesSent - before.bytesSent,
                             after.bytesReceived - before.bytesReceived};
        const uint64_t slack = kCalls * 2 * 64 * sizeof(float);
        for (uint64_t value : moved) {
          EXPECT_LE(value, expected + slack) << param.algorithm << " on rank " << context.rank;
          EXPECT_GE(value + slack, expected) << param.algorithm << " on rank " << context.rank;
        }
        CC_ASSERT_OK(ccAllReduce(moved, moved, 2, ccUint64, ccSum, comm, nullptr));
        EXPECT_EQ(moved[0], expected * static_cast<uint64_t>(n))
            << param.algorithm << ": sent, all ranks";
        EXPECT_EQ(moved[1], expected * static_cast<uint64_t>(n))
            << param.algorithm << ": received, all ranks";
        // Nothing leaked into the other kinds.
        EXPECT_EQ(trafficOf(comm, ccTrafficAllGather).bytesSent, 0u);
        EXPECT_EQ(trafficOf(comm, ccTrafficSendRecv).bytesSent, 0u);
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      transportOptions(param.transport));
}

TEST_P(Traffic, AllGatherAndReduceScatterMoveTheOthersShares) {
  const Param param = GetParam();
  const int n = param.ranks;
  runRanks(
      n,
      [&](RankContext& context) {
        ccComm_t comm = initWithAlgorithm(context, param.algorithm);
        ASSERT_NE(comm, nullptr);
        const size_t perRank = 50021;  // odd: no help from alignment
        std::vector<float> whole(perRank * static_cast<size_t>(n), 2.0f);
        std::vector<float> part(perRank, 1.0f);
        CC_ASSERT_OK(ccAllGather(part.data(), whole.data(), perRank, ccFloat32, comm, nullptr));
        CC_ASSERT_OK(
            ccReduceScatter(whole.data(), part.data(), perRank, ccFloat32, ccSum, comm, nullptr));
        const uint64_t others = (static_cast<uint64_t>(n) - 1) * perRank * sizeof(float);
        for (ccTrafficKind_t kind : {ccTrafficAllGather, ccTrafficReduceScatter}) {
          ccTraffic_t traffic = trafficOf(comm, kind);
          EXPECT_EQ(traffic.calls, 1u);
          EXPECT_EQ(traffic.bytesSent, others) << "kind " << kind << " " << param.algorithm;
          EXPECT_EQ(traffic.bytesReceived, others) << "kind " << kind << " " << param.algorithm;
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      transportOptions(param.transport));
}

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return std::string(info.param.algorithm) + "_" + std::to_string(info.param.ranks) + "ranks_" +
         info.param.transport;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Traffic,
                         ::testing::Values(Param{2, "ring", "shm"}, Param{3, "ring", "shm"},
                                           Param{4, "ring", "tcp"}, Param{3, "direct", "shm"},
                                           Param{4, "direct", "shm"}, Param{4, "hd", "shm"}),
                         paramName);

TEST(TrafficCounters, PointToPointAndBarrierAreCountedApart) {
  runRanks(2, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    std::vector<uint8_t> buffer(12345, 7);
    int peer = 1 - context.rank;
    for (int i = 0; i < 2; ++i) {
      if ((context.rank == 0) == (i == 0)) {
        CC_ASSERT_OK(ccSend(buffer.data(), buffer.size(), ccUint8, peer, comm, nullptr));
      } else {
        CC_ASSERT_OK(ccRecv(buffer.data(), buffer.size(), ccUint8, peer, comm, nullptr));
      }
    }
    // The barrier's empty messages are cc's own, not the program's send/recv.
    CC_ASSERT_OK(ccBarrier(comm, nullptr));
    ccTraffic_t p2p = trafficOf(comm, ccTrafficSendRecv);
    EXPECT_EQ(p2p.calls, 2u);
    EXPECT_EQ(p2p.bytesSent, buffer.size());
    EXPECT_EQ(p2p.bytesReceived, buffer.size());
    EXPECT_EQ(trafficOf(comm, ccTrafficAllReduce).calls, 0u);
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

TEST(TrafficCounters, BadArgumentsAreNamed) {
  runRanks(1, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ccTraffic_t traffic{};
    EXPECT_EQ(ccCommGetTraffic(comm, ccTrafficAllReduce, nullptr), ccInvalidArgument);
    EXPECT_NE(std::string(ccGetLastError(nullptr)).find("traffic is NULL"), std::string::npos);
    EXPECT_EQ(ccCommGetTraffic(comm, static_cast<ccTrafficKind_t>(ccNumTrafficKinds), &traffic),
              ccInvalidArgument);
    EXPECT_NE(std::string(ccGetLastError(nullptr)).find("kind 9"), std::string::npos);
    EXPECT_EQ(ccCommGetTraffic(nullptr, ccTrafficAllReduce, &traffic), ccInvalidArgument);
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

}  // namespace
}  // namespace cc::testing
