// Global gradient norm and the clipping factor: gradients are scaled by
// min(1, maxNorm / norm) inside the optimizer step rather than rewritten, so the raw
// gradients stay available (DP later reduces them before this).
#pragma once

#include <span>

#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

// sqrt(sum g^2), accumulated in fp64 in buffer order.
double globalNorm(std::span<const float> gradients);

// Sums of squares of values = elements [begin, begin + values.size()) of a layout's
// buffer, apart for the tensors split across the tensor-parallel ranks (each rank holds a
// different slice: the group sums them) and the replicated ones (every rank holds the
// same: counted once). Elements past the layout (padding, zero) count as replicated; a
// pipeline stage's tied copy of wte counts nowhere (the first stage counts the original).
struct SquaredSums {
  double replicated = 0;
  double split = 0;
};
SquaredSums squaredSumsBySplit(const ParameterLayout& layout, size_t begin,
                               std::span<const float> values);

// 1 when clipping is off (maxNorm <= 0) or the norm is within it.
float clipScale(double norm, float maxNorm);

}  // namespace cc::parallel
