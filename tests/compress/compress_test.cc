// Gradient compression (include/cc/compress.h):
// - the building blocks: packed signs round-trip; 1-bit error feedback loses nothing (what
//   is sent plus the new residual is the input plus the old residual, to the rounding of
//   one addition); orthonormalised columns are orthonormal; PowerSGD's products are the
//   plain ones;
// - every kind at 1-8 ranks, three calls in a row (the state carried between them),
//   against a sequential reference of the same algorithm: 1-bit bit for bit (the same
//   arithmetic in the same order), fp16/bf16 to their rounding, PowerSGD to 1e-4;
// - PowerSGD at full rank is the plain average to 1e-5; the 16-bit reduce-scatter gives
//   each rank its part of the mean;
// - the bytes each kind sends (ccCommGetTraffic, summed over the ranks) are its formula;
// - bad arguments are ccInvalidArgument naming the argument; a call queued on a stream
//   runs there.
#include <cc/cc.h>
#include <cc/compress.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/reduce_kernels.h"
#include "comm/handles.h"
#include "compress/compressor.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

using compress::TensorShape;

// A bucket's worth of tensors: a matrix, a bias, a small matrix, a short vector (446
// floats: no multiple of 8 or of the ranks, so the parts are padded).
const std::vector<TensorShape> kShapes = {{16, 24}, {1, 24}, {7, 5}, {1, 3}};

size_t elementsOf(const std::vector<TensorShape>& shapes) {
  size_t total = 0;
  for (const TensorShape& shape : shapes) total += shape.size();
  return total;
}

// Rank r's gradient at call c: values in [-1, 1), different per rank, call and element.
float value(int rank, int call, size_t i) {
  uint64_t z = (static_cast<uint64_t>(rank) << 40) ^ (static_cast<uint64_t>(call) << 32) ^ i;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

std::vector<float> gradient(int rank, int call, size_t count) {
  std::vector<float> g(count);
  for (size_t i = 0; i < count; ++i) g[i] = value(rank, call, i);
  return g;
}

ccCompressor_t makeCompressor(ccComm_t comm, ccCompressKind_t kind,
                              const std::vector<TensorShape>& shapes, int rank = 4,
                              double rate = 0) {
  std::vector<size_t> rows, cols;
  for (const TensorShape& shape : shapes) {
    rows.push_back(shape.rows);
    cols.push_back(shape.cols);
  }
  ccCompressConfig_t config{kind, rank, 7, rate};
  ccCompressor_t compressor = nullptr;
  EXPECT_EQ(ccCompressorCreate(comm, &config, shapes.size(), rows.data(), cols.data(), &compressor),
            ccSuccess)
      << ccGetLastError(nullptr);
  return compressor;
}

TEST(CompressBlocks, PackedSignsRoundTrip) {
  for (size_t count : {1u, 7u, 8u, 9u, 100u}) {
    std::vector<float> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = i % 5 == 0 ? 0.0f : value(1, 0, i);
    std::vector<uint8_t> bits((count + 7) / 8);
    compress::packSigns(values, bits);
    std::vector<float> back(count);
    compress::unpackSigns(bits, 0.25f, back);
    for (size_t i = 0; i < count; ++i)
      EXPECT_EQ(back[i], values[i] >= 0 ? 0.25f : -0.25f) << "count " << count << " i " << i;
    if (count % 8 != 0) {
      EXPECT_EQ(bits.back() >> (count % 8), 0) << "unused bits are 0";
    }
  }
}

// The vectorised whole-buffer casts (F16C/AVX2 where the CPU has them) give the scalar
// conversions' bits, on odd lengths, ties, subnormals, infinities and NaN.
TEST(CompressBlocks, BufferCastsAreTheScalarConversions) {
  std::vector<float> values = gradient(7, 0, 1003);
  for (size_t i = 0; i < values.size(); i += 7) values[i] *= 1e-6f;  // half subnormals
  const float special[] = {0.0f,
                           -0.0f,
                           65504.0f,
                           65520.0f,
                           1e30f,
                           -1e30f,
                           std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           1.0009765625f,
                           1.00048828125f};
  std::copy(std::begin(special), std::end(special), values.begin() + 500);
  for (bool bf16 : {false, true}) {
    std::vector<uint16_t> narrow(values.size());
    collectives::floatsTo16Bits(values.data(), narrow.data(), values.size(), bf16);
    std::vector<float> wide(values.size());
    collectives::floatsFrom16Bits(narrow.data(), wide.data(), values.size(), bf16);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t expected =
          bf16 ? collectives::floatToBfloat16(values[i]) : collectives::floatToHalf(values[i]);
      ASSERT_EQ(narrow[i], expected) << (bf16 ? "bf16 " : "fp16 ") << i << " " << values[i];
      const float back =
          bf16 ? collectives::bfloat16ToFloat(narrow[i]) : collectives::halfToFloat(narrow[i]);
      if (std::isnan(back)) {
        ASSERT_TRUE(std::isnan(wide[i])) << i;
      } else {
        ASSERT_EQ(wide[i], back) << i;
      }
    }
  }
}

TEST(CompressBlocks, ErrorFeedbackLosesNothing) {
  const size_t count = 1000;
  std::vector<float> input = gradient(2, 0, count), residual = gradient(3, 1, count);
  for (float& r : residual) r *= 0.1f;
  const std::vector<float> old = residual;
  std::vector<uint8_t> bits((count + 7) / 8);
  const float scale = compress::compressSigns(input, residual, bits);
  double absolute = 0;
  for (size_t i = 0; i < count; ++i) absolute += std::fabs(static_cast<double>(input[i] + old[i]));
  EXPECT_NEAR(scale, absolute / count, 1e-6) << "the mean absolute value";
  std::vector<float> sent(count);
  compress::unpackSigns(bits, scale, sent);
  for (size_t i = 0; i < count; ++i) {
    // sent + new residual = input + old residual, but for the rounding of the two
    // additions that computed x and the new residual.
    const double lhs = static_cast<double>(sent[i]) + residual[i];
    const double rhs = static_cast<double>(input[i]) + old[i];
    const double bound = 0x1.0p-24 * (std::fabs(rhs) + std::fabs(residual[i]));
    EXPECT_LE(std::fabs(lhs - rhs), bound) << i;
    EXPECT_EQ(sent[i] > 0, input[i] + old[i] >= 0) << i;
  }
}

TEST(CompressBlocks, OrthonormalColumnsAndProducts) {
  const size_t rows = 20, cols = 12, r = 4;
  std::vector<float> p = gradient(4, 0, rows * r);
  compress::orthonormalizeColumns(p.data(), rows, r);
  for (size_t a = 0; a < r; ++a) {
    for (size_t b = 0; b < r; ++b) {
      double dot = 0;
      for (size_t i = 0; i < rows; ++i) dot += static_cast<double>(p[i * r + a]) * p[i * r + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << "," << b;
    }
  }
  const std::vector<float> m = gradient(5, 0, rows * cols), q = gradient(6, 0, cols * r);
  std::vector<float> out(rows * r), back(cols * r), whole(rows * cols);
  compress::multiply(m.data(), q.data(), out.data(), rows, cols, r);
  compress::multiplyTransposed(m.data(), out.data(), back.data(), rows, cols, r);
  compress::multiplyByTranspose(out.data(), back.data(), whole.data(), rows, cols, r);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < r; ++j) {
      double sum = 0;
      for (size_t k = 0; k < cols; ++k) sum += static_cast<double>(m[i * cols + k]) * q[k * r + j];
      EXPECT_NEAR(out[i * r + j], sum, 1e-4);
    }
  }
  for (size_t k = 0; k < cols; ++k) {
    for (size_t j = 0; j < r; ++j) {
      double sum = 0;
      for (size_t i = 0; i < rows; ++i)
        sum += static_cast<double>(m[i * cols + k]) * out[i * r + j];
      EXPECT_NEAR(back[k * r + j], sum, 1e-3);
    }
  }
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < cols; ++k) {
      double sum = 0;
      for (size_t j = 0; j < r; ++j) sum += static_cast<double>(out[i * r + j]) * back[k * r + j];
      EXPECT_NEAR(whole[i * cols + k], sum, 1e-3);
    }
  }
  EXPECT_TRUE(compress::powerSgdCompresses({16, 24}, 4, 2.0));   // 384 >= 2 * 4 * 40 = 320
  EXPECT_FALSE(compress::powerSgdCompresses({7, 5}, 4, 2.0));    // 35 < 96
  EXPECT_FALSE(compress::powerSgdCompresses({1, 24}, 1, 1e-9));  // a vector, never
}

// The sequential reference of 1-bit compression over n ranks, `calls` calls: what every
// rank's buffer holds after each call (the same on every rank).
std::vector<std::vector<float>> oneBitReference(int n, int calls, size_t count) {
  const size_t ranks = static_cast<size_t>(n);
  const size_t part = ((count + ranks - 1) / ranks + 7) / 8 * 8;
  std::vector<std::vector<float>> worker(ranks, std::vector<float>(part * ranks, 0.0f));
  std::vector<std::vector<float>> server(ranks, std::vector<float>(part, 0.0f));
  auto realIn = [&](size_t j) {
    return j * part >= count ? size_t{0} : std::min(part, count - j * part);
  };
  std::vector<std::vector<float>> results;
  for (int call = 0; call < calls; ++call) {
    // scale and signs of (sender, part)
    std::vector<std::vector<float>> scales(ranks, std::vector<float>(ranks));
    std::vector<std::vector<std::vector<uint8_t>>> bits(
        ranks, std::vector<std::vector<uint8_t>>(ranks, std::vector<uint8_t>(part / 8)));
    for (size_t sender = 0; sender < ranks; ++sender) {
      const std::vector<float> g = gradient(static_cast<int>(sender), call, count);
      for (size_t j = 0; j < ranks; ++j) {
        const size_t real = realIn(j);
        scales[sender][j] = compress::compressSigns(
            std::span<const float>(g.data() + j * part, real),
            std::span<float>(worker[sender].data() + j * part, real), bits[sender][j]);
      }
    }
    std::vector<float> result(count);
    for (size_t j = 0; j < ranks; ++j) {
      const size_t real = realIn(j);
      std::vector<float> sum(real, 0.0f), decoded(real);
      for (size_t sender = 0; sender < ranks; ++sender) {
        compress::unpackSigns(bits[sender][j], scales[sender][j], decoded);
        for (size_t i = 0; i < real; ++i) sum[i] += decoded[i];
      }
      const float inverse = 1.0f / static_cast<float>(n);
      for (float& v : sum) v *= inverse;
      std::vector<uint8_t> serverBits(part / 8);
      const float scale =
          compress::compressSigns(sum, std::span<float>(server[j].data(), real), serverBits);
      compress::unpackSigns(serverBits, scale, std::span<float>(result.data() + j * part, real));
    }
    results.push_back(result);
  }
  return results;
}

// PowerSGD's sequential reference (averages in double), the buffers after each call.
std::vector<std::vector<float>> powerSgdReference(int n, int calls,
                                                  const std::vector<TensorShape>& shapes,
                                                  int rank) {
  const size_t r = static_cast<size_t>(rank);
  const size_t count = elementsOf(shapes);
  std::vector<std::vector<float>> residual(static_cast<size_t>(n), std::vector<float>(count, 0.0f));
  std::vector<std::vector<float>> qs;
  size_t compressed = 0;
  for (const TensorShape& shape : shapes) {
    if (!compress::powerSgdCompresses(shape, rank, 2.0)) continue;
    qs.emplace_back(shape.cols * r);
    compress::initialQ(7, compressed++, qs.back());
  }
  std::vector<std::vector<float>> results;
  for (int call = 0; call < calls; ++call) {
    std::vector<std::vector<float>> g;
    for (int k = 0; k < n; ++k) g.push_back(gradient(k, call, count));
    std::vector<float> result(count);
    size_t offset = 0, matrix = 0;
    for (const TensorShape& shape : shapes) {
      const size_t size = shape.size();
      if (!compress::powerSgdCompresses(shape, rank, 2.0)) {
        for (size_t i = 0; i < size; ++i) {
          double sum = 0;
          for (int k = 0; k < n; ++k) sum += g[static_cast<size_t>(k)][offset + i];
          result[offset + i] = static_cast<float>(sum / n);
        }
        offset += size;
        continue;
      }
      std::vector<float> p(shape.rows * r, 0.0f), one(shape.rows * r);
      for (int k = 0; k < n; ++k) {
        float* m = residual[static_cast<size_t>(k)].data() + offset;
        for (size_t i = 0; i < size; ++i) m[i] += g[static_cast<size_t>(k)][offset + i];
        compress::multiply(m, qs[matrix].data(), one.data(), shape.rows, shape.cols, r);
        for (size_t i = 0; i < p.size(); ++i) p[i] += one[i] / static_cast<float>(n);
      }
      compress::orthonormalizeColumns(p.data(), shape.rows, r);
      std::vector<float> q(shape.cols * r, 0.0f), part(shape.cols * r);
      for (int k = 0; k < n; ++k) {
        compress::multiplyTransposed(residual[static_cast<size_t>(k)].data() + offset, p.data(),
                                     part.data(), shape.rows, shape.cols, r);
        for (size_t i = 0; i < q.size(); ++i) q[i] += part[i] / static_cast<float>(n);
      }
      compress::multiplyByTranspose(p.data(), q.data(), result.data() + offset, shape.rows,
                                    shape.cols, r);
      for (int k = 0; k < n; ++k) {
        for (size_t i = 0; i < size; ++i)
          residual[static_cast<size_t>(k)][offset + i] -= result[offset + i];
      }
      qs[matrix++] = q;
      offset += size;
    }
    results.push_back(result);
  }
  return results;
}

struct KindParam {
  ccCompressKind_t kind;
  const char* name;
};

class CompressRanks : public ::testing::TestWithParam<KindParam> {};

TEST_P(CompressRanks, EveryRankCountMatchesTheSequentialReference) {
  const KindParam param = GetParam();
  constexpr int kCalls = 3;
  const size_t count = elementsOf(kShapes);
  for (int n = 1; n <= 8; ++n) {
    SCOPED_TRACE(std::string(param.name) + " on " + std::to_string(n) + " ranks");
    runRanks(n, [&](RankContext& context) {
      ccComm_t comm = context.initComm();
      ASSERT_NE(comm, nullptr);
      ccCompressor_t compressor = makeCompressor(comm, param.kind, kShapes);
      ASSERT_NE(compressor, nullptr);
      std::vector<std::vector<float>> expected;
      if (param.kind == ccCompressOneBit) expected = oneBitReference(n, kCalls, count);
      if (param.kind == ccCompressPowerSgd) expected = powerSgdReference(n, kCalls, kShapes, 4);
      for (int call = 0; call < kCalls; ++call) {
        std::vector<float> buffer = gradient(context.rank, call, count);
        ASSERT_EQ(ccCompressedAllReduce(compressor, buffer.data(), nullptr), ccSuccess)
            << ccGetLastError(nullptr);
        for (size_t i = 0; i < count; ++i) {
          if (param.kind == ccCompressOneBit) {
            ASSERT_EQ(buffer[i], expected[static_cast<size_t>(call)][i])
                << "call " << call << " i " << i;
          } else if (param.kind == ccCompressPowerSgd) {
            ASSERT_NEAR(buffer[i], expected[static_cast<size_t>(call)][i], 1e-4)
                << "call " << call << " i " << i;
          } else {
            // The mean of the 16-bit inputs, to the rounding of n - 1 partial sums of up to n
            // in 16 bits, divided by n.
            const bool bf16 = param.kind == ccCompressBf16;
            double mean = 0;
            for (int k = 0; k < n; ++k) {
              const float v = value(k, call, i);
              mean += bf16 ? collectives::bfloat16ToFloat(collectives::floatToBfloat16(v))
                           : collectives::halfToFloat(collectives::floatToHalf(v));
            }
            mean /= n;
            ASSERT_NEAR(buffer[i], mean, n * (bf16 ? 0x1.0p-7 : 0x1.0p-10)) << "call " << call;
          }
        }
      }
      EXPECT_EQ(ccCompressorDestroy(compressor), ccSuccess);
      CC_ASSERT_OK(ccCommDestroy(comm));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, CompressRanks,
                         ::testing::Values(KindParam{ccCompressFp16, "fp16"},
                                           KindParam{ccCompressBf16, "bf16"},
                                           KindParam{ccCompressOneBit, "onebit"},
                                           KindParam{ccCompressPowerSgd, "powersgd"}),
                         [](const auto& caseInfo) { return std::string(caseInfo.param.name); });

// ZeRO's 16-bit reduce-scatter: each rank's part of the mean of the 16-bit inputs, at 1-8
// ranks (840 floats divide among all of them); the lossy kinds and a buffer the ranks do
// not divide are refused, saying why.
TEST(CompressReduceScatter, SixteenBitsGiveEachRankItsPartOfTheMean) {
  const size_t count = 840;
  for (int n = 1; n <= 8; ++n) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    runRanks(n, [&](RankContext& context) {
      ccComm_t comm = context.initComm();
      ASSERT_NE(comm, nullptr);
      const size_t part = count / static_cast<size_t>(n);
      for (ccCompressKind_t kind : {ccCompressFp16, ccCompressBf16}) {
        const bool bf16 = kind == ccCompressBf16;
        ccCompressor_t compressor = makeCompressor(comm, kind, {{1, count}});
        const std::vector<float> buffer = gradient(context.rank, 0, count);
        std::vector<float> shard(part);
        ASSERT_EQ(ccCompressedReduceScatter(compressor, buffer.data(), shard.data(), nullptr),
                  ccSuccess)
            << ccGetLastError(nullptr);
        for (size_t i = 0; i < part; ++i) {
          const size_t at = static_cast<size_t>(context.rank) * part + i;
          double mean = 0;
          for (int k = 0; k < n; ++k) {
            const float v = value(k, 0, at);
            mean += bf16 ? collectives::bfloat16ToFloat(collectives::floatToBfloat16(v))
                         : collectives::halfToFloat(collectives::floatToHalf(v));
          }
          ASSERT_NEAR(shard[i], mean / n, n * (bf16 ? 0x1.0p-7 : 0x1.0p-10)) << i;
        }
        EXPECT_EQ(ccCompressorDestroy(compressor), ccSuccess);
      }
      ccCompressor_t onebit = makeCompressor(comm, ccCompressOneBit, {{1, count}});
      std::vector<float> buffer(count), shard(part);
      EXPECT_EQ(ccCompressedReduceScatter(onebit, buffer.data(), shard.data(), nullptr),
                ccInvalidArgument);
      EXPECT_NE(std::string(ccGetLastError(nullptr)).find("only fp16 and bf16 reduce-scatter"),
                std::string::npos)
          << ccGetLastError(nullptr);
      EXPECT_EQ(ccCompressorDestroy(onebit), ccSuccess);
      if (n > 1) {
        ccCompressor_t odd = makeCompressor(comm, ccCompressFp16, {{1, count + 1}});
        std::vector<float> longer(count + 1);
        EXPECT_EQ(ccCompressedReduceScatter(odd, longer.data(), shard.data(), nullptr),
                  ccInvalidArgument);
        EXPECT_NE(std::string(ccGetLastError(nullptr)).find("do not divide among"),
                  std::string::npos);
        EXPECT_EQ(ccCompressorDestroy(odd), ccSuccess);
      }
      CC_ASSERT_OK(ccCommDestroy(comm));
    });
  }
}

TEST(CompressPowerSgd, FullRankIsThePlainAverage) {
  const std::vector<TensorShape> shapes = {{6, 9}, {12, 6}, {1, 7}};
  const size_t count = elementsOf(shapes);
  runRanks(3, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    // Rank 6 = min(rows, cols) of both matrices; a tiny rate compresses them.
    ccCompressor_t compressor = makeCompressor(comm, ccCompressPowerSgd, shapes, 6, 1e-9);
    ASSERT_NE(compressor, nullptr);
    for (int call = 0; call < 2; ++call) {
      std::vector<float> buffer = gradient(context.rank, call, count);
      ASSERT_EQ(ccCompressedAllReduce(compressor, buffer.data(), nullptr), ccSuccess);
      for (size_t i = 0; i < count; ++i) {
        const double mean = (value(0, call, i) + value(1, call, i) + value(2, call, i)) / 3.0;
        ASSERT_NEAR(buffer[i], mean, 1e-5) << "call " << call << " i " << i;
      }
    }
    EXPECT_EQ(ccCompressorDestroy(compressor), ccSuccess);
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

// Bytes sent, summed over the ranks, per call: the ring all-reduce moves 2(n-1)/n of its
// vector per rank, the pairwise all-to-all and the all-gather (ring or direct) n-1
// messages per rank. (A small all-reduce the tuner would run one-shot through shared
// memory moves more: every peer reads the whole vector.)
TEST(CompressBytes, EachKindSendsItsFormula) {
  const std::vector<TensorShape> shapes = {{64, 48}, {1, 48}, {32, 32}, {1, 32}};
  const uint64_t count = elementsOf(shapes);  // 4176
  const int n = 4;
  const uint64_t ranks = n;
  for (ccCompressKind_t kind :
       {ccCompressFp16, ccCompressBf16, ccCompressOneBit, ccCompressPowerSgd}) {
    SCOPED_TRACE("kind " + std::to_string(static_cast<int>(kind)));
    runRanks(n, [&](RankContext& context) {
      ccComm_t comm = context.initComm();
      ASSERT_NE(comm, nullptr);
      // The ring for the all-reduces; for 1-bit the pairwise all-to-all, its all-gather as
      // the tuner decides (pairwise cannot run it).
      comm::communicatorOf(comm)->algorithmOverride() = static_cast<int>(
          collectives::parseAlgorithm(kind == ccCompressOneBit ? "pairwise" : "ring"));
      ccCompressor_t compressor = makeCompressor(comm, kind, shapes);
      std::vector<float> buffer = gradient(context.rank, 0, count);
      ASSERT_EQ(ccCompressedAllReduce(compressor, buffer.data(), nullptr), ccSuccess);
      uint64_t sent = 0;
      for (ccTrafficKind_t traffic : {ccTrafficAllReduce, ccTrafficAllToAll, ccTrafficAllGather}) {
        ccTraffic_t t{};
        ASSERT_EQ(ccCommGetTraffic(comm, traffic, &t), ccSuccess);
        sent += t.bytesSent;
      }
      ASSERT_EQ(ccAllReduce(&sent, &sent, 1, ccUint64, ccSum, comm, nullptr), ccSuccess);
      uint64_t expected = 0;
      const uint64_t plain = 2 * (ranks - 1) * count * 4;  // the float32 all-reduce, all ranks
      if (kind == ccCompressFp16 || kind == ccCompressBf16) expected = 2 * (ranks - 1) * count * 2;
      if (kind == ccCompressOneBit) {
        const uint64_t part = ((count + ranks - 1) / ranks + 7) / 8 * 8;
        expected = 2 * ranks * (ranks - 1) * (4 + part / 8);
      }
      if (kind == ccCompressPowerSgd) {
        // r = 4: both matrices compress (3072 >= 2*4*112, 1024 >= 2*4*64); P: 64*4 + 32*4,
        // then Q: 48*4 + 32*4 with the two biases, 48 + 32.
        const uint64_t pq = (64 + 32) * 4 + (48 + 32) * 4 + 48 + 32;
        expected = 2 * (ranks - 1) * pq * 4;
      }
      EXPECT_EQ(sent, expected);
      if (context.rank == 0)
        std::printf("kind %d: %llu bytes, %.1f%% of float32's\n", static_cast<int>(kind),
                    static_cast<unsigned long long>(sent), 100.0 * sent / plain);
      EXPECT_EQ(ccCompressorDestroy(compressor), ccSuccess);
      CC_ASSERT_OK(ccCommDestroy(comm));
    });
  }
}

TEST(CompressApi, BadArgumentsNameTheArgumentAndAStreamRunsTheCall) {
  runRanks(2, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    const size_t rows[] = {4, 1}, cols[] = {6, 5};
    ccCompressConfig_t config{ccCompressPowerSgd, 2, 1, 0};
    ccCompressor_t compressor = nullptr;
    auto expectError = [](ccResult_t result, const char* words) {
      EXPECT_EQ(result, ccInvalidArgument);
      EXPECT_NE(std::string(ccGetLastError(nullptr)).find(words), std::string::npos)
          << ccGetLastError(nullptr);
    };
    expectError(ccCompressorCreate(nullptr, &config, 2, rows, cols, &compressor), "comm");
    expectError(ccCompressorCreate(comm, nullptr, 2, rows, cols, &compressor), "config is NULL");
    expectError(ccCompressorCreate(comm, &config, 0, rows, cols, &compressor), "tensors is 0");
    expectError(ccCompressorCreate(comm, &config, 2, nullptr, cols, &compressor), "rows is NULL");
    expectError(ccCompressorCreate(comm, &config, 2, rows, cols, nullptr), "compressor is NULL");
    const size_t zero[] = {4, 0};
    expectError(ccCompressorCreate(comm, &config, 2, rows, zero, &compressor), "tensor 1 is 1 x 0");
    ccCompressConfig_t bad = config;
    bad.rank = 0;
    expectError(ccCompressorCreate(comm, &bad, 2, rows, cols, &compressor), "config->rank 0");
    bad = config;
    const int unknown = 9;
    std::memcpy(&bad.kind, &unknown, sizeof(unknown));
    expectError(ccCompressorCreate(comm, &bad, 2, rows, cols, &compressor), "config->kind 9");
    expectError(ccCompressedAllReduce(nullptr, nullptr, nullptr), "compressor is NULL");

    ASSERT_EQ(ccCompressorCreate(comm, &config, 2, rows, cols, &compressor), ccSuccess);
    expectError(ccCompressedAllReduce(compressor, nullptr, nullptr), "buffer is NULL");
    // On a stream: queued, done once the stream is.
    ccStream_t stream = nullptr;
    CC_ASSERT_OK(ccStreamCreate(&stream));
    std::vector<float> buffer(29, static_cast<float>(context.rank));
    ASSERT_EQ(ccCompressedAllReduce(compressor, buffer.data(), stream), ccSuccess);
    CC_ASSERT_OK(ccStreamSynchronize(stream));
    // The bias (uncompressed) is the plain average; the 4 x 6 matrix is rank-2 PowerSGD of
    // a constant matrix, which rank 1 captures exactly.
    for (float v : buffer) EXPECT_NEAR(v, 0.5f, 1e-6);
    CC_ASSERT_OK(ccStreamDestroy(stream));
    EXPECT_EQ(ccCompressorDestroy(compressor), ccSuccess);
    expectError(ccCompressorDestroy(compressor), "not a live ccCompressor_t");
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

}  // namespace
}  // namespace cc::testing
