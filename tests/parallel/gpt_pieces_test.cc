// The model as a row of pieces (model/gpt.h): three pipeline stages run one after the other,
// handing the hidden state forward and its gradient back, reproduce the whole model; two
// micro-batches in flight in arenas of their own, backward in the reverse order (as 1F1B
// runs them), give the sequential run's losses and gradients; the activation memory is the
// documented formula.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "gradient_check.h"
#include "parallel/model/gpt.h"
#include "parallel/model/initialize.h"
#include "parallel/model/rng.h"

namespace cc::parallel {
namespace {

using testing::initializeModel;
using testing::randomTokens;

GptConfig tinyConfig() {
  GptConfig config;
  config.vocab = 11;
  config.vocabMultiple = 8;
  config.seq = 5;
  config.layers = 3;
  config.heads = 2;
  config.width = 8;
  return config;
}

// The values of tensor `name` in a model's gradient buffer.
template <typename T>
std::vector<T> gradientOf(const Gpt<T>& model, const std::string& name) {
  for (const TensorSlice& tensor : model.layout().tensors()) {
    if (tensor.name == name) {
      auto values = model.gradients().subspan(tensor.offset, tensor.size);
      return {values.begin(), values.end()};
    }
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

TEST(GptPieces, ThreeStagesInSequenceReproduceTheWholeModel) {
  const GptConfig config = tinyConfig();
  const int batch = 2;
  const auto inputs = randomTokens(config, batch, 1);
  const auto targets = randomTokens(config, batch, 2);
  Gpt<double> whole(config, batch);
  initializeModel(whole, 9);
  whole.zeroGradients();
  const double wholeLoss = whole.forward(inputs, targets, batch);
  whole.backward(1.0);

  // Three stages: the first (embeddings), a middle one (neither embeddings nor head), the
  // last (the head).
  Gpt<double> first(ParameterLayout(config, ModelPart{0, 1, 1, 0}), batch);
  Gpt<double> middle(ParameterLayout(config, ModelPart{1, 2, 1, 0}), batch);
  Gpt<double> last(ParameterLayout(config, ModelPart{2, 3, 1, 0}), batch);
  for (Gpt<double>* stage : {&first, &middle, &last}) {
    initializeModel(*stage, 9);
    stage->zeroGradients();
  }
  ActivationArena<double> firstArena = first.makeArena(batch);
  ActivationArena<double> middleArena = middle.makeArena(batch);
  ActivationArena<double> lastArena = last.makeArena(batch);
  const size_t hidden = static_cast<size_t>(batch * config.seq * config.width);

  firstArena.setBatch(inputs, {}, batch);
  first.embeddingForward(firstArena);
  first.blockForward(0, firstArena);
  // The "sends": each stage's output is the next stage's input.
  middleArena.setBatch({}, {}, batch);
  std::memcpy(middleArena.input(), firstArena.output(), hidden * sizeof(double));
  middle.blockForward(1, middleArena);
  lastArena.setBatch({}, targets, batch);
  std::memcpy(lastArena.input(), middleArena.output(), hidden * sizeof(double));
  last.blockForward(2, lastArena);
  const double stagedLoss = last.headForward(lastArena);
  EXPECT_EQ(stagedLoss, wholeLoss) << "the same operations in the same order";

  std::vector<double> dhidden(hidden);
  last.headBackward(lastArena, dhidden.data(), 1.0);
  last.blockBackward(2, lastArena, dhidden.data());
  middle.blockBackward(1, middleArena, dhidden.data());
  first.blockBackward(0, firstArena, dhidden.data());
  first.embeddingBackward(firstArena, dhidden.data());

  for (const TensorSlice& tensor : whole.layout().tensors()) {
    const std::vector<double> expected = gradientOf(whole, tensor.name);
    std::vector<double> staged(expected.size(), 0.0);
    // wte's gradient is the sum of the embedding's (first stage) and the tied head's
    // (last stage), added in another order than the whole model adds them.
    for (const Gpt<double>* stage : {&first, &middle, &last}) {
      for (const TensorSlice& mine : stage->layout().tensors()) {
        if (mine.name != tensor.name) continue;
        const std::vector<double> part = gradientOf(*stage, tensor.name);
        for (size_t i = 0; i < part.size(); ++i) staged[i] += part[i];
      }
    }
    for (size_t i = 0; i < expected.size(); ++i) {
      if (tensor.name == "wte.weight") {
        ASSERT_NEAR(staged[i], expected[i], 1e-15 + 1e-12 * std::abs(expected[i])) << tensor.name;
      } else {
        ASSERT_EQ(staged[i], expected[i]) << tensor.name << "[" << i << "]";
      }
    }
  }
}

TEST(GptPieces, MicroBatchesInFlightGiveTheSequentialRun) {
  const GptConfig config = tinyConfig();
  const int batch = 2;
  const auto inputsA = randomTokens(config, batch, 3), targetsA = randomTokens(config, batch, 4);
  const auto inputsB = randomTokens(config, batch, 5), targetsB = randomTokens(config, batch, 6);

  Gpt<double> sequential(config, batch);
  initializeModel(sequential, 11);
  sequential.zeroGradients();
  const double lossA = sequential.forward(inputsA, targetsA, batch);
  sequential.backward(0.5);
  const double lossB = sequential.forward(inputsB, targetsB, batch);
  sequential.backward(0.5);

  Gpt<double> model(config, batch);
  initializeModel(model, 11);
  model.zeroGradients();
  std::vector<ActivationArena<double>> arenas;
  arenas.push_back(model.makeArena(batch));
  arenas.push_back(model.makeArena(batch));
  auto forward = [&](ActivationArena<double>& arena, const std::vector<int32_t>& inputs,
                     const std::vector<int32_t>& targets) {
    arena.setBatch(inputs, targets, batch);
    model.embeddingForward(arena);
    for (int layer = 0; layer < config.layers; ++layer) model.blockForward(layer, arena);
    return model.headForward(arena);
  };
  auto backward = [&](ActivationArena<double>& arena) {
    double* dhidden = model.hiddenGradient();
    model.headBackward(arena, dhidden, 0.5);
    for (int layer = config.layers - 1; layer >= 0; --layer)
      model.blockBackward(layer, arena, dhidden);
    model.embeddingBackward(arena, dhidden);
  };
  // Both forwards first, then the backwards newest first: each arena keeps its own.
  EXPECT_EQ(forward(arenas[0], inputsA, targetsA), lossA);
  EXPECT_EQ(forward(arenas[1], inputsB, targetsB), lossB);
  backward(arenas[1]);
  backward(arenas[0]);
  const auto expected = sequential.gradients();
  const auto actual = model.gradients();
  for (size_t i = 0; i < expected.size(); ++i) {
    // The two micro-batches' contributions add in the other order.
    ASSERT_NEAR(actual[i], expected[i], 1e-15 + 1e-12 * std::abs(expected[i])) << i;
  }
}

TEST(GptPieces, RecomputationGivesTheSameLossAndGradientsBitForBit) {
  GptConfig config = tinyConfig();
  const int batch = 3;
  const auto inputs = testing::randomTokens(config, batch, 1);
  const auto targets = testing::randomTokens(config, batch, 2);
  Gpt<double> kept(config, batch);
  Gpt<double> rebuilt(config, batch, 0, /*recompute=*/true);
  testing::initializeModel(kept, 3);
  testing::initializeModel(rebuilt, 3);
  for (Gpt<double>* model : {&kept, &rebuilt}) model->zeroGradients();
  // Two micro-batches, so that the second rebuilds from an arena the first has used.
  for (int micro = 0; micro < 2; ++micro) {
    const double a = kept.forward(inputs, targets, batch - micro);
    const double b = rebuilt.forward(inputs, targets, batch - micro);
    EXPECT_EQ(a, b);
    kept.backward(0.5);
    rebuilt.backward(0.5);
  }
  for (size_t i = 0; i < kept.gradients().size(); ++i)
    ASSERT_EQ(kept.gradients()[i], rebuilt.gradients()[i]) << i;
}

// The split backward (B down the pieces, then W) against the whole backward of a model that
// keeps its activations; `recompute`: the split model rebuilds them instead.
void expectSplitBackwardIsTheWholeBackward(bool recompute) {
  GptConfig config = tinyConfig();
  const int batch = 3;
  Gpt<double> whole(config, batch);
  Gpt<double> split(config, batch, 0, recompute);
  initializeModel(whole, 4);
  initializeModel(split, 4);
  whole.zeroGradients();
  split.zeroGradients();
  std::vector<double> stash(split.weightStashElements(batch));
  std::vector<double> dhidden(static_cast<size_t>(batch * config.seq * config.width));
  ActivationArena<double> arena = split.makeArena(batch);
  for (int micro = 0; micro < 2; ++micro) {
    const auto inputs = randomTokens(config, batch, 10 + micro);
    const auto targets = randomTokens(config, batch, 20 + micro);
    arena.setBatch(inputs, targets, batch);
    split.embeddingForward(arena);
    for (int layer = 0; layer < config.layers; ++layer) split.blockForward(layer, arena);
    EXPECT_EQ(whole.forward(inputs, targets, batch), split.headForward(arena));
    whole.backward(0.5);
    // B down the pieces, then W: the order of a zero-bubble stage that holds everything.
    split.headBackwardInput(arena, dhidden.data(), 0.5, stash.data());
    for (int layer = config.layers - 1; layer >= 0; --layer)
      split.blockBackwardInput(layer, arena, dhidden.data(), stash.data());
    split.embeddingBackwardInput(arena, dhidden.data(), stash.data());
    split.headBackwardWeight(arena, stash.data());
    for (int layer = config.layers - 1; layer >= 0; --layer)
      split.blockBackwardWeight(layer, arena, stash.data());
    split.embeddingBackwardWeight(arena, stash.data());
  }
  for (size_t i = 0; i < whole.gradients().size(); ++i)
    ASSERT_EQ(whole.gradients()[i], split.gradients()[i]) << i;
}

TEST(GptPieces, SplitBackwardGivesTheWholeBackwardsGradientsBitForBit) {
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recomputing" : "keeping activations");
    expectSplitBackwardIsTheWholeBackward(recompute);
  }
}

TEST(GptPieces, ActivationMemoryIsTheDocumentedFormula) {
  // docs/TRAINING.md, "Memory" (one process) and "Tensor parallelism" (per rank, with and
  // without sequence parallelism): A in floats for one micro-batch in flight.
  struct Split {
    int tp;
    bool sp;
  };
  for (const Split split : {Split{1, false}, Split{2, false}, Split{2, true}, Split{4, true}}) {
    for (int batch : {1, 3}) {
      GptConfig config = tinyConfig();
      config.layers = 4;
      config.heads = 4;
      config.seq = 8;
      const ModelPart part{0, config.layers, split.tp, split.tp - 1, split.sp};
      ASSERT_TRUE(validatePart(config, part).isOk());
      const ParameterLayout layout(config, part);
      const size_t b = static_cast<size_t>(batch), t = static_cast<size_t>(config.seq);
      const size_t c = static_cast<size_t>(config.width), h = static_cast<size_t>(config.heads);
      const size_t l = static_cast<size_t>(config.layers);
      const size_t vp = static_cast<size_t>(config.paddedVocab());
      const size_t tp = static_cast<size_t>(split.tp);
      const size_t n = b * t;                  // N, the rows
      const size_t m = split.sp ? n / tp : n;  // M, the residual stream's rows on this rank
      const size_t formula = l * (4 * m * c + 4 * m + 12 * n * c / tp + b * h * t * t / tp) +
                             2 * m * c + 2 * m + n * vp / tp + n +              // the arena's rest
                             2 * n * c + m * c + 12 * n * c / tp + n * vp / tp  // the workspace
                             + t * t + 2 * c + (tp > 1 ? 3 * n : 0) + (split.sp ? 4 * c : 0);
      EXPECT_EQ(activationElementCount(layout, batch), formula)
          << "tp " << split.tp << (split.sp ? " sp" : "") << " batch " << batch;
      // Recomputation keeps one [M, C] per block in the arena and one whole block in the
      // workspace.
      const size_t block = 4 * m * c + 4 * m + 12 * n * c / tp + b * h * t * t / tp;
      EXPECT_EQ(activationElementCount(layout, batch, 1, true),
                formula - l * block + l * m * c + block);
      // Each further micro-batch in flight costs one arena, not another workspace.
      const size_t arena = ActivationArena<float>::elementCount(layout, batch);
      EXPECT_EQ(activationElementCount(layout, batch, 3), formula + 2 * arena);
    }
  }
}

}  // namespace
}  // namespace cc::parallel
