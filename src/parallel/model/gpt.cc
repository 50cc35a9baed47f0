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
Gpt<T>::Gpt(const GptConfig& config, int maxBatch, size_t bufferElements, bool recompute)
    : Gpt(ParameterLayout(config), maxBatch, bufferElements, recompute) {}

template <typename T>
Gpt<T>::Gpt(const ParameterLayout& layout, int maxBatch, size_t bufferElements, bool recompute)
    : config_(layout.config()),
      layout_(layout),
      maxBatch_(maxBatch),
      recompute_(recompute),
      parameterPages_(std::max(layout_.totalSize(), bufferElements) * sizeof(T)),
      gradientPages_(parameterPages_.bytes()),
      parameters_(static_cast<T*>(parameterPages_.data()),
                  std::max(layout_.totalSize(), bufferElements)),
      gradients_(static_cast<T*>(gradientPages_.data()), parameters_.size()),
      workspace_(layout_, maxBatch, recompute) {}

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
bool Gpt<T>::sequenceParallel() const {
  return layout_.part().sequenceParallel && split();
}

template <typename T>
const T* Gpt<T>::gatherRows(const T* local, const ActivationArena<T>& arena) {
  if (!sequenceParallel()) return local;
  const size_t c = static_cast<size_t>(config_.width);
  tensorParallel_->gatherSequence(std::span<const T>(local, arena.localRows() * c),
                                  std::span<T>(workspace_.projection, arena.rows() * c));
  return workspace_.projection;
}

template <typename T>
T* Gpt<T>::sumPartials(T* partial, const ActivationArena<T>& arena, bool forward) {
  const size_t c = static_cast<size_t>(config_.width);
  if (!split()) return partial;
  const std::span<T> whole(partial, arena.rows() * c);
  if (sequenceParallel()) {
    tensorParallel_->reduceScatterSequence(whole);
    return partial + arena.firstLocalRow() * c;
  }
  if (forward) {
    tensorParallel_->reduceFromRegionForward(whole);
  } else {
    tensorParallel_->copyToRegionBackward(whole);
  }
  return partial;
}

template <typename T>
typename Gpt<T>::LayerNormGradient Gpt<T>::layerNormGradient(const LayerNormOffsets& offsets,
                                                             int slot) {
  if (!sequenceParallel())
    return {gradients_.data() + offsets.weight, gradients_.data() + offsets.bias};
  T* scratch = workspace_.sequenceGradients + 2 * static_cast<size_t>(slot * config_.width);
  return {scratch, scratch + config_.width};
}

template <typename T>
void Gpt<T>::sumLayerNormGradients(std::span<const LayerNormOffsets> norms) {
  if (!sequenceParallel()) return;
  const size_t c = static_cast<size_t>(config_.width);
  T* scratch = workspace_.sequenceGradients;
  tensorParallel_->allReduceSum(std::span<T>(scratch, 2 * c * norms.size()));
  T* g = gradients_.data();
  for (size_t k = 0; k < norms.size(); ++k) {
    const T* weight = scratch + 2 * k * c;
    const T* bias = weight + c;
    for (size_t i = 0; i < c; ++i) g[norms[k].weight + i] += weight[i];
    for (size_t i = 0; i < c; ++i) g[norms[k].bias + i] += bias[i];
  }
  zero(scratch, 2 * c * norms.size());  // the next backward accumulates from zero
}

template <typename T>
void Gpt<T>::embeddingForward(ActivationArena<T>& arena) {
  const T* p = parameters_.data();
  const size_t c = static_cast<size_t>(config_.width);
  if (!split()) {
    layers::embeddingForward(arena.input(), arena.inputs(), p + layout_.wte(), p + layout_.wpe(),
                             arena.batch(), config_.seq, config_.width);
    return;
  }
  // Each rank looks up the tokens it owns; g sums the lookups (one rank's row and zeros:
  // exact; under SP each rank keeps its rows of the sum), then the positions are added as
  // on one process.
  const ShardDimensions& shard = layout_.shard();
  T* lookups = workspace_.projection;
  vocabParallelEmbeddingForward(lookups, arena.inputs(), p + layout_.wte(),
                                static_cast<size_t>(shard.firstToken),
                                static_cast<size_t>(shard.vocab), arena.rows(), c);
  const T* local = sumPartials(lookups, arena, /*forward=*/true);
  std::copy(local, local + arena.localRows() * c, arena.input());
  addPositions(arena.input(), p + layout_.wpe(), arena.firstLocalRow(), arena.localRows(),
               config_.seq, c);
}

template <typename T>
void Gpt<T>::requireEveryLayer(const char* what) const {
  if (layout_.hasEmbeddings() && layout_.hasHead() && layout_.chunks().size() == 1) return;
  // A pipeline stage runs its pieces from a schedule; the whole-model loop is a caller's bug.
  std::fprintf(stderr, "Gpt::%s: the model part holds layers [%d, %d) of %d; run its pieces\n",
               what, layout_.firstLayer(), layout_.endLayer(), config_.layers);
  std::abort();
}

template <typename T>
const T* Gpt<T>::rowParallelForward(const T* inp, const T* weight, const T* bias, int inWidth,
                                    const ActivationArena<T>& arena) {
  const int rows = static_cast<int>(arena.rows());
  const int width = config_.width;
  T* out = workspace_.projection;
  if (!split()) {
    linearForward(out, inp, weight, bias, rows, inWidth, width);  // the bias seeds the GEMM
    return out;
  }
  matmulForward(out, inp, weight, rows, inWidth, width);
  T* local = sumPartials(out, arena, /*forward=*/true);
  addBias(local, bias, static_cast<int>(arena.localRows()), width);
  return local;
}

template <typename T>
void Gpt<T>::blockForward(int layer, ActivationArena<T>& arena) {
  if (observer_ != nullptr) observer_->beforeBlockForward(layer);
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    // Everything but the output in the workspace's block, for backward to rebuild.
    T* output = a.residual3;
    a = workspace_.block;
    a.residual3 = output;
  }
  computeBlock(layer, arena, a);
  if (observer_ != nullptr) observer_->afterBlockForward(layer);
}

template <typename T>
void Gpt<T>::computeBlock(int layer, const ActivationArena<T>& arena, BlockActivations<T>& a) {
  const int rows = static_cast<int>(arena.rows());
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  const BlockOffsets& w = layout_.block(layer);
  const T* residual = arena.blockInput(layer);
  // The LayerNorms and residual adds run on the rank's M rows, the linears and the
  // attention between them on all N.
  layerNormForward(a.ln1, a.ln1Mean, a.ln1Rstd, residual, p + w.ln1.weight, p + w.ln1.bias, m, c);
  linearForward(a.qkv, gatherRows(a.ln1, arena), p + w.attention.qkv.weight,
                p + w.attention.qkv.bias, rows, width, 3 * shard.width);
  attentionForward(a.atty, a.att, a.qkv, shape);
  const T* attention = rowParallelForward(a.atty, p + w.attention.projection.weight,
                                          p + w.attention.projection.bias, shard.width, arena);
  residualForward(a.residual2, residual, attention, m * c);
  layerNormForward(a.ln2, a.ln2Mean, a.ln2Rstd, a.residual2, p + w.ln2.weight, p + w.ln2.bias, m,
                   c);
  linearForward(a.fch, gatherRows(a.ln2, arena), p + w.mlp.fc.weight, p + w.mlp.fc.bias, rows,
                width, shard.hidden);
  geluForward(a.fchGelu, a.fch, arena.rows() * static_cast<size_t>(shard.hidden));
  const T* mlp = rowParallelForward(a.fchGelu, p + w.mlp.projection.weight,
                                    p + w.mlp.projection.bias, shard.hidden, arena);
  residualForward(a.residual3, a.residual2, mlp, m * c);
}

template <typename T>
double Gpt<T>::headForward(ActivationArena<T>& arena) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t c = static_cast<size_t>(config_.width);
  const T* p = parameters_.data();
  HeadActivations<T>& h = arena.head();
  layerNormForward(h.lnf, h.lnfMean, h.lnfRstd, arena.output(), p + layout_.lnfWeight(),
                   p + layout_.lnfBias(), arena.localRows(), c);
  const ShardDimensions& shard = layout_.shard();
  tiedHeadForward(h.probs, gatherRows(h.lnf, arena), p + layout_.headWeight(), rows, config_.width,
                  shard.vocab);
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
  const size_t m = arena.localRows();
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
  tiedHeadBackward(d.dln, g + layout_.headWeight(), d.dlogits, gatherRows(h.lnf, arena),
                   p + layout_.headWeight(), rows, config_.width, shard.vocab);
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);  // f before the head
  zero(dhidden, m * c);
  const LayerNormOffsets lnf{layout_.lnfWeight(), layout_.lnfBias()};
  const LayerNormGradient dlnf = layerNormGradient(lnf, 0);
  layerNormBackward(dhidden, dlnf.weight, dlnf.bias, dln, arena.output(), p + layout_.lnfWeight(),
                    h.lnfMean, h.lnfRstd, m, c, d.layerNorm);
  sumLayerNormGradients(std::span<const LayerNormOffsets>(&lnf, 1));
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.lnfWeight());
}

template <typename T>
void Gpt<T>::blockBackward(int layer, ActivationArena<T>& arena, T* dhidden) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const size_t hidden = static_cast<size_t>(shard.hidden);
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  T* g = gradients_.data();
  Workspace<T>& d = workspace_;
  const BlockOffsets& w = layout_.block(layer);
  const T* residual = arena.blockInput(layer);
  const LayerNormOffsets norms[] = {w.ln2, w.ln1};
  const LayerNormGradient dln2 = layerNormGradient(w.ln2, 0);
  const LayerNormGradient dln1 = layerNormGradient(w.ln1, 1);
  if (observer_ != nullptr) observer_->beforeBlockBackward(layer);
  // Under recomputation the block's forward runs again (its parameters are back: ZeRO-3
  // gathered them above) into the workspace's block, output included, the arena's left as is.
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    a = workspace_.block;
    computeBlock(layer, arena, a);
  }
  // dhidden is d(residual3); the residual add passes it unchanged to the MLP branch and to
  // residual2, so it is used in place for both. Under SP the linears read it gathered to
  // all N rows, and the input each column-parallel linear saved sharded, re-gathered.
  zero(d.dfchGelu, n * hidden);
  linearBackward(d.dfchGelu, g + w.mlp.projection.weight, g + w.mlp.projection.bias,
                 gatherRows(dhidden, arena), a.fchGelu, p + w.mlp.projection.weight, rows,
                 shard.hidden, width);
  zero(d.dfch, n * hidden);
  geluBackward(d.dfch, a.fch, d.dfchGelu, n * hidden);
  zero(d.dln, n * c);
  linearBackward(d.dln, g + w.mlp.fc.weight, g + w.mlp.fc.bias, d.dfch, gatherRows(a.ln2, arena),
                 p + w.mlp.fc.weight, rows, width, shard.hidden);
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);
  layerNormBackward(dhidden, dln2.weight, dln2.bias, dln, a.residual2, p + w.ln2.weight, a.ln2Mean,
                    a.ln2Rstd, m, c, d.layerNorm);
  // Now dhidden is d(residual2), which again feeds both the attention branch and the
  // block's input.
  zero(d.datty, n * static_cast<size_t>(shard.width));
  linearBackward(d.datty, g + w.attention.projection.weight, g + w.attention.projection.bias,
                 gatherRows(dhidden, arena), a.atty, p + w.attention.projection.weight, rows,
                 shard.width, width);
  zero(d.dqkv, n * 3 * static_cast<size_t>(shard.width));
  attentionBackward(d.dqkv, d.datty, a.qkv, a.att, shape, d.dscores);
  zero(d.dln, n * c);
  linearBackward(d.dln, g + w.attention.qkv.weight, g + w.attention.qkv.bias, d.dqkv,
                 gatherRows(a.ln1, arena), p + w.attention.qkv.weight, rows, width,
                 3 * shard.width);
  dln = sumPartials(d.dln, arena, /*forward=*/false);
  layerNormBackward(dhidden, dln1.weight, dln1.bias, dln, residual, p + w.ln1.weight, a.ln1Mean,
                    a.ln1Rstd, m, c, d.layerNorm);
  sumLayerNormGradients(norms);
  if (observer_ != nullptr) {
    observer_->afterBlockBackward(layer);
    observer_->gradientsFinalFrom(layout_.blockBegin(layer));
  }
}

// The split backward's stash, per micro-batch, for N rows of which this rank's residual
// stream holds M (N but under sequence parallelism): the head's dlogits [N, Vs] and d(ln_f
// output) [M, C]; per block d(output) [N, C] (gathered under SP), d(fch) [N, F], d(ln2
// output) [M, C], d(residual2) [N, C] (gathered), d(qkv) [N, 3Cs], d(ln1 output) [M, C];
// the embeddings' gradient [M, C].
template <typename T>
typename Gpt<T>::StashOffsets Gpt<T>::stashOffsets(size_t rows) const {
  const size_t c = static_cast<size_t>(config_.width);
  const ModelPart& part = layout_.part();
  const size_t local = rows / static_cast<size_t>(part.sequenceParallel ? part.tpSize : 1);
  const ShardDimensions& shard = layout_.shard();
  StashOffsets o{};
  const size_t head = layout_.hasHead() ? rows * static_cast<size_t>(shard.vocab) : 0;
  o.logits = 0;
  o.lnf = head;
  o.blocks = head + (layout_.hasHead() ? local * c : 0);
  o.perBlock =
      rows * (2 * c + static_cast<size_t>(shard.hidden) + 3 * static_cast<size_t>(shard.width)) +
      local * 2 * c;
  o.embedding = o.blocks + o.perBlock * layout_.blocks().size();
  o.total = o.embedding + (layout_.hasEmbeddings() ? local * c : 0);
  return o;
}

template <typename T>
size_t Gpt<T>::weightStashElements(int maxBatch) const {
  return stashOffsets(static_cast<size_t>(maxBatch) * static_cast<size_t>(config_.seq)).total;
}

template <typename T>
void Gpt<T>::headBackwardInput(ActivationArena<T>& arena, T* dhidden, T lossScale, T* stash) {
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const size_t c = static_cast<size_t>(config_.width);
  const ShardDimensions& shard = layout_.shard();
  const size_t columns = static_cast<size_t>(shard.vocab);
  const StashOffsets o = stashOffsets(n);
  T* dlogits = stash + o.logits;
  const T* p = parameters_.data();
  const HeadActivations<T>& h = arena.head();
  Workspace<T>& d = workspace_;
  zero(dlogits, n * columns);
  const T scale = lossScale / static_cast<T>(n);
  if (!split()) {
    crossEntropyBackward(dlogits, h.probs, arena.targets(), n, static_cast<size_t>(config_.vocab),
                         columns, scale);
  } else {
    const size_t first = static_cast<size_t>(shard.firstToken);
    vocabParallelCrossEntropyBackward(
        dlogits, h.probs, arena.targets(), n, columns, first,
        realColumns(first, columns, static_cast<size_t>(config_.vocab)), scale);
  }
  zero(d.dln, n * c);
  tiedHeadBackwardInput(d.dln, dlogits, p + layout_.headWeight(), static_cast<int>(n),
                        config_.width, shard.vocab);
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);  // f before the head
  T* savedDln = stash + o.lnf;
  std::copy(dln, dln + m * c, savedDln);
  zero(dhidden, m * c);
  layerNormBackwardInput(dhidden, savedDln, arena.output(), p + layout_.lnfWeight(), h.lnfMean,
                         h.lnfRstd, m, c, d.layerNorm);
}

template <typename T>
void Gpt<T>::headBackwardWeight(const ActivationArena<T>& arena, const T* stash) {
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const size_t c = static_cast<size_t>(config_.width);
  const StashOffsets o = stashOffsets(n);
  T* g = gradients_.data();
  const HeadActivations<T>& h = arena.head();
  tiedHeadBackwardWeight(g + layout_.headWeight(), stash + o.logits, gatherRows(h.lnf, arena),
                         static_cast<int>(n), config_.width, layout_.shard().vocab);
  const LayerNormOffsets lnf{layout_.lnfWeight(), layout_.lnfBias()};
  const LayerNormGradient dlnf = layerNormGradient(lnf, 0);
  layerNormBackwardParameters(dlnf.weight, dlnf.bias, stash + o.lnf, arena.output(), h.lnfMean,
                              h.lnfRstd, m, c);
  sumLayerNormGradients(std::span<const LayerNormOffsets>(&lnf, 1));
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.lnfWeight());
}

namespace {

// The stash of one block: d(output), d(fch), d(ln2 output), d(residual2), d(qkv), d(ln1
// output), in that order (stashOffsets' sizes).
template <typename T>
struct BlockStash {
  T* output;
  T* fch;
  T* ln2;
  T* residual2;
  T* qkv;
  T* ln1;
};

template <typename T>
BlockStash<T> blockStash(T* base, size_t rows, size_t localRows, size_t width,
                         const ShardDimensions& shard) {
  BlockStash<T> s{};
  s.output = base;
  s.fch = s.output + rows * width;
  s.ln2 = s.fch + rows * static_cast<size_t>(shard.hidden);
  s.residual2 = s.ln2 + localRows * width;
  s.qkv = s.residual2 + rows * width;
  s.ln1 = s.qkv + rows * 3 * static_cast<size_t>(shard.width);
  return s;
}

}  // namespace

template <typename T>
T* Gpt<T>::blockStashBase(int layer, T* stash, size_t rows) const {
  const StashOffsets o = stashOffsets(rows);
  const size_t position = static_cast<size_t>(&layout_.block(layer) - layout_.blocks().data());
  return stash + o.blocks + o.perBlock * position;
}

template <typename T>
void Gpt<T>::blockBackwardInput(int layer, ActivationArena<T>& arena, T* dhidden, T* stash) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const size_t hidden = static_cast<size_t>(shard.hidden);
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  Workspace<T>& d = workspace_;
  const BlockOffsets& w = layout_.block(layer);
  const BlockStash<T> s = blockStash(blockStashBase(layer, stash, n), n, m, c, shard);
  if (observer_ != nullptr) observer_->beforeBlockBackward(layer);
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    a = workspace_.block;
    computeBlock(layer, arena, a);
  }
  // As blockBackward, each linear's input gradient only; what W needs is saved: the output
  // gradients the linears saw (gathered to N rows under SP) and the LayerNorms' (summed
  // over the TP group, this rank's M rows).
  const T* dout = gatherRows(dhidden, arena);
  std::copy(dout, dout + n * c, s.output);
  zero(d.dfchGelu, n * hidden);
  matmulBackwardInput(d.dfchGelu, s.output, p + w.mlp.projection.weight, rows, shard.hidden, width);
  zero(s.fch, n * hidden);
  geluBackward(s.fch, a.fch, d.dfchGelu, n * hidden);
  zero(d.dln, n * c);
  matmulBackwardInput(d.dln, s.fch, p + w.mlp.fc.weight, rows, width, shard.hidden);
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);
  std::copy(dln, dln + m * c, s.ln2);
  layerNormBackwardInput(dhidden, s.ln2, a.residual2, p + w.ln2.weight, a.ln2Mean, a.ln2Rstd, m, c,
                         d.layerNorm);
  const T* dresidual2 = gatherRows(dhidden, arena);
  std::copy(dresidual2, dresidual2 + n * c, s.residual2);
  zero(d.datty, n * static_cast<size_t>(shard.width));
  matmulBackwardInput(d.datty, s.residual2, p + w.attention.projection.weight, rows, shard.width,
                      width);
  zero(s.qkv, n * 3 * static_cast<size_t>(shard.width));
  attentionBackward(s.qkv, d.datty, a.qkv, a.att, shape, d.dscores);
  zero(d.dln, n * c);
  matmulBackwardInput(d.dln, s.qkv, p + w.attention.qkv.weight, rows, width, 3 * shard.width);
  dln = sumPartials(d.dln, arena, /*forward=*/false);
  std::copy(dln, dln + m * c, s.ln1);
  layerNormBackwardInput(dhidden, s.ln1, arena.blockInput(layer), p + w.ln1.weight, a.ln1Mean,
                         a.ln1Rstd, m, c, d.layerNorm);
  if (observer_ != nullptr) observer_->afterBlockBackward(layer);
}

template <typename T>
void Gpt<T>::blockBackwardWeight(int layer, const ActivationArena<T>& arena, const T* stash) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  T* g = gradients_.data();
  const BlockOffsets& w = layout_.block(layer);
  // Under recomputation the block's forward runs once more: B's rebuild is gone by now.
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    a = workspace_.block;
    computeBlock(layer, arena, a);
  }
  const BlockStash<const T> s =
      blockStash<const T>(blockStashBase(layer, const_cast<T*>(stash), n), n, m, c, shard);
  const LayerNormOffsets norms[] = {w.ln2, w.ln1};
  const LayerNormGradient dln2 = layerNormGradient(w.ln2, 0);
  const LayerNormGradient dln1 = layerNormGradient(w.ln1, 1);
  // Each tensor's gradient gets this micro-batch's one contribution, as in blockBackward.
  matmulBackwardWeight(g + w.mlp.projection.weight, s.output, a.fchGelu, rows, shard.hidden, width);
  biasBackward(g + w.mlp.projection.bias, s.output, rows, width);
  matmulBackwardWeight(g + w.mlp.fc.weight, s.fch, gatherRows(a.ln2, arena), rows, width,
                       shard.hidden);
  biasBackward(g + w.mlp.fc.bias, s.fch, rows, shard.hidden);
  layerNormBackwardParameters(dln2.weight, dln2.bias, s.ln2, a.residual2, a.ln2Mean, a.ln2Rstd, m,
                              c);
  matmulBackwardWeight(g + w.attention.projection.weight, s.residual2, a.atty, rows, shard.width,
                       width);
  biasBackward(g + w.attention.projection.bias, s.residual2, rows, width);
  matmulBackwardWeight(g + w.attention.qkv.weight, s.qkv, gatherRows(a.ln1, arena), rows, width,
                       3 * shard.width);
  biasBackward(g + w.attention.qkv.bias, s.qkv, rows, 3 * shard.width);
  layerNormBackwardParameters(dln1.weight, dln1.bias, s.ln1, arena.blockInput(layer), a.ln1Mean,
                              a.ln1Rstd, m, c);
  sumLayerNormGradients(norms);
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.blockBegin(layer));
}

template <typename T>
void Gpt<T>::embeddingBackwardInput(const ActivationArena<T>& arena, const T* dhidden, T* stash) {
  std::copy(dhidden, dhidden + arena.localRows() * static_cast<size_t>(config_.width),
            stash + stashOffsets(arena.rows()).embedding);
}

template <typename T>
void Gpt<T>::embeddingBackwardWeight(const ActivationArena<T>& arena, const T* stash) {
  embeddingBackward(arena, stash + stashOffsets(arena.rows()).embedding);
}

template <typename T>
void Gpt<T>::embeddingBackward(const ActivationArena<T>& arena, const T* dhidden) {
  T* g = gradients_.data();
  if (!split()) {
    layers::embeddingBackward(g + layout_.wte(), g + layout_.wpe(), dhidden, arena.inputs(),
                              arena.batch(), config_.seq, config_.width);
  } else {
    const ShardDimensions& shard = layout_.shard();
    // Under SP the gradient is gathered to all N rows first (the reduce-scatter's backward).
    vocabParallelEmbeddingBackward(g + layout_.wte(), g + layout_.wpe(), gatherRows(dhidden, arena),
                                   arena.inputs(), static_cast<size_t>(shard.firstToken),
                                   static_cast<size_t>(shard.vocab), arena.batch(), config_.seq,
                                   static_cast<size_t>(config_.width));
  }
  if (observer_ != nullptr) observer_->gradientsFinalFrom(0);
}

template <typename T>
double Gpt<T>::forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                       int batch) {
  requireEveryLayer("forward");
  if (!arena_) arena_ = std::make_unique<ActivationArena<T>>(layout_, maxBatch_, recompute_);
  arena_->setBatch(inputs, targets, batch);
  embeddingForward(*arena_);
  for (int layer = 0; layer < config_.layers; ++layer) blockForward(layer, *arena_);
  return headForward(*arena_);
}

template <typename T>
void Gpt<T>::backward(T lossScale) {
  requireEveryLayer("backward");
  if (!arena_) {
    std::fprintf(stderr, "Gpt::backward: called before any forward\n");
    std::abort();
  }
  T* dhidden = workspace_.dhidden;
  headBackward(*arena_, dhidden, lossScale);
  for (int layer = config_.layers - 1; layer >= 0; --layer) blockBackward(layer, *arena_, dhidden);
  embeddingBackward(*arena_, dhidden);
}

template <typename T>
void Gpt<T>::zeroGradients() {
  std::fill(gradients_.begin(), gradients_.end(), T(0));
}

template <typename T>
std::span<const T> Gpt<T>::probabilities() const {
  if (!arena_) return {};
  return {arena_->head().probs, arena_->rows() * static_cast<size_t>(layout_.shard().vocab)};
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace cc::parallel
