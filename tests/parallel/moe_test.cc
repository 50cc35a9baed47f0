// The mixture-of-experts model on one process: the router's capacity and drop order, its
// backward against fp64 central differences, and the whole MoE model's gradient (router,
// experts, auxiliary losses) against central differences of its objective.
#include "parallel/model/layers/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "gradient_check.h"
#include "parallel/model/gpt.h"
#include "parallel/model/initialize.h"

namespace cc::parallel {
namespace {

using testing::expectGradientMatches;
using testing::randomTokens;
using testing::randomVector;

TEST(MoeRouting, CapacityIsTheCeilingOfTheFormula) {
  EXPECT_EQ(layers::expertCapacity(10, 2, 4, 1.25), 7);  // 10 x 2 / 4 x 1.25 = 6.25
  EXPECT_EQ(layers::expertCapacity(8, 2, 4, 1.0), 4);    // exact: no rounding up
  EXPECT_EQ(layers::expertCapacity(8, 1, 4, 1.5), 3);
  EXPECT_EQ(layers::expertCapacity(9, 2, 4, 0), 9);  // dropless: every token
}

// Four tokens that all prefer expert 0, then expert 1, with capacity 2: the first choices
// of tokens 0 and 1 fit, those of 2 and 3 are dropped; then the second choices (expert 1)
// of tokens 0 and 1 fit and those of 2 and 3 are dropped.
TEST(MoeRouting, FirstChoicesClaimSlotsBeforeSecondChoicesInTokenOrder) {
  const int n = 4, e = 3, k = 2;
  std::vector<double> probs = {0.5, 0.3, 0.2, 0.6, 0.3, 0.1, 0.7, 0.2, 0.1, 0.4, 0.35, 0.25};
  std::vector<double> gates(static_cast<size_t>(n * k));
  layers::Routing r;
  layers::route(r, gates.data(), probs.data(), n, e, k, 2);
  EXPECT_EQ(r.routed, (std::vector<int64_t>{4, 4, 0}));
  EXPECT_EQ(r.kept, (std::vector<int64_t>{2, 2, 0}));
  for (int t = 0; t < n; ++t) {
    EXPECT_EQ(r.choice[static_cast<size_t>(t * k)], 0);
    EXPECT_EQ(r.choice[static_cast<size_t>(t * k + 1)], 1);
    const bool kept = t < 2;
    EXPECT_EQ(r.row[static_cast<size_t>(t * k)] >= 0, kept) << t;
    EXPECT_EQ(r.row[static_cast<size_t>(t * k + 1)] >= 0, kept) << t;
    // Gates renormalised over the K choices.
    const double sum = probs[static_cast<size_t>(t * e)] + probs[static_cast<size_t>(t * e + 1)];
    EXPECT_DOUBLE_EQ(gates[static_cast<size_t>(t * k)], probs[static_cast<size_t>(t * e)] / sum);
  }
  // Send order: expert-major, slot order inside: expert 0's tokens 0, 1, then expert 1's.
  EXPECT_EQ(r.rowToken, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(r.rowChoice, (std::vector<int32_t>{0, 0, 1, 1}));
}

// A second choice loses its slot to a later token's first choice.
TEST(MoeRouting, ASecondChoiceComesAfterEveryFirstChoice) {
  const int n = 2, e = 2, k = 2;
  // Token 0 prefers 0 then 1; token 1 prefers 1 then 0. Capacity 1: both first choices fit,
  // both second choices are dropped.
  std::vector<double> probs = {0.6, 0.4, 0.3, 0.7};
  std::vector<double> gates(4);
  layers::Routing r;
  layers::route(r, gates.data(), probs.data(), n, e, k, 1);
  EXPECT_EQ(r.kept, (std::vector<int64_t>{1, 1}));
  EXPECT_GE(r.row[0], 0);
  EXPECT_LT(r.row[1], 0);
  EXPECT_GE(r.row[2], 0);
  EXPECT_LT(r.row[3], 0);
}

TEST(MoeRouting, TiesGoToTheLowerExpert) {
  std::vector<double> probs = {0.25, 0.25, 0.25, 0.25};
  std::vector<double> gates(2);
  layers::Routing r;
  layers::route(r, gates.data(), probs.data(), 1, 4, 2, 1);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 1}));
}

TEST(MoeRouting, BalancedRoutingHasLoadBalancingLossAlpha) {
  // Every expert chosen equally often with uniform probabilities: alpha E sum (1/E)(1/E).
  const int n = 4, e = 4, k = 1;
  std::vector<double> probs(16, 0.25);
  for (int t = 0; t < n; ++t) probs[static_cast<size_t>(t * e + t)] = 0.25 + 1e-9;
  std::vector<double> gates(4);
  layers::Routing r;
  layers::route(r, gates.data(), probs.data(), n, e, k, 4);
  EXPECT_NEAR(layers::loadBalancingLoss(r, probs.data(), 0.01), 0.01, 1e-9);
}

// d(objective)/d(logits) through softmax, top-K renormalisation and both auxiliary losses,
// with the routing held fixed (it is piecewise constant in the logits).
TEST(MoeRouting, RouterBackwardMatchesFiniteDifferences) {
  const size_t n = 6, e = 5, k = 2;
  const double alpha = 0.3, beta = 0.2, scale = 0.7;
  std::vector<double> logits = randomVector(n * e, 11, 1.5);
  const std::vector<double> dgates = randomVector(n * k, 12);
  layers::Routing fixed;
  std::vector<double> probs(n * e), lse(n), gates(n * k);
  layers::routerSoftmax(probs.data(), lse.data(), logits.data(), n, e);
  layers::route(fixed, gates.data(), probs.data(), static_cast<int>(n), static_cast<int>(e),
                static_cast<int>(k), 3);
  auto objective = [&] {
    std::vector<double> p(n * e), l(n), g(n * k);
    layers::routerSoftmax(p.data(), l.data(), logits.data(), n, e);
    double total = 0;
    for (size_t t = 0; t < n; ++t) {
      double sum = 0;
      for (size_t c = 0; c < k; ++c) sum += p[t * e + static_cast<size_t>(fixed.choice[t * k + c])];
      for (size_t c = 0; c < k; ++c)
        total += dgates[t * k + c] * p[t * e + static_cast<size_t>(fixed.choice[t * k + c])] / sum;
    }
    return total + scale * (layers::loadBalancingLoss(fixed, p.data(), alpha) +
                            layers::routerZLoss(l.data(), n, beta));
  };
  std::vector<double> analytic(n * e), scratch(2 * e);
  // dgates already carry the scale where they come from the model's output gradient.
  layers::routerBackward(analytic.data(), dgates.data(), gates.data(), probs.data(), lse.data(),
                         fixed, alpha, beta, scale, scratch.data());
  expectGradientMatches("router logits", logits, analytic, objective, 1e-6);
}

// Top-1 (Switch): the gate is the probability itself, so the router learns from the
// model's loss through it.
TEST(MoeRouting, TopOneGateIsTheProbabilityAndCarriesAGradient) {
  const size_t n = 5, e = 4;
  std::vector<double> logits = randomVector(n * e, 21, 1.5);
  const std::vector<double> dgates = randomVector(n, 22);
  std::vector<double> probs(n * e), lse(n), gates(n);
  layers::routerSoftmax(probs.data(), lse.data(), logits.data(), n, e);
  layers::Routing fixed;
  layers::route(fixed, gates.data(), probs.data(), static_cast<int>(n), static_cast<int>(e), 1, 5);
  for (size_t t = 0; t < n; ++t)
    EXPECT_DOUBLE_EQ(gates[t], probs[t * e + static_cast<size_t>(fixed.choice[t])]);
  auto objective = [&] {
    std::vector<double> p(n * e), l(n);
    layers::routerSoftmax(p.data(), l.data(), logits.data(), n, e);
    double total = 0;
    for (size_t t = 0; t < n; ++t)
      total += dgates[t] * p[t * e + static_cast<size_t>(fixed.choice[t])];
    return total;
  };
  std::vector<double> analytic(n * e), scratch(2 * e);
  layers::routerBackward(analytic.data(), dgates.data(), gates.data(), probs.data(), lse.data(),
                         fixed, 0.0, 0.0, 1.0, scratch.data());
  expectGradientMatches("top-1 router logits", logits, analytic, objective, 1e-6);
}

GptConfig tinyMoeConfig(double capacityFactor) {
  GptConfig config;
  config.vocab = 11;
  config.vocabMultiple = 8;
  config.seq = 5;
  config.layers = 2;
  config.heads = 2;
  config.width = 8;
  config.experts = 4;
  config.topK = 2;
  config.moeEvery = 1;
  config.expertWidth = 6;
  config.capacityFactor = capacityFactor;
  config.auxLossCoef = 0.05;
  config.zLossCoef = 0.01;
  return config;
}

// Every parameter of an MoE model against central differences of forward() +
// auxiliaryLoss(), with capacity (some choices dropped) and dropless. The parameters are 10x
// GPT-2's scale, as in gpt_gradient_test; the gating makes the objective curved enough that
// the central difference's h^2 error reaches 1e-4 relative at gpt_gradient_test's step 1e-5
// (it falls as h^2), so these take h = 2e-6 (worst 4e-6 relative).
void checkWholeModel(double capacityFactor, bool expectDrops, double tolerance = 1e-5, int topK = 2,
                     int moeEvery = 1) {
  GptConfig config = tinyMoeConfig(capacityFactor);
  config.topK = topK;
  config.moeEvery = moeEvery;
  ASSERT_TRUE(config.validate().isOk());
  const int batch = 2;
  Gpt<double> model(config, batch);
  std::vector<float> initial(model.layout().totalSize());
  initializeParameters(initial, config, model.layout(), 7);
  for (size_t i = 0; i < initial.size(); ++i) model.parameters()[i] = initial[i] * 10.0;
  const auto inputs = randomTokens(config, batch, 1);
  const auto targets = randomTokens(config, batch, 2);
  const double scale = 0.5;
  auto objective = [&] {
    return scale * (model.forward(inputs, targets, batch) + model.auxiliaryLoss());
  };
  model.zeroGradients();
  model.resetMoeStatistics();
  objective();
  EXPECT_GT(model.auxiliaryLoss(), 0.0);
  int64_t dropped = 0;
  for (const MoeStatistics& statistics : model.moeStatistics()) {
    for (int64_t count : statistics.dropped) dropped += count;
    EXPECT_EQ(std::accumulate(statistics.routed.begin(), statistics.routed.end(), int64_t{0}),
              int64_t{batch} * config.seq * config.topK);
  }
  EXPECT_EQ(dropped > 0, expectDrops);
  model.backward(scale);
  std::vector<double> analytic(model.gradients().begin(), model.gradients().end());
  for (const TensorSlice& tensor : model.layout().tensors()) {
    expectGradientMatches(tensor.name, model.parameters().subspan(tensor.offset, tensor.size),
                          std::span<const double>(analytic).subspan(tensor.offset, tensor.size),
                          objective, tolerance, 2e-6);
  }
}

TEST(MoeGradient, MatchesFiniteDifferencesWithCapacity) { checkWholeModel(0.75, true); }

TEST(MoeGradient, MatchesFiniteDifferencesDropless) { checkWholeModel(0, false); }

TEST(MoeGradient, MatchesFiniteDifferencesTopOne) { checkWholeModel(0, false, 1e-5, 1); }

// Block 0 MoE, block 1 dense.
TEST(MoeGradient, MatchesFiniteDifferencesEverySecondBlock) {
  checkWholeModel(0, false, 1e-5, 2, 2);
}

// Recomputation routes again in backward: the same loss, auxiliary loss, statistics and
// gradients as keeping the activations (block 1 dense, so a stale MoE value would show).
TEST(MoeGradient, RecomputationChangesNothing) {
  GptConfig config = tinyMoeConfig(1.0);
  config.moeEvery = 2;
  const int batch = 2;
  Gpt<double> kept(config, batch), rebuilt(config, batch, 0, /*recompute=*/true);
  std::vector<float> initial(kept.layout().totalSize());
  initializeParameters(initial, config, kept.layout(), 9);
  for (size_t i = 0; i < initial.size(); ++i) {
    kept.parameters()[i] = initial[i] * 10.0;
    rebuilt.parameters()[i] = initial[i] * 10.0;
  }
  const auto inputs = randomTokens(config, batch, 3);
  const auto targets = randomTokens(config, batch, 4);
  for (Gpt<double>* model : {&kept, &rebuilt}) {
    model->zeroGradients();
    model->resetMoeStatistics();
    model->forward(inputs, targets, batch);
    model->backward(0.5);
  }
  EXPECT_DOUBLE_EQ(kept.auxiliaryLoss(), rebuilt.auxiliaryLoss());
  EXPECT_EQ(kept.moeStatistics()[0].routed, rebuilt.moeStatistics()[0].routed);
  EXPECT_EQ(kept.moeStatistics()[0].dropped, rebuilt.moeStatistics()[0].dropped);
  EXPECT_EQ(kept.moeStatistics()[0].microBatches, 1);
  EXPECT_EQ(rebuilt.moeStatistics()[0].microBatches, 1);
  for (size_t i = 0; i < kept.gradients().size(); ++i)
    ASSERT_DOUBLE_EQ(kept.gradients()[i], rebuilt.gradients()[i]) << i;
}

TEST(MoeLayout, NamesRouterAndExpertsAndSplitsExpertsOverEp) {
  GptConfig config = tinyMoeConfig(1.25);
  config.moeEvery = 2;  // blocks 0 (MoE) and 1 (dense)
  const ParameterLayout whole(config);
  std::vector<std::string> names;
  for (const TensorSlice& tensor : whole.tensors()) names.push_back(tensor.name);
  auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  EXPECT_TRUE(has("h.0.moe.router.weight"));
  EXPECT_TRUE(has("h.0.moe.experts.3.c_fc.weight"));
  EXPECT_TRUE(has("h.0.moe.experts.0.c_proj.bias"));
  EXPECT_FALSE(has("h.0.mlp.c_fc.weight"));
  EXPECT_TRUE(has("h.1.mlp.c_fc.weight"));
  ModelPart part = ModelPart::whole(config);
  part.epSize = 2;
  part.epRank = 1;
  ASSERT_TRUE(validatePart(config, part).isOk());
  const ParameterLayout half(config, part);
  const BlockOffsets& block = half.block(0);
  EXPECT_EQ(block.moeMlp.firstExpert, 2);
  EXPECT_EQ(block.moeMlp.experts.size(), 2u);
  // Each held expert's size, and the dense rest the same as the whole model's.
  const size_t expertSize = 8 * 6 + 6 + 6 * 8 + 8;
  EXPECT_EQ(block.moeMlp.expertsEnd - block.moeMlp.expertsBegin, 2 * expertSize);
  EXPECT_EQ(half.totalSize() + 2 * expertSize, whole.totalSize());
  part.epSize = 3;
  part.epRank = 0;
  EXPECT_FALSE(validatePart(config, part).isOk());  // 3 does not divide 4 experts
}

}  // namespace
}  // namespace cc::parallel
