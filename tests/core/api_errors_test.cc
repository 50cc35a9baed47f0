// Bad input is a clear error naming the argument, never a crash: every check of the C
// API's entry points, on a communicator of one rank made in this process.
#include <cc/cc.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

class ApiErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ccUniqueId id;
    ASSERT_EQ(ccGetUniqueId(&id), ccSuccess);
    ASSERT_EQ(ccCommInitRank(&comm_, 1, id, 0), ccSuccess) << ccGetLastError(nullptr);
  }
  void TearDown() override {
    if (comm_ != nullptr) {
      EXPECT_EQ(ccCommDestroy(comm_), ccSuccess);
    }
  }
  // The last error message of this thread mentions `word`.
  static void expectMessageNames(const std::string& word) {
    std::string message = ccGetLastError(nullptr);
    EXPECT_NE(message.find(word), std::string::npos)
        << "message '" << message << "' does not name '" << word << "'";
  }
  ccComm_t comm_ = nullptr;
  char buffer_[64] = {};
};

TEST_F(ApiErrors, NullCommunicator) {
  EXPECT_EQ(ccSend(buffer_, 1, ccInt8, 0, nullptr, nullptr), ccInvalidArgument);
  expectMessageNames("comm is NULL");
  int count = 0;
  EXPECT_EQ(ccCommCount(nullptr, &count), ccInvalidArgument);
  EXPECT_EQ(ccBarrier(nullptr, nullptr), ccInvalidArgument);
}

TEST_F(ApiErrors, NullBufferWithCount) {
  EXPECT_EQ(ccSend(nullptr, 4, ccFloat32, 0, comm_, nullptr), ccInvalidArgument);
  expectMessageNames("sendbuff is NULL");
  EXPECT_EQ(ccRecv(nullptr, 4, ccFloat32, 0, comm_, nullptr), ccInvalidArgument);
  expectMessageNames("recvbuff is NULL");
}

TEST_F(ApiErrors, NullBufferWithZeroCountIsFine) {
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  EXPECT_EQ(ccSend(nullptr, 0, ccFloat32, 0, comm_, nullptr), ccSuccess);
  EXPECT_EQ(ccRecv(nullptr, 0, ccFloat32, 0, comm_, nullptr), ccSuccess);
  EXPECT_EQ(ccGroupEnd(), ccSuccess) << ccGetLastError(nullptr);
}

TEST_F(ApiErrors, CountOverflow) {
  EXPECT_EQ(ccSend(buffer_, SIZE_MAX / 2, ccFloat64, 0, comm_, nullptr), ccInvalidArgument);
  expectMessageNames("overflows");
}

TEST_F(ApiErrors, PeerOutOfRange) {
  EXPECT_EQ(ccSend(buffer_, 1, ccInt8, 1, comm_, nullptr), ccInvalidArgument);
  expectMessageNames("peer 1 is out of range");
  EXPECT_EQ(ccRecv(buffer_, 1, ccInt8, -1, comm_, nullptr), ccInvalidArgument);
  expectMessageNames("peer -1");
}

TEST_F(ApiErrors, UnknownDatatype) {
  EXPECT_EQ(ccSend(buffer_, 1, static_cast<ccDataType_t>(42), 0, comm_, nullptr),
            ccInvalidArgument);
  expectMessageNames("datatype 42");
}

TEST_F(ApiErrors, SendToSelfNeedsAMatchingReceiveInAGroup) {
  EXPECT_EQ(ccSend(buffer_, 8, ccInt8, 0, comm_, nullptr), ccInvalidUsage);
  expectMessageNames("matching receive");
  EXPECT_NE(std::string(ccGetLastError(comm_)).find("matching receive"), std::string::npos);
  // The communicator stays usable after a usage error.
  char received[8] = {};
  for (int i = 0; i < 8; ++i) buffer_[i] = static_cast<char>(i + 1);
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  ASSERT_EQ(ccSend(buffer_, 8, ccInt8, 0, comm_, nullptr), ccSuccess);
  ASSERT_EQ(ccRecv(received, 8, ccInt8, 0, comm_, nullptr), ccSuccess);
  ASSERT_EQ(ccGroupEnd(), ccSuccess) << ccGetLastError(nullptr);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(received[i], i + 1);
}

TEST_F(ApiErrors, SelfSizesMustMatch) {
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  ASSERT_EQ(ccSend(buffer_, 8, ccInt8, 0, comm_, nullptr), ccSuccess);
  ASSERT_EQ(ccRecv(buffer_ + 8, 4, ccInt8, 0, comm_, nullptr), ccSuccess);
  EXPECT_EQ(ccGroupEnd(), ccInvalidUsage);
  expectMessageNames("size mismatch");
}

TEST_F(ApiErrors, BadCallInsideAGroupDropsTheGroup) {
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  ASSERT_EQ(ccSend(buffer_, 8, ccInt8, 0, comm_, nullptr), ccSuccess);
  EXPECT_EQ(ccRecv(buffer_, 8, ccInt8, 7, comm_, nullptr), ccInvalidArgument);
  EXPECT_EQ(ccGroupEnd(), ccInvalidArgument);
  expectMessageNames("dropped");
}

TEST_F(ApiErrors, UseAfterDestroy) {
  ccComm_t stale = comm_;
  ASSERT_EQ(ccCommDestroy(comm_), ccSuccess);
  comm_ = nullptr;
  EXPECT_EQ(ccSend(buffer_, 1, ccInt8, 0, stale, nullptr), ccInvalidArgument);
  expectMessageNames("not a live communicator");
  EXPECT_EQ(ccCommDestroy(stale), ccInvalidArgument);
}

TEST_F(ApiErrors, AStaleHandleNeverAliasesANewCommunicator) {
  ccComm_t stale = comm_;
  ASSERT_EQ(ccCommDestroy(comm_), ccSuccess);
  comm_ = nullptr;
  ccUniqueId id;
  ASSERT_EQ(ccGetUniqueId(&id), ccSuccess);
  ASSERT_EQ(ccCommInitRank(&comm_, 1, id, 0), ccSuccess);
  EXPECT_NE(comm_, stale) << "the new communicator reuses the destroyed one's handle";
  int count = 0;
  EXPECT_EQ(ccCommCount(stale, &count), ccInvalidArgument);
}

TEST_F(ApiErrors, GroupEndWithoutStart) {
  EXPECT_EQ(ccGroupEnd(), ccInvalidUsage);
  expectMessageNames("ccGroupStart");
}

TEST_F(ApiErrors, BarrierInsideGroupIsUsageError) {
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  EXPECT_EQ(ccBarrier(comm_, nullptr), ccInvalidUsage);
  EXPECT_EQ(ccGroupEnd(), ccSuccess);
}

TEST_F(ApiErrors, InitArguments) {
  ccUniqueId id;
  ASSERT_EQ(ccGetUniqueId(&id), ccSuccess);
  ccComm_t comm = nullptr;
  EXPECT_EQ(ccCommInitRank(&comm, 0, id, 0), ccInvalidArgument);
  expectMessageNames("nranks 0");
  EXPECT_EQ(ccCommInitRank(&comm, 2, id, 2), ccInvalidArgument);
  expectMessageNames("rank 2");
  EXPECT_EQ(ccCommInitRank(nullptr, 1, id, 0), ccInvalidArgument);
  ccUniqueId garbage;
  for (size_t i = 0; i < sizeof(garbage.internal); ++i)
    garbage.internal[i] = static_cast<char>(i * 7);
  EXPECT_EQ(ccCommInitRank(&comm, 1, garbage, 0), ccInvalidArgument);
  expectMessageNames("ccUniqueId");
  EXPECT_EQ(ccCommInitAll(nullptr, 2, nullptr), ccInvalidArgument);
  EXPECT_EQ(ccCommSplit(comm_, -5, 0, &comm), ccInvalidArgument);
  expectMessageNames("color -5");
}

TEST_F(ApiErrors, QueriesAndStrings) {
  int count = 0;
  int rank = -1;
  ASSERT_EQ(ccCommCount(comm_, &count), ccSuccess);
  ASSERT_EQ(ccCommUserRank(comm_, &rank), ccSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(ccCommCount(comm_, nullptr), ccInvalidArgument);
  ccResult_t async = ccInternalError;
  ASSERT_EQ(ccCommGetAsyncError(comm_, &async), ccSuccess);
  EXPECT_EQ(async, ccSuccess);
  for (int code = 0; code <= ccNumResults; ++code) {
    EXPECT_NE(ccGetErrorString(static_cast<ccResult_t>(code)), nullptr);
  }
  int version = 0;
  ASSERT_EQ(ccGetVersion(&version), ccSuccess);
  EXPECT_EQ(version, CC_VERSION_CODE);
}

TEST_F(ApiErrors, StreamHandles) {
  EXPECT_EQ(ccStreamCreate(nullptr), ccInvalidArgument);
  ccStream_t stream = nullptr;
  ASSERT_EQ(ccStreamCreate(&stream), ccSuccess);
  EXPECT_EQ(ccStreamQuery(stream), ccSuccess);
  ASSERT_EQ(ccStreamDestroy(stream), ccSuccess);
  EXPECT_EQ(ccStreamSynchronize(stream), ccInvalidArgument);
  EXPECT_EQ(ccStreamDestroy(stream), ccInvalidArgument);
  EXPECT_EQ(ccSend(buffer_, 1, ccInt8, 0, comm_, stream), ccInvalidArgument);
  expectMessageNames("stream");
}

TEST_F(ApiErrors, AGroupMustUseOneStream) {
  ccStream_t stream = nullptr;
  ASSERT_EQ(ccStreamCreate(&stream), ccSuccess);
  char received[8] = {};
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  ASSERT_EQ(ccSend(buffer_, 8, ccInt8, 0, comm_, stream), ccSuccess);
  ASSERT_EQ(ccRecv(received, 8, ccInt8, 0, comm_, nullptr), ccSuccess);
  EXPECT_EQ(ccGroupEnd(), ccInvalidUsage);
  expectMessageNames("different streams");
  ASSERT_EQ(ccStreamDestroy(stream), ccSuccess);
}

// Destroying a stream that a pending group refers to must not free it under the group.
TEST_F(ApiErrors, StreamDestroyedInsideAGroupStillRunsTheGroup) {
  ccStream_t stream = nullptr;
  ASSERT_EQ(ccStreamCreate(&stream), ccSuccess);
  char received[8] = {};
  for (int i = 0; i < 8; ++i) buffer_[i] = static_cast<char>(10 + i);
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  ASSERT_EQ(ccSend(buffer_, 8, ccInt8, 0, comm_, stream), ccSuccess);
  ASSERT_EQ(ccRecv(received, 8, ccInt8, 0, comm_, stream), ccSuccess);
  ASSERT_EQ(ccStreamDestroy(stream), ccSuccess);
  EXPECT_EQ(ccGroupEnd(), ccSuccess) << ccGetLastError(nullptr);
  // The group ran on the stream's worker before the stream went away.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(received[i], 10 + i);
}

TEST_F(ApiErrors, StreamReportsAnAsyncError) {
  ccStream_t stream = nullptr;
  ASSERT_EQ(ccStreamCreate(&stream), ccSuccess);
  // Valid arguments, but a send to self with no receive: fails when it runs.
  ASSERT_EQ(ccSend(buffer_, 8, ccInt8, 0, comm_, stream), ccSuccess);
  EXPECT_EQ(ccStreamSynchronize(stream), ccInvalidUsage);
  ccResult_t async = ccSuccess;
  ASSERT_EQ(ccCommGetAsyncError(comm_, &async), ccSuccess);
  EXPECT_EQ(async, ccInvalidUsage);
  EXPECT_EQ(ccStreamSynchronize(stream), ccSuccess) << "the error is reported once";
  ASSERT_EQ(ccStreamDestroy(stream), ccSuccess);
}

}  // namespace
