// The process mesh (mesh/mesh.h): shapes that cannot run are refused with a message naming
// the dimension, the world splits with TP fastest-varying, and each rank's part of the
// model follows from its coordinates.
#include "parallel/mesh/mesh.h"

#include <gtest/gtest.h>

#include "support/multi_rank.h"

namespace cc::parallel {
namespace {

using cc::testing::RankContext;
using cc::testing::runRanks;

TEST(Mesh, RefusesShapesThatCannotRun) {
  GptConfig model;
  model.layers = 4;
  model.heads = 4;
  EXPECT_TRUE(validateMeshShape({2, 1, 1}, 2, model).isOk());
  const Status wrongProduct = validateMeshShape({2, 1, 1}, 4, model);
  EXPECT_FALSE(wrongProduct.isOk());
  EXPECT_NE(wrongProduct.message().find("world size"), std::string::npos) << wrongProduct.message();
  const Status badPp = validateMeshShape({1, 3, 1}, 3, model);
  EXPECT_NE(badPp.message().find("pp 3 does not divide the 4 layers"), std::string::npos)
      << badPp.message();
  GptConfig oddVocab = model;
  oddVocab.vocabMultiple = 2;
  oddVocab.vocab = 202;  // padded to 202: tp 4 divides the heads, not the vocabulary
  const Status badVocab = validateMeshShape({1, 1, 4}, 4, oddVocab);
  EXPECT_NE(badVocab.message().find("tp 4 does not divide the padded vocabulary 202"),
            std::string::npos)
      << badVocab.message();
  const Status badTp = validateMeshShape({1, 1, 3}, 3, model);
  EXPECT_NE(badTp.message().find("tp 3 does not divide the 4 heads"), std::string::npos)
      << badTp.message();
  EXPECT_FALSE(validateMeshShape({0, 1, 1}, 0, model).isOk());
  // An uneven cut: pp stages of at least one block that add up to the layers.
  EXPECT_TRUE(validateMeshShape({1, 3, 1, {1, 2, 1}}, 3, model).isOk());
  const Status shortCut = validateMeshShape({1, 2, 1, {1, 2}}, 2, model);
  EXPECT_NE(shortCut.message().find("a cut into 2 stages of 3 blocks for pp 2 and 4 layers"),
            std::string::npos)
      << shortCut.message();
  EXPECT_NE(validateMeshShape({1, 2, 1, {0, 4}}, 2, model).message().find("no blocks"),
            std::string::npos);
}

TEST(Mesh, SplitsTheWorldTpFastest) {
  runRanks(4, [](RankContext& context) {
    ccComm_t world = context.initComm();
    GptConfig model;
    auto mesh = Mesh::create(world, {2, 1, 2}, model);
    ASSERT_TRUE(mesh.isOk()) << mesh.status().message();
    const MeshCoordinates& at = mesh.value()->coordinates();
    EXPECT_EQ(at.tp, context.rank % 2);
    EXPECT_EQ(at.dp, context.rank / 2);
    int dpSize = 0, dpRank = -1;
    ASSERT_EQ(ccCommCount(mesh.value()->dp(), &dpSize), ccSuccess);
    ASSERT_EQ(ccCommUserRank(mesh.value()->dp(), &dpRank), ccSuccess);
    EXPECT_EQ(dpSize, 2);
    EXPECT_EQ(dpRank, at.dp);
    auto table = mesh.value()->placementTable();
    ASSERT_TRUE(table.isOk());
    EXPECT_NE(table->find("rank 3: dp 1 pp 0 tp 1"), std::string::npos) << table.value();
    mesh.value().reset();
    ccCommDestroy(world);
  });
}

TEST(Mesh, PartsCoverTheLayersAndShardsOnce) {
  runRanks(4, [](RankContext& context) {
    ccComm_t world = context.initComm();
    GptConfig model;
    model.layers = 4;
    {
      auto mesh = Mesh::create(world, {1, 2, 2}, model);
      ASSERT_TRUE(mesh.isOk()) << mesh.status().message();
      const MeshCoordinates& at = mesh.value()->coordinates();
      const ModelPart part = mesh.value()->modelPart(model);
      EXPECT_TRUE(validatePart(model, part).isOk());
      EXPECT_EQ(part.firstLayer, 2 * at.pp);
      EXPECT_EQ(part.endLayer, 2 * at.pp + 2);
      EXPECT_EQ(part.tpSize, 2);
      EXPECT_EQ(part.tpRank, at.tp);
      EXPECT_EQ(part.hasEmbeddings(), at.pp == 0);
      EXPECT_EQ(part.hasHead(model), at.pp == 1);
      // Over the ranks: every (layer, TP rank) held by exactly one rank.
      int mine[3] = {part.firstLayer, part.endLayer, part.tpRank};
      int all[4 * 3] = {};
      ASSERT_EQ(ccAllGather(mine, all, 3, ccInt32, world, nullptr), ccSuccess);
      for (int layer = 0; layer < model.layers; ++layer) {
        for (int tpRank = 0; tpRank < 2; ++tpRank) {
          int holders = 0;
          for (int rank = 0; rank < 4; ++rank) {
            holders +=
                all[3 * rank] <= layer && layer < all[3 * rank + 1] && all[3 * rank + 2] == tpRank;
          }
          EXPECT_EQ(holders, 1) << "layer " << layer << " tp rank " << tpRank;
        }
      }
    }
    ccCommDestroy(world);
  });
}

}  // namespace
}  // namespace cc::parallel
