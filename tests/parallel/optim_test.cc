// The optimizer pieces (src/parallel/optim): AdamW's first step moves every parameter by
// lr against its gradient's sign (Adam's bias correction), decays only the tensors the
// layout marks, and gives the same bits over any cut into pieces (what ZeRO relies on);
// the learning-rate schedule warms up linearly and decays by a cosine to its floor; the
// global norm is the fp64 square root of the sum of squares and clipping scales to it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "parallel/model/parameter_layout.h"
#include "parallel/model/rng.h"
#include "parallel/optim/adamw.h"
#include "parallel/optim/grad_norm.h"
#include "parallel/optim/lr_schedule.h"

namespace cc::parallel {
namespace {

GptConfig smallConfig() {
  GptConfig config;
  config.vocab = 50;
  config.vocabMultiple = 8;
  config.seq = 8;
  config.layers = 2;
  config.heads = 2;
  config.width = 16;
  return config;
}

std::vector<float> randomValues(size_t count, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> values(count);
  for (float& value : values) value = static_cast<float>(rng.normal());
  return values;
}

TEST(AdamW, FirstStepMovesEachParameterByLrAgainstItsGradient) {
  const ParameterLayout layout(smallConfig());
  std::vector<float> parameters = randomValues(layout.totalSize(), 1);
  const std::vector<float> before = parameters;
  const std::vector<float> gradients = randomValues(layout.totalSize(), 2);
  AdamWOptions options;
  options.weightDecay = 0.0f;
  options.epsilon = 0.0f;
  AdamW optimizer(layout.totalSize(), options);
  const float lr = 1e-2f;
  optimizer.update(parameters, gradients, layout, lr, 1.0f);
  EXPECT_EQ(optimizer.step(), 1);
  for (size_t i = 0; i < parameters.size(); ++i) {
    // m̂ = g and v̂ = g² after bias correction: the step is lr · sign(g).
    const float expected = before[i] - lr * (gradients[i] > 0 ? 1.0f : -1.0f);
    ASSERT_NEAR(parameters[i], expected, 1e-6f) << i;
  }
}

TEST(AdamW, DecaysOnlyTheTensorsTheLayoutMarks) {
  const ParameterLayout layout(smallConfig());
  std::vector<float> parameters = randomValues(layout.totalSize(), 3);
  const std::vector<float> before = parameters;
  const std::vector<float> zeroGradients(layout.totalSize(), 0.0f);
  AdamWOptions options;
  options.weightDecay = 0.5f;
  AdamW optimizer(layout.totalSize(), options);
  const float lr = 0.1f;
  optimizer.update(parameters, zeroGradients, layout, lr, 1.0f);
  for (const TensorSlice& tensor : layout.tensors()) {
    for (size_t i = tensor.offset; i < tensor.offset + tensor.size; ++i) {
      const float expected =
          tensor.decays ? before[i] * (1.0f - lr * options.weightDecay) : before[i];
      ASSERT_FLOAT_EQ(parameters[i], expected) << tensor.name;
    }
  }
}

TEST(AdamW, PiecesInAnyCutGiveTheWholeStepsBits) {
  const ParameterLayout layout(smallConfig());
  const size_t total = layout.totalSize();
  const size_t padded = total + 5;  // ZeRO pads past the layout: never decays
  std::vector<float> whole = randomValues(padded, 4);
  std::vector<float> pieced = whole;
  AdamW reference(padded, AdamWOptions{});
  AdamW sharded(padded, AdamWOptions{});
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> gradients = randomValues(padded, 10 + static_cast<uint64_t>(step));
    const AdamWPiece all{whole.data(), gradients.data(), 0, padded, 0};
    reference.updatePieces({&all, 1}, layout, 1e-2f, 0.7f);
    // Uneven pieces that cut through tensors, stored in reverse order in the state.
    std::vector<AdamWPiece> pieces;
    const size_t cuts[] = {0, 7, 100, total / 2, total - 3, padded};
    size_t stateOffset = padded;
    for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
      const size_t count = cuts[i + 1] - cuts[i];
      stateOffset -= count;
      pieces.push_back(
          {pieced.data() + cuts[i], gradients.data() + cuts[i], cuts[i], count, stateOffset});
    }
    sharded.updatePieces(pieces, layout, 1e-2f, 0.7f);
  }
  EXPECT_EQ(0, std::memcmp(whole.data(), pieced.data(), padded * sizeof(float)));
}

TEST(LrSchedule, WarmsUpLinearlyThenDecaysByACosineToItsFloor) {
  const LrSchedule schedule{1e-3f, 10, 110, 0.1f};
  for (int64_t step = 0; step < 10; ++step) {
    EXPECT_FLOAT_EQ(schedule.at(step), 1e-3f * static_cast<float>(step + 1) / 10.0f);
  }
  EXPECT_FLOAT_EQ(schedule.at(10), 1e-3f);
  for (int64_t step = 11; step <= 110; ++step) {
    EXPECT_LE(schedule.at(step), schedule.at(step - 1)) << "decays monotonically";
  }
  EXPECT_FLOAT_EQ(schedule.at(60), 0.5f * (1e-3f + 1e-4f)) << "half way down the cosine";
  EXPECT_FLOAT_EQ(schedule.at(110), 1e-4f);
  EXPECT_FLOAT_EQ(schedule.at(1000), 1e-4f) << "stays at the floor past the end";
}

TEST(GradNorm, IsTheFp64RootOfTheSumOfSquares) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{1001}}) {
    const std::vector<float> values = randomValues(count, 5 + count);
    double sum = 0;
    for (float value : values) sum += static_cast<double>(value) * value;
    EXPECT_NEAR(globalNorm(values), std::sqrt(sum), 1e-12 * (1 + std::sqrt(sum))) << count;
  }
}

TEST(GradNorm, ClipScaleBringsTheNormToTheLimit) {
  EXPECT_EQ(clipScale(10.0, 0.0f), 1.0f) << "clipping off";
  EXPECT_EQ(clipScale(0.5, 1.0f), 1.0f) << "within the limit";
  EXPECT_NEAR(10.0 * clipScale(10.0, 1.0f), 1.0, 1e-6);
  EXPECT_NEAR(250.0 * clipScale(250.0, 2.5f), 2.5, 1e-5);
}

}  // namespace
}  // namespace cc::parallel
