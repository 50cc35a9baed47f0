// The activation arena: every tensor the forward keeps for the backward, plus the one
// layer's worth of gradient scratch the backward reuses from the top block down, carved
// from a single allocation whose size follows from the configuration and the batch.
#pragma once

#include <cstddef>
#include <vector>

#include "parallel/model/config.h"

namespace cc::parallel {

template <typename T>
struct BlockActivations {
  T* ln1;        // [N, C]
  T* ln1Mean;    // [N]
  T* ln1Rstd;    // [N]
  T* qkv;        // [N, 3C]
  T* atty;       // [N, C]
  T* att;        // [B, H, T, T]
  T* residual2;  // [N, C]
  T* ln2;        // [N, C]
  T* ln2Mean;    // [N]
  T* ln2Rstd;    // [N]
  T* fch;        // [N, 4C]
  T* fchGelu;    // [N, 4C]
  T* residual3;  // [N, C]
};

template <typename T>
struct GradientScratch {
  T* dresidual;  // [N, C]: the residual stream's gradient, flowing down the blocks
  T* dln;        // [N, C]
  T* dqkv;       // [N, 3C]
  T* datty;      // [N, C]
  T* dfch;       // [N, 4C]
  T* dfchGelu;   // [N, 4C]
  T* dscores;    // [T, T]
  T* dlogits;    // [N, Vp]
  T* layerNorm;  // [2C]
};

template <typename T>
class ActivationArena {
 public:
  ActivationArena(const GptConfig& config, int maxBatch);

  // Elements the arena holds for this configuration and batch (the docs' formula).
  static size_t elementCount(const GptConfig& config, int maxBatch);

  std::vector<BlockActivations<T>> blocks;
  T* encoded;     // [N, C]
  T* projection;  // [N, C]: attn/mlp c_proj output, consumed at once by the residual add
  T* lnf;         // [N, C]
  T* lnfMean;     // [N]
  T* lnfRstd;     // [N]
  T* probs;       // [N, Vp]: logits, turned into probabilities in place
  T* losses;      // [N]
  GradientScratch<T> grads;

 private:
  std::vector<T> storage_;
};

}  // namespace cc::parallel
