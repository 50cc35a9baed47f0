// Bad arguments to the collectives: each gives ccInvalidArgument (or ccInvalidUsage)
// with a message that names the argument, and the communicator stays usable.
#include <cc/cc.h>

#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "support/multi_rank.h"

namespace cc::testing {
namespace {

void expectError(ccResult_t result, ccResult_t expected, ccComm_t comm, const std::string& needle) {
  EXPECT_EQ(result, expected) << ccGetErrorString(result);
  std::string message = ccGetLastError(comm);
  EXPECT_NE(message.find(needle), std::string::npos)
      << "message: " << message << "\nexpected to mention: " << needle;
}

TEST(CollectiveArguments, BadInputsAreRefusedWithTheArgumentNamed) {
  runRanks(2, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    std::vector<float> a(64, 1.0f), b(64, 0.0f);
    int badOp = 17;
    ccRedOp_t op;
    std::memcpy(&op, &badOp, sizeof(op));
    int badTypeValue = 42;
    ccDataType_t badType;
    std::memcpy(&badType, &badTypeValue, sizeof(badType));
    expectError(ccAllReduce(a.data(), b.data(), 8, ccFloat32, op, comm, nullptr), ccInvalidArgument,
                comm, "op 17");
    expectError(ccAllReduce(a.data(), b.data(), 8, badType, ccSum, comm, nullptr),
                ccInvalidArgument, comm, "datatype 42");
    expectError(ccAllReduce(nullptr, b.data(), 8, ccFloat32, ccSum, comm, nullptr),
                ccInvalidArgument, comm, "sendbuff is NULL");
    expectError(ccAllReduce(a.data(), nullptr, 8, ccFloat32, ccSum, comm, nullptr),
                ccInvalidArgument, comm, "recvbuff is NULL");
    expectError(ccAllReduce(a.data(), a.data() + 1, 8, ccFloat32, ccSum, comm, nullptr),
                ccInvalidArgument, comm, "overlap");
    expectError(ccAllReduce(a.data(), b.data(), SIZE_MAX / 2, ccFloat32, ccSum, comm, nullptr),
                ccInvalidArgument, comm, "overflows");
    expectError(ccBroadcast(a.data(), b.data(), 8, ccFloat32, 2, comm, nullptr), ccInvalidArgument,
                comm, "root 2");
    expectError(ccReduce(a.data(), b.data(), 8, ccFloat32, ccSum, -1, comm, nullptr),
                ccInvalidArgument, comm, "root -1");
    expectError(ccAllGather(a.data(), a.data() + 3, 8, ccFloat32, comm, nullptr), ccInvalidArgument,
                comm, "overlap");
    expectError(ccAllGather(a.data(), b.data(), SIZE_MAX / 4, ccFloat32, comm, nullptr),
                ccInvalidArgument, comm, "overflows");
    expectError(ccReduceScatter(a.data(), b.data(), 8, ccFloat32, op, comm, nullptr),
                ccInvalidArgument, comm, "op 17");
    expectError(ccAllToAll(a.data(), a.data(), 8, ccFloat32, comm, nullptr), ccInvalidArgument,
                comm, "in place");
    size_t counts[2] = {1, 1}, displs[2] = {0, 1};
    expectError(
        ccAllToAllv(a.data(), nullptr, displs, b.data(), counts, displs, ccFloat32, comm, nullptr),
        ccInvalidArgument, comm, "sendcounts is NULL");
    expectError(
        ccAllToAllv(a.data(), counts, displs, nullptr, counts, displs, ccFloat32, comm, nullptr),
        ccInvalidArgument, comm, "recvbuff is NULL");
    size_t hugeDispl[2] = {SIZE_MAX - 1, 0};
    expectError(ccAllToAllv(a.data(), counts, hugeDispl, b.data(), counts, displs, ccFloat32, comm,
                            nullptr),
                ccInvalidArgument, comm, "overflows");
    expectError(ccAllReduce(a.data(), b.data(), 8, ccFloat32, ccSum, nullptr, nullptr),
                ccInvalidArgument, nullptr, "comm is NULL");
    // Broadcast's sendbuff matters only on the root; reduce's recvbuff only there.
    CC_ASSERT_OK(ccBroadcast(context.rank == 0 ? a.data() : nullptr, b.data(), 8, ccFloat32, 0,
                             comm, nullptr));
    CC_ASSERT_OK(ccReduce(a.data(), context.rank == 1 ? b.data() : nullptr, 8, ccFloat32, ccSum, 1,
                          comm, nullptr));
    // Still usable, and count 0 is a no-op even with NULL buffers.
    CC_ASSERT_OK(ccAllReduce(nullptr, nullptr, 0, ccFloat32, ccSum, comm, nullptr));
    CC_ASSERT_OK(ccAllReduce(a.data(), b.data(), 64, ccFloat32, ccSum, comm, nullptr));
    EXPECT_EQ(b[63], 2.0f);
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

TEST(CollectiveArguments, MismatchedAllToAllvCountsAreAnError) {
  MultiRankOptions options;
  options.env["CC_TIMEOUT_MS"] = "3000";
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        std::vector<int32_t> send(8, context.rank), recv(8, -1);
        // Rank 0 expects 3 elements from rank 1, which sends 2.
        size_t sendCounts[2] = {2, 2}, sendDispls[2] = {0, 2};
        size_t recvCounts[2] = {2, context.rank == 0 ? size_t{3} : size_t{2}},
               recvDispls[2] = {0, 4};
        ccResult_t result = ccAllToAllv(send.data(), sendCounts, sendDispls, recv.data(),
                                        recvCounts, recvDispls, ccInt32, comm, nullptr);
        if (context.rank == 0) {
          EXPECT_NE(result, ccSuccess);
          EXPECT_NE(std::string(ccGetLastError(comm)).find("mismatch"), std::string::npos)
              << ccGetLastError(comm);
        }
        (void)ccCommAbort(comm);
      },
      options);
}

}  // namespace
}  // namespace cc::testing
