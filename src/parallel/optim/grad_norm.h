// Global gradient norm and the clipping factor: gradients are scaled by
// min(1, maxNorm / norm) inside the optimizer step rather than rewritten, so the raw
// gradients stay available (DP later reduces them before this).
#pragma once

#include <span>

namespace cc::parallel {

// sqrt(sum g^2), accumulated in fp64 in buffer order.
double globalNorm(std::span<const float> gradients);

// 1 when clipping is off (maxNorm <= 0) or the norm is within it.
float clipScale(double norm, float maxNorm);

}  // namespace cc::parallel
