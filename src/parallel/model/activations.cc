#include "parallel/model/activations.h"

#include <functional>

namespace cc::parallel {
namespace {

struct Sizes {
  size_t rows;           // N = B x T
  size_t localRows;      // M: N, or N / tp under sequence parallelism
  size_t width;          // C
  size_t shardWidth;     // Cs
  size_t hidden;         // F
  size_t scores;         // B x Hs x T x T
  size_t scoresPerHead;  // T x T
  size_t vocab;          // the shard's logits per row: Vp / tp
  size_t lossScratch;    // the vocabulary-parallel loss's row max, sums and target logits
};

Sizes sizesOf(const ParameterLayout& layout, int maxBatch) {
  const GptConfig& config = layout.config();
  const size_t batch = static_cast<size_t>(maxBatch);
  const size_t seq = static_cast<size_t>(config.seq);
  const ShardDimensions& shard = layout.shard();
  const ModelPart& part = layout.part();
  return Sizes{batch * seq,
               batch * seq / static_cast<size_t>(part.sequenceParallel ? part.tpSize : 1),
               static_cast<size_t>(config.width),
               static_cast<size_t>(shard.width),
               static_cast<size_t>(shard.hidden),
               batch * static_cast<size_t>(shard.heads) * seq * seq,
               seq * seq,
               static_cast<size_t>(shard.vocab),
               part.tpSize > 1 ? 3 * batch * seq : 0};
}

// One walk over an arena or a workspace, used both to count and to hand out pointers,
// so the two cannot disagree. take(count) returns the next count elements.
// One block's activations; with onlyOutput, only residual3. An MoE block has no dense MLP
// (its experts' activations are MoeActivations, sized by the routing).
template <typename T, typename Take>
BlockActivations<T> carveBlock(const Sizes& s, Take& take, bool onlyOutput, bool moe = false) {
  BlockActivations<T> block{};
  if (!onlyOutput) {
    block.ln1 = take(s.localRows * s.width);
    block.ln1Mean = take(s.localRows);
    block.ln1Rstd = take(s.localRows);
    block.qkv = take(s.rows * 3 * s.shardWidth);
    block.atty = take(s.rows * s.shardWidth);
    block.att = take(s.scores);
    block.residual2 = take(s.localRows * s.width);
    block.ln2 = take(s.localRows * s.width);
    block.ln2Mean = take(s.localRows);
    block.ln2Rstd = take(s.localRows);
    if (!moe) {
      block.fch = take(s.rows * s.hidden);
      block.fchGelu = take(s.rows * s.hidden);
    }
  }
  block.residual3 = take(s.localRows * s.width);
  return block;
}

// One walk over an arena or a workspace, used both to count and to hand out pointers,
// so the two cannot disagree. take(count) returns the next count elements.
template <typename T, typename Take>
void carveArena(const ParameterLayout& layout, int chunk, int maxBatch, bool recompute, Take take,
                std::vector<BlockActivations<T>>* blocks, T** input, HeadActivations<T>* head) {
  const Sizes s = sizesOf(layout, maxBatch);
  const LayerRange range = layout.chunks()[static_cast<size_t>(chunk)];
  for (int layer = range.first; layer < range.end; ++layer) {
    BlockActivations<T> block = carveBlock<T>(s, take, recompute, layout.config().isMoe(layer));
    if (blocks != nullptr) blocks->push_back(block);
  }
  T* in = take(s.localRows * s.width);
  if (input != nullptr) *input = in;
  if (range.end == layout.config().layers) {
    HeadActivations<T> carved{};
    carved.lnf = take(s.localRows * s.width);
    carved.lnfMean = take(s.localRows);
    carved.lnfRstd = take(s.localRows);
    carved.probs = take(s.rows * s.vocab);
    carved.losses = take(s.rows);
    if (head != nullptr) *head = carved;
  }
}

template <typename T, typename Take>
void carveWorkspace(const ParameterLayout& layout, int maxBatch, bool recompute, Take take,
                    Workspace<T>* workspace) {
  const Sizes s = sizesOf(layout, maxBatch);
  const BlockActivations<T> block =
      recompute ? carveBlock<T>(s, take, false) : BlockActivations<T>{};
  T* projection = take(s.rows * s.width);
  T* dhidden = take(s.localRows * s.width);
  T* dln = take(s.rows * s.width);
  T* dqkv = take(s.rows * 3 * s.shardWidth);
  T* datty = take(s.rows * s.shardWidth);
  T* dfch = take(s.rows * s.hidden);
  T* dfchGelu = take(s.rows * s.hidden);
  T* dscores = take(s.scoresPerHead);
  T* dlogits = layout.hasHead() ? take(s.rows * s.vocab) : nullptr;
  T* layerNorm = take(2 * s.width);
  T* lossScratch = layout.hasHead() && s.lossScratch > 0 ? take(s.lossScratch) : nullptr;
  T* sequenceGradients = layout.part().sequenceParallel ? take(4 * s.width) : nullptr;
  if (workspace == nullptr) return;
  workspace->block = block;
  workspace->lossScratch = lossScratch;
  workspace->sequenceGradients = sequenceGradients;
  workspace->projection = projection;
  workspace->dhidden = dhidden;
  workspace->dln = dln;
  workspace->dqkv = dqkv;
  workspace->datty = datty;
  workspace->dfch = dfch;
  workspace->dfchGelu = dfchGelu;
  workspace->dscores = dscores;
  workspace->dlogits = dlogits;
  workspace->layerNorm = layerNorm;
}

template <typename T>
struct Counter {
  size_t total = 0;
  T* operator()(size_t count) {
    total += count;
    return nullptr;
  }
};

template <typename T>
struct Carver {
  T* next;
  T* operator()(size_t count) {
    T* begin = next;
    next += count;
    return begin;
  }
};

}  // namespace

template <typename T>
size_t ActivationArena<T>::elementCount(const ParameterLayout& layout, int maxBatch, bool recompute,
                                        int chunk) {
  Counter<T> counter;
  carveArena<T>(layout, chunk, maxBatch, recompute, std::ref(counter), nullptr, nullptr, nullptr);
  return counter.total;
}

template <typename T>
ActivationArena<T>::ActivationArena(const ParameterLayout& layout, int maxBatch, bool recompute,
                                    int chunk)
    : maxBatch_(maxBatch),
      seq_(layout.config().seq),
      firstLayer_(layout.chunks()[static_cast<size_t>(chunk)].first),
      rowShards_(layout.part().sequenceParallel ? layout.part().tpSize : 1),
      rowShard_(layout.part().sequenceParallel ? layout.part().tpRank : 0),
      storage_(elementCount(layout, maxBatch, recompute, chunk)) {
  carveArena<T>(layout, chunk, maxBatch, recompute, Carver<T>{storage_.data()}, &blocks_, &input_,
                &head_);
  const LayerRange range = layout.chunks()[static_cast<size_t>(chunk)];
  size_t moeBlocks = 0;
  for (int layer = range.first; layer < range.end; ++layer)
    moeBlocks += layout.config().isMoe(layer) ? 1 : 0;
  moe_.resize(moeBlocks);
  size_t next = 0;
  for (int layer = range.first; layer < range.end; ++layer) {
    if (layout.config().isMoe(layer)) block(layer).moe = &moe_[next++];
  }
}

template <typename T>
void ActivationArena<T>::setBatch(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                                  int batch) {
  batch_ = batch;
  auxiliaryLoss_ = 0;
  const size_t count = rows();
  inputs_.assign(inputs.begin(),
                 inputs.begin() + static_cast<std::ptrdiff_t>(inputs.empty() ? 0 : count));
  targets_.assign(targets.begin(),
                  targets.begin() + static_cast<std::ptrdiff_t>(targets.empty() ? 0 : count));
}

template <typename T>
size_t ActivationArena<T>::rows() const {
  return static_cast<size_t>(batch_) * static_cast<size_t>(seq_);
}

template <typename T>
const T* ActivationArena<T>::blockInput(int layer) const {
  return layer == firstLayer_ ? input_
                              : blocks_[static_cast<size_t>(layer - 1 - firstLayer_)].residual3;
}

template <typename T>
size_t Workspace<T>::elementCount(const ParameterLayout& layout, int maxBatch, bool recompute) {
  Counter<T> counter;
  carveWorkspace<T>(layout, maxBatch, recompute, std::ref(counter), nullptr);
  return counter.total;
}

template <typename T>
Workspace<T>::Workspace(const ParameterLayout& layout, int maxBatch, bool recompute)
    : storage_(elementCount(layout, maxBatch, recompute)) {
  carveWorkspace<T>(layout, maxBatch, recompute, Carver<T>{storage_.data()}, this);
  block.moe = &moe;
}

size_t activationElementCount(const ParameterLayout& layout, int maxBatch, int arenas,
                              bool recompute) {
  return static_cast<size_t>(arenas) *
             ActivationArena<float>::elementCount(layout, maxBatch, recompute) +
         Workspace<float>::elementCount(layout, maxBatch, recompute);
}

template class ActivationArena<float>;
template class ActivationArena<double>;
template class Workspace<float>;
template class Workspace<double>;

}  // namespace cc::parallel
