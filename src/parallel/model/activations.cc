#include "parallel/model/activations.h"

namespace cc::parallel {
namespace {

struct Sizes {
  size_t n, c, bhtt, tt, vp;
};

Sizes sizesOf(const GptConfig& config, int maxBatch) {
  const size_t batch = static_cast<size_t>(maxBatch);
  const size_t seq = static_cast<size_t>(config.seq);
  return Sizes{batch * seq, static_cast<size_t>(config.width),
               batch * static_cast<size_t>(config.heads) * seq * seq, seq * seq,
               static_cast<size_t>(config.paddedVocab())};
}

// One walk over the arena, used both to count and to hand out pointers, so the two cannot
// disagree.
template <typename T, typename Take>
void carve(const GptConfig& config, int maxBatch, Take take, ActivationArena<T>* arena) {
  const Sizes s = sizesOf(config, maxBatch);
  for (int layer = 0; layer < config.layers; ++layer) {
    BlockActivations<T> block{};
    block.ln1 = take(s.n * s.c);
    block.ln1Mean = take(s.n);
    block.ln1Rstd = take(s.n);
    block.qkv = take(s.n * 3 * s.c);
    block.atty = take(s.n * s.c);
    block.att = take(s.bhtt);
    block.residual2 = take(s.n * s.c);
    block.ln2 = take(s.n * s.c);
    block.ln2Mean = take(s.n);
    block.ln2Rstd = take(s.n);
    block.fch = take(s.n * 4 * s.c);
    block.fchGelu = take(s.n * 4 * s.c);
    block.residual3 = take(s.n * s.c);
    if (arena != nullptr) arena->blocks.push_back(block);
  }
  T* encoded = take(s.n * s.c);
  T* projection = take(s.n * s.c);
  T* lnf = take(s.n * s.c);
  T* lnfMean = take(s.n);
  T* lnfRstd = take(s.n);
  T* probs = take(s.n * s.vp);
  T* losses = take(s.n);
  GradientScratch<T> grads{};
  grads.dresidual = take(s.n * s.c);
  grads.dln = take(s.n * s.c);
  grads.dqkv = take(s.n * 3 * s.c);
  grads.datty = take(s.n * s.c);
  grads.dfch = take(s.n * 4 * s.c);
  grads.dfchGelu = take(s.n * 4 * s.c);
  grads.dscores = take(s.tt);
  grads.dlogits = take(s.n * s.vp);
  grads.layerNorm = take(2 * s.c);
  if (arena != nullptr) {
    arena->encoded = encoded;
    arena->projection = projection;
    arena->lnf = lnf;
    arena->lnfMean = lnfMean;
    arena->lnfRstd = lnfRstd;
    arena->probs = probs;
    arena->losses = losses;
    arena->grads = grads;
  }
}

}  // namespace

template <typename T>
size_t ActivationArena<T>::elementCount(const GptConfig& config, int maxBatch) {
  size_t total = 0;
  carve<T>(
      config, maxBatch,
      [&total](size_t count) -> T* {
        total += count;
        return nullptr;
      },
      nullptr);
  return total;
}

template <typename T>
ActivationArena<T>::ActivationArena(const GptConfig& config, int maxBatch)
    : storage_(elementCount(config, maxBatch)) {
  size_t used = 0;
  carve<T>(
      config, maxBatch,
      [this, &used](size_t count) -> T* {
        T* begin = storage_.data() + used;
        used += count;
        return begin;
      },
      this);
}

template class ActivationArena<float>;
template class ActivationArena<double>;

}  // namespace cc::parallel
