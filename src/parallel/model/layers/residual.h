// The residual connection: out = a + b; its gradient flows unchanged to both branches.
#pragma once

#include <cstddef>

namespace cc::parallel::layers {

template <typename T>
void residualForward(T* out, const T* a, const T* b, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void residualBackward(T* da, T* db, const T* dout, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace cc::parallel::layers
