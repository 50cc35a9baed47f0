#include "parallel/optim/adamw.h"

#include <algorithm>
#include <cmath>

namespace cc::parallel {
namespace {

struct StepConstants {
  float beta1, beta2, epsilon, lr, gradientScale, correction1, correction2;
};

void updateRun(float* p, const float* g, float* m, float* v, size_t count, float decay,
               const StepConstants& k) {
  for (size_t i = 0; i < count; ++i) {
    const float grad = g[i] * k.gradientScale;
    m[i] = k.beta1 * m[i] + (1.0f - k.beta1) * grad;
    v[i] = k.beta2 * v[i] + (1.0f - k.beta2) * grad * grad;
    const float mHat = m[i] * k.correction1;
    const float vHat = v[i] * k.correction2;
    p[i] -= k.lr * (mHat / (std::sqrt(vHat) + k.epsilon) + decay * p[i]);
  }
}

}  // namespace

AdamW::AdamW(size_t stateSize, AdamWOptions options)
    : options_(options), m_(stateSize), v_(stateSize) {}

void AdamW::update(std::span<float> parameters, std::span<const float> gradients,
                   const ParameterLayout& layout, float lr, float gradientScale) {
  const AdamWPiece whole{parameters.data(), gradients.data(), 0, layout.totalSize(), 0};
  updatePieces({&whole, 1}, layout, lr, gradientScale);
}

void AdamW::updatePieces(std::span<const AdamWPiece> pieces, const ParameterLayout& layout,
                         float lr, float gradientScale) {
  ++step_;
  varianceStep_ = step_;
  // Bias corrections in fp64, then rounded once: the same on every step replay.
  const StepConstants k{
      options_.beta1,
      options_.beta2,
      options_.epsilon,
      lr,
      gradientScale,
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(options_.beta1), step_))),
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(options_.beta2), step_)))};
  const std::vector<TensorSlice>& tensors = layout.tensors();
  for (const AdamWPiece& piece : pieces) {
    const size_t end = piece.begin + piece.count;
    // The tensors are in buffer order; walk the ones this piece overlaps.
    auto tensor =
        std::upper_bound(tensors.begin(), tensors.end(), piece.begin,
                         [](size_t offset, const TensorSlice& t) { return offset < t.offset; });
    if (tensor != tensors.begin()) --tensor;
    size_t at = piece.begin;
    for (; tensor != tensors.end() && at < end; ++tensor) {
      const size_t runEnd = std::min(end, tensor->offset + tensor->size);
      if (runEnd <= at) continue;
      const size_t local = at - piece.begin;
      updateRun(piece.parameters + local, piece.gradients + local,
                m_.data() + piece.stateOffset + local, v_.data() + piece.stateOffset + local,
                runEnd - at, tensor->decays ? options_.weightDecay : 0.0f, k);
      at = runEnd;
    }
    if (at < end) {  // padding past the layout: no decay
      const size_t local = at - piece.begin;
      updateRun(piece.parameters + local, piece.gradients + local,
                m_.data() + piece.stateOffset + local, v_.data() + piece.stateOffset + local,
                end - at, 0.0f, k);
    }
  }
}

Status AdamW::updateFrozenVariance(std::span<float> parameters, std::span<const float> gradients,
                                   const ParameterLayout& layout, float lr, float gradientScale,
                                   const std::function<Status(std::span<float>)>& average) {
  ++step_;
  const size_t count = layout.totalSize();
  const float beta1 = options_.beta1;
  for (size_t i = 0; i < count; ++i)
    m_[i] = beta1 * m_[i] + (1.0f - beta1) * gradients[i] * gradientScale;
  CC_TRY(average(std::span<float>(m_).first(count)));
  const float correction1 =
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), step_)));
  const float correction2 =
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(options_.beta2),
                                               std::max<int64_t>(varianceStep_, 1))));
  for (const TensorSlice& tensor : layout.tensors()) {
    const float decay = tensor.decays ? options_.weightDecay : 0.0f;
    for (size_t i = tensor.offset; i < tensor.offset + tensor.size; ++i) {
      const float vHat = v_[i] * correction2;
      parameters[i] -=
          lr * (m_[i] * correction1 / (std::sqrt(vHat) + options_.epsilon) + decay * parameters[i]);
    }
  }
  return Status::ok();
}

void AdamW::restore(std::vector<float> m, std::vector<float> v, int64_t step) {
  m_ = std::move(m);
  v_ = std::move(v);
  step_ = step;
  varianceStep_ = step;
}

}  // namespace cc::parallel
