// Large vectors (1000003 and 16 Mi + 3 elements) through every collective and
// algorithm, against the reference: the multi-chunk, multi-round and uneven-slice paths
// at sizes where pipelining really happens. Release builds only (label "large").
#include <cc/cc.h>

#include <string>
#include <vector>

#include "collectives/collective.h"
#include "comm/handles.h"
#include "reference.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

struct LargeParam {
  int nranks;
  size_t count;
};

class LargeVectors : public ::testing::TestWithParam<LargeParam> {};

TEST_P(LargeVectors, EveryAlgorithmMatchesTheReference) {
  const LargeParam param = GetParam();
  MultiRankOptions options;
  options.timeoutSeconds = 600;
  runRanks(
      param.nranks,
      [&](RankContext& context) {
        ccComm_t comm = context.initComm();
        auto impl = comm::communicatorOf(comm);
        const int n = context.nranks;
        const size_t count = param.count;
        const auto me = static_cast<size_t>(context.rank);
        const ccDataType_t type = count > 2000000 ? ccFloat32 : ccBfloat16;
        std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          inputs[static_cast<size_t>(r)].resize(count * 4);
          fillInput(inputs[static_cast<size_t>(r)].data(), count, type, ccSum, r, 7);
        }
        const size_t size = collectives::dataTypeSize(type);
        std::vector<std::byte> out(count * size);
        // All-reduce by every algorithm; the others by theirs, on a block of count / n.
        for (const char* algorithm : {"ring", "tree", "hd", "direct", "dbt"}) {
          impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm(algorithm));
          CC_ASSERT_OK(
              ccAllReduce(inputs[me].data(), out.data(), count, type, ccSum, comm, nullptr));
          for (size_t i = 0; i < count; i += 997) {
            std::string error = checkReduced(out.data(), i, inputs, i, type, ccSum);
            ASSERT_TRUE(error.empty()) << algorithm << ": " << error;
          }
          ASSERT_TRUE(checkReduced(out.data(), count - 1, inputs, count - 1, type, ccSum).empty())
              << algorithm;
        }
        const size_t block = count / static_cast<size_t>(n);
        for (const char* algorithm : {"ring", "direct", "tree"}) {
          impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm(algorithm));
          CC_ASSERT_OK(
              ccBroadcast(inputs[me].data(), out.data(), count, type, n - 1, comm, nullptr));
          ASSERT_EQ(
              std::memcmp(out.data(), inputs[static_cast<size_t>(n - 1)].data(), count * size), 0)
              << algorithm;
          CC_ASSERT_OK(
              ccReduceScatter(inputs[me].data(), out.data(), block, type, ccSum, comm, nullptr));
          for (size_t i = 0; i < block; i += 991) {
            ASSERT_TRUE(checkReduced(out.data(), i, inputs, me * block + i, type, ccSum).empty())
                << algorithm;
          }
          CC_ASSERT_OK(ccAllGather(inputs[me].data(), out.data(), block, type, comm, nullptr));
          for (int r = 0; r < n; ++r) {
            ASSERT_EQ(std::memcmp(out.data() + static_cast<size_t>(r) * block * size,
                                  inputs[static_cast<size_t>(r)].data(), block * size),
                      0)
                << algorithm;
          }
        }
        for (const char* algorithm : {"pairwise", "bruck", "direct"}) {
          impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm(algorithm));
          CC_ASSERT_OK(ccAllToAll(inputs[me].data(), out.data(), block, type, comm, nullptr));
          for (int r = 0; r < n; ++r) {
            ASSERT_EQ(std::memcmp(out.data() + static_cast<size_t>(r) * block * size,
                                  inputs[static_cast<size_t>(r)].data() + me * block * size,
                                  block * size),
                      0)
                << algorithm;
          }
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options);
}

// Every type and op at 1000003 elements, through each reducing collective and the
// algorithms that reduce differently (ring's chain per slice, the direct slices, the
// tree, halving-doubling).
TEST(LargeVectorsEveryTypeAndOp, AllReduceReduceScatterAndReduce) {
  MultiRankOptions options;
  options.timeoutSeconds = 600;
  runRanks(
      3,
      [&](RankContext& context) {
        ccComm_t comm = context.initComm();
        auto impl = comm::communicatorOf(comm);
        const int n = context.nranks;
        const size_t count = 1000003;
        const auto me = static_cast<size_t>(context.rank);
        const ccDataType_t types[] = {ccInt8,   ccUint8,   ccInt32,   ccUint32,  ccInt64,
                                      ccUint64, ccFloat16, ccFloat32, ccFloat64, ccBfloat16};
        const ccRedOp_t ops[] = {ccSum, ccProd, ccMax, ccMin, ccAvg};
        const char* algorithms[] = {"ring", "direct", "tree", "hd", "dbt"};
        int which = 0;
        for (ccDataType_t type : types) {
          const size_t size = collectives::dataTypeSize(type);
          for (ccRedOp_t op : ops) {
            const char* algorithm = algorithms[which++ % 5];
            impl->algorithmOverride() = static_cast<int>(collectives::parseAlgorithm(algorithm));
            std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(n));
            for (int r = 0; r < n; ++r) {
              inputs[static_cast<size_t>(r)].resize(count * size);
              fillInput(inputs[static_cast<size_t>(r)].data(), count, type, op, r,
                        static_cast<uint64_t>(which));
            }
            std::vector<std::byte> out(count * size);
            CC_ASSERT_OK(
                ccAllReduce(inputs[me].data(), out.data(), count, type, op, comm, nullptr));
            for (size_t i = 0; i < count; i += 101) {
              std::string error = checkReduced(out.data(), i, inputs, i, type, op);
              ASSERT_TRUE(error.empty())
                  << "allreduce " << collectives::dataTypeName(type) << " "
                  << collectives::redOpName(op) << " " << algorithm << ": " << error;
            }
            const size_t block = count / static_cast<size_t>(n);
            CC_ASSERT_OK(
                ccReduceScatter(inputs[me].data(), out.data(), block, type, op, comm, nullptr));
            for (size_t i = 0; i < block; i += 97) {
              std::string error = checkReduced(out.data(), i, inputs, me * block + i, type, op);
              ASSERT_TRUE(error.empty()) << "reducescatter " << collectives::dataTypeName(type)
                                         << " " << collectives::redOpName(op) << ": " << error;
            }
            CC_ASSERT_OK(
                ccReduce(inputs[me].data(), out.data(), count, type, op, 1, comm, nullptr));
            for (size_t i = 0; i < count && context.rank == 1; i += 103) {
              std::string error = checkReduced(out.data(), i, inputs, i, type, op);
              ASSERT_TRUE(error.empty()) << "reduce " << collectives::dataTypeName(type) << " "
                                         << collectives::redOpName(op) << ": " << error;
            }
          }
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LargeVectors,
                         ::testing::Values(LargeParam{2, 1000003}, LargeParam{3, 1000003},
                                           LargeParam{8, 1000003}, LargeParam{2, (16u << 20) + 3},
                                           LargeParam{3, (16u << 20) + 3}),
                         [](const ::testing::TestParamInfo<LargeParam>& p) {
                           return std::to_string(p.param.nranks) + "ranks_" +
                                  std::to_string(p.param.count);
                         });

}  // namespace
}  // namespace cc::testing
