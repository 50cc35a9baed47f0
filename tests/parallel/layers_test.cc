// Every layer's backward against central finite differences of its forward, in fp64 (the
// same templates the fp32 model uses), on small shapes. The objective is sum(out * w) for
// a random w, so the upstream gradient is w. Backward must accumulate, so each check also
// starts the gradients from a non-zero value and subtracts it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "gradient_check.h"
#include "parallel/model/layers/attention.h"
#include "parallel/model/layers/cross_entropy.h"
#include "parallel/model/layers/embedding.h"
#include "parallel/model/layers/fast_math.h"
#include "parallel/model/layers/gelu.h"
#include "parallel/model/layers/layernorm.h"
#include "parallel/model/layers/linear.h"
#include "parallel/model/layers/residual.h"

namespace cc::parallel::layers {
namespace {

using testing::expectGradientMatches;
using testing::randomVector;
using testing::weightedSum;

// Runs backward on gradients preloaded with `bias` and returns what it added.
std::vector<double> added(const std::vector<double>& after, double bias) {
  std::vector<double> delta(after);
  for (double& value : delta) value -= bias;
  return delta;
}

constexpr double kPreload = 0.25;

TEST(LayerGradients, Embedding) {
  const int batch = 2, seq = 3, width = 4, vocab = 5;
  const std::vector<int32_t> tokens = {1, 4, 1, 0, 2, 4};
  auto wte = randomVector(vocab * width, 1);
  auto wpe = randomVector(seq * width, 2);
  const auto upstream = randomVector(batch * seq * width, 3);
  std::vector<double> out(upstream.size());
  auto objective = [&] {
    embeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), batch, seq, width);
    return weightedSum(out, upstream);
  };
  std::vector<double> dwte(wte.size(), kPreload), dwpe(wpe.size(), kPreload);
  embeddingBackward(dwte.data(), dwpe.data(), upstream.data(), tokens.data(), batch, seq, width);
  expectGradientMatches("wte", wte, added(dwte, kPreload), objective);
  expectGradientMatches("wpe", wpe, added(dwpe, kPreload), objective);
}

TEST(LayerGradients, LayerNorm) {
  const size_t rows = 3, width = 7;
  auto inp = randomVector(rows * width, 4, 2.0);
  for (size_t i = 0; i < width; ++i) inp[i] += 5.0;  // a row with a large mean
  auto weight = randomVector(width, 5);
  auto bias = randomVector(width, 6);
  const auto upstream = randomVector(rows * width, 7);
  std::vector<double> out(inp.size()), mean(rows), rstd(rows), scratch(2 * width);
  auto objective = [&] {
    layerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                     rows, width);
    return weightedSum(out, upstream);
  };
  objective();
  std::vector<double> dinp(inp.size(), kPreload), dweight(width, kPreload), dbias(width, kPreload);
  layerNormBackward(dinp.data(), dweight.data(), dbias.data(), upstream.data(), inp.data(),
                    weight.data(), mean.data(), rstd.data(), rows, width, scratch.data());
  expectGradientMatches("inp", inp, added(dinp, kPreload), objective);
  expectGradientMatches("weight", weight, added(dweight, kPreload), objective);
  expectGradientMatches("bias", bias, added(dbias, kPreload), objective);
}

TEST(LayerGradients, Linear) {
  const int rows = 4, inWidth = 5, outWidth = 3;
  auto inp = randomVector(rows * inWidth, 8);
  auto weight = randomVector(inWidth * outWidth, 9);
  auto bias = randomVector(outWidth, 10);
  const auto upstream = randomVector(rows * outWidth, 11);
  std::vector<double> out(upstream.size());
  auto objective = [&] {
    linearForward(out.data(), inp.data(), weight.data(), bias.data(), rows, inWidth, outWidth);
    return weightedSum(out, upstream);
  };
  std::vector<double> dinp(inp.size(), kPreload), dweight(weight.size(), kPreload),
      dbias(bias.size(), kPreload);
  linearBackward(dinp.data(), dweight.data(), dbias.data(), upstream.data(), inp.data(),
                 weight.data(), rows, inWidth, outWidth);
  expectGradientMatches("inp", inp, added(dinp, kPreload), objective);
  expectGradientMatches("weight", weight, added(dweight, kPreload), objective);
  expectGradientMatches("bias", bias, added(dbias, kPreload), objective);
}

// What a row-parallel linear does on two ranks: each multiplies its rows of the weight by
// its columns of the input (matmulForward), the partial products are summed (the
// all-reduce) and the bias is added once after (addBias); backward keeps the bias
// gradient whole (biasBackward) and each rank's input gradient for its columns only.
TEST(LayerGradients, RowParallelSplitAddsTheBiasOnceAfterTheSum) {
  const int rows = 4, inWidth = 6, outWidth = 3, half = inWidth / 2;
  const auto inp = randomVector(rows * inWidth, 30);
  const auto weight = randomVector(inWidth * outWidth, 31);
  const auto bias = randomVector(outWidth, 32);
  const auto upstream = randomVector(rows * outWidth, 33);
  std::vector<double> whole(rows * outWidth);
  linearForward(whole.data(), inp.data(), weight.data(), bias.data(), rows, inWidth, outWidth);
  std::vector<double> dinpWhole(inp.size(), 0.0), dweightWhole(weight.size(), 0.0);
  linearBackward(dinpWhole.data(), dweightWhole.data(), static_cast<double*>(nullptr),
                 upstream.data(), inp.data(), weight.data(), rows, inWidth, outWidth);

  std::vector<double> sum(rows * outWidth, 0.0), dbias(bias.size(), 0.0);
  biasBackward(dbias.data(), upstream.data(), rows, outWidth);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<double> columns(rows * half), dcolumns(rows * half, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < half; ++j) columns[r * half + j] = inp[r * inWidth + rank * half + j];
    }
    const double* weightRows = weight.data() + rank * half * outWidth;
    std::vector<double> partial(rows * outWidth), dweightRows(half * outWidth, 0.0);
    matmulForward(partial.data(), columns.data(), weightRows, rows, half, outWidth);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += partial[i];
    matmulBackward(dcolumns.data(), dweightRows.data(), upstream.data(), columns.data(), weightRows,
                   rows, half, outWidth);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < half; ++j) {
        EXPECT_NEAR(dcolumns[r * half + j], dinpWhole[r * inWidth + rank * half + j], 1e-12);
      }
    }
    for (size_t i = 0; i < dweightRows.size(); ++i) {
      EXPECT_NEAR(dweightRows[i], dweightWhole[rank * half * outWidth + i], 1e-12);
    }
  }
  addBias(sum.data(), bias.data(), rows, outWidth);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(sum[i], whole[i], 1e-12);
  for (int i = 0; i < outWidth; ++i) {
    double columnSum = 0;
    for (int r = 0; r < rows; ++r) columnSum += upstream[r * outWidth + i];
    EXPECT_NEAR(dbias[i], columnSum, 1e-12) << "the whole bias gradient on every rank";
  }
}

TEST(LayerGradients, TiedHead) {
  const int rows = 3, width = 4, vocab = 6;
  auto inp = randomVector(rows * width, 12);
  auto wte = randomVector(vocab * width, 13);
  const auto upstream = randomVector(rows * vocab, 14);
  std::vector<double> logits(upstream.size());
  auto objective = [&] {
    tiedHeadForward(logits.data(), inp.data(), wte.data(), rows, width, vocab);
    return weightedSum(logits, upstream);
  };
  std::vector<double> dinp(inp.size(), kPreload), dwte(wte.size(), kPreload);
  tiedHeadBackward(dinp.data(), dwte.data(), upstream.data(), inp.data(), wte.data(), rows, width,
                   vocab);
  expectGradientMatches("inp", inp, added(dinp, kPreload), objective);
  expectGradientMatches("wte", wte, added(dwte, kPreload), objective);
}

TEST(LayerGradients, CausalAttention) {
  const AttentionShape shape{2, 5, 6, 2};
  const size_t rows = static_cast<size_t>(shape.batch * shape.seq);
  auto qkv = randomVector(rows * 3 * static_cast<size_t>(shape.width), 15);
  const auto upstream = randomVector(rows * static_cast<size_t>(shape.width), 16);
  std::vector<double> out(upstream.size());
  std::vector<double> att(static_cast<size_t>(shape.batch * shape.heads) * shape.scoresPerHead());
  std::vector<double> scratch(shape.scoresPerHead());
  auto objective = [&] {
    attentionForward(out.data(), att.data(), qkv.data(), shape);
    return weightedSum(out, upstream);
  };
  objective();
  std::vector<double> dqkv(qkv.size(), kPreload);
  attentionBackward(dqkv.data(), upstream.data(), qkv.data(), att.data(), shape, scratch.data());
  expectGradientMatches("qkv", qkv, added(dqkv, kPreload), objective);
}

TEST(LayerGradients, AttentionIsCausal) {
  // Changing a later position's key or value must not change an earlier output.
  const AttentionShape shape{1, 4, 4, 2};
  auto qkv = randomVector(4 * 12, 17);
  std::vector<double> out(16), later(16), att(2 * 16);
  attentionForward(out.data(), att.data(), qkv.data(), shape);
  for (size_t i = 3 * 12 + 4; i < 4 * 12; ++i) qkv[i] += 1.0;  // k and v of position 3
  attentionForward(later.data(), att.data(), qkv.data(), shape);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(out[i], later[i]) << i;
}

TEST(LayerGradients, Gelu) {
  auto inp = randomVector(40, 18, 3.0);
  const auto upstream = randomVector(40, 19);
  std::vector<double> out(40);
  auto objective = [&] {
    geluForward(out.data(), inp.data(), inp.size());
    return weightedSum(out, upstream);
  };
  std::vector<double> dinp(40, kPreload);
  geluBackward(dinp.data(), inp.data(), upstream.data(), inp.size());
  expectGradientMatches("inp", inp, added(dinp, kPreload), objective);
}

TEST(LayerGradients, Residual) {
  auto a = randomVector(9, 20), b = randomVector(9, 21);
  const auto upstream = randomVector(9, 22);
  std::vector<double> out(9);
  auto objective = [&] {
    residualForward(out.data(), a.data(), b.data(), out.size());
    return weightedSum(out, upstream);
  };
  std::vector<double> da(9, kPreload), db(9, kPreload);
  residualBackward(da.data(), db.data(), upstream.data(), 9);
  expectGradientMatches("a", a, added(da, kPreload), objective);
  expectGradientMatches("b", b, added(db, kPreload), objective);
}

TEST(LayerGradients, CrossEntropyIgnoresPaddedVocabulary) {
  const size_t rows = 3, vocab = 5, padded = 8;
  auto logits = randomVector(rows * padded, 23, 2.0);
  const std::vector<int32_t> targets = {4, 0, 2};
  std::vector<double> probs(logits.size()), losses(rows);
  auto objective = [&] {
    probs = logits;
    return crossEntropyForward(probs.data(), losses.data(), targets.data(), rows, vocab, padded);
  };
  const double loss = objective();
  std::vector<double> dlogits(logits.size(), kPreload);
  crossEntropyBackward(dlogits.data(), probs.data(), targets.data(), rows, vocab, padded,
                       1.0 / rows);
  auto delta = added(dlogits, kPreload);
  expectGradientMatches("logits", logits, delta, objective);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = vocab; j < padded; ++j) {
      EXPECT_EQ(delta[r * padded + j], 0.0);
      EXPECT_EQ(probs[r * padded + j], 0.0);
    }
  }
  // The padded logits do not enter the loss at all.
  for (size_t r = 0; r < rows; ++r) logits[r * padded + vocab] += 100.0;
  EXPECT_EQ(objective(), loss);
}

// The fp32 path uses its own exp and tanh; they must track libm closely.
TEST(FastMath, ExpAndTanhTrackLibm) {
  for (float x = -80.0f; x <= 80.0f; x += 0.0137f) {
    const double exact = std::exp(static_cast<double>(x));
    EXPECT_NEAR(expOf(x) / exact, 1.0, 4e-7) << x;
  }
  for (float x = -10.0f; x <= 10.0f; x += 0.001f) {
    EXPECT_NEAR(tanhOf(x), std::tanh(static_cast<double>(x)), 3e-7) << x;
  }
}

// The fp32 instantiation computes what the fp64 one does, to fp32 rounding.
TEST(FastMath, Fp32AttentionMatchesFp64) {
  const AttentionShape shape{2, 16, 16, 4};
  const auto qkv = randomVector(32 * 48, 24);
  std::vector<float> qkvFloat(qkv.begin(), qkv.end());
  std::vector<double> out(32 * 16), att(2 * 4 * 256);
  std::vector<float> outFloat(out.size()), attFloat(att.size());
  attentionForward(out.data(), att.data(), qkv.data(), shape);
  attentionForward(outFloat.data(), attFloat.data(), qkvFloat.data(), shape);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(outFloat[i], out[i], 2e-6) << i;
}

}  // namespace
}  // namespace cc::parallel::layers
