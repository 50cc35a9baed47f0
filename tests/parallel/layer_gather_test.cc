// ZeRO-3's layer gathers (zero/layer_gather.h) on two ranks that each keep half of every
// layer unit: a unit reads the one-process values exactly while it is gathered and zero
// once released, forward keeps only the blocks it needs (and the last, which backward
// needs first), and gatherAll / releaseAll bring everything back and away.
#include "parallel/zero/layer_gather.h"

#include <gtest/gtest.h>

#include <cstring>

#include "parallel/dp/segments.h"
#include "parallel/model/initialize.h"
#include "support/multi_rank.h"

namespace cc::parallel {
namespace {

using cc::testing::RankContext;
using cc::testing::runRanks;

GptConfig smallConfig() {
  GptConfig config;
  config.vocab = 200;
  config.seq = 16;
  config.layers = 3;
  config.heads = 2;
  config.width = 32;
  return config;
}

TEST(LayerGather, GatheredUnitsHoldTheFullValuesAndReleasedOnesNothing) {
  runRanks(2, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      const GptConfig config = smallConfig();
      const int world = 2;
      const ParameterLayout layout(config);
      const size_t padded = paddedBufferSize(layout.totalSize(), world);
      Gpt<float> model(config, 1, padded);
      initializeParameters(model.parameters(), config, layout, 5);
      const std::vector<float> full(model.paddedParameters().begin(),
                                    model.paddedParameters().end());
      const std::vector<Segment> units = layerUnits(layout, padded, world);
      const std::vector<ShardPiece> pieces = shardPieces(units, context.rank, world);
      std::vector<float> shard(padded / world);
      for (const ShardPiece& piece : pieces) {
        std::memcpy(shard.data() + piece.stateOffset, full.data() + piece.begin,
                    piece.count * sizeof(float));
      }
      model.releaseParameters(0, padded);
      ccStream_t stream = nullptr;
      ASSERT_EQ(ccStreamCreate(&stream), ccSuccess);
      LayerGather gather(model, units, pieces, comm, stream);
      gather.setShard(shard);

      auto unitIs = [&](size_t unit, bool gathered) {
        const float* p = model.paddedParameters().data();
        for (size_t i = units[unit].begin; i < units[unit].end; ++i) {
          const float expected = gathered ? full[i] : 0.0f;
          if (std::memcmp(&p[i], &expected, sizeof(float)) != 0) return false;
        }
        return true;
      };
      const size_t last = units.size() - 1;  // ln_f's unit
      ASSERT_TRUE(gather.beginMicroBatch().isOk());
      for (size_t unit : {size_t{0}, size_t{1}, size_t{2}, last}) {
        EXPECT_TRUE(unitIs(unit, true)) << "unit " << unit << " before the first block";
      }
      for (int layer = 0; layer < config.layers; ++layer) {
        ASSERT_TRUE(gather.beforeBlockForward(layer).isOk());
        EXPECT_TRUE(unitIs(static_cast<size_t>(layer) + 1, true)) << "block " << layer;
        ASSERT_TRUE(gather.afterBlockForward(layer).isOk());
      }
      // Forward gave back every block but the last (backward's first).
      EXPECT_TRUE(unitIs(1, false));
      EXPECT_TRUE(unitIs(static_cast<size_t>(config.layers), true));
      for (int layer = config.layers - 1; layer >= 0; --layer) {
        ASSERT_TRUE(gather.beforeBlockBackward(layer).isOk());
        EXPECT_TRUE(unitIs(static_cast<size_t>(layer) + 1, true)) << "block " << layer;
        EXPECT_TRUE(unitIs(static_cast<size_t>(layer) + 2, true)) << "block " << layer << "'s tail";
        ASSERT_TRUE(gather.afterBlockBackward(layer).isOk());
      }
      ASSERT_TRUE(gather.releaseAll().isOk());
      for (size_t unit = 0; unit < units.size(); ++unit) EXPECT_TRUE(unitIs(unit, false)) << unit;
      ASSERT_TRUE(gather.gatherAll().isOk());
      for (size_t unit = 0; unit < units.size(); ++unit) EXPECT_TRUE(unitIs(unit, true)) << unit;
      size_t largestBlock = 0;
      for (size_t unit = 1; unit < last; ++unit)
        largestBlock = std::max(largestBlock, units[unit].size());
      EXPECT_EQ(gather.peakResidentElements(),
                units[0].size() + units[last].size() + 3 * largestBlock);
      ASSERT_TRUE(gather.releaseAll().isOk());
      ASSERT_EQ(ccStreamDestroy(stream), ccSuccess);
    }
    ccCommDestroy(comm);
  });
}

}  // namespace
}  // namespace cc::parallel
