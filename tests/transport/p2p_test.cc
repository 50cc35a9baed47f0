// Point-to-point over each transport (shm, tcp and ucx), across forked ranks: message sizes
// from 0 bytes to 256 MiB, every pair, a ring exchange in one group, and many
// operations queued on a stream. Every byte received is checked.
#include <cc/cc.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/handles.h"
#include "core/copy.h"
#include "support/multi_rank.h"
#include "transport/shm/channel.h"

namespace cc::testing {
namespace {

// A pattern that differs with the sender, the receiver, the message and the offset.
uint8_t patternByte(int from, int to, int message, size_t offset) {
  uint64_t x = (static_cast<uint64_t>(from) * 1000003u) ^ (static_cast<uint64_t>(to) * 7919u) ^
               (static_cast<uint64_t>(message) * 104729u) ^ (offset * 2654435761u);
  return static_cast<uint8_t>((x >> 7) ^ (x >> 17) ^ offset);
}

std::vector<uint8_t> makeMessage(int from, int to, int message, size_t bytes) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = patternByte(from, to, message, i);
  return data;
}

// Index of the first wrong byte, or -1.
int64_t firstMismatch(const std::vector<uint8_t>& data, int from, int to, int message) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != patternByte(from, to, message, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

// Anonymous memory that asks for transparent huge pages: a 4.5 GiB buffer in 4 KiB pages
// takes over a million page faults, which cost more than the transfer in a VM.
class HugePageWords {
 public:
  explicit HugePageWords(size_t words) : bytes_(words * sizeof(uint64_t)) {
    void* memory =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return;
    madvise(memory, bytes_, MADV_HUGEPAGE);  // a hint: without it the pages are 4 KiB
    words_ = static_cast<uint64_t*>(memory);
  }
  ~HugePageWords() {
    if (words_ != nullptr) munmap(words_, bytes_);
  }
  HugePageWords(const HugePageWords&) = delete;
  HugePageWords& operator=(const HugePageWords&) = delete;
  uint64_t* data() const { return words_; }

 private:
  size_t bytes_;
  uint64_t* words_ = nullptr;
};

class PointToPoint : public ::testing::TestWithParam<const char*> {
 protected:
  MultiRankOptions options() const { return transportOptions(GetParam()); }
};

TEST_P(PointToPoint, SizesFromZeroTo256MiBBothWays) {
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
#if defined(__SANITIZE_THREAD__)
        // Under TSan, 32 MiB (still 32 rings' worth, and over the CMA threshold): filling and
        // checking 256 MiB byte by byte took this test to ~50 s a transport there.
        const size_t largest = 32u << 20;
#else
        const size_t largest = 256u << 20;
#endif
        const size_t sizes[] = {0, 1, 4095, (1u << 20) + 7, largest};
        int message = 0;
        for (size_t bytes : sizes) {
          for (int sender = 0; sender < 2; ++sender, ++message) {
            int receiver = 1 - sender;
            if (context.rank == sender) {
              auto data = makeMessage(sender, receiver, message, bytes);
              CC_ASSERT_OK(ccSend(data.data(), bytes, ccUint8, receiver, comm, nullptr));
            } else {
              std::vector<uint8_t> data(bytes, 0xEE);
              CC_ASSERT_OK(ccRecv(data.data(), bytes, ccUint8, sender, comm, nullptr));
              ASSERT_EQ(firstMismatch(data, sender, receiver, message), -1) << "size " << bytes;
            }
          }
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options());
}

// More than 4 GiB in one message: no 32-bit size or offset anywhere on the path.
// Skipped under sanitizers (their shadow memory would double the 9 GiB this needs).
TEST_P(PointToPoint, OneMessageLargerThanFourGiB) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "too large under a sanitizer";
#else
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        const size_t words = (size_t{9} << 29) / sizeof(uint64_t) + 3;  // 4.5 GiB + 24 bytes
        HugePageWords buffer(words);
        uint64_t* data = buffer.data();
        ASSERT_NE(data, nullptr) << "mmap of " << words * sizeof(uint64_t) << " bytes failed";
        if (context.rank == 0) {
          for (size_t i = 0; i < words; ++i) data[i] = i * 0x9e3779b97f4a7c15ull;
          CC_ASSERT_OK(ccSend(data, words, ccUint64, 1, comm, nullptr));
        } else {
          CC_ASSERT_OK(ccRecv(data, words, ccUint64, 0, comm, nullptr));
          for (size_t i = 0; i < words; ++i) {
            if (data[i] != i * 0x9e3779b97f4a7c15ull)
              FAIL() << "word " << i << " of " << words << " is wrong";
          }
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options());
#endif
}

TEST_P(PointToPoint, TypedCountsMoveCountTimesTypeSize) {
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        std::vector<double> values(1001);
        if (context.rank == 0) {
          std::iota(values.begin(), values.end(), 0.5);
          CC_ASSERT_OK(ccSend(values.data(), values.size(), ccFloat64, 1, comm, nullptr));
        } else {
          CC_ASSERT_OK(ccRecv(values.data(), values.size(), ccFloat64, 0, comm, nullptr));
          for (size_t i = 0; i < values.size(); ++i)
            ASSERT_EQ(values[i], static_cast<double>(i) + 0.5);
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options());
}

TEST_P(PointToPoint, EveryOrderedPairOfFourRanks) {
  runRanks(
      4,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        const size_t bytes = (64u << 10) + 3;
        int message = 0;
        for (int from = 0; from < 4; ++from) {
          for (int to = 0; to < 4; ++to, ++message) {
            if (from == to) continue;
            if (context.rank == from) {
              auto data = makeMessage(from, to, message, bytes);
              CC_ASSERT_OK(ccSend(data.data(), bytes, ccUint8, to, comm, nullptr));
            } else if (context.rank == to) {
              std::vector<uint8_t> data(bytes);
              CC_ASSERT_OK(ccRecv(data.data(), bytes, ccUint8, from, comm, nullptr));
              ASSERT_EQ(firstMismatch(data, from, to, message), -1) << from << " -> " << to;
            }
          }
        }
        CC_ASSERT_OK(ccBarrier(comm, nullptr));
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options());
}

// Everyone sends right and receives left in one group: must not deadlock, for sizes
// far beyond any buffering (8 ranks on 2 cores).
TEST_P(PointToPoint, RingExchangeInOneGroup) {
  for (int nranks : {2, 3, 8}) {
    runRanks(
        nranks,
        [](RankContext& context) {
          ccComm_t comm = context.initComm();
          ASSERT_NE(comm, nullptr);
          int right = (context.rank + 1) % context.nranks;
          int left = (context.rank + context.nranks - 1) % context.nranks;
          for (size_t bytes : {size_t{8}, size_t{(4u << 20) + 5}}) {
            auto out = makeMessage(context.rank, right, 1, bytes);
            std::vector<uint8_t> in(bytes);
            CC_ASSERT_OK(ccGroupStart());
            CC_ASSERT_OK(ccSend(out.data(), bytes, ccUint8, right, comm, nullptr));
            CC_ASSERT_OK(ccRecv(in.data(), bytes, ccUint8, left, comm, nullptr));
            CC_ASSERT_OK(ccGroupEnd());
            ASSERT_EQ(firstMismatch(in, left, context.rank, 1), -1) << "size " << bytes;
          }
          CC_ASSERT_OK(ccCommDestroy(comm));
        },
        options());
  }
}

// Two messages to the same peer in one group arrive in order.
TEST_P(PointToPoint, OrderWithinAGroupIsKept) {
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        int peer = 1 - context.rank;
        auto first = makeMessage(context.rank, peer, 10, 300000);
        auto second = makeMessage(context.rank, peer, 11, 17);
        std::vector<uint8_t> got1(300000);
        std::vector<uint8_t> got2(17);
        CC_ASSERT_OK(ccGroupStart());
        CC_ASSERT_OK(ccSend(first.data(), first.size(), ccUint8, peer, comm, nullptr));
        CC_ASSERT_OK(ccSend(second.data(), second.size(), ccUint8, peer, comm, nullptr));
        CC_ASSERT_OK(ccRecv(got1.data(), got1.size(), ccUint8, peer, comm, nullptr));
        CC_ASSERT_OK(ccRecv(got2.data(), got2.size(), ccUint8, peer, comm, nullptr));
        CC_ASSERT_OK(ccGroupEnd());
        ASSERT_EQ(firstMismatch(got1, peer, context.rank, 10), -1);
        ASSERT_EQ(firstMismatch(got2, peer, context.rank, 11), -1);
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options());
}

// Hundreds of operations queued on a stream run in order in the background.
TEST_P(PointToPoint, ManyOutstandingOperationsOnAStream) {
  runRanks(
      3,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        ccStream_t stream = nullptr;
        CC_ASSERT_OK(ccStreamCreate(&stream));
        const int kMessages = 300;
        const size_t bytes = 4099;
        int right = (context.rank + 1) % context.nranks;
        int left = (context.rank + context.nranks - 1) % context.nranks;
        std::vector<std::vector<uint8_t>> out(kMessages);
        std::vector<std::vector<uint8_t>> in(kMessages, std::vector<uint8_t>(bytes));
        for (int m = 0; m < kMessages; ++m) {
          out[m] = makeMessage(context.rank, right, m, bytes);
          CC_ASSERT_OK(ccGroupStart());
          CC_ASSERT_OK(ccSend(out[m].data(), bytes, ccUint8, right, comm, stream));
          CC_ASSERT_OK(ccRecv(in[m].data(), bytes, ccUint8, left, comm, stream));
          CC_ASSERT_OK(ccGroupEnd());
        }
        ccResult_t query = ccStreamQuery(stream);
        EXPECT_TRUE(query == ccInProgress || query == ccSuccess) << ccGetErrorString(query);
        CC_ASSERT_OK(ccStreamSynchronize(stream));
        EXPECT_EQ(ccStreamQuery(stream), ccSuccess);
        for (int m = 0; m < kMessages; ++m)
          ASSERT_EQ(firstMismatch(in[m], left, context.rank, m), -1) << "message " << m;
        CC_ASSERT_OK(ccBarrier(comm, stream));
        CC_ASSERT_OK(ccStreamDestroy(stream));
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options());
}

// Messages a rank sent before it destroyed its communicator still arrive, even when the
// receiver posts its receives only later (what the transport buffered is not dropped).
TEST_P(PointToPoint, SendsBeforeDestroyArriveAfterIt) {
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        const int kMessages = 48;
        const size_t bytes = 48 * 1024 + 5;
        if (context.rank == 0) {
          for (int m = 0; m < kMessages; ++m) {
            auto message = makeMessage(0, 1, m, bytes);
            CC_ASSERT_OK(ccSend(message.data(), bytes, ccUint8, 1, comm, nullptr));
          }
          CC_ASSERT_OK(ccCommDestroy(comm));
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::vector<uint8_t> got(bytes);
        for (int m = 0; m < kMessages; ++m) {
          CC_ASSERT_OK(ccRecv(got.data(), bytes, ccUint8, 0, comm, nullptr));
          ASSERT_EQ(firstMismatch(got, 0, 1, m), -1) << "message " << m;
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options());
}

// A receive whose size differs from the send is reported, not silently truncated.
TEST_P(PointToPoint, SizeMismatchIsAnError) {
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        std::vector<uint8_t> data(1000);
        if (context.rank == 0) {
          CC_ASSERT_OK(ccSend(data.data(), 100, ccUint8, 1, comm, nullptr));
          // Rank 1 gives up on the communicator, so this barrier must fail, not hang.
          EXPECT_NE(ccBarrier(comm, nullptr), ccSuccess);
        } else {
          EXPECT_EQ(ccRecv(data.data(), 200, ccUint8, 0, comm, nullptr), ccInvalidUsage);
          std::string message = ccGetLastError(comm);
          EXPECT_NE(message.find("size mismatch"), std::string::npos) << message;
          EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
        }
        ccCommAbort(comm);
      },
      [this] {
        MultiRankOptions options = transportOptions(GetParam());
        options.env["CC_TIMEOUT_MS"] = "3000";
        return options;
      }());
}

// CC_SHM_USE_CMA=auto offers the single copy to the direct collectives only, never to
// blocking sends, even where it is offered (forced here, as this host's kernel copy may
// be too slow to be): a send by address would complete only once the peer read it, so a
// program whose ranks both send before they receive, with messages that fit the ring,
// would hang where it runs today. Both ranks send first, many times, every message
// arrives whole, and none went by address.
TEST(ChosenSingleCopy, BlockingSendsStayStagedAndCompleteBeforeTheirReceive) {
  MultiRankOptions options = transportOptions("shm");
  options.env["CC_SHM_USE_CMA"] = "auto";
  options.env["CC_TIMEOUT_MS"] = "5000";
  runRanks(
      2,
      [&](RankContext& context) {
        transport::shm::setCrossMemoryCopyCompetitiveForTesting(true);
        ccComm_t comm = context.initComm();
        const int me = context.rank;
        const int peer = 1 - me;
        constexpr size_t kBytes = 80000;  // a chooser bucket; fits the ring
        const int messages = 2 * static_cast<int>(CopyChooser::kSeedCalls3);
        for (int message = 0; message < messages; ++message) {
          std::vector<uint8_t> out = makeMessage(me, peer, message, kBytes);
          CC_ASSERT_OK(ccSend(out.data(), kBytes, ccUint8, peer, comm, nullptr));
          std::fill(out.begin(), out.end(), uint8_t{0xff});
          std::vector<uint8_t> in(kBytes);
          CC_ASSERT_OK(ccRecv(in.data(), kBytes, ccUint8, peer, comm, nullptr));
          ASSERT_EQ(firstMismatch(in, peer, me, message), -1) << "message " << message;
        }
        EXPECT_EQ(comm::communicatorOf(comm)->channel(peer)->bytesPostedByAddress(), 0u);
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPoint,
                         ::testing::Values("shm", "shm_cma", "tcp", "ucx"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string(param.param);
                         });

}  // namespace
}  // namespace cc::testing
