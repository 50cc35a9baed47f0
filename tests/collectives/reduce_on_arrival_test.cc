// Reducing on arrival (collectives/context.h, ReduceOnArrival): over shared memory the
// ring's reduce-scatter and all-reduce and the chain's reduce combine each arriving
// piece with the rank's own data straight from the channel's slot (or, with the single
// copy, where process_vm_readv put it), instead of receiving it and reducing after.
//
// Properties: on one communicator over shm and one over tcp (which receives, then
// reduces), the same call gives the same bits, in place and out of place, for float32
// and bfloat16 sums and an int32 max, at counts that leave a short last piece, with
// slots small enough that every chunk arrives in several pieces, and with the single
// copy taking the pieces by address; the bits are the reference's; the shm ranks that
// receive partial sums reduce at least that many bytes on arrival, and the tcp ranks none.
#include <cc/cc.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/reduce_kernels.h"
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
  if (kind == "allreduce")
    return ccAllReduce(send, inPlace ? send : recv, count, type, op, comm, nullptr);
  if (kind == "reduce")
    return ccReduce(send, inPlace ? send : recv, count, type, op, 0, comm, nullptr);
  return ccReduceScatter(send, inPlace ? send + static_cast<size_t>(rank) * block : recv, count,
                         type, op, comm, nullptr);
}

TEST_P(ReduceOnArrival, GivesTheBitsOfReceivingThenReducing) {
  const int n = std::get<0>(GetParam());
  const Case param = std::get<1>(GetParam());
  MultiRankOptions options;
  options.env["CC_TRANSPORT"] = "shm";
  // 4 KiB slots: a 16 KiB chunk arrives in four pieces.
  options.env["CC_SHM_SLOT_BYTES"] = "4096";
  if (param.singleCopy) {
    options.env["CC_SHM_USE_CMA"] = "1";
    options.env["CC_SHM_CMA_THRESHOLD"] = "4096";
  }
  runRanks(
      n,
      [&](RankContext& context) {
        const int me = context.rank;
        ccComm_t shm = context.initComm();
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
          impl->chunkBytesOverride() = 16 << 10;
        }
        const std::pair<ccDataType_t, ccRedOp_t> kinds[] = {
            {ccFloat32, ccSum}, {ccBfloat16, ccSum}, {ccInt32, ccMax}};
        for (const auto& [type, op] : kinds) {
          const size_t size = collectives::dataTypeSize(type);
          // 20011: many chunks and a short last piece; 7: one piece smaller than a slot.
          for (const size_t count : {size_t{20011}, size_t{7}}) {
            const size_t total = count * static_cast<size_t>(n);
            for (const char* kind : {"allreduce", "reduce", "reducescatter"}) {
              for (bool inPlace : {false, true}) {
                std::vector<std::byte> results[2];
                uint64_t reducedOnArrival[2] = {0, 0};
                for (int which = 0; which < 2; ++which) {
                  ccComm_t comm = which == 0 ? shm : tcp;
                  auto impl = comm::communicatorOf(comm);
                  std::vector<std::byte> send(total * size);
                  std::vector<std::byte> recv(total * size);
                  fillInput(send.data(), total, type, op, me, 11);
                  const uint64_t before = impl->bytesReducedOnArrival();
                  CC_ASSERT_OK(runCollective(kind, inPlace, send.data(), recv.data(), count, type,
                                             op, me, comm));
                  reducedOnArrival[which] = impl->bytesReducedOnArrival() - before;
                  const std::string k = kind;
                  const std::byte* out = inPlace ? send.data() : recv.data();
                  if (k == "reducescatter" && inPlace)
                    out = send.data() + static_cast<size_t>(me) * count * size;
                  if (k != "reduce" || me == 0) results[which].assign(out, out + count * size);
                }
                const std::string what = std::string(kind) + " of " + std::to_string(count) + " " +
                                         collectives::dataTypeName(type) +
                                         (inPlace ? " in place" : "");
                ASSERT_EQ(results[0], results[1]) << what << ": shm and tcp differ";
                EXPECT_EQ(reducedOnArrival[1], 0u) << what;
                // What the shm rank received as partial sums, at least: the ring's n-1
                // blocks (of count / n in an all-reduce, of count in a reduce-scatter);
                // the whole vector at the chain's root.
                const std::string k = kind;
                const auto others = static_cast<size_t>(n - 1);
                const size_t received = k == "allreduce" ? others * (count / static_cast<size_t>(n))
                                        : k == "reducescatter" ? others * count
                                        : me == 0              ? count
                                                               : 0;
                EXPECT_GE(reducedOnArrival[0], received * size) << what;
                if (!results[0].empty()) {
                  std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(n));
                  for (int r = 0; r < n; ++r) {
                    inputs[static_cast<size_t>(r)].resize(total * size);
                    fillInput(inputs[static_cast<size_t>(r)].data(), total, type, op, r, 11);
                  }
                  // Reduce-scatter's result is block `me` of the inputs.
                  const size_t at =
                      std::string(kind) == "reducescatter" ? static_cast<size_t>(me) * count : 0;
                  for (size_t i = 0; i < count; i += 97) {
                    std::string error =
                        checkReduced(results[0].data(), i, inputs, at + i, type, op);
                    ASSERT_TRUE(error.empty()) << what << ": " << error;
                  }
                }
              }
            }
          }
        }
        CC_ASSERT_OK(ccCommDestroy(tcp));
        CC_ASSERT_OK(ccCommDestroy(shm));
      },
      options);
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
