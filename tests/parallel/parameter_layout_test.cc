// The parameter layout (model/parameter_layout.h) for the whole model, a pipeline stage
// and a tensor-parallel shard: the whole model is GPT-2's tensors in order; stages
// together hold every tensor once (the tied head's weight on the first and the last);
// TP shards put back together give the one-process tensor; a part initialises to exactly
// its piece of the one-process model.
#include "parallel/model/parameter_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "parallel/model/initialize.h"
#include "parallel/model/rng.h"
#include "parallel/model/tensor_split.h"

namespace cc::parallel {
namespace {

GptConfig smallConfig() {
  GptConfig config;
  config.vocab = 200;  // padded to 256
  config.seq = 16;
  config.layers = 4;
  config.heads = 4;
  config.width = 32;
  return config;
}

size_t elementsOf(const std::vector<size_t>& shape) {
  size_t count = 1;
  for (size_t dim : shape) count *= dim;
  return count;
}

void expectContiguous(const ParameterLayout& layout) {
  size_t at = 0;
  for (const TensorSlice& tensor : layout.tensors()) {
    EXPECT_EQ(tensor.offset, at) << tensor.name;
    EXPECT_EQ(tensor.size, elementsOf(tensor.shape)) << tensor.name;
    at += tensor.size;
  }
  EXPECT_EQ(at, layout.totalSize());
}

TEST(ParameterLayout, WholeModelIsGpt2sTensorsInOrder) {
  const GptConfig config = smallConfig();
  const ParameterLayout layout(config);
  expectContiguous(layout);
  const auto& tensors = layout.tensors();
  ASSERT_EQ(tensors.size(), 2 + 12 * static_cast<size_t>(config.layers) + 2);
  EXPECT_EQ(tensors.front().name, "wte.weight");
  EXPECT_EQ(tensors[1].name, "wpe.weight");
  EXPECT_EQ(tensors[tensors.size() - 2].name, "ln_f.weight");
  EXPECT_EQ(tensors.back().name, "ln_f.bias");
  EXPECT_EQ(layout.headWeight(), layout.wte());
  for (size_t index = 0; index < tensors.size(); ++index) {
    EXPECT_EQ(tensors[index].fullIndex, index);
    EXPECT_EQ(tensors[index].shape, tensors[index].fullShape) << "nothing is split on one process";
  }
  for (int layer = 0; layer < config.layers; ++layer) {
    const BlockOffsets& block = layout.block(layer);
    const std::string prefix = "h." + std::to_string(layer) + ".";
    size_t inBlock = 0;
    for (const TensorSlice& tensor : tensors) {
      const bool named = tensor.name.rfind(prefix, 0) == 0;
      const bool placed = tensor.offset >= block.begin && tensor.offset < block.end;
      EXPECT_EQ(named, placed) << tensor.name << " and block " << layer;
      inBlock += placed ? tensor.size : 0;
    }
    EXPECT_EQ(inBlock, block.end - block.begin);
    EXPECT_EQ(block.ln1.weight, block.begin);
  }
  EXPECT_EQ(tensors[tensors.size() - 2].offset, layout.lnfWeight());
}

// The stages' parts (each a contiguous range or an interleaved stage's chunks) hold every
// tensor once between them, but wte, which the first and the last stage hold.
void expectStagesHoldEveryTensorOnce(const GptConfig& config,
                                     const std::vector<ModelPart>& stages) {
  const ParameterLayout whole(config);
  std::map<std::string, int> holders;
  for (const ModelPart& part : stages) {
    ASSERT_TRUE(validatePart(config, part).isOk()) << validatePart(config, part).message();
    const ParameterLayout layout(config, part);
    expectContiguous(layout);
    EXPECT_EQ(layout.hasEmbeddings(), part.firstLayer == 0);
    EXPECT_EQ(layout.hasHead(), part.endLayer == config.layers);
    for (const TensorSlice& tensor : layout.tensors()) {
      ++holders[tensor.name];
      EXPECT_EQ(whole.tensors()[tensor.fullIndex].name, tensor.name);
    }
    // The chunks' blocks, ascending in the buffer.
    size_t blocks = 0, previousEnd = 0;
    for (const LayerRange& chunk : layout.chunks()) {
      for (int layer = chunk.first; layer < chunk.end; ++layer, ++blocks) {
        EXPECT_EQ(layout.block(layer).layer, layer);
        EXPECT_EQ(layout.blocks()[blocks].layer, layer);
        EXPECT_GE(layout.blockBegin(layer), previousEnd);
        previousEnd = layout.blockEnd(layer);
        EXPECT_EQ(layout.blockEnd(layer) - layout.blockBegin(layer),
                  whole.blockEnd(layer) - whole.blockBegin(layer));
      }
    }
    EXPECT_EQ(blocks, layout.blocks().size());
    if (layout.hasHead() && !layout.hasEmbeddings()) {
      // The tied copy sits first, where wte sits on the first stage; the only tied copy.
      EXPECT_EQ(layout.headWeight(), 0u);
      EXPECT_EQ(layout.tensors().front().name, "wte.weight");
      EXPECT_TRUE(layout.tensors().front().tiedCopy);
      EXPECT_TRUE(layout.hasTiedCopy());
    }
    for (size_t i = layout.hasTiedCopy() ? 1 : 0; i < layout.tensors().size(); ++i)
      EXPECT_FALSE(layout.tensors()[i].tiedCopy) << layout.tensors()[i].name;
  }
  for (const TensorSlice& tensor : whole.tensors()) {
    EXPECT_EQ(holders[tensor.name], tensor.name == "wte.weight" ? 2 : 1) << tensor.name;
  }
  EXPECT_EQ(holders.size(), whole.tensors().size());
}

TEST(ParameterLayout, StagesTogetherHoldEveryTensorOnce) {
  const GptConfig config = smallConfig();
  expectStagesHoldEveryTensorOnce(config, {{0, 1, 1, 0}, {1, 3, 1, 0}, {3, 4, 1, 0}});
}

// Two stages of two chunks each (Megatron's interleaved placement: stage s holds virtual
// stages s and s + 2); and with an uneven cut over six layers.
TEST(ParameterLayout, InterleavedStagesHoldTheirChunksAndEveryTensorOnce) {
  const GptConfig config = smallConfig();
  expectStagesHoldEveryTensorOnce(
      config, {ModelPart::ofChunks({{0, 1}, {2, 3}}), ModelPart::ofChunks({{1, 2}, {3, 4}})});
  GptConfig six = config;
  six.layers = 6;
  expectStagesHoldEveryTensorOnce(
      six, {ModelPart::ofChunks({{0, 1}, {3, 5}}), ModelPart::ofChunks({{1, 3}, {5, 6}})});
  const ParameterLayout last(config, ModelPart::ofChunks({{1, 2}, {3, 4}}));
  EXPECT_TRUE(last.hasTiedCopy());
  EXPECT_FALSE(last.part().isWhole(config));
  EXPECT_EQ(last.chunks().size(), 2u);
}

// Megatron's split, tensor by tensor: what is column-parallel, row-parallel, replicated.
TEST(ParameterLayout, TensorsSplitAsMegatronDoes) {
  const GptConfig config = smallConfig();
  const ParameterLayout shard(config, ModelPart{0, config.layers, 2, 1});
  auto endsWith = [](const std::string& name, const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const TensorSlice& tensor : shard.tensors()) {
    SplitAxis expected = SplitAxis::kNone;
    int fused = 1;
    if (tensor.name == "wte.weight" || endsWith(tensor.name, "c_proj.weight"))
      expected = SplitAxis::kRows;
    if (endsWith(tensor.name, "c_fc.weight") || endsWith(tensor.name, "c_fc.bias"))
      expected = SplitAxis::kColumns;
    if (endsWith(tensor.name, "c_attn.weight") || endsWith(tensor.name, "c_attn.bias")) {
      expected = SplitAxis::kColumns;
      fused = 3;
    }
    EXPECT_EQ(tensor.split, expected) << tensor.name;
    EXPECT_EQ(tensor.fusedParts, fused) << tensor.name;
    std::vector<size_t> splitShape = tensor.fullShape;
    if (expected == SplitAxis::kRows) splitShape.front() /= 2;
    if (expected == SplitAxis::kColumns) splitShape.back() /= 2;
    EXPECT_EQ(tensor.shape, splitShape) << tensor.name;
  }
  EXPECT_EQ(shard.shard().firstToken, config.paddedVocab() / 2);
  EXPECT_EQ(shard.shard().hidden, 2 * config.width);
}

TEST(ParameterLayout, TensorParallelShardsReassembleTheOneProcessTensor) {
  const GptConfig config = smallConfig();
  const ParameterLayout whole(config);
  Rng rng(3);
  std::vector<float> full(whole.totalSize());
  for (float& value : full) value = static_cast<float>(rng.normal());
  for (int tp : {2, 4}) {
    std::vector<float> rebuilt(whole.totalSize(), 0.0f);
    for (int rank = 0; rank < tp; ++rank) {
      const ModelPart part{0, config.layers, tp, rank};
      ASSERT_TRUE(validatePart(config, part).isOk());
      const ParameterLayout shard(config, part);
      expectContiguous(shard);
      EXPECT_EQ(shard.shard().heads, config.heads / tp);
      EXPECT_EQ(shard.shard().width, config.width / tp);
      ASSERT_EQ(shard.tensors().size(), whole.tensors().size());
      for (size_t index = 0; index < whole.tensors().size(); ++index) {
        const TensorSlice& mine = shard.tensors()[index];
        const TensorSlice& original = whole.tensors()[index];
        ASSERT_EQ(mine.name, original.name);
        EXPECT_EQ(mine.size * (mine.split == SplitAxis::kNone ? 1 : static_cast<size_t>(tp)),
                  original.size)
            << mine.name;
        std::vector<float> values(mine.size);
        const std::span<const float> fullTensor(full.data() + original.offset, original.size);
        takeShard<float>(mine, rank, tp, fullTensor, values);
        placeShard<float>(mine, rank, tp, values,
                          std::span<float>(rebuilt.data() + original.offset, original.size));
        if (mine.name == "h.1.attn.c_attn.weight") {
          // Rank r's shard is its heads' q, then k, then v: contiguous, attention-ready.
          const size_t width = static_cast<size_t>(config.width);
          const size_t cs = width / static_cast<size_t>(tp);
          const size_t r = static_cast<size_t>(rank);
          for (size_t row = 0; row < width; ++row) {
            for (size_t fused = 0; fused < 3; ++fused) {
              for (size_t j = 0; j < cs; ++j) {
                ASSERT_EQ(values[row * 3 * cs + fused * cs + j],
                          fullTensor[row * 3 * width + fused * width + r * cs + j]);
              }
            }
          }
        }
      }
    }
    EXPECT_EQ(rebuilt, full) << "tp " << tp << ": the shards cover every element exactly";
  }
}

TEST(ParameterLayout, PartsInitialiseToTheirPieceOfTheOneProcessModel) {
  const GptConfig config = smallConfig();
  const ParameterLayout whole(config);
  std::vector<float> full(whole.totalSize());
  initializeParameters(full, config, whole, 42);
  for (const ModelPart& part :
       {ModelPart{1, 3, 1, 0}, ModelPart{3, 4, 2, 1}, ModelPart{0, 2, 4, 2}}) {
    const ParameterLayout layout(config, part);
    std::vector<float> values(layout.totalSize());
    initializeParameters(values, config, layout, 42);
    std::vector<float> expected(layout.totalSize());
    takePart<float>(layout, whole, full, expected);
    for (const TensorSlice& tensor : layout.tensors()) {
      EXPECT_EQ(0, std::memcmp(expected.data() + tensor.offset, values.data() + tensor.offset,
                               tensor.size * sizeof(float)))
          << tensor.name << " of layers [" << part.firstLayer << ", " << part.endLayer << ") tp "
          << part.tpRank << "/" << part.tpSize;
    }
  }
}

TEST(ParameterLayout, InvalidPartsNameWhatIsWrong) {
  const GptConfig config = smallConfig();
  auto messageOf = [&](const ModelPart& part) { return validatePart(config, part).message(); };
  EXPECT_NE(messageOf({2, 2, 1, 0}).find("layers [2, 2)"), std::string::npos);
  EXPECT_NE(messageOf({0, 5, 1, 0}).find("4 layers"), std::string::npos);
  EXPECT_NE(messageOf({0, 4, 2, 2}).find("rank 2 of 2"), std::string::npos);
  EXPECT_NE(messageOf({0, 4, 3, 0}).find("heads 4"), std::string::npos);
  GptConfig oddVocab = config;
  oddVocab.heads = 8;
  oddVocab.vocabMultiple = 4;
  oddVocab.vocab = 204;  // padded to 204, not a multiple of 8
  EXPECT_NE(validatePart(oddVocab, {0, 4, 8, 0}).message().find("padded vocabulary 204"),
            std::string::npos);
  EXPECT_EQ(validatePart(config, ModelPart::whole(config)).code(), ccSuccess);
  // Chunks: apart (adjacent ones are one chunk), ascending, non-empty, spanning the part.
  EXPECT_NE(messageOf(ModelPart::ofChunks({{0, 1}, {1, 2}})).find("chunk [1, 2)"),
            std::string::npos);
  EXPECT_NE(messageOf(ModelPart::ofChunks({{2, 3}, {0, 1}})).find("not a non-empty range"),
            std::string::npos);
  ModelPart unspanned = ModelPart::ofChunks({{0, 1}, {2, 3}});
  unspanned.endLayer = 4;
  EXPECT_NE(messageOf(unspanned).find("do not span layers [0, 4)"), std::string::npos);
  EXPECT_EQ(validatePart(config, ModelPart::ofChunks({{0, 1}, {2, 4}})).code(), ccSuccess);
}

}  // namespace
}  // namespace cc::parallel
