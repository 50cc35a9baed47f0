// Collectives when things go wrong, and under load: mismatched calls (with CC_CHECK=1 a
// clear error on every rank naming both calls; without it an error or ccTimeout, never
// a hang or a crash), a rank killed in the middle of a stream of collectives (the others
// fail within 2 s, for every algorithm), a soak of random collectives on communicators
// split from one another, and collectives queued on streams and inside groups.
#include <cc/cc.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "collectives/tuner.h"
#include "comm/handles.h"
#include "reference.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

TEST(MismatchedCollectives, CheckedCallsFailOnEveryRankNamingBothCalls) {
  MultiRankOptions options;
  options.env["CC_CHECK"] = "1";
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        std::vector<float> data(1000, 1.0f);
        ccResult_t result = context.rank == 0 ? ccAllReduce(data.data(), data.data(), data.size(),
                                                            ccFloat32, ccSum, comm, nullptr)
                                              : ccBroadcast(data.data(), data.data(), data.size(),
                                                            ccFloat32, 0, comm, nullptr);
        EXPECT_EQ(result, ccInvalidUsage);
        std::string message = ccGetLastError(comm);
        EXPECT_NE(message.find("allreduce(count 1000, float, sum)"), std::string::npos) << message;
        EXPECT_NE(message.find("broadcast(count 1000, float, root 0)"), std::string::npos)
            << message;
        (void)ccCommAbort(comm);
      },
      options);
}

TEST(MismatchedCollectives, CheckedCountsFail) {
  MultiRankOptions options;
  options.env["CC_CHECK"] = "1";
  runRanks(
      3,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        std::vector<int32_t> data(2000, 1);
        size_t count = context.rank == 2 ? 2000 : 1000;
        EXPECT_EQ(ccAllReduce(data.data(), data.data(), count, ccInt32, ccSum, comm, nullptr),
                  ccInvalidUsage);
        EXPECT_NE(std::string(ccGetLastError(comm)).find("count 2000"), std::string::npos)
            << ccGetLastError(comm);
        (void)ccCommAbort(comm);
      },
      options);
}

// Without CC_CHECK: whatever happens, every rank returns within the timeout.
class UncheckedMismatch : public ::testing::TestWithParam<const char*> {};

TEST_P(UncheckedMismatch, ReturnsWithoutHangOrCrash) {
  MultiRankOptions options;
  options.env["CC_TIMEOUT_MS"] = "1500";
  options.env["CC_ALGO"] = GetParam();
  options.timeoutSeconds = 30;
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        std::vector<float> data(1 << 18, 1.0f);
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 4; ++i) {
          ccResult_t result = ccSuccess;
          if (context.rank == 0) {
            result = ccAllReduce(data.data(), data.data(), 1000 + 50000 * static_cast<size_t>(i),
                                 ccFloat32, ccSum, comm, nullptr);
          } else {
            result = ccBroadcast(data.data(), data.data(), 3000, ccFloat32, 1, comm, nullptr);
          }
          if (result != ccSuccess) break;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
        (void)ccCommAbort(comm);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, UncheckedMismatch,
                         ::testing::Values("ring", "tree", "direct", "hd"));

// A rank dies between collectives of a long stream; the survivors must fail within 2 s
// of their last success.
struct KillParam {
  const char* algorithm;
  const char* transport;
  int kind;  // 0 all-reduce, 1 broadcast, 2 all-gather, 3 all-to-all, 4 reduce-scatter
};

class KilledRank : public ::testing::TestWithParam<KillParam> {};

std::string killName(const ::testing::TestParamInfo<KillParam>& info) {
  static const char* const kKinds[] = {"allreduce", "broadcast", "allgather", "alltoall",
                                       "reducescatter"};
  return std::string(kKinds[info.param.kind]) + "_" + info.param.algorithm + "_" +
         info.param.transport;
}

TEST_P(KilledRank, OthersFailWithinTwoSeconds) {
  const KillParam param = GetParam();
  MultiRankOptions options = transportOptions(param.transport);
  options.env["CC_ALGO"] = param.algorithm;
  options.expectKilled = {1};
  options.timeoutSeconds = 60;
  runRanks(
      3,
      [&](RankContext& context) {
        ccComm_t comm = context.initComm();
        const size_t count = 1 << 16;
        std::vector<float> send(3 * count, 1.0f), recv(3 * count, 0.0f);
        auto last = std::chrono::steady_clock::now();
        for (int i = 0; i < 100000; ++i) {
          if (context.rank == 1 && i == 20) kill(getpid(), SIGKILL);
          ccResult_t result = ccSuccess;
          switch (param.kind) {
            case 0:
              result =
                  ccAllReduce(send.data(), recv.data(), count, ccFloat32, ccSum, comm, nullptr);
              break;
            case 1:
              result = ccBroadcast(send.data(), recv.data(), count, ccFloat32, 0, comm, nullptr);
              break;
            case 2:
              result = ccAllGather(send.data(), recv.data(), count, ccFloat32, comm, nullptr);
              break;
            case 3:
              result = ccAllToAll(send.data(), recv.data(), count, ccFloat32, comm, nullptr);
              break;
            default:
              result =
                  ccReduceScatter(send.data(), recv.data(), count, ccFloat32, ccSum, comm, nullptr);
              break;
          }
          auto now = std::chrono::steady_clock::now();
          if (result != ccSuccess) {
            EXPECT_LT(now - last, std::chrono::seconds(2))
                << "noticed after "
                << std::chrono::duration_cast<std::chrono::milliseconds>(now - last).count()
                << " ms";
            EXPECT_TRUE(result == ccRemoteError || result == ccSystemError)
                << ccGetErrorString(result) << ": " << ccGetLastError(comm);
            (void)ccCommAbort(comm);
            return;
          }
          last = now;
        }
        ADD_FAILURE() << "rank " << context.rank << " never noticed that rank 1 died";
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, KilledRank,
    ::testing::Values(KillParam{"ring", "shm", 0}, KillParam{"tree", "shm", 0},
                      KillParam{"hd", "shm", 0}, KillParam{"direct", "shm", 0},
                      KillParam{"ring", "tcp", 0}, KillParam{"tree", "shm", 1},
                      KillParam{"ring", "shm", 1}, KillParam{"direct", "shm", 1},
                      KillParam{"ring", "shm", 2}, KillParam{"direct", "shm", 2},
                      KillParam{"pairwise", "shm", 3}, KillParam{"bruck", "tcp", 3},
                      KillParam{"direct", "shm", 3}, KillParam{"ring", "shm", 4},
                      KillParam{"direct", "shm", 4}),
    killName);

// Thousands of random collectives (kind, type, op, count, root and algorithm drawn from
// one seed, so every rank draws the same) on the world and on communicators split from
// it, each result checked against the reference.
TEST(Soak, RandomCollectivesOnSplitCommunicators) {
#if defined(__SANITIZE_THREAD__)
  // TSan makes each call ~6x slower (91 s for 1500); a race shows in any stretch of calls.
  constexpr int kIterations = 300;
#else
  constexpr int kIterations = 1500;
#endif
  runRanks(4, [](RankContext& context) {
    ccComm_t world = context.initComm();
    ccComm_t half = nullptr;
    ccComm_t reversed = nullptr;
    CC_ASSERT_OK(ccCommSplit(world, context.rank % 2, context.rank, &half));
    CC_ASSERT_OK(ccCommSplit(world, 0, -context.rank, &reversed));
    std::mt19937_64 random(12345);
    const ccDataType_t types[] = {ccInt8,    ccInt32,   ccUint64,  ccFloat16,
                                  ccFloat32, ccFloat64, ccBfloat16};
    const ccRedOp_t ops[] = {ccSum, ccProd, ccMax, ccMin, ccAvg};
    for (int iteration = 0; iteration < kIterations; ++iteration) {
      ccComm_t comms[3] = {world, half, reversed};
      ccComm_t comm = comms[random() % 3];
      int n = 0;
      int me = 0;
      CC_ASSERT_OK(ccCommCount(comm, &n));
      CC_ASSERT_OK(ccCommUserRank(comm, &me));
      // Ranks of `half` draw the same numbers only if everyone draws the same amount.
      int kind = static_cast<int>(random() % 6);
      ccDataType_t type = types[random() % 7];
      ccRedOp_t op = ops[random() % 5];
      size_t count = random() % 3 == 0 ? random() % 70000 : random() % 100;
      int root = static_cast<int>(random() % 2);
      int algorithm = static_cast<int>(random() % 9);  // every CC_ALGO value
      auto impl = comm::communicatorOf(comm);
      ASSERT_NE(impl, nullptr);
      impl->algorithmOverride() = algorithm;
      size_t size = collectives::dataTypeSize(type);
      size_t inCount = kind == 4 || kind == 5 ? count * static_cast<size_t>(n) : count;
      size_t outCount = kind == 3 || kind == 5 ? count * static_cast<size_t>(n) : count;
      std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        inputs[static_cast<size_t>(r)].resize(std::max<size_t>(inCount, 1) * size);
        fillInput(inputs[static_cast<size_t>(r)].data(), inCount, type, op, r,
                  static_cast<uint64_t>(iteration));
      }
      std::vector<std::byte> out(std::max<size_t>(outCount, 1) * size);
      const std::byte* in = inputs[static_cast<size_t>(me)].data();
      ccResult_t result = ccSuccess;
      switch (kind) {
        case 0:
          result = ccAllReduce(in, out.data(), count, type, op, comm, nullptr);
          break;
        case 1:
          result = ccBroadcast(in, out.data(), count, type, root, comm, nullptr);
          break;
        case 2:
          result = ccReduce(in, out.data(), count, type, op, root, comm, nullptr);
          break;
        case 3:
          result = ccAllGather(in, out.data(), count, type, comm, nullptr);
          break;
        case 4:
          result = ccReduceScatter(in, out.data(), count, type, op, comm, nullptr);
          break;
        default:
          result = ccAllToAll(in, out.data(), count, type, comm, nullptr);
          break;
      }
      ASSERT_EQ(result, ccSuccess) << "iteration " << iteration << ": " << ccGetLastError(comm);
      std::string error;
      for (size_t i = 0; i < count && error.empty(); ++i) {
        switch (kind) {
          case 0:
            error = checkReduced(out.data(), i, inputs, i, type, op);
            break;
          case 2:
            if (me == root) error = checkReduced(out.data(), i, inputs, i, type, op);
            break;
          case 4:
            error =
                checkReduced(out.data(), i, inputs, static_cast<size_t>(me) * count + i, type, op);
            break;
          default:
            break;
        }
      }
      if (kind == 1 &&
          std::memcmp(out.data(), inputs[static_cast<size_t>(root)].data(), count * size) != 0)
        error = "broadcast differs";
      for (int r = 0; r < n && (kind == 3 || kind == 5); ++r) {
        const std::byte* expected = kind == 3 ? inputs[static_cast<size_t>(r)].data()
                                              : inputs[static_cast<size_t>(r)].data() +
                                                    static_cast<size_t>(me) * count * size;
        if (std::memcmp(out.data() + static_cast<size_t>(r) * count * size, expected,
                        count * size) != 0)
          error = "block differs";
      }
      ASSERT_TRUE(error.empty()) << "iteration " << iteration << " kind " << kind << " algorithm "
                                 << algorithm << ": " << error;
    }
    CC_ASSERT_OK(ccCommDestroy(reversed));
    CC_ASSERT_OK(ccCommDestroy(half));
    CC_ASSERT_OK(ccCommDestroy(world));
  });
}

TEST(CollectivesOnStreams, QueuedAndGroupedCollectivesRunInOrder) {
  runRanks(3, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ccStream_t stream = nullptr;
    CC_ASSERT_OK(ccStreamCreate(&stream));
    const int buffers = 20;
    std::vector<std::vector<int64_t>> data(buffers, std::vector<int64_t>(5000));
    for (int b = 0; b < buffers; ++b) {
      for (size_t i = 0; i < 5000; ++i)
        data[static_cast<size_t>(b)][i] = (context.rank + 1) * (b + 1) + static_cast<int64_t>(i);
      CC_ASSERT_OK(ccAllReduce(data[static_cast<size_t>(b)].data(),
                               data[static_cast<size_t>(b)].data(), 5000, ccInt64, ccSum, comm,
                               stream));
    }
    CC_ASSERT_OK(ccStreamSynchronize(stream));
    for (int b = 0; b < buffers; ++b) {
      for (size_t i = 0; i < 5000; i += 499) {
        ASSERT_EQ(data[static_cast<size_t>(b)][i], 6 * (b + 1) + 3 * static_cast<int64_t>(i));
      }
    }
    // Two collectives and a ring exchange in one group.
    std::vector<float> a(100, 1.0f), b(300, 0.0f);
    float token = static_cast<float>(context.rank), got = -1;
    CC_ASSERT_OK(ccGroupStart());
    CC_ASSERT_OK(ccAllReduce(a.data(), a.data(), 100, ccFloat32, ccSum, comm, nullptr));
    CC_ASSERT_OK(ccAllGather(a.data(), b.data(), 100, ccFloat32, comm, nullptr));
    CC_ASSERT_OK(ccSend(&token, 1, ccFloat32, (context.rank + 1) % 3, comm, nullptr));
    CC_ASSERT_OK(ccRecv(&got, 1, ccFloat32, (context.rank + 2) % 3, comm, nullptr));
    CC_ASSERT_OK(ccGroupEnd());
    EXPECT_EQ(a[0], 3.0f);
    EXPECT_EQ(b[299], 3.0f);
    EXPECT_EQ(got, static_cast<float>((context.rank + 2) % 3));
    CC_ASSERT_OK(ccStreamDestroy(stream));
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

}  // namespace
}  // namespace cc::testing
