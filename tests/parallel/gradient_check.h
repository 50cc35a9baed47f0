// Central finite differences in fp64, shared by the layer and model gradient tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "parallel/model/config.h"
#include "parallel/model/gpt.h"
#include "parallel/model/initialize.h"
#include "parallel/model/rng.h"

namespace cc::parallel::testing {

// batch x config.seq token ids below config.vocab, from a seed.
inline std::vector<int32_t> randomTokens(const GptConfig& config, int batch, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * config.seq));
  for (int32_t& token : tokens) {
    token = static_cast<int32_t>(rng.below(static_cast<uint64_t>(config.vocab)));
  }
  return tokens;
}

// The model's parameters from GPT-2's initialisation (made in fp32, as training does).
template <typename T>
void initializeModel(Gpt<T>& model, uint64_t seed) {
  std::vector<float> values(model.layout().totalSize());
  initializeParameters(values, model.config(), model.layout(), seed);
  std::copy(values.begin(), values.end(), model.parameters().begin());
}

inline std::vector<double> randomVector(size_t count, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<double> values(count);
  for (double& value : values) value = scale * rng.normal();
  return values;
}

// Perturbs every element of `x` by +-step, re-evaluates `objective`, and compares the
// central difference with `analytic`. The error allowed is relative, with an absolute
// floor for gradients near zero. step: the perturbation (a smaller one for objectives whose
// third derivatives are large, where the central difference's h^2 error shows).
inline void expectGradientMatches(const std::string& what, std::span<double> x,
                                  std::span<const double> analytic,
                                  const std::function<double()>& objective, double tolerance = 1e-6,
                                  double step = 1e-5) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double h = step;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = objective();
    x[i] = saved - h;
    const double down = objective();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double error = std::abs(numeric - analytic[i]) /
                         std::max({1e-3, std::abs(numeric), std::abs(analytic[i])});
    worst = std::max(worst, error);
    ASSERT_LE(error, tolerance) << what << "[" << i << "]: analytic " << analytic[i] << " numeric "
                                << numeric;
  }
  ::testing::Test::RecordProperty(what + "_worst_relative_error", std::to_string(worst));
}

// sum(out * weights): its gradient with respect to out is `weights`.
inline double weightedSum(std::span<const double> out, std::span<const double> weights) {
  double total = 0;
  for (size_t i = 0; i < out.size(); ++i) total += out[i] * weights[i];
  return total;
}

}  // namespace cc::parallel::testing
