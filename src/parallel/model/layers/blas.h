// Row-major GEMM through CBLAS (OpenBLAS), overloaded on the scalar so the layers can be
// templates: C = alpha * op(A) op(B) + beta * C. With more than one compute thread
// (setBlasThreads) a large GEMM is cut along C's rows into one band a thread, each its own
// single-threaded GEMM: every element of C still sums over k in the same order, and each
// band's rows meet the kernel's tiles where the uncut call's do, so the bits do not depend
// on the thread count (kGemmBandAlign below). One band a thread, not more:
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
// Bands are a multiple of this many rows, and the last is at least this many (a band one
// row high could go to GEMV). A row-major C is the transpose of what OpenBLAS computes, so
// C's rows are its kernels' "n" side, which they take in tiles of 4, 8, 12 or 16 (0.3.21's
// x86-64 cores: 12 for single precision on Haswell and Zen, the kernels Debian's build picks
// on AMD EPYC with AVX-512 too): with bands a multiple of 48 every tile of a band is a tile
// of the uncut call. At 16 rows the Haswell kernel's bits differed (rows next to each cut,
// `BlasThreads.*BitsDoNotDependOnTheThreadCount` on such a guest). C's columns, its "m"
// side, are not cut: there the Haswell kernel's bits differed at every alignment tried,
// 8 to 96 columns, on 1100x1050x140 (a probe of cblas_sgemm bands against one call).
inline constexpr int kGemmBandAlign = 48;

// How gemm cuts C's rows: `count` bands of `width` rows but the last, which takes the rest
// (fewer or, by less than 48 a band, more). A count of 1 is no cut.
struct GemmBands {
  int count;
  int width;
};

inline GemmBands gemmBands(int threads, int m, int n, int k) {
  const double multiplyAddsPerLine = static_cast<double>(n) * k;
  const auto enough = [&](int lines) {
    return lines >= kGemmBandAlign && lines * multiplyAddsPerLine >= kMinBandMultiplyAdds;
  };
  for (int count = std::min(threads, m / kGemmBandAlign); count > 1; --count) {
    // Bands rounded up to the alignment (the last is the narrowest), or else down (the
    // last is the widest), whichever leaves every band enough work.
    const int up = ((m + count - 1) / count + kGemmBandAlign - 1) / kGemmBandAlign * kGemmBandAlign;
    if (enough(m - (count - 1) * up)) return {count, up};
    const int down = m / count / kGemmBandAlign * kGemmBandAlign;
    if (enough(down)) return {count, down};
  }
  return {1, m};
}

template <typename T>
void gemm(Op opA, Op opB, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
          T beta, T* c, int ldc) {
  const GemmBands bands = gemmBands(blasThreads(), m, n, k);
  if (bands.count == 1) {
    blasGemm(opA, opB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool ran = runPartsAtOnce(bands.count, [&](int part) {
    const int begin = part * bands.width;
    const int count = part == bands.count - 1 ? m - begin : bands.width;
    const size_t at = static_cast<size_t>(begin);
    // Rows of op(A): row `begin` of A, or column `begin` of A stored transposed.
    const T* aBand = opA == Op::kNone ? a + at * static_cast<size_t>(lda) : a + at;
    blasGemm(opA, opB, count, n, k, alpha, aBand, lda, b, ldb, beta,
             c + at * static_cast<size_t>(ldc), ldc);
  });
  if (!ran) blasGemm(opA, opB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace cc::parallel::layers
