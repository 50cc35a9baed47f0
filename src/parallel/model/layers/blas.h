// Row-major GEMM through CBLAS (OpenBLAS), overloaded on the scalar so the layers can be
// templates: C = alpha * op(A) op(B) + beta * C.
#pragma once

#include <cblas.h>

namespace cc::parallel::layers {

enum class Op { kNone, kTranspose };

inline CBLAS_TRANSPOSE toCblas(Op op) { return op == Op::kNone ? CblasNoTrans : CblasTrans; }

inline void gemm(Op opA, Op opB, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, toCblas(opA), toCblas(opB), m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

inline void gemm(Op opA, Op opB, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, toCblas(opA), toCblas(opB), m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

}  // namespace cc::parallel::layers
