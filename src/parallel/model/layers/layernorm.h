// LayerNorm over the last dimension (eps 1e-5, as GPT-2). The forward keeps each row's
// mean and 1/std so the backward need not recompute them.
#pragma once

#include <cmath>
#include <cstddef>

#include "parallel/model/layers/fast_math.h"

namespace cc::parallel::layers {

inline constexpr double kLayerNormEpsilon = 1e-5;

template <typename T>
void layerNormForward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                      size_t rows, size_t width) {
  const T inverseWidth = T(1) / static_cast<T>(width);
  for (size_t r = 0; r < rows; ++r) {
    const T* x = inp + r * width;
    T* y = out + r * width;
    const T rowMean = sumOf(x, width) * inverseWidth;
    // Variance from the centred values (two passes): no cancellation for large means.
    for (size_t i = 0; i < width; ++i) y[i] = x[i] - rowMean;
    const T variance = dotOf(y, y, width) * inverseWidth;
    const T rowRstd = T(1) / std::sqrt(variance + static_cast<T>(kLayerNormEpsilon));
    for (size_t i = 0; i < width; ++i) y[i] = y[i] * rowRstd * weight[i] + bias[i];
    mean[r] = rowMean;
    rstd[r] = rowRstd;
  }
}

// Its weight's and bias's half alone (a zero-bubble pipeline's W): the same sums, row by
// row, as layerNormBackward's.
template <typename T>
void layerNormBackwardParameters(T* dweight, T* dbias, const T* dout, const T* inp, const T* mean,
                                 const T* rstd, size_t rows, size_t width) {
  for (size_t r = 0; r < rows; ++r) {
    const T* x = inp + r * width;
    const T* dy = dout + r * width;
    const T rowMean = mean[r];
    const T rowRstd = rstd[r];
    for (size_t i = 0; i < width; ++i) {
      const T norm = (x[i] - rowMean) * rowRstd;
      dbias[i] += dy[i];
      dweight[i] += norm * dy[i];
    }
  }
}

// The input's half alone (a zero-bubble pipeline's B); dinp as layerNormBackward's.
template <typename T>
void layerNormBackwardInput(T* dinp, const T* dout, const T* inp, const T* weight, const T* mean,
                            const T* rstd, size_t rows, size_t width, T* scratch) {
  T* norm = scratch;
  T* dnorm = scratch + width;
  const T inverseWidth = T(1) / static_cast<T>(width);
  for (size_t r = 0; r < rows; ++r) {
    const T* x = inp + r * width;
    const T* dy = dout + r * width;
    T* dx = dinp + r * width;
    const T rowMean = mean[r];
    const T rowRstd = rstd[r];
    for (size_t i = 0; i < width; ++i) {
      norm[i] = (x[i] - rowMean) * rowRstd;
      dnorm[i] = weight[i] * dy[i];
    }
    const T dnormMean = sumOf(dnorm, width) * inverseWidth;
    const T dnormNormMean = dotOf(dnorm, norm, width) * inverseWidth;
    for (size_t i = 0; i < width; ++i) {
      dx[i] += (dnorm[i] - dnormMean - norm[i] * dnormNormMean) * rowRstd;
    }
  }
}

// Accumulates into dinp, dweight and dbias. `scratch` holds 2*width elements. The two
// halves run one after the other; each sums row by row as a fused loop would.
template <typename T>
void layerNormBackward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                       const T* mean, const T* rstd, size_t rows, size_t width, T* scratch) {
  layerNormBackwardInput(dinp, dout, inp, weight, mean, rstd, rows, width, scratch);
  layerNormBackwardParameters(dweight, dbias, dout, inp, mean, rstd, rows, width);
}

}  // namespace cc::parallel::layers
