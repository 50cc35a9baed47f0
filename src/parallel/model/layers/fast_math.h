// exp and tanh the compiler can vectorise. The fp32 forms are plain arithmetic on floats
// and their bit patterns (no calls into libm), so a loop over them becomes SIMD code and
// gives the same bits on every machine; the fp64 forms call libm, because the fp64 build
// exists to be the accurate reference in the gradient tests.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace cc::parallel::layers {

// e^x for fp32 within ~2 ulp on [-87, 88]; inputs outside are clamped (softmax inputs are
// <= 0 after the max is subtracted, so the clamp only turns 1e-38 into 0-like values).
inline float expOf(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // ln 2 split so that n * kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float shifted = x * kLog2e + kRoundShift;
  const float n = shifted - kRoundShift;
  const int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRoundShift);
  const float r = x - n * kLn2High - n * kLn2Low;  // |r| <= ln(2)/2
  // Taylor series to r^7: the truncation error (r^8/8!) is below fp32's half ulp.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((exponent + 127) << 23);
}

inline double expOf(double x) { return std::exp(x); }

// tanh(x) = 1 - 2 / (e^{2x} + 1): absolute error ~1e-7, which is what GELU needs.
inline float tanhOf(float x) { return 1.0f - 2.0f / (expOf(2.0f * x) + 1.0f); }
inline double tanhOf(double x) { return std::tanh(x); }

// Sums in 16 independent lanes so the loop vectorises without reassociating fp maths
// (the order is fixed, so the result is the same on every run).
template <typename T>
inline T sumOf(const T* x, size_t n) {
  constexpr size_t kLanes = 16;
  T lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lanes[k] += x[i + k];
  }
  T total = 0;
  for (size_t k = 0; k < kLanes; ++k) total += lanes[k];
  for (; i < n; ++i) total += x[i];
  return total;
}

template <typename T>
inline T dotOf(const T* x, const T* y, size_t n) {
  constexpr size_t kLanes = 16;
  T lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lanes[k] += x[i + k] * y[i + k];
  }
  T total = 0;
  for (size_t k = 0; k < kLanes; ++k) total += lanes[k];
  for (; i < n; ++i) total += x[i] * y[i];
  return total;
}

template <typename T>
inline T maxOf(const T* x, size_t n) {
  T best = x[0];
  for (size_t i = 1; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

}  // namespace cc::parallel::layers
