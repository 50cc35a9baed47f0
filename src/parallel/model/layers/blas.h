// Row-major GEMM through CBLAS (OpenBLAS), overloaded on the scalar so the layers can be
// templates: C = alpha * op(A) op(B) + beta * C. With more than one compute thread
// (setBlasThreads) a large GEMM is cut along the longer of C's two sides into one band a
// thread, each its own single-threaded GEMM: every element of C still sums over k in the
// same order, so the bits do not depend on the thread count. One band a thread, not more:
// each band packs the other operand again (four bands a thread ran 6–9% slower than one,
// two ranks of 2 threads on 2 cores). A thread that has not woken by the time the caller is
// done with its own band leaves its band to the caller (runPartsAtOnce); where the pool is
// busy the call is not cut at all.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstddef>

#include "parallel/model/blas_threads.h"

namespace cc::parallel::layers {

enum class Op { kNone, kTranspose };

inline CBLAS_TRANSPOSE toCblas(Op op) { return op == Op::kNone ? CblasNoTrans : CblasTrans; }

inline void blasGemm(Op opA, Op opB, int m, int n, int k, float alpha, const float* a, int lda,
                     const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, toCblas(opA), toCblas(opB), m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

inline void blasGemm(Op opA, Op opB, int m, int n, int k, double alpha, const double* a, int lda,
                     const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, toCblas(opA), toCblas(opB), m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

// No band has fewer multiply-adds than this (0.18–0.19 ms on one core here: sgemm of
// 256x256x128 and 1024x64x128, single-threaded, medians of 200): below it waking a thread
// costs more than it saves, and OpenBLAS computes small GEMMs with other kernels whose bits
// differ from its blocked one: at most 10^6 multiply-adds (0.3.21's small-matrix kernel)
// and, in later x86-64 builds on AVX-512, row-major float calls without transposes, alpha 1
// and beta 0 below 28 * 512^2 (its direct kernel, interface/gemm.c). A band above both
// takes the blocked kernel, as the uncut call does.
inline constexpr double kMinBandMultiplyAdds = 1 << 23;
// Bands are a multiple of this many rows or columns, so that no band but the last has a
// ragged edge for the BLAS kernel, and the last is at least this wide (a band one line
// wide could go to GEMV).
inline constexpr int kGemmBandAlign = 16;

// How gemm cuts C along its longer side: `count` bands of `width` rows or columns but the
// last, which takes the rest (narrower or, by less than 16 a band, wider). A count of 1 is no
// cut.
struct GemmBands {
  int count;
  int width;
};

inline GemmBands gemmBands(int threads, int m, int n, int k) {
  const int side = std::max(m, n);
  const double multiplyAddsPerLine = static_cast<double>(std::min(m, n)) * k;
  const auto enough = [&](int lines) {
    return lines >= kGemmBandAlign && lines * multiplyAddsPerLine >= kMinBandMultiplyAdds;
  };
  for (int count = std::min(threads, side / kGemmBandAlign); count > 1; --count) {
    // Bands rounded up to the alignment (the last is the narrowest), or else down (the
    // last is the widest), whichever leaves every band enough work.
    const int up =
        ((side + count - 1) / count + kGemmBandAlign - 1) / kGemmBandAlign * kGemmBandAlign;
    if (enough(side - (count - 1) * up)) return {count, up};
    const int down = side / count / kGemmBandAlign * kGemmBandAlign;
    if (enough(down)) return {count, down};
  }
  return {1, side};
}

template <typename T>
void gemm(Op opA, Op opB, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
          T beta, T* c, int ldc) {
  const GemmBands bands = gemmBands(blasThreads(), m, n, k);
  if (bands.count == 1) {
    blasGemm(opA, opB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool alongRows = m >= n;
  const int side = alongRows ? m : n;
  const bool ran = runPartsAtOnce(bands.count, [&](int part) {
    const int begin = part * bands.width;
    const int count = part == bands.count - 1 ? side - begin : bands.width;
    const size_t at = static_cast<size_t>(begin);
    if (alongRows) {
      // Rows of op(A): row `begin` of A, or column `begin` of A stored transposed.
      const T* aBand = opA == Op::kNone ? a + at * static_cast<size_t>(lda) : a + at;
      blasGemm(opA, opB, count, n, k, alpha, aBand, lda, b, ldb, beta,
               c + at * static_cast<size_t>(ldc), ldc);
    } else {
      // Columns of op(B): column `begin` of B, or row `begin` of B stored transposed.
      const T* bBand = opB == Op::kNone ? b + at : b + at * static_cast<size_t>(ldb);
      blasGemm(opA, opB, m, count, k, alpha, a, lda, bBand, ldb, beta, c + at, ldc);
    }
  });
  if (!ran) blasGemm(opA, opB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace cc::parallel::layers
