// The model's compute threads: a GEMM cut into bands gives the bits of the uncut one, and the
// pool runs every part of every job exactly once, however many callers share it.
#include "parallel/model/blas_threads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "parallel/model/layers/blas.h"

namespace cc::parallel {
namespace {

using layers::gemm;
using layers::gemmBands;
using layers::Op;

struct Shape {
  int m, n, k;
};

// Shapes that the threads cut: along the rows, along the columns, ragged at the last band.
const Shape kShapes[] = {{1000, 130, 70}, {130, 1000, 70}, {256, 768, 1024}, {77, 900, 120}};

template <typename T>
std::vector<T> randomValues(size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<T> values(count);
  for (auto& v : values) v = static_cast<T>(value(generator));
  return values;
}

// C (with a stride wider than its rows, prefilled, beta 0.5) at `threads` threads.
template <typename T>
std::vector<T> product(int threads, Op opA, Op opB, const Shape& s) {
  const int lda = (opA == Op::kNone ? s.k : s.m) + 3;
  const int ldb = (opB == Op::kNone ? s.n : s.k) + 5;
  const int ldc = s.n + 7;
  const auto a = randomValues<T>(static_cast<size_t>(lda) * (opA == Op::kNone ? s.m : s.k), 1);
  const auto b = randomValues<T>(static_cast<size_t>(ldb) * (opB == Op::kNone ? s.k : s.n), 2);
  auto c = randomValues<T>(static_cast<size_t>(ldc) * s.m, 3);
  setBlasThreads(threads);
  gemm(opA, opB, s.m, s.n, s.k, T(1.5), a.data(), lda, b.data(), ldb, T(0.5), c.data(), ldc);
  setBlasThreads(1);
  return c;
}

template <typename T>
void expectSameBitsAtAnyThreadCount() {
  for (const Shape& shape : kShapes) {
    ASSERT_EQ(gemmBands(3, shape.m, shape.n, shape.k).count, 3) << shape.m << "x" << shape.n;
    for (Op opA : {Op::kNone, Op::kTranspose}) {
      for (Op opB : {Op::kNone, Op::kTranspose}) {
        const auto one = product<T>(1, opA, opB, shape);
        for (int threads : {2, 3}) {
          const auto many = product<T>(threads, opA, opB, shape);
          ASSERT_EQ(one.size(), many.size());
          EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(T)), 0)
              << shape.m << "x" << shape.n << "x" << shape.k << " opA " << int(opA) << " opB "
              << int(opB) << " at " << threads << " threads";
        }
      }
    }
  }
}

TEST(BlasThreads, FloatGemmBitsDoNotDependOnTheThreadCount) {
  expectSameBitsAtAnyThreadCount<float>();
}

TEST(BlasThreads, DoubleGemmBitsDoNotDependOnTheThreadCount) {
  expectSameBitsAtAnyThreadCount<double>();
}

// Every band but the last is as wide as the first, the bands cover the side exactly, and
// none is below the least work worth a thread.
void expectBandsCover(int threads, int m, int n, int k) {
  const auto bands = layers::gemmBands(threads, m, n, k);
  const int side = std::max(m, n);
  ASSERT_GE(bands.count, 1);
  ASSERT_LE(bands.count, threads);
  if (bands.count == 1) {
    EXPECT_EQ(bands.width, side);
    return;
  }
  EXPECT_EQ(bands.width % layers::kGemmBandAlign, 0);
  const int last = side - (bands.count - 1) * bands.width;
  EXPECT_GT(last, 0);
  EXPECT_LE(last, bands.width);
  EXPECT_GE(static_cast<double>(last) * std::min(m, n) * k, layers::kMinBandMultiplyAdds);
}

TEST(BlasThreads, BandsCoverTheSideAndCarryEnoughWork) {
  for (int threads : {1, 2, 3, 4, 8, 16}) {
    for (int side : {16, 100, 130, 200, 512, 900, 1000, 4099}) {
      for (int other : {1, 64, 256}) {
        for (int k : {8, 64, 1024}) {
          expectBandsCover(threads, side, other, k);
          expectBandsCover(threads, other, side, k);
        }
      }
    }
  }
}

TEST(BlasThreads, SmallGemmsAreNotCut) {
  EXPECT_EQ(gemmBands(1, 1024, 1024, 1024).count, 1);
  EXPECT_EQ(gemmBands(4, 128, 128, 64).count, 1);  // 10^6 multiply-adds
  EXPECT_EQ(gemmBands(4, 1024, 256, 256).count, 4);
  EXPECT_EQ(gemmBands(4, 40, 40, 4096).count, 1);  // no side holds two aligned bands
}

TEST(BlasThreads, EveryPartRunsOnceWhateverTheCallers) {
  setBlasThreads(3);
  constexpr int kCallers = 4, kJobs = 300, kParts = 7;
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int caller = 0; caller < kCallers; ++caller) {
    callers.emplace_back([&] {
      for (int job = 0; job < kJobs; ++job) {
        std::vector<std::atomic<int>> runs(kParts);
        for (auto& r : runs) r = 0;
        runParts(kParts, [&](int part) { runs[static_cast<size_t>(part)]++; });
        for (auto& r : runs) wrong += r.load() != 1;
      }
    });
  }
  for (auto& c : callers) c.join();
  setBlasThreads(1);
  EXPECT_EQ(wrong.load(), 0);
}

TEST(BlasThreads, PartsRunAtOnceWhenThePoolHasThreads) {
  setBlasThreads(2);
  // Each part waits for the other to start: they meet only if two threads run them at once.
  // One thread alone would run part 0 to its deadline and never see part 1.
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  runParts(2, [&](int) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    met += started.load() == 2;
  });
  setBlasThreads(1);
  EXPECT_EQ(met.load(), 2);
}

}  // namespace
}  // namespace cc::parallel
