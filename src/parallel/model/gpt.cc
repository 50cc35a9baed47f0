#include "parallel/model/gpt.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "parallel/model/layers/attention.h"
#include "parallel/model/layers/cross_entropy.h"
#include "parallel/model/layers/embedding.h"
#include "parallel/model/layers/gelu.h"
#include "parallel/model/layers/layernorm.h"
#include "parallel/model/layers/linear.h"
#include "parallel/model/layers/residual.h"
#include "parallel/model/layers/vocab_parallel.h"

namespace cc::parallel {

using namespace layers;

namespace {

template <typename T>
void zero(T* buffer, size_t count) {
  std::fill(buffer, buffer + count, T(0));
}

}  // namespace

template <typename T>
Gpt<T>::Gpt(const GptConfig& config, int maxBatch, size_t bufferElements)
    : Gpt(ParameterLayout(config), maxBatch, bufferElements) {}

template <typename T>
Gpt<T>::Gpt(const ParameterLayout& layout, int maxBatch, size_t bufferElements)
    : config_(layout.config()),
      layout_(layout),
      maxBatch_(maxBatch),
      parameterPages_(std::max(layout_.totalSize(), bufferElements) * sizeof(T)),
      gradientPages_(parameterPages_.bytes()),
      parameters_(static_cast<T*>(parameterPages_.data()),
                  std::max(layout_.totalSize(), bufferElements)),
      gradients_(static_cast<T*>(gradientPages_.data()), parameters_.size()),
      workspace_(layout_, maxBatch),
      arena_(layout_, maxBatch) {}

template <typename T>
bool Gpt<T>::split() const {
  if (layout_.part().tpSize == 1) return false;
  if (tensorParallel_ == nullptr) {
    std::fprintf(stderr,
                 "Gpt: a tensor-parallel shard (%d of %d) runs only after setTensorParallel\n",
                 layout_.part().tpRank, layout_.part().tpSize);
    std::abort();
  }
  return true;
}

template <typename T>
void Gpt<T>::embeddingForward(ActivationArena<T>& arena) {
  const T* p = parameters_.data();
  if (!split()) {
    layers::embeddingForward(arena.input(), arena.inputs(), p + layout_.wte(), p + layout_.wpe(),
                             arena.batch(), config_.seq, config_.width);
    return;
  }
  // Each rank looks up the tokens it owns; g sums the lookups (one rank's row and zeros:
  // exact), then the positions are added as on one process.
  const ShardDimensions& shard = layout_.shard();
  const size_t c = static_cast<size_t>(config_.width);
  vocabParallelEmbeddingForward(arena.input(), arena.inputs(), p + layout_.wte(),
                                static_cast<size_t>(shard.firstToken),
                                static_cast<size_t>(shard.vocab), arena.rows(), c);
  tensorParallel_->reduceFromRegionForward(std::span<T>(arena.input(), arena.rows() * c));
  addPositions(arena.input(), p + layout_.wpe(), arena.batch(), config_.seq, c);
}

template <typename T>
void Gpt<T>::requireEveryLayer(const char* what) const {
  if (layout_.hasEmbeddings() && layout_.hasHead()) return;
  // A pipeline stage runs its pieces from a schedule; the whole-model loop is a caller's bug.
  std::fprintf(stderr, "Gpt::%s: the model part holds layers [%d, %d) of %d; run its pieces\n",
               what, layout_.firstLayer(), layout_.endLayer(), config_.layers);
  std::abort();
}

template <typename T>
void Gpt<T>::rowParallelForward(T* out, const T* inp, const T* weight, const T* bias, int rows,
                                int inWidth) {
  const int width = config_.width;
  if (!split()) {
    linearForward(out, inp, weight, bias, rows, inWidth, width);  // the bias seeds the GEMM
    return;
  }
  matmulForward(out, inp, weight, rows, inWidth, width);
  tensorParallel_->reduceFromRegionForward(
      std::span<T>(out, static_cast<size_t>(rows) * static_cast<size_t>(width)));
  addBias(out, bias, rows, width);
}

template <typename T>
void Gpt<T>::copyToRegionBackward(T* inputGradient, size_t count) {
  if (split()) tensorParallel_->copyToRegionBackward(std::span<T>(inputGradient, count));
}

template <typename T>
void Gpt<T>::blockForward(int layer, ActivationArena<T>& arena) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  const BlockOffsets& w = layout_.block(layer);
  BlockActivations<T>& a = arena.block(layer);
  const T* residual = arena.blockInput(layer);
  T* projection = workspace_.projection;
  if (observer_ != nullptr) observer_->beforeBlockForward(layer);
  layerNormForward(a.ln1, a.ln1Mean, a.ln1Rstd, residual, p + w.ln1.weight, p + w.ln1.bias, n, c);
  linearForward(a.qkv, a.ln1, p + w.attention.qkv.weight, p + w.attention.qkv.bias, rows, width,
                3 * shard.width);
  attentionForward(a.atty, a.att, a.qkv, shape);
  rowParallelForward(projection, a.atty, p + w.attention.projection.weight,
                     p + w.attention.projection.bias, rows, shard.width);
  residualForward(a.residual2, residual, projection, n * c);
  layerNormForward(a.ln2, a.ln2Mean, a.ln2Rstd, a.residual2, p + w.ln2.weight, p + w.ln2.bias, n,
                   c);
  linearForward(a.fch, a.ln2, p + w.mlp.fc.weight, p + w.mlp.fc.bias, rows, width, shard.hidden);
  geluForward(a.fchGelu, a.fch, n * static_cast<size_t>(shard.hidden));
  rowParallelForward(projection, a.fchGelu, p + w.mlp.projection.weight, p + w.mlp.projection.bias,
                     rows, shard.hidden);
  residualForward(a.residual3, a.residual2, projection, n * c);
  if (observer_ != nullptr) observer_->afterBlockForward(layer);
}

template <typename T>
double Gpt<T>::headForward(ActivationArena<T>& arena) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t c = static_cast<size_t>(config_.width);
  const T* p = parameters_.data();
  HeadActivations<T>& h = arena.head();
  layerNormForward(h.lnf, h.lnfMean, h.lnfRstd, arena.output(), p + layout_.lnfWeight(),
                   p + layout_.lnfBias(), n, c);
  const ShardDimensions& shard = layout_.shard();
  tiedHeadForward(h.probs, h.lnf, p + layout_.headWeight(), rows, config_.width, shard.vocab);
  if (!split()) {
    return crossEntropyForward(h.probs, h.losses, arena.targets(), n,
                               static_cast<size_t>(config_.vocab),
                               static_cast<size_t>(shard.vocab));
  }
  // The vocabulary-parallel loss: the group's row max, then its row sums of exponentials
  // and target logits (one reduction of 2N), never the logits themselves.
  const size_t columns = static_cast<size_t>(shard.vocab);
  const size_t first = static_cast<size_t>(shard.firstToken);
  const size_t real = realColumns(first, columns, static_cast<size_t>(config_.vocab));
  T* rowMax = workspace_.lossScratch;
  T* sums = rowMax + n;
  T* targetLogits = sums + n;
  shardRowMax(rowMax, h.probs, n, columns, real);
  tensorParallel_->allReduceMax(std::span<T>(rowMax, n));
  shardExponentials(h.probs, sums, targetLogits, rowMax, arena.targets(), n, columns, first, real);
  tensorParallel_->allReduceSum(std::span<T>(sums, 2 * n));
  return shardProbabilities(h.probs, h.losses, sums, targetLogits, rowMax, n, columns, real);
}

template <typename T>
void Gpt<T>::headBackward(ActivationArena<T>& arena, T* dhidden, T lossScale) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t c = static_cast<size_t>(config_.width);
  const ShardDimensions& shard = layout_.shard();
  const size_t columns = static_cast<size_t>(shard.vocab);
  const T* p = parameters_.data();
  T* g = gradients_.data();
  const HeadActivations<T>& h = arena.head();
  Workspace<T>& d = workspace_;
  zero(d.dlogits, n * columns);
  const T scale = lossScale / static_cast<T>(n);
  if (!split()) {
    crossEntropyBackward(d.dlogits, h.probs, arena.targets(), n, static_cast<size_t>(config_.vocab),
                         columns, scale);
  } else {
    const size_t first = static_cast<size_t>(shard.firstToken);
    vocabParallelCrossEntropyBackward(
        d.dlogits, h.probs, arena.targets(), n, columns, first,
        realColumns(first, columns, static_cast<size_t>(config_.vocab)), scale);
  }
  zero(d.dln, n * c);
  tiedHeadBackward(d.dln, g + layout_.headWeight(), d.dlogits, h.lnf, p + layout_.headWeight(),
                   rows, config_.width, shard.vocab);
  copyToRegionBackward(d.dln, n * c);  // f before the column-parallel head
  zero(dhidden, n * c);
  layerNormBackward(dhidden, g + layout_.lnfWeight(), g + layout_.lnfBias(), d.dln, arena.output(),
                    p + layout_.lnfWeight(), h.lnfMean, h.lnfRstd, n, c, d.layerNorm);
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.lnfWeight());
}

template <typename T>
void Gpt<T>::blockBackward(int layer, ActivationArena<T>& arena, T* dhidden) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const size_t hidden = static_cast<size_t>(shard.hidden);
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  T* g = gradients_.data();
  Workspace<T>& d = workspace_;
  const BlockOffsets& w = layout_.block(layer);
  BlockActivations<T>& a = arena.block(layer);
  const T* residual = arena.blockInput(layer);
  if (observer_ != nullptr) observer_->beforeBlockBackward(layer);
  // dhidden is d(residual3); the residual add passes it unchanged to the MLP branch and to
  // residual2, so it is used in place for both.
  zero(d.dfchGelu, n * hidden);
  linearBackward(d.dfchGelu, g + w.mlp.projection.weight, g + w.mlp.projection.bias, dhidden,
                 a.fchGelu, p + w.mlp.projection.weight, rows, shard.hidden, width);
  zero(d.dfch, n * hidden);
  geluBackward(d.dfch, a.fch, d.dfchGelu, n * hidden);
  zero(d.dln, n * c);
  linearBackward(d.dln, g + w.mlp.fc.weight, g + w.mlp.fc.bias, d.dfch, a.ln2, p + w.mlp.fc.weight,
                 rows, width, shard.hidden);
  copyToRegionBackward(d.dln, n * c);
  layerNormBackward(dhidden, g + w.ln2.weight, g + w.ln2.bias, d.dln, a.residual2, p + w.ln2.weight,
                    a.ln2Mean, a.ln2Rstd, n, c, d.layerNorm);
  // Now dhidden is d(residual2), which again feeds both the attention branch and the
  // block's input.
  zero(d.datty, n * static_cast<size_t>(shard.width));
  linearBackward(d.datty, g + w.attention.projection.weight, g + w.attention.projection.bias,
                 dhidden, a.atty, p + w.attention.projection.weight, rows, shard.width, width);
  zero(d.dqkv, n * 3 * static_cast<size_t>(shard.width));
  attentionBackward(d.dqkv, d.datty, a.qkv, a.att, shape, d.dscores);
  zero(d.dln, n * c);
  linearBackward(d.dln, g + w.attention.qkv.weight, g + w.attention.qkv.bias, d.dqkv, a.ln1,
                 p + w.attention.qkv.weight, rows, width, 3 * shard.width);
  copyToRegionBackward(d.dln, n * c);
  layerNormBackward(dhidden, g + w.ln1.weight, g + w.ln1.bias, d.dln, residual, p + w.ln1.weight,
                    a.ln1Mean, a.ln1Rstd, n, c, d.layerNorm);
  if (observer_ != nullptr) {
    observer_->afterBlockBackward(layer);
    observer_->gradientsFinalFrom(layout_.blockBegin(layer));
  }
}

template <typename T>
void Gpt<T>::embeddingBackward(const ActivationArena<T>& arena, const T* dhidden) {
  T* g = gradients_.data();
  if (!split()) {
    layers::embeddingBackward(g + layout_.wte(), g + layout_.wpe(), dhidden, arena.inputs(),
                              arena.batch(), config_.seq, config_.width);
  } else {
    const ShardDimensions& shard = layout_.shard();
    vocabParallelEmbeddingBackward(g + layout_.wte(), g + layout_.wpe(), dhidden, arena.inputs(),
                                   static_cast<size_t>(shard.firstToken),
                                   static_cast<size_t>(shard.vocab), arena.batch(), config_.seq,
                                   static_cast<size_t>(config_.width));
  }
  if (observer_ != nullptr) observer_->gradientsFinalFrom(0);
}

template <typename T>
double Gpt<T>::forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                       int batch) {
  arena_.setBatch(inputs, targets, batch);
  embeddingForward(arena_);
  for (int layer = 0; layer < config_.layers; ++layer) blockForward(layer, arena_);
  return headForward(arena_);
}

template <typename T>
void Gpt<T>::backward(T lossScale) {
  requireEveryLayer("backward");
  T* dhidden = workspace_.dhidden;
  headBackward(arena_, dhidden, lossScale);
  for (int layer = config_.layers - 1; layer >= 0; --layer) blockBackward(layer, arena_, dhidden);
  embeddingBackward(arena_, dhidden);
}

template <typename T>
void Gpt<T>::zeroGradients() {
  std::fill(gradients_.begin(), gradients_.end(), T(0));
}

template <typename T>
std::span<const T> Gpt<T>::probabilities() const {
  return {arena_.head().probs, arena_.rows() * static_cast<size_t>(layout_.shard().vocab)};
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace cc::parallel
