// Registered buffers (ccMemAlloc, ccCommRegister): the direct collectives read a rank's
// registered send and receive buffers in place instead of through staging.
//
// Properties: every collective gives the same bits as the staged run, whichever ranks
// register (all, one, none), in place and out of place, over many rounds, even when each
// rank scribbles over its buffers the moment the call returns (so a rank must not return
// while a peer still reads them); the peers map exactly the allocations registered; an
// allocation freed and made again is never read through the old mapping; every bad
// argument is named.
#include <cc/cc.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/collective.h"
#include "comm/handles.h"
#include "core/copy.h"
#include "reference.h"
#include "support/multi_rank.h"
#include "transport/shm/channel.h"

namespace cc::testing {
namespace {

constexpr ccDataType_t kType = ccFloat32;
constexpr size_t kElement = 4;

enum class Who { kNone, kAll, kRankZero };

bool registers(Who who, int rank) {
  return who == Who::kAll || (who == Who::kRankZero && rank == 0);
}

struct Kind {
  const char* name;
  bool inPlace;
};

// Runs collective `kind` of `count` elements (per rank where the API counts per rank)
// on `send`/`recv`, each `bytes` long, laid out in place when asked.
ccResult_t runCollective(const std::string& kind, bool inPlace, std::byte* send, std::byte* recv,
                         size_t count, int rank, int n, ccComm_t comm) {
  const size_t block = count * kElement;
  const auto me = static_cast<size_t>(rank);
  if (kind == "allreduce") {
    return ccAllReduce(send, inPlace ? send : recv, count, kType, ccSum, comm, nullptr);
  }
  if (kind == "reduce") {
    return ccReduce(send, inPlace ? send : recv, count, kType, ccSum, n - 1, comm, nullptr);
  }
  if (kind == "broadcast") {
    return ccBroadcast(send, inPlace ? send : recv, count, kType, 1 % n, comm, nullptr);
  }
  if (kind == "allgather") {
    // In place: the send block is this rank's block of the output.
    return ccAllGather(inPlace ? recv + me * block : send, recv, count, kType, comm, nullptr);
  }
  if (kind == "reducescatter") {
    return ccReduceScatter(send, inPlace ? send + me * block : recv, count, kType, ccSum, comm,
                           nullptr);
  }
  return ccAllToAll(send, recv, count, kType, comm, nullptr);
}

// The output a rank compares: where the collective left its result.
std::vector<std::byte> resultOf(const std::string& kind, bool inPlace, const std::byte* send,
                                const std::byte* recv, size_t count, int rank, int n) {
  const size_t block = count * kElement;
  const auto me = static_cast<size_t>(rank);
  const auto total = static_cast<size_t>(n) * block;
  if (kind == "reduce" && rank != n - 1) return {};
  if (kind == "allgather" || kind == "alltoall") return {recv, recv + total};
  if (kind == "reducescatter") {
    const std::byte* out = inPlace ? send + me * block : recv;
    return {out, out + block};
  }
  const std::byte* out = inPlace ? send : recv;
  return {out, out + block};
}

class Registered : public ::testing::TestWithParam<int> {};

TEST_P(Registered, EveryCollectiveGivesTheStagedBitsWhoeverRegisters) {
  const int n = GetParam();
  runRanks(n, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    auto impl = comm::communicatorOf(comm);
    impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm("direct"));
    // Small slots: a call of `count` elements takes many rounds.
    impl->chunkBytesOverride() = 16 << 10;
    const int me = context.rank;
    // An odd size (uneven slices, many rounds), and one small enough for the one-shot
    // all-reduce and reduce.
    for (const size_t count : {size_t{20011}, size_t{1001}}) {
      const size_t bytes = count * kElement * static_cast<size_t>(n);
      for (const char* kind :
           {"allreduce", "reduce", "broadcast", "allgather", "reducescatter", "alltoall"}) {
        for (bool inPlace : {false, true}) {
          if (inPlace && std::string(kind) == "alltoall") continue;  // the API refuses it
          std::vector<std::byte> staged;
          for (Who who : {Who::kNone, Who::kAll, Who::kRankZero}) {
            void* send = nullptr;
            void* recv = nullptr;
            CC_ASSERT_OK(ccMemAlloc(&send, bytes));
            CC_ASSERT_OK(ccMemAlloc(&recv, bytes));
            auto* sendBytes = static_cast<std::byte*>(send);
            auto* recvBytes = static_cast<std::byte*>(recv);
            fillInput(sendBytes, bytes / kElement, kType, ccSum, me, 3);
            // In-place all-gather reads its block from the output buffer.
            fillInput(recvBytes, bytes / kElement, kType, ccSum, me, 3);
            void* sendHandle = nullptr;
            void* recvHandle = nullptr;
            if (registers(who, me)) {
              CC_ASSERT_OK(ccCommRegister(comm, send, bytes, &sendHandle));
              CC_ASSERT_OK(ccCommRegister(comm, recv, bytes, &recvHandle));
            }
            CC_ASSERT_OK(runCollective(kind, inPlace, sendBytes, recvBytes, count, me, n, comm));
            std::vector<std::byte> result =
                resultOf(kind, inPlace, sendBytes, recvBytes, count, me, n);
            // The call has returned: the buffers are the caller's again.
            std::memset(send, 0xff, bytes);
            std::memset(recv, 0xff, bytes);
            if (who == Who::kNone) {
              staged = result;
            } else {
              ASSERT_EQ(result, staged) << kind << " of " << count << (inPlace ? " in place" : "")
                                        << " with " << (who == Who::kAll ? "every rank" : "rank 0")
                                        << " registered differs from the staged run";
            }
            if (registers(who, me)) {
              CC_ASSERT_OK(ccCommDeregister(comm, sendHandle));
              CC_ASSERT_OK(ccCommDeregister(comm, recvHandle));
            }
            // Every rank is done with the peers' buffers only after this barrier.
            CC_ASSERT_OK(ccBarrier(comm, nullptr));
            CC_ASSERT_OK(ccMemFree(send));
            CC_ASSERT_OK(ccMemFree(recv));
          }
          if (std::string(kind) == "allreduce") {
            // The staged run itself is right (so "the same bits" means right).
            std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(n));
            for (int r = 0; r < n; ++r) {
              inputs[static_cast<size_t>(r)].resize(bytes);
              fillInput(inputs[static_cast<size_t>(r)].data(), bytes / kElement, kType, ccSum, r,
                        3);
            }
            for (size_t i = 0; i < count; i += 101) {
              std::string error = checkReduced(staged.data(), i, inputs, i, kType, ccSum);
              ASSERT_TRUE(error.empty()) << error;
            }
          }
        }
      }
    }
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Registered, ::testing::Values(2, 3, 4),
                         [](const auto& param) { return "np" + std::to_string(param.param); });

// The single copy (CC_SHM_USE_CMA): broadcast, all-gather and all-to-all read a peer's
// plain (unregistered) send buffer where it lies, with process_vm_readv, from
// CC_SHM_CMA_THRESHOLD bytes a peer on (4096 in the shm_cma options). Properties: the
// output is the formula's (every rank's input as fillInput makes it, moved where the
// collective puts it), out of place and in place, over many rounds, though every rank
// scribbles over its input the moment its call returns; a rank reads exactly the bytes
// the peers send it by address at or above the threshold, and none below it; where the
// kernel refuses the probe (Yama ptrace scope above 0: sibling processes may not read each
// other) the call goes through staging instead. Where Yama allows it (or is absent) the
// probe must pass, so that a probe or path broken silently fails here instead of testing
// only the fallback.
class SingleCopy : public ::testing::TestWithParam<int> {};

// What `kind` leaves on `rank` when every rank r's send and receive buffers held
// fillInput(r) over n blocks of `count` (resultOf's layout).
std::vector<std::byte> expectedOf(const std::string& kind, bool inPlace, size_t count, int rank,
                                  int n) {
  const size_t block = count * kElement;
  const auto blocks = static_cast<size_t>(n);
  auto input = [&](int r) {
    std::vector<std::byte> data(blocks * block);
    fillInput(data.data(), blocks * count, kType, ccSum, r, 3);
    return data;
  };
  std::vector<std::byte> expected;
  auto append = [&](const std::vector<std::byte>& data, size_t at) {
    expected.insert(expected.end(), data.begin() + static_cast<std::ptrdiff_t>(at * block),
                    data.begin() + static_cast<std::ptrdiff_t>((at + 1) * block));
  };
  if (kind == "broadcast") append(input(1 % n), 0);
  for (int r = 0; r < n && kind == "allgather"; ++r) {
    append(input(r), inPlace ? static_cast<size_t>(r) : 0);
  }
  for (int r = 0; r < n && kind == "alltoall"; ++r) append(input(r), static_cast<size_t>(rank));
  return expected;
}

// One call of `kind` on fresh buffers that hold fillInput(rank): the output must be the
// formula's, though the rank scribbles over both buffers the moment the call returns (a
// peer still reading its input by address would see 0xff). Adds the bytes this rank read
// from its peers by address to `readByAddress`.
void scribbledCall(const std::string& kind, bool inPlace, size_t count, int me, int n,
                   ccComm_t comm, uint64_t& readByAddress) {
  auto impl = comm::communicatorOf(comm);
  const size_t bytes = count * kElement * static_cast<size_t>(n);
  std::vector<std::byte> send(bytes);
  std::vector<std::byte> recv(bytes);
  fillInput(send.data(), bytes / kElement, kType, ccSum, me, 3);
  fillInput(recv.data(), bytes / kElement, kType, ccSum, me, 3);
  const uint64_t readBefore = impl->bytesReadByAddress();
  CC_ASSERT_OK(runCollective(kind, inPlace, send.data(), recv.data(), count, me, n, comm));
  readByAddress += impl->bytesReadByAddress() - readBefore;
  std::vector<std::byte> result = resultOf(kind, inPlace, send.data(), recv.data(), count, me, n);
  std::memset(send.data(), 0xff, bytes);
  std::memset(recv.data(), 0xff, bytes);
  ASSERT_EQ(result, expectedOf(kind, inPlace, count, me, n))
      << kind << " of " << count << (inPlace ? " in place" : "");
}

TEST_P(SingleCopy, PeersReadPlainBuffersWhereTheyLie) {
  const int n = GetParam();
  runRanks(
      n,
      [&](RankContext& context) {
        ccComm_t comm = context.initComm();
        auto impl = comm::communicatorOf(comm);
        impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm("direct"));
        impl->chunkBytesOverride() = 16 << 10;  // many rounds
        const int me = context.rank;
        bool allowed = true;
        for (int p = 0; p < n; ++p) {
          if (p != me) allowed = allowed && impl->channel(p)->peerReadsByAddress();
        }
        if (yamaAllowsSiblings()) {
          ASSERT_TRUE(allowed) << "rank " << me << ": the process_vm_readv probe failed though "
                               << "Yama allows it";
        } else if (!allowed) {
          std::fprintf(stderr, "rank %d: process_vm_readv refused (Yama); staged\n", me);
        }
        // 80 KB a peer, over the threshold; 4000 bytes, under it.
        for (const size_t count : {size_t{20011}, size_t{1000}}) {
          const bool byAddress = allowed && count * kElement >= 4096;
          for (const char* kind : {"broadcast", "allgather", "alltoall"}) {
            for (bool inPlace : {false, true}) {
              if (inPlace && std::string(kind) == "alltoall") continue;  // the API refuses it
              uint64_t readByAddress = 0;
              ASSERT_NO_FATAL_FAILURE(
                  scribbledCall(kind, inPlace, count, me, n, comm, readByAddress));
              // By address, a rank reads each peer's block for it (broadcast: the root's
              // vector, on every other rank).
              const bool reads = std::string(kind) != "broadcast" || me != 1 % n;
              const uint64_t peers = std::string(kind) == "broadcast" ? 1 : n - 1;
              EXPECT_EQ(readByAddress, byAddress && reads ? peers * count * kElement : 0)
                  << kind << " of " << count << (inPlace ? " in place" : "");
              CC_ASSERT_OK(ccBarrier(comm, nullptr));
            }
          }
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      transportOptions("shm_cma"));
}

INSTANTIATE_TEST_SUITE_P(Ranks, SingleCopy, ::testing::Values(2, 3, 4),
                         [](const auto& param) { return "np" + std::to_string(param.param); });

// The single copy chosen call by call (CC_SHM_USE_CMA=auto, core/copy.h): where it is
// offered (the kernel's copy found fast enough; forced here, as this host's may not be),
// the copy chooser's first calls try it beside the staged copies and later calls take
// whichever ran faster, so consecutive calls of one collective take both paths (and,
// when the ranks' clocks disagree after the seeds, one call may mix them: each rank
// publishes its way in its call line). Properties: every call's output is the formula's, though
// each rank scribbles over its buffers the moment its call returns; some calls read the peers by
// address (the seeds try it) where the probe passes; where it is not offered, none does.
class ChosenSingleCopy : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ChosenSingleCopy, MixesBothPathsAndKeepsTheBytes) {
  const auto [n, offered] = GetParam();
  MultiRankOptions options = transportOptions("shm");
  options.env["CC_SHM_USE_CMA"] = "auto";
  runRanks(
      n,
      [&](RankContext& context) {
        transport::shm::setCrossMemoryCopyCompetitiveForTesting(offered);
        ccComm_t comm = context.initComm();
        auto impl = comm::communicatorOf(comm);
        impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm("direct"));
        impl->chunkBytesOverride() = 16 << 10;
        const int me = context.rank;
        bool allowed = true;
        for (int p = 0; p < n; ++p) {
          if (p != me) allowed = allowed && impl->channel(p)->peerReadsByAddress();
        }
        if (!offered) {
          ASSERT_FALSE(allowed) << "rank " << me << ": single copy offered though the kernel's "
                                << "copy was not found fast enough";
        } else if (yamaAllowsSiblings()) {
          ASSERT_TRUE(allowed) << "rank " << me << ": the process_vm_readv probe failed though "
                               << "Yama allows it";
        }
        const size_t count = 20011;  // 80 KB a peer: a bucket of the chooser
        const int calls = 2 * static_cast<int>(CopyChooser::kSeedCalls3);
        for (const char* kind : {"broadcast", "allgather", "alltoall"}) {
          uint64_t readByAddress = 0;
          for (int call = 0; call < calls; ++call) {
            const bool inPlace = call % 2 == 1 && std::string(kind) != "alltoall";
            ASSERT_NO_FATAL_FAILURE(scribbledCall(kind, inPlace, count, me, n, comm, readByAddress))
                << "call " << call;
          }
          // Broadcast's root reads nobody.
          const bool reads = std::string(kind) != "broadcast" || me != 1 % n;
          if (offered && allowed && reads) {
            EXPECT_GT(readByAddress, 0u) << kind << ": no call took the single copy";
          } else {
            EXPECT_EQ(readByAddress, 0u) << kind;
          }
          CC_ASSERT_OK(ccBarrier(comm, nullptr));
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(RanksOffered, ChosenSingleCopy,
                         ::testing::Values(std::tuple{2, true}, std::tuple{3, true},
                                           std::tuple{2, false}),
                         [](const auto& param) {
                           return "np" + std::to_string(std::get<0>(param.param)) +
                                  (std::get<1>(param.param) ? "_offered" : "_not_offered");
                         });

TEST(RegisteredBuffers, PeersMapExactlyTheRegisteredAllocations) {
  const int n = 3;
  runRanks(n, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    auto impl = comm::communicatorOf(comm);
    impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm("direct"));
    const int me = context.rank;
    const size_t count = 1 << 18;  // 1 MiB: the sliced all-reduce, not the one-shot
    void* send = nullptr;
    void* recv = nullptr;
    CC_ASSERT_OK(ccMemAlloc(&send, count * kElement));
    CC_ASSERT_OK(ccMemAlloc(&recv, count * kElement));
    fillInput(static_cast<std::byte*>(send), count, kType, ccSum, me, 5);
    std::vector<void*> handles(2);
    // Only rank 0 registers: the others map its two allocations, rank 0 maps nothing.
    if (me == 0) {
      CC_ASSERT_OK(ccCommRegister(comm, send, count * kElement, &handles[0]));
      CC_ASSERT_OK(ccCommRegister(comm, recv, count * kElement, &handles[1]));
    }
    CC_ASSERT_OK(ccAllReduce(send, recv, count, kType, ccSum, comm, nullptr));
    EXPECT_EQ(impl->peerMappings().count(), me == 0 ? 0u : 2u);
    // Every rank registers: each maps the two allocations of every peer, once, however
    // many calls use them.
    if (me != 0) {
      CC_ASSERT_OK(ccCommRegister(comm, send, count * kElement, &handles[0]));
      CC_ASSERT_OK(ccCommRegister(comm, recv, count * kElement, &handles[1]));
    }
    for (int call = 0; call < 3; ++call) {
      CC_ASSERT_OK(ccAllReduce(send, recv, count, kType, ccSum, comm, nullptr));
    }
    EXPECT_EQ(impl->peerMappings().count(), 2u * (n - 1));
    for (void* handle : handles) CC_ASSERT_OK(ccCommDeregister(comm, handle));
    CC_ASSERT_OK(ccBarrier(comm, nullptr));
    CC_ASSERT_OK(ccMemFree(send));
    CC_ASSERT_OK(ccMemFree(recv));
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

TEST(RegisteredBuffers, AnAllocationMadeAgainIsNeverReadThroughTheOldMapping) {
  const int n = 2;
  runRanks(n, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    auto impl = comm::communicatorOf(comm);
    impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm("direct"));
    const size_t count = 1 << 18;
    const size_t bytes = count * kElement;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      // Freed before the next allocation, so the memfd gets the same descriptor number
      // and the peers' cache holds a mapping of the previous allocation under it.
      void* send = nullptr;
      CC_ASSERT_OK(ccMemAlloc(&send, bytes));
      fillInput(static_cast<std::byte*>(send), count, kType, ccSum, context.rank, seed);
      void* handle = nullptr;
      CC_ASSERT_OK(ccCommRegister(comm, send, bytes, &handle));
      std::vector<std::byte> out(bytes);
      CC_ASSERT_OK(ccAllReduce(send, out.data(), count, kType, ccSum, comm, nullptr));
      std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        inputs[static_cast<size_t>(r)].resize(bytes);
        fillInput(inputs[static_cast<size_t>(r)].data(), count, kType, ccSum, r, seed);
      }
      for (size_t i = 0; i < count; i += 97) {
        std::string error = checkReduced(out.data(), i, inputs, i, kType, ccSum);
        ASSERT_TRUE(error.empty()) << "allocation " << seed << ": " << error;
      }
      CC_ASSERT_OK(ccCommDeregister(comm, handle));
      CC_ASSERT_OK(ccBarrier(comm, nullptr));
      CC_ASSERT_OK(ccMemFree(send));
    }
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

void expectFailure(ccResult_t result, ccResult_t expected, const std::string& named) {
  EXPECT_EQ(result, expected) << ccGetLastError(nullptr);
  EXPECT_NE(std::string(ccGetLastError(nullptr)).find(named), std::string::npos)
      << "the error should name " << named << ": " << ccGetLastError(nullptr);
}

TEST(RegisteredBuffers, EveryBadArgumentIsNamed) {
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    expectFailure(ccMemAlloc(nullptr, 64), ccInvalidArgument, "ptr");
    void* memory = nullptr;
    expectFailure(ccMemAlloc(&memory, 0), ccInvalidArgument, "size");
    EXPECT_EQ(memory, nullptr);
    int onStack = 0;
    expectFailure(ccMemFree(&onStack), ccInvalidArgument, "ccMemAlloc");
    EXPECT_EQ(ccMemFree(nullptr), ccSuccess);

    CC_ASSERT_OK(ccMemAlloc(&memory, 100));  // rounded up to a page
    void* handle = nullptr;
    std::vector<std::byte> plain(64);
    expectFailure(ccCommRegister(comm, plain.data(), plain.size(), &handle), ccInvalidArgument,
                  "ccMemAlloc");
    expectFailure(ccCommRegister(comm, memory, 4097, &handle), ccInvalidArgument, "ccMemAlloc");
    expectFailure(ccCommRegister(comm, nullptr, 64, &handle), ccInvalidArgument, "buff");
    expectFailure(ccCommRegister(comm, memory, 0, &handle), ccInvalidArgument, "size");
    expectFailure(ccCommRegister(comm, memory, 64, nullptr), ccInvalidArgument, "handle");
    expectFailure(ccCommRegister(nullptr, memory, 64, &handle), ccInvalidArgument, "comm");

    CC_ASSERT_OK(ccCommRegister(comm, static_cast<std::byte*>(memory) + 96, 4000, &handle));
    expectFailure(ccMemFree(memory), ccInvalidUsage, "still registered");
    int bogus = 0;
    expectFailure(ccCommDeregister(comm, &bogus), ccInvalidArgument, "handle");
    expectFailure(ccCommDeregister(comm, nullptr), ccInvalidArgument, "handle");
    CC_ASSERT_OK(ccCommDeregister(comm, handle));
    expectFailure(ccCommDeregister(comm, handle), ccInvalidArgument, "handle");
    CC_ASSERT_OK(ccMemFree(memory));
    expectFailure(ccMemFree(memory), ccInvalidArgument, "ccMemAlloc");

    // Destroying a communicator drops its registrations.
    CC_ASSERT_OK(ccMemAlloc(&memory, 4096));
    CC_ASSERT_OK(ccCommRegister(comm, memory, 4096, &handle));
    CC_ASSERT_OK(ccCommDestroy(comm));
    CC_ASSERT_OK(ccMemFree(memory));
  });
}

}  // namespace
}  // namespace cc::testing
