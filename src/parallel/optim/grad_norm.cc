#include "parallel/optim/grad_norm.h"

#include <algorithm>
#include <cmath>

namespace cc::parallel {

double globalNorm(std::span<const float> gradients) {
  // Eight fp64 lanes: vectorisable, and a fixed order, so the same bits every run.
  constexpr size_t kLanes = 8;
  double lanes[kLanes] = {};
  size_t i = 0;
  const size_t n = gradients.size();
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) {
      const double g = gradients[i + k];
      lanes[k] += g * g;
    }
  }
  double total = 0;
  for (double lane : lanes) total += lane;
  for (; i < n; ++i) total += static_cast<double>(gradients[i]) * gradients[i];
  return std::sqrt(total);
}

SquaredSums squaredSumsBySplit(const ParameterLayout& layout, size_t begin,
                               std::span<const float> values) {
  SquaredSums sums;
  const size_t end = begin + values.size();
  for (const TensorSlice& tensor : layout.tensors()) {
    if (tensor.tiedCopy) continue;  // counted where the original is
    const size_t from = std::max(begin, tensor.offset);
    const size_t to = std::min(end, tensor.offset + tensor.size);
    if (from >= to) continue;
    double sum = 0;
    for (size_t i = from; i < to; ++i) {
      const double g = values[i - begin];
      sum += g * g;
    }
    (tensor.split == SplitAxis::kNone ? sums.replicated : sums.split) += sum;
  }
  return sums;
}

float clipScale(double norm, float maxNorm) {
  if (maxNorm <= 0.0f || norm <= static_cast<double>(maxNorm)) return 1.0f;
  return static_cast<float>(static_cast<double>(maxNorm) / (norm + 1e-6));
}

}  // namespace cc::parallel
