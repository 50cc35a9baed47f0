// GELU in GPT-2's tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <cstddef>

#include "parallel/model/layers/fast_math.h"

namespace cc::parallel::layers {

inline constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluCubic = 0.044715;

template <typename T>
void geluForward(T* out, const T* inp, size_t count) {
  const T scale = static_cast<T>(kGeluScale);
  const T cubic = static_cast<T>(kGeluCubic);
  for (size_t i = 0; i < count; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + tanhOf(scale * (x + cubic * x * x * x)));
  }
}

// Accumulates dinp. Uses sech^2 = 1 - tanh^2, so one tanh per element.
template <typename T>
void geluBackward(T* dinp, const T* inp, const T* dout, size_t count) {
  const T scale = static_cast<T>(kGeluScale);
  const T cubic = static_cast<T>(kGeluCubic);
  for (size_t i = 0; i < count; ++i) {
    const T x = inp[i];
    const T tanhValue = tanhOf(scale * (x + cubic * x * x * x));
    const T sech2 = T(1) - tanhValue * tanhValue;
    const T slope =
        T(0.5) * (T(1) + tanhValue) + T(0.5) * x * sech2 * scale * (T(1) + T(3) * cubic * x * x);
    dinp[i] += slope * dout[i];
  }
}

}  // namespace cc::parallel::layers
