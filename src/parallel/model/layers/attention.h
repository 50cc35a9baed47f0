// Causal multi-head self-attention over the fused qkv projection. Per (batch, head) the
// scores and the weighted sum are GEMMs on strided views of qkv (leading dimension 3C), so
// the only hand-written loop is the row softmax. The forward keeps the attention weights
// att[B, H, T, T] (zero above the diagonal) for the backward.
#pragma once

#include <cmath>
#include <cstddef>

#include "parallel/model/layers/blas.h"
#include "parallel/model/layers/fast_math.h"

namespace cc::parallel::layers {

struct AttentionShape {
  int batch, seq, width, heads;
  int headSize() const { return width / heads; }
  size_t scoresPerHead() const { return static_cast<size_t>(seq) * static_cast<size_t>(seq); }
};

// qkv: [B, T, 3C] (q, k, v side by side); out: [B, T, C]; att: [B, H, T, T].
template <typename T>
void attentionForward(T* out, T* att, const T* qkv, const AttentionShape& shape) {
  const int seq = shape.seq;
  const int width = shape.width;
  const int headSize = shape.headSize();
  const T scale = T(1) / std::sqrt(static_cast<T>(headSize));
  const size_t rowStride = 3 * static_cast<size_t>(width);
  for (int b = 0; b < shape.batch; ++b) {
    for (int h = 0; h < shape.heads; ++h) {
      const T* q = qkv + static_cast<size_t>(b) * static_cast<size_t>(seq) * rowStride +
                   static_cast<size_t>(h) * static_cast<size_t>(headSize);
      const T* k = q + width;
      const T* v = q + 2 * static_cast<size_t>(width);
      T* scores = att + (static_cast<size_t>(b) * static_cast<size_t>(shape.heads) +
                         static_cast<size_t>(h)) *
                            shape.scoresPerHead();
      gemm(Op::kNone, Op::kTranspose, seq, seq, headSize, scale, q, 3 * width, k, 3 * width, T(0),
           scores, seq);
      for (int i = 0; i < seq; ++i) {
        T* row = scores + static_cast<size_t>(i) * static_cast<size_t>(seq);
        const size_t visible = static_cast<size_t>(i) + 1;
        const T rowMax = maxOf(row, visible);
        for (size_t j = 0; j < visible; ++j) row[j] = expOf(row[j] - rowMax);
        const T inverseSum = T(1) / sumOf(row, visible);
        for (size_t j = 0; j < visible; ++j) row[j] *= inverseSum;
        for (size_t j = visible; j < static_cast<size_t>(seq); ++j) row[j] = 0;
      }
      T* outHead = out +
                   static_cast<size_t>(b) * static_cast<size_t>(seq) * static_cast<size_t>(width) +
                   static_cast<size_t>(h) * static_cast<size_t>(headSize);
      gemm(Op::kNone, Op::kNone, seq, headSize, seq, T(1), scores, seq, v, 3 * width, T(0), outHead,
           width);
    }
  }
}

// Accumulates into dqkv. `scratch` holds T*T elements.
template <typename T>
void attentionBackward(T* dqkv, const T* dout, const T* qkv, const T* att,
                       const AttentionShape& shape, T* scratch) {
  const int seq = shape.seq;
  const int width = shape.width;
  const int headSize = shape.headSize();
  const T scale = T(1) / std::sqrt(static_cast<T>(headSize));
  const size_t rowStride = 3 * static_cast<size_t>(width);
  for (int b = 0; b < shape.batch; ++b) {
    for (int h = 0; h < shape.heads; ++h) {
      const size_t headOffset = static_cast<size_t>(b) * static_cast<size_t>(seq) * rowStride +
                                static_cast<size_t>(h) * static_cast<size_t>(headSize);
      const T* q = qkv + headOffset;
      const T* k = q + width;
      const T* v = q + 2 * static_cast<size_t>(width);
      T* dq = dqkv + headOffset;
      T* dk = dq + width;
      T* dv = dq + 2 * static_cast<size_t>(width);
      const T* weights = att + (static_cast<size_t>(b) * static_cast<size_t>(shape.heads) +
                                static_cast<size_t>(h)) *
                                   shape.scoresPerHead();
      const T* doutHead =
          dout + static_cast<size_t>(b) * static_cast<size_t>(seq) * static_cast<size_t>(width) +
          static_cast<size_t>(h) * static_cast<size_t>(headSize);
      T* dscores = scratch;
      // d(weights) = dout v^T; dv += weights^T dout.
      gemm(Op::kNone, Op::kTranspose, seq, seq, headSize, T(1), doutHead, width, v, 3 * width, T(0),
           dscores, seq);
      gemm(Op::kTranspose, Op::kNone, seq, headSize, seq, T(1), weights, seq, doutHead, width, T(1),
           dv, 3 * width);
      // Softmax backward, in place: d(score_j) = w_j (dw_j - sum_k w_k dw_k) on the visible
      // part, zero where the mask hid the score.
      for (int i = 0; i < seq; ++i) {
        T* row = dscores + static_cast<size_t>(i) * static_cast<size_t>(seq);
        const T* w = weights + static_cast<size_t>(i) * static_cast<size_t>(seq);
        const size_t visible = static_cast<size_t>(i) + 1;
        const T weighted = dotOf(w, row, visible);
        for (size_t j = 0; j < visible; ++j) row[j] = w[j] * (row[j] - weighted);
        for (size_t j = visible; j < static_cast<size_t>(seq); ++j) row[j] = 0;
      }
      // scores = scale q k^T: dq += scale dscores k, dk += scale dscores^T q.
      gemm(Op::kNone, Op::kNone, seq, headSize, seq, scale, dscores, seq, k, 3 * width, T(1), dq,
           3 * width);
      gemm(Op::kTranspose, Op::kNone, seq, headSize, seq, scale, dscores, seq, q, 3 * width, T(1),
           dk, 3 * width);
    }
  }
}

}  // namespace cc::parallel::layers
