// Fully connected layers as GEMMs. GPT-2 stores its Conv1D weights [in, out], and so do
// we (the checkpoint is then a plain copy); the tied LM head uses wte [vocab, width], i.e.
// [out, in].
#pragma once

#include <cstddef>

#include "parallel/model/layers/blas.h"

namespace cc::parallel::layers {

// The bias is a step of its own, so that a layer can place it: a dense or column-parallel
// linear seeds its output with the bias and lets the GEMM accumulate onto it
// (linearForward); a row-parallel linear multiplies, reduces the partial products across
// its ranks, and only then adds the bias, once (matmulForward, a reduction, addBias).

// out[rows, outWidth] = inp[rows, inWidth] @ weight[inWidth, outWidth] (+= with accumulate).
template <typename T>
void matmulForward(T* out, const T* inp, const T* weight, int rows, int inWidth, int outWidth,
                   bool accumulate = false) {
  gemm(Op::kNone, Op::kNone, rows, outWidth, inWidth, T(1), inp, inWidth, weight, outWidth,
       accumulate ? T(1) : T(0), out, outWidth);
}

// Every row of out[rows, width] set to bias.
template <typename T>
void broadcastBias(T* out, const T* bias, int rows, int width) {
  const size_t n = static_cast<size_t>(width);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    for (size_t i = 0; i < n; ++i) out[r * n + i] = bias[i];
  }
}

// Every row of out[rows, width] += bias.
template <typename T>
void addBias(T* out, const T* bias, int rows, int width) {
  const size_t n = static_cast<size_t>(width);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    for (size_t i = 0; i < n; ++i) out[r * n + i] += bias[i];
  }
}

// out = inp @ weight + bias (bias may be null): the bias seeds the GEMM's accumulator.
template <typename T>
void linearForward(T* out, const T* inp, const T* weight, const T* bias, int rows, int inWidth,
                   int outWidth) {
  if (bias != nullptr) broadcastBias(out, bias, rows, outWidth);
  matmulForward(out, inp, weight, rows, inWidth, outWidth, bias != nullptr);
}

// The backward of a linear in its two halves, which a zero-bubble pipeline runs apart: the
// input's gradient (what the previous layer waits for) and the weight's (what nobody waits
// for). Each is one GEMM, the same one whether the halves run together or not.
// Accumulates dinp += dout @ weight^T.
template <typename T>
void matmulBackwardInput(T* dinp, const T* dout, const T* weight, int rows, int inWidth,
                         int outWidth) {
  gemm(Op::kNone, Op::kTranspose, rows, inWidth, outWidth, T(1), dout, outWidth, weight, outWidth,
       T(1), dinp, inWidth);
}

// Accumulates dweight += inp^T @ dout.
template <typename T>
void matmulBackwardWeight(T* dweight, const T* dout, const T* inp, int rows, int inWidth,
                          int outWidth) {
  gemm(Op::kTranspose, Op::kNone, inWidth, outWidth, rows, T(1), inp, inWidth, dout, outWidth, T(1),
       dweight, outWidth);
}

// Accumulates dinp += dout @ weight^T and dweight += inp^T @ dout.
template <typename T>
void matmulBackward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, int rows,
                    int inWidth, int outWidth) {
  matmulBackwardInput(dinp, dout, weight, rows, inWidth, outWidth);
  matmulBackwardWeight(dweight, dout, inp, rows, inWidth, outWidth);
}

// Accumulates dbias += the column sums of dout[rows, width].
template <typename T>
void biasBackward(T* dbias, const T* dout, int rows, int width) {
  const size_t n = static_cast<size_t>(width);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    for (size_t i = 0; i < n; ++i) dbias[i] += dout[r * n + i];
  }
}

// matmulBackward, then biasBackward where dbias is not null.
template <typename T>
void linearBackward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                    int rows, int inWidth, int outWidth) {
  matmulBackward(dinp, dweight, dout, inp, weight, rows, inWidth, outWidth);
  if (dbias != nullptr) biasBackward(dbias, dout, rows, outWidth);
}

// The tied head: logits[rows, vocab] = inp[rows, width] @ wte[vocab, width]^T.
template <typename T>
void tiedHeadForward(T* logits, const T* inp, const T* wte, int rows, int width, int vocab) {
  gemm(Op::kNone, Op::kTranspose, rows, vocab, width, T(1), inp, width, wte, width, T(0), logits,
       vocab);
}

// Accumulates dinp += dlogits @ wte.
template <typename T>
void tiedHeadBackwardInput(T* dinp, const T* dlogits, const T* wte, int rows, int width,
                           int vocab) {
  gemm(Op::kNone, Op::kNone, rows, width, vocab, T(1), dlogits, vocab, wte, width, T(1), dinp,
       width);
}

// Accumulates dwte += dlogits^T @ inp.
template <typename T>
void tiedHeadBackwardWeight(T* dwte, const T* dlogits, const T* inp, int rows, int width,
                            int vocab) {
  gemm(Op::kTranspose, Op::kNone, vocab, width, rows, T(1), dlogits, vocab, inp, width, T(1), dwte,
       width);
}

// Accumulates dinp += dlogits @ wte and dwte += dlogits^T @ inp.
template <typename T>
void tiedHeadBackward(T* dinp, T* dwte, const T* dlogits, const T* inp, const T* wte, int rows,
                      int width, int vocab) {
  tiedHeadBackwardInput(dinp, dlogits, wte, rows, width, vocab);
  tiedHeadBackwardWeight(dwte, dlogits, inp, rows, width, vocab);
}

}  // namespace cc::parallel::layers
