// Fully connected layers as GEMMs. GPT-2 stores its Conv1D weights [in, out], and so do
// we (the checkpoint is then a plain copy); the tied LM head uses wte [vocab, width], i.e.
// [out, in].
#pragma once

#include <cstddef>

#include "parallel/model/layers/blas.h"

namespace cc::parallel::layers {

// out[rows, outWidth] = inp[rows, inWidth] @ weight[inWidth, outWidth] + bias (bias may be null).
template <typename T>
void linearForward(T* out, const T* inp, const T* weight, const T* bias, int rows, int inWidth,
                   int outWidth) {
  const size_t n = static_cast<size_t>(outWidth);
  T beta = 0;
  if (bias != nullptr) {
    for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
      for (size_t i = 0; i < n; ++i) out[r * n + i] = bias[i];
    }
    beta = 1;
  }
  gemm(Op::kNone, Op::kNone, rows, outWidth, inWidth, T(1), inp, inWidth, weight, outWidth, beta,
       out, outWidth);
}

// Accumulates dinp += dout @ weight^T, dweight += inp^T @ dout, dbias += column sums of dout.
template <typename T>
void linearBackward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                    int rows, int inWidth, int outWidth) {
  gemm(Op::kNone, Op::kTranspose, rows, inWidth, outWidth, T(1), dout, outWidth, weight, outWidth,
       T(1), dinp, inWidth);
  gemm(Op::kTranspose, Op::kNone, inWidth, outWidth, rows, T(1), inp, inWidth, dout, outWidth, T(1),
       dweight, outWidth);
  if (dbias != nullptr) {
    const size_t n = static_cast<size_t>(outWidth);
    for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
      for (size_t i = 0; i < n; ++i) dbias[i] += dout[r * n + i];
    }
  }
}

// The tied head: logits[rows, vocab] = inp[rows, width] @ wte[vocab, width]^T.
template <typename T>
void tiedHeadForward(T* logits, const T* inp, const T* wte, int rows, int width, int vocab) {
  gemm(Op::kNone, Op::kTranspose, rows, vocab, width, T(1), inp, width, wte, width, T(0), logits,
       vocab);
}

// Accumulates dinp += dlogits @ wte and dwte += dlogits^T @ inp.
template <typename T>
void tiedHeadBackward(T* dinp, T* dwte, const T* dlogits, const T* inp, const T* wte, int rows,
                      int width, int vocab) {
  gemm(Op::kNone, Op::kNone, rows, width, vocab, T(1), dlogits, vocab, wte, width, T(1), dinp,
       width);
  gemm(Op::kTranspose, Op::kNone, vocab, width, rows, T(1), dlogits, vocab, inp, width, T(1), dwte,
       width);
}

}  // namespace cc::parallel::layers
