// Token plus position embedding: out[b,t,:] = wte[token[b,t],:] + wpe[t,:].
#pragma once

#include <cstddef>
#include <cstdint>

namespace cc::parallel::layers {

template <typename T>
void embeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int batch, int seq,
                      int width) {
  const size_t c = static_cast<size_t>(width);
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < seq; ++t) {
      const size_t row = static_cast<size_t>(b) * static_cast<size_t>(seq) + static_cast<size_t>(t);
      const T* tokenRow = wte + static_cast<size_t>(tokens[row]) * c;
      const T* positionRow = wpe + static_cast<size_t>(t) * c;
      T* outRow = out + row * c;
      for (size_t i = 0; i < c; ++i) outRow[i] = tokenRow[i] + positionRow[i];
    }
  }
}

// Accumulates into dwte and dwpe, rows in token order (a fixed order: deterministic).
template <typename T>
void embeddingBackward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int batch, int seq,
                       int width) {
  const size_t c = static_cast<size_t>(width);
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < seq; ++t) {
      const size_t row = static_cast<size_t>(b) * static_cast<size_t>(seq) + static_cast<size_t>(t);
      const T* doutRow = dout + row * c;
      T* tokenRow = dwte + static_cast<size_t>(tokens[row]) * c;
      T* positionRow = dwpe + static_cast<size_t>(t) * c;
      for (size_t i = 0; i < c; ++i) {
        tokenRow[i] += doutRow[i];
        positionRow[i] += doutRow[i];
      }
    }
  }
}

}  // namespace cc::parallel::layers
