// The whole model's gradient against finite differences of its loss, in fp64 on a tiny
// configuration (two blocks, two heads, a padded vocabulary), for every parameter; and
// the loss at initialisation close to ln(V).
#include <gtest/gtest.h>

#include <cmath>

#include "gradient_check.h"
#include "parallel/model/gpt.h"
#include "parallel/model/initialize.h"

namespace cc::parallel {
namespace {

using testing::randomTokens;

using testing::expectGradientMatches;

GptConfig tinyConfig() {
  GptConfig config;
  config.vocab = 11;
  config.vocabMultiple = 8;  // padded to 16
  config.seq = 5;
  config.layers = 2;
  config.heads = 2;
  config.width = 8;
  return config;
}

TEST(GptGradient, MatchesFiniteDifferencesForEveryParameter) {
  const GptConfig config = tinyConfig();
  const int batch = 2;
  Gpt<double> model(config, batch);
  std::vector<float> initial(model.layout().totalSize());
  initializeParameters(initial, config, model.layout(), 7);
  // Larger than GPT-2's 0.02 so every path (attention softmax, GELU curvature) is
  // exercised away from its linear regime.
  for (size_t i = 0; i < initial.size(); ++i) model.parameters()[i] = initial[i] * 10.0;
  const auto inputs = randomTokens(config, batch, 1);
  const auto targets = randomTokens(config, batch, 2);
  auto objective = [&] { return model.forward(inputs, targets, batch); };

  model.zeroGradients();
  objective();
  model.backward(1.0);
  std::vector<double> analytic(model.gradients().begin(), model.gradients().end());
  for (const TensorSlice& tensor : model.layout().tensors()) {
    expectGradientMatches(tensor.name, model.parameters().subspan(tensor.offset, tensor.size),
                          std::span<const double>(analytic).subspan(tensor.offset, tensor.size),
                          objective, 1e-5);
  }
  // The padded vocabulary rows of wte get no gradient.
  const size_t width = static_cast<size_t>(config.width);
  for (size_t i = static_cast<size_t>(config.vocab) * width;
       i < static_cast<size_t>(config.paddedVocab()) * width; ++i) {
    EXPECT_EQ(analytic[model.layout().wte() + i], 0.0);
  }
}

TEST(GptGradient, BackwardAccumulatesAcrossMicroBatches) {
  const GptConfig config = tinyConfig();
  Gpt<double> model(config, 2);
  std::vector<float> initial(model.layout().totalSize());
  initializeParameters(initial, config, model.layout(), 3);
  std::copy(initial.begin(), initial.end(), model.parameters().begin());
  const auto inputs = randomTokens(config, 2, 5);
  const auto targets = randomTokens(config, 2, 6);
  model.zeroGradients();
  model.forward(inputs, targets, 2);
  model.backward(1.0);
  std::vector<double> once(model.gradients().begin(), model.gradients().end());
  model.forward(inputs, targets, 2);
  model.backward(1.0);
  for (size_t i = 0; i < once.size(); ++i)
    EXPECT_NEAR(model.gradients()[i], 2 * once[i], 1e-12 + 1e-12 * std::abs(once[i]));
}

TEST(GptGradient, Fp32MatchesFp64) {
  const GptConfig config = tinyConfig();
  Gpt<double> reference(config, 2);
  Gpt<float> model(config, 2);
  initializeParameters(model.parameters(), config, model.layout(), 9);
  std::copy(model.parameters().begin(), model.parameters().end(), reference.parameters().begin());
  const auto inputs = randomTokens(config, 2, 10);
  const auto targets = randomTokens(config, 2, 11);
  reference.zeroGradients();
  model.zeroGradients();
  EXPECT_NEAR(model.forward(inputs, targets, 2), reference.forward(inputs, targets, 2), 1e-5);
  model.backward(1.0f);
  reference.backward(1.0);
  double maxGradient = 0;
  for (double g : reference.gradients()) maxGradient = std::max(maxGradient, std::abs(g));
  for (size_t i = 0; i < model.gradients().size(); ++i) {
    EXPECT_NEAR(model.gradients()[i], reference.gradients()[i], 1e-4 * maxGradient) << i;
  }
}

TEST(GptInitialLoss, IsCloseToLogVocab) {
  GptConfig config;  // the default small model: L=4, H=4, C=256, T=128, V=256
  config.seq = 64;
  const int batch = 4;
  Gpt<float> model(config, batch);
  initializeParameters(model.parameters(), config, model.layout(), 1234);
  const auto inputs = randomTokens(config, batch, 1);
  const auto targets = randomTokens(config, batch, 2);
  const double loss = model.forward(inputs, targets, batch);
  // The logits are dot products of a unit-variance LayerNorm output with N(0, 0.02^2) rows
  // of wte, so they have variance s2 = C * 0.02^2 and the expected loss is about
  // ln(V) + s2 / 2 (ln V = 5.545, s2 / 2 = 0.05 here).
  const double spread = config.width * 0.02 * 0.02;
  EXPECT_NEAR(loss, std::log(static_cast<double>(config.vocab)) + spread / 2, 0.03);
}

}  // namespace
}  // namespace cc::parallel
