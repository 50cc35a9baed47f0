// The model's compute threads: a GEMM cut into bands gives the bits of the uncut one, and the
// pool runs every part of every job exactly once, however many callers share it.
#include "parallel/model/blas_threads.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

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

// Shapes that the threads cut (along the rows; at 3 threads into `bands`): a last band
// narrower than the others ({1000, 200, 130}: 336 + 336 + 328 rows; {256, 768, 1024}: 96 +
// 96 + 64), wider and ragged ({300, 700, 130}: 96 + 96 + 108), two bands where three would
// carry too little ({200, 1000, 130}: 96 + 104; {400, 256, 272}: 240 + 160), and k above
// 512 ({96, 480, 600}: 48 + 48). Bands of 8.5-13.8 million multiply-adds (the least a band
// may have is 8.4): later OpenBLAS builds send float GEMMs below 7.3 million with alpha 1
// and beta 0 to another kernel.
struct CutShape {
  Shape shape;
  int bands;
};
const CutShape kShapes[] = {{{1000, 200, 130}, 3}, {{200, 1000, 130}, 2}, {{256, 768, 1024}, 3},
                            {{300, 700, 130}, 3},  {{96, 480, 600}, 2},   {{400, 256, 272}, 2}};

struct Scale {
  double alpha, beta;
};
const Scale kScales[] = {{1.5, 0.5}, {1.0, 0.0}};

template <typename T>
std::vector<T> randomValues(size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<T> values(count);
  for (auto& v : values) v = static_cast<T>(value(generator));
  return values;
}

// C (with a stride wider than its rows, prefilled) at `threads` threads.
template <typename T>
std::vector<T> product(int threads, Op opA, Op opB, const Shape& s, const Scale& scale) {
  const int lda = (opA == Op::kNone ? s.k : s.m) + 3;
  const int ldb = (opB == Op::kNone ? s.n : s.k) + 5;
  const int ldc = s.n + 7;
  const auto a = randomValues<T>(static_cast<size_t>(lda) * (opA == Op::kNone ? s.m : s.k), 1);
  const auto b = randomValues<T>(static_cast<size_t>(ldb) * (opB == Op::kNone ? s.k : s.n), 2);
  auto c = randomValues<T>(static_cast<size_t>(ldc) * s.m, 3);
  setBlasThreads(threads);
  gemm(opA, opB, s.m, s.n, s.k, T(scale.alpha), a.data(), lda, b.data(), ldb, T(scale.beta),
       c.data(), ldc);
  setBlasThreads(1);
  return c;
}

template <typename T>
void expectSameBitsAtAnyThreadCount() {
  for (const CutShape& cut : kShapes) {
    const Shape& shape = cut.shape;
    const auto bands = gemmBands(3, shape.m, shape.n, shape.k);
    ASSERT_EQ(bands.count, cut.bands) << shape.m << "x" << shape.n;
    for (const Scale& scale : kScales) {
      for (Op opA : {Op::kNone, Op::kTranspose}) {
        for (Op opB : {Op::kNone, Op::kTranspose}) {
          const auto one = product<T>(1, opA, opB, shape, scale);
          for (int threads : {2, 3}) {
            const auto many = product<T>(threads, opA, opB, shape, scale);
            ASSERT_EQ(one.size(), many.size());
            EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(T)), 0)
                << shape.m << "x" << shape.n << "x" << shape.k << " opA " << int(opA) << " opB "
                << int(opB) << " alpha " << scale.alpha << " beta " << scale.beta << " at "
                << threads << " threads";
          }
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

// Whether two bands of rows, each at least kGemmBandAlign high and carrying the least work
// worth a thread, fit C.
bool twoBandsFit(int m, int n, int k) {
  const int half = m / 2 / layers::kGemmBandAlign * layers::kGemmBandAlign;
  return half >= layers::kGemmBandAlign &&
         static_cast<double>(half) * n * k >= layers::kMinBandMultiplyAdds;
}

// Every band but the last has as many rows as the first, aligned; the last takes the rest
// of C's rows and is neither empty nor a whole band larger than the others; no band has
// fewer rows than the alignment or less than the least work worth a thread; and a GEMM
// left whole could not be cut in two.
void expectBandsCover(int threads, int m, int n, int k) {
  const auto bands = layers::gemmBands(threads, m, n, k);
  const int side = m;
  ASSERT_GE(bands.count, 1);
  ASSERT_LE(bands.count, threads);
  if (bands.count == 1) {
    EXPECT_EQ(bands.width, side);
    if (threads > 1) {
      EXPECT_FALSE(twoBandsFit(m, n, k)) << m << "x" << n << "x" << k;
    }
    return;
  }
  EXPECT_EQ(bands.width % layers::kGemmBandAlign, 0);
  const int last = side - (bands.count - 1) * bands.width;
  EXPECT_LT(last, bands.width + layers::kGemmBandAlign * bands.count);
  const int narrowest = std::min(last, bands.width);
  EXPECT_GE(narrowest, layers::kGemmBandAlign);
  EXPECT_GE(static_cast<double>(narrowest) * n * k, layers::kMinBandMultiplyAdds);
}

TEST(BlasThreads, BandsCoverTheSideAndCarryEnoughWork) {
  for (int threads : {1, 2, 3, 4, 8, 16}) {
    for (int side : {16, 100, 130, 200, 257, 512, 900, 1000, 4099, 65537}) {
      for (int other : {1, 64, 256}) {
        for (int k : {8, 64, 1024, 4096}) {
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
  EXPECT_EQ(gemmBands(2, 256, 256, 200).count, 1);    // 144 + 112 rows: 5.7 million in the last
  EXPECT_EQ(gemmBands(3, 400, 256, 272).width, 240);  // 3 x 144 leaves 112 rows, 7.8 M
  EXPECT_EQ(gemmBands(4, 40, 4096, 4096).count, 1);   // 40 rows hold no two aligned bands
  EXPECT_EQ(gemmBands(4, 64, 100000, 64).count, 1);   // nor 64: C's columns are not cut
}

// A part that asks the pool for more threads (on the caller or on a worker) gets false and
// nothing run, and at one thread there is no pool to ask: gemm then makes one uncut call,
// with the same bits. (A caller that finds the pool held by another: the test below.)
TEST(BlasThreads, ANestedCallRunsNothingAndGemmStaysWhole) {
  setBlasThreads(2);
  std::atomic<int> nestedRan{0};
  std::atomic<int> nestedTaken{0};
  std::atomic<int> outerRan{0};
  const bool outer = runPartsAtOnce(2, [&](int) {
    ++outerRan;
    nestedTaken += runPartsAtOnce(2, [&](int) { ++nestedRan; });
  });
  EXPECT_TRUE(outer);
  EXPECT_EQ(outerRan.load(), 2);
  EXPECT_EQ(nestedTaken.load(), 0);
  EXPECT_EQ(nestedRan.load(), 0);

  const Shape s = kShapes[0].shape;
  const auto a = randomValues<float>(static_cast<size_t>(s.m) * s.k, 1);
  const auto b = randomValues<float>(static_cast<size_t>(s.k) * s.n, 2);
  std::vector<float> whole(static_cast<size_t>(s.m) * s.n);
  std::vector<float> nested(whole.size());
  setBlasThreads(1);
  gemm(Op::kNone, Op::kNone, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.n, 0.0f, whole.data(),
       s.n);
  setBlasThreads(2);
  ASSERT_EQ(gemmBands(2, s.m, s.n, s.k).count, 2);
  EXPECT_TRUE(runPartsAtOnce(2, [&](int part) {
    if (part == 0) {
      gemm(Op::kNone, Op::kNone, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.n, 0.0f,
           nested.data(), s.n);
    }
  }));
  setBlasThreads(1);
  EXPECT_EQ(std::memcmp(whole.data(), nested.data(), whole.size() * sizeof(float)), 0);
  EXPECT_FALSE(runPartsAtOnce(2, [&](int) { ++nestedRan; }));  // one thread: no pool
  EXPECT_EQ(nestedRan.load(), 0);
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
        const auto count = [&](int part) { runs[static_cast<size_t>(part)]++; };
        if (!runPartsAtOnce(kParts, count)) {
          for (int part = 0; part < kParts; ++part) count(part);
        }
        for (auto& r : runs) wrong += r.load() != 1;
      }
    });
  }
  for (auto& c : callers) c.join();
  setBlasThreads(1);
  EXPECT_EQ(wrong.load(), 0);
}

// The CPUs to run on are the calling thread's affinity mask: one where it is bound to one.
TEST(BlasThreads, CpusToRunOnFollowTheAffinity) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  EXPECT_EQ(cpusToRunOn(), CPU_COUNT(&mask));
  int bound = 0;
  std::thread([&] {
    int first = 0;
    while (!CPU_ISSET(first, &mask)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0) bound = cpusToRunOn();
  }).join();
  EXPECT_EQ(bound, 1);
}

TEST(BlasThreads, PartsRunAtOnceWhenThePoolHasThreads) {
  setBlasThreads(2);
  // Each part waits for the other to start: they meet only if two threads run them at once.
  // One thread alone would run part 0 to its deadline and never see part 1.
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  const bool ran = runPartsAtOnce(2, [&](int) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    met += started.load() == 2;
  });
  setBlasThreads(1);
  EXPECT_TRUE(ran);
  EXPECT_EQ(met.load(), 2);
}

}  // namespace
}  // namespace cc::parallel
