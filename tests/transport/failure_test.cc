// Never hang, never leave anything behind: a rank killed with SIGKILL mid-transfer makes
// the others fail within 2 s on every transport (shm, tcp, ucx), with nothing left in
// /dev/shm; a silent peer is a ccTimeout naming the operation and the peer; ccCommAbort
// from another thread unblocks a waiting rank.
#include <cc/cc.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/multi_rank.h"

namespace cc::testing {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class Failure : public ::testing::TestWithParam<const char*> {};

// Rank 2 streams large messages to rank 0 and is killed partway; rank 1 waits for a
// message from rank 2 that never comes. Both must see an error within 2 s of the kill.
TEST_P(Failure, KilledRankIsNoticedWithinTwoSeconds) {
  auto before = listDevShm();
  MultiRankOptions options = transportOptions(GetParam());
  options.expectKilled = {2};
  runRanks(
      3,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        // Allocated before the barrier, so that the clock starts when every rank is ready.
        // 64 MiB a message: rank 2 sends them back to back, so the kill lands inside one.
        // (With 1 GiB messages, each one's first touch of TSan's shadow took this test to
        // 100-120 s under TSan on 2 cores.)
        const size_t bytes = size_t{64} << 20;
        std::vector<uint8_t> buffer(bytes, 1);
        CC_ASSERT_OK(ccBarrier(comm, nullptr));
        if (context.rank == 2) {
          // Die while the transfer is in flight.
          std::thread killer([] {
            std::this_thread::sleep_for(std::chrono::milliseconds(150));
            raise(SIGKILL);
          });
          for (int i = 0; i < 1000; ++i) ccSend(buffer.data(), bytes, ccUint8, 0, comm, nullptr);
          killer.join();
          return;
        }
        auto start = Clock::now();
        ccResult_t result = ccRecv(buffer.data(), bytes, ccUint8, 2, comm, nullptr);
        double elapsed = secondsSince(start);
        // Some messages may complete before the kill; the first that cannot must fail.
        while (result == ccSuccess && secondsSince(start) < 30) {
          start = Clock::now();
          result = ccRecv(buffer.data(), bytes, ccUint8, 2, comm, nullptr);
          elapsed = secondsSince(start);
        }
        EXPECT_EQ(result, ccRemoteError) << ccGetErrorString(result);
        // The kill happens ~150 ms after the barrier, inside a message; allow 2 s after it.
        EXPECT_LT(elapsed, 2.5) << "noticed the dead rank only after " << elapsed << " s";
        std::string message = ccGetLastError(comm);
        EXPECT_NE(message.find("rank 2"), std::string::npos) << message;
        ccResult_t async = ccSuccess;
        CC_ASSERT_OK(ccCommGetAsyncError(comm, &async));
        EXPECT_EQ(async, ccRemoteError);
        // The communicator refuses further work instead of hanging.
        EXPECT_NE(ccBarrier(comm, nullptr), ccSuccess);
        CC_ASSERT_OK(ccCommAbort(comm));
      },
      options);
  EXPECT_EQ(listDevShm(), before) << "something was left in /dev/shm";
}

TEST_P(Failure, SilentPeerTimesOutNamingOperationAndPeer) {
  MultiRankOptions options = transportOptions(GetParam());
  options.env["CC_TIMEOUT_MS"] = "500";
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        if (context.rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // alive but silent
          ccCommAbort(comm);
          return;
        }
        char byte = 0;
        auto start = Clock::now();
        ccResult_t result = ccRecv(&byte, 1, ccInt8, 1, comm, nullptr);
        double elapsed = secondsSince(start);
        EXPECT_EQ(result, ccTimeout) << ccGetErrorString(result);
        EXPECT_GE(elapsed, 0.45);
        EXPECT_LT(elapsed, 2.0);
        std::string message = ccGetLastError(comm);
        EXPECT_NE(message.find("recv #"), std::string::npos) << message;
        EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
        EXPECT_NE(message.find("CC_TIMEOUT_MS"), std::string::npos) << message;
        ccCommAbort(comm);
      },
      options);
}

TEST_P(Failure, AbortFromAnotherThreadUnblocksAWaitingRank) {
  MultiRankOptions options = transportOptions(GetParam());
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        if (context.rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(3000));
          ccCommAbort(comm);
          return;
        }
        std::thread aborter([comm] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          EXPECT_EQ(ccCommAbort(comm), ccSuccess);
        });
        std::vector<char> buffer(1 << 20);
        auto start = Clock::now();
        ccResult_t result = ccRecv(buffer.data(), buffer.size(), ccInt8, 1, comm, nullptr);
        double elapsed = secondsSince(start);
        aborter.join();
        EXPECT_NE(result, ccSuccess);
        EXPECT_LT(elapsed, 1.0) << "abort took " << elapsed << " s to unblock the receive";
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, Failure, ::testing::Values("shm", "shm_cma", "tcp", "ucx"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string(param.param);
                         });

}  // namespace
}  // namespace cc::testing
