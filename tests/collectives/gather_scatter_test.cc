// ccGather and ccScatter: at 1 to 6 ranks, every root, out of place and in place on the
// root, on the NULL stream, on a stream and inside a group with other messages; the bytes
// each rank moves equal the blocks it sends and receives; bad arguments are refused with
// a message naming them.
#include <cc/cc.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/multi_rank.h"

namespace cc::testing {
namespace {

// Rank r's block for a gather rooted at `root`: distinct in every element.
int64_t element(int rank, int root, size_t i) {
  return static_cast<int64_t>(rank) * 1000003 + root * 7919 + static_cast<int64_t>(i);
}

TEST(GatherScatter, EveryRootInAndOutOfPlaceAtOneToSixRanks) {
  for (int nranks = 1; nranks <= 6; ++nranks) {
    runRanks(nranks, [](RankContext& context) {
      ccComm_t comm = context.initComm();
      ASSERT_NE(comm, nullptr);
      const int n = context.nranks;
      const int me = context.rank;
      const size_t count = 1000;
      ccStream_t stream = nullptr;
      CC_ASSERT_OK(ccStreamCreate(&stream));
      for (int root = 0; root < n; ++root) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          // Gather.
          std::vector<int64_t> mine(count);
          for (size_t i = 0; i < count; ++i) mine[i] = element(me, root, i);
          std::vector<int64_t> all(count * static_cast<size_t>(n), -1);
          const int64_t* send = mine.data();
          if (inPlace && me == root) {
            std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(count) * me);
            send = all.data() + count * static_cast<size_t>(me);
          }
          CC_ASSERT_OK(
              ccGather(send, all.data(), count, ccInt64, root, comm, inPlace ? stream : nullptr));
          CC_ASSERT_OK(ccStreamSynchronize(stream));
          if (me == root) {
            for (int r = 0; r < n; ++r) {
              for (size_t i = 0; i < count; i += 97) {
                ASSERT_EQ(all[count * static_cast<size_t>(r) + i], element(r, root, i))
                    << "gather root " << root << " block " << r << " in place " << inPlace;
              }
            }
          }
          // Scatter: the root's blocks back out.
          std::vector<int64_t> blocks(count * static_cast<size_t>(n));
          for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < count; ++i)
              blocks[count * static_cast<size_t>(r) + i] = element(r, root, i) + 5;
          }
          std::vector<int64_t> got(count, -1);
          int64_t* recv = got.data();
          if (inPlace && me == root) recv = blocks.data() + count * static_cast<size_t>(me);
          CC_ASSERT_OK(ccScatter(blocks.data(), recv, count, ccInt64, root, comm, nullptr));
          for (size_t i = 0; i < count; i += 89) {
            ASSERT_EQ(recv[i], element(me, root, i) + 5) << "scatter root " << root;
          }
        }
      }
      CC_ASSERT_OK(ccStreamDestroy(stream));
      CC_ASSERT_OK(ccCommDestroy(comm));
    });
  }
}

// Inside a group a gather joins the other messages: a ring shift and a gather to rank 0
// progress together.
TEST(GatherScatter, JoinsAnOpenGroup) {
  runRanks(4, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    const int n = context.nranks;
    const int me = context.rank;
    std::vector<float> out(50000, static_cast<float>(me));
    std::vector<float> in(50000, -1);
    std::vector<float> all(50000 * 4, -1);
    CC_ASSERT_OK(ccGroupStart());
    CC_ASSERT_OK(ccSend(out.data(), out.size(), ccFloat32, (me + 1) % n, comm, nullptr));
    CC_ASSERT_OK(ccGather(out.data(), all.data(), out.size(), ccFloat32, 0, comm, nullptr));
    CC_ASSERT_OK(ccRecv(in.data(), in.size(), ccFloat32, (me + n - 1) % n, comm, nullptr));
    CC_ASSERT_OK(ccGroupEnd());
    EXPECT_EQ(in.back(), static_cast<float>((me + n - 1) % n));
    if (me == 0) {
      for (int r = 0; r < n; ++r) EXPECT_EQ(all[50000 * static_cast<size_t>(r) + 7], r);
    }
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

TEST(GatherScatter, TrafficIsTheBlocksMoved) {
  runRanks(3, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    const size_t count = 4096;
    std::vector<int32_t> mine(count, context.rank);
    std::vector<int32_t> all(count * 3);
    ccTraffic_t before{};
    CC_ASSERT_OK(ccCommGetTraffic(comm, ccTrafficSendRecv, &before));
    CC_ASSERT_OK(ccGather(mine.data(), all.data(), count, ccInt32, 1, comm, nullptr));
    ccTraffic_t after{};
    CC_ASSERT_OK(ccCommGetTraffic(comm, ccTrafficSendRecv, &after));
    const uint64_t block = count * sizeof(int32_t);
    // The root receives one block from each other rank; the others send one each.
    EXPECT_EQ(after.bytesReceived - before.bytesReceived, context.rank == 1 ? 2 * block : 0);
    EXPECT_EQ(after.bytesSent - before.bytesSent, context.rank == 1 ? 0 : block);
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

TEST(GatherScatter, BadArgumentsAreRefusedByName) {
  runRanks(2, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    std::vector<float> a(8);
    std::vector<float> b(16);
    EXPECT_EQ(ccGather(a.data(), b.data(), 8, ccFloat32, 2, comm, nullptr), ccInvalidArgument);
    EXPECT_NE(std::string(ccGetLastError(comm)).find("root 2"), std::string::npos);
    EXPECT_EQ(ccScatter(b.data(), nullptr, 8, ccFloat32, 0, comm, nullptr), ccInvalidArgument);
    EXPECT_NE(std::string(ccGetLastError(comm)).find("recvbuff is NULL"), std::string::npos);
    EXPECT_EQ(ccGather(a.data(), b.data(), 8, static_cast<ccDataType_t>(99), 0, comm, nullptr),
              ccInvalidArgument);
    EXPECT_EQ(ccGather(a.data(), b.data(), 8, ccFloat32, 0, nullptr, nullptr), ccInvalidArgument);
    if (context.rank == 0) {
      // Overlapping buffers that are not the in-place layout.
      EXPECT_EQ(ccGather(b.data() + 4, b.data(), 8, ccFloat32, 0, comm, nullptr),
                ccInvalidArgument);
      EXPECT_NE(std::string(ccGetLastError(comm)).find("overlap"), std::string::npos);
    }
    // A count of 0 is a no-op everywhere.
    CC_ASSERT_OK(ccGather(nullptr, nullptr, 0, ccFloat32, 0, comm, nullptr));
    CC_ASSERT_OK(ccBarrier(comm, nullptr));
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

}  // namespace
}  // namespace cc::testing
