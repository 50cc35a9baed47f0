#include "parallel/optim/adamw.h"

#include <cmath>

namespace cc::parallel {

AdamW::AdamW(size_t parameterCount, AdamWOptions options)
    : options_(options), m_(parameterCount), v_(parameterCount) {}

void AdamW::update(std::span<float> parameters, std::span<const float> gradients, const ParameterLayout& layout,
                   float lr, float gradientScale) {
  ++step_;
  const float beta1 = options_.beta1;
  const float beta2 = options_.beta2;
  const float epsilon = options_.epsilon;
  // Bias corrections in fp64, then rounded once: the same on every step replay.
  const float correction1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), step_)));
  const float correction2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), step_)));
  for (const TensorSlice& tensor : layout.tensors()) {
    const float decay = tensor.decays ? options_.weightDecay : 0.0f;
    float* p = parameters.data() + tensor.offset;
    const float* g = gradients.data() + tensor.offset;
    float* m = m_.data() + tensor.offset;
    float* v = v_.data() + tensor.offset;
    for (size_t i = 0; i < tensor.size; ++i) {
      const float grad = g[i] * gradientScale;
      m[i] = beta1 * m[i] + (1.0f - beta1) * grad;
      v[i] = beta2 * v[i] + (1.0f - beta2) * grad * grad;
      const float mHat = m[i] * correction1;
      const float vHat = v[i] * correction2;
      p[i] -= lr * (mHat / (std::sqrt(vHat) + epsilon) + decay * p[i]);
    }
  }
}

void AdamW::restore(std::vector<float> m, std::vector<float> v, int64_t step) {
  m_ = std::move(m);
  v_ = std::move(v);
  step_ = step;
}

}  // namespace cc::parallel
