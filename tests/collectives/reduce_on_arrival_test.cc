// Reducing on arrival (collectives/context.h, ReduceOnArrival): over shared memory the
// ring's reduce-scatter and all-reduce and the chain's reduce combine each arriving
// piece with the rank's own data straight from the channel's slot (or, with the single
// copy, from where process_vm_readv put it), instead of receiving it and reducing after.
//
// Properties: on one communicator over shm and one over tcp (which receives, then
// reduces), the same call gives the same bits, in place and out of place, for float32
// and bfloat16 sums, an int32 max and a float32 max over inputs with +0 and -0 (whose
// result depends on which operand comes first), at counts that leave a short last piece,
// with slots so small and few that every chunk arrives in several pieces over several
// progress calls, and with the single copy taking the pieces by address (where Yama lets
// siblings read each other, the probe must pass; a chunk larger than one by-address piece
// arrives in two); the bits are the reference's; the shm ranks that receive partial sums
// reduce at least that many bytes on arrival, and the tcp ranks none.
#include <cc/cc.h>

#include <algorithm>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/reduce_kernels.h"
#include "comm/executor.h"
#include "comm/handles.h"
#include "reference.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

struct Case {
  const char* name;
  bool singleCopy;  // CC_SHM_USE_CMA with a threshold below the chunk
};

class ReduceOnArrival : public ::testing::TestWithParam<std::tuple<int, Case>> {};

ccResult_t runCollective(const std::string& kind, bool inPlace, std::byte* send, std::byte* recv,
                         size_t count, ccDataType_t type, ccRedOp_t op, int rank, ccComm_t comm) {
  const size_t block = count * collectives::dataTypeSize(type);
  if (kind == "allreduce") {
    return ccAllReduce(send, inPlace ? send : recv, count, type, op, comm, nullptr);
  }
  if (kind == "reduce") {
    return ccReduce(send, inPlace ? send : recv, count, type, op, 0, comm, nullptr);
  }
  return ccReduceScatter(send, inPlace ? send + static_cast<size_t>(rank) * block : recv, count,
                         type, op, comm, nullptr);
}

// Rank `rank`'s input: fillInput's, and for a float32 max every third element +0 or -0 by
// rank and index, so that a max taken in the other operand order gives other bits.
std::vector<std::byte> inputOf(size_t elements, ccDataType_t type, ccRedOp_t op, int rank) {
  std::vector<std::byte> data(elements * collectives::dataTypeSize(type));
  fillInput(data.data(), elements, type, op, rank, 11);
  if (type == ccFloat32 && op == ccMax) {
    for (size_t i = 0; i < elements; i += 3) {
      storeFloat(data.data(), i, type, (i + static_cast<size_t>(rank)) % 2 == 0 ? 0.0 : -0.0);
    }
  }
  return data;
}

TEST_P(ReduceOnArrival, GivesTheBitsOfReceivingThenReducing) {
  const int n = std::get<0>(GetParam());
  const Case param = std::get<1>(GetParam());
  MultiRankOptions options;
  options.env["CC_TRANSPORT"] = "shm";
  // Two 4 KiB slots: a 16 KiB chunk arrives in four pieces, over at least two calls.
  options.env["CC_SHM_SLOT_BYTES"] = "4096";
  options.env["CC_SHM_SLOTS"] = "2";
  if (param.singleCopy) {
    if (!yamaAllowsSiblings()) GTEST_SKIP() << "Yama refuses process_vm_readv between siblings";
    options.env["CC_SHM_USE_CMA"] = "1";
    options.env["CC_SHM_CMA_THRESHOLD"] = "4096";
  }
  runRanks(
      n,
      [&](RankContext& context) {
        const int me = context.rank;
        ccComm_t shm = context.initComm();
        auto shmImpl = comm::communicatorOf(shm);
        for (int p = 0; p < n && param.singleCopy; ++p) {
          ASSERT_TRUE(p == me || shmImpl->channel(p)->peerReadsByAddress())
              << "rank " << me << ": the process_vm_readv probe failed though Yama allows it";
        }
        // A second communicator over tcp, on an id rank 0 makes and broadcasts.
        ccUniqueId id{};
        if (me == 0) CC_ASSERT_OK(ccGetUniqueId(&id));
        CC_ASSERT_OK(ccBroadcast(&id, &id, sizeof(id), ccUint8, 0, shm, nullptr));
        setenv("CC_TRANSPORT", "tcp", 1);
        ccComm_t tcp = nullptr;
        CC_ASSERT_OK(ccCommInitRank(&tcp, n, id, me));
        for (ccComm_t comm : {shm, tcp}) {
          auto impl = comm::communicatorOf(comm);
          impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm("ring"));
        }

        // Runs `kind` on both communicators and compares them with each other and with
        // the reference.
        auto compare = [&](const std::string& kind, bool inPlace, size_t count, ccDataType_t type,
                           ccRedOp_t op, size_t chunkBytes) {
          const size_t size = collectives::dataTypeSize(type);
          const size_t total = count * (kind == "reducescatter" ? static_cast<size_t>(n) : 1);
          std::vector<std::byte> results[2];
          uint64_t reducedOnArrival[2] = {0, 0};
          for (int which = 0; which < 2; ++which) {
            auto impl = comm::communicatorOf(which == 0 ? shm : tcp);
            impl->chunkBytesOverride() = chunkBytes;
            std::vector<std::byte> send = inputOf(total, type, op, me);
            std::vector<std::byte> recv(total * size);
            const uint64_t before = impl->bytesReducedOnArrival();
            CC_ASSERT_OK(runCollective(kind, inPlace, send.data(), recv.data(), count, type, op, me,
                                       which == 0 ? shm : tcp));
            reducedOnArrival[which] = impl->bytesReducedOnArrival() - before;
            const std::byte* out = inPlace ? send.data() : recv.data();
            if (kind == "reducescatter" && inPlace) out += static_cast<size_t>(me) * count * size;
            if (kind != "reduce" || me == 0) results[which].assign(out, out + count * size);
          }
          const std::string what = kind + " of " + std::to_string(count) + " " +
                                   collectives::dataTypeName(type) +
                                   (op == ccMax ? " max" : " sum") + (inPlace ? " in place" : "");
          ASSERT_EQ(results[0], results[1]) << what << ": shm and tcp differ";
          EXPECT_EQ(reducedOnArrival[1], 0u) << what;
          // What the shm rank received as partial sums, at least: the ring's n-1 blocks (of
          // count / n in an all-reduce, of count in a reduce-scatter); the whole vector at
          // the chain's root.
          const auto others = static_cast<size_t>(n - 1);
          size_t received = me == 0 ? count : 0;
          if (kind == "allreduce") received = others * (count / static_cast<size_t>(n));
          if (kind == "reducescatter") received = others * count;
          EXPECT_GE(reducedOnArrival[0], received * size) << what;
          if (results[0].empty()) return;
          std::vector<std::vector<std::byte>> inputs;
          for (int r = 0; r < n; ++r) inputs.push_back(inputOf(total, type, op, r));
          // Reduce-scatter's result is block `me` of the inputs.
          const size_t at = kind == "reducescatter" ? static_cast<size_t>(me) * count : 0;
          for (size_t i = 0; i < count; i += std::max<size_t>(1, count / 1000)) {
            std::string error = checkReduced(results[0].data(), i, inputs, at + i, type, op);
            ASSERT_TRUE(error.empty()) << what << ": " << error;
          }
        };

        const std::pair<ccDataType_t, ccRedOp_t> kinds[] = {
            {ccFloat32, ccSum}, {ccBfloat16, ccSum}, {ccInt32, ccMax}, {ccFloat32, ccMax}};
        for (const auto& [type, op] : kinds) {
          // 20011: many chunks and a short last piece; 7: one piece smaller than a slot.
          for (const size_t count : {size_t{20011}, size_t{7}}) {
            for (const char* kind : {"allreduce", "reduce", "reducescatter"}) {
              for (bool inPlace : {false, true}) compare(kind, inPlace, count, type, op, 16 << 10);
            }
          }
        }
        if (param.singleCopy) {
          // One chunk of 8.4 MB: by address it comes in two pieces (8 MiB, then the rest).
          compare("reduce", false, size_t{2100001}, ccFloat32, ccSum, size_t{16} << 20);
        }
        CC_ASSERT_OK(ccCommDestroy(tcp));
        CC_ASSERT_OK(ccCommDestroy(shm));
      },
      options);
}

// A sink where no transport can honour it (a receive over tcp, a send, a receive from
// self) is refused before anything moves, on every rank, naming the operation; a
// transport that ignored it would leave unreduced bytes.
TEST(ReduceOnArrivalRefusals, OnlyAReceiveFromAPeerOverShmTakesASink) {
  runRanks(
      2,
      [&](RankContext& context) {
        ccComm_t handle = context.initComm();
        auto comm = comm::communicatorOf(handle);
        const int me = context.rank;
        const int peer = 1 - me;
        std::vector<std::byte> data(64);
        transport::Sink sink{[](const void*, std::byte*, const std::byte*, size_t, size_t) {},
                             nullptr};
        auto run = [&](bool isSend, int to) {
          comm::PointToPoint op{comm.get(), isSend, data.data(), data.size(), to, "probe", &sink};
          comm::OperationLocks locks({comm.get()});
          return comm::execute(std::span(&op, 1));
        };
        for (const auto& [isSend, to] :
             {std::pair{false, peer}, std::pair{true, peer}, std::pair{false, me}}) {
          Status status = run(isSend, to);
          EXPECT_EQ(status.code(), ccInvalidUsage) << isSend << " " << to;
          EXPECT_NE(status.message().find("probe with rank"), std::string::npos)
              << status.message();
        }
        // Nothing moved: the communicator still works.
        CC_ASSERT_OK(ccAllReduce(data.data(), data.data(), 16, ccFloat32, ccSum, handle, nullptr));
        CC_ASSERT_OK(ccCommDestroy(handle));
      },
      transportOptions("tcp"));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReduceOnArrival,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(Case{"slots", false},
                                                              Case{"single_copy", true})),
                         [](const auto& param) {
                           return "np" + std::to_string(std::get<0>(param.param)) + "_" +
                                  std::get<1>(param.param).name;
                         });

}  // namespace
}  // namespace cc::testing
