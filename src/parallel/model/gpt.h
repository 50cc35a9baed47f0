// The reference GPT-2-style decoder on one process: token and position embeddings, L
// blocks of (LayerNorm, causal self-attention, residual, LayerNorm, GELU MLP, residual),
// final LayerNorm and a head tied to the token embedding. Parameters and gradients are
// each one contiguous buffer in ParameterLayout's order; backward accumulates into the
// gradients, so micro-batches sum by calling forward/backward repeatedly. A template on
// the scalar: float for training, double for the finite-difference tests.
#pragma once

#include "parallel/model/activations.h"
#include "parallel/model/config.h"
#include "parallel/model/parameter_layout.h"

#include <cstdint>
#include <span>
#include <vector>

namespace cc::parallel {

template <typename T>
class Gpt {
 public:
  // The arena is sized for batches of up to maxBatch sequences of config.seq tokens.
  Gpt(const GptConfig& config, int maxBatch);

  const GptConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  int maxBatch() const { return maxBatch_; }
  std::span<T> parameters() { return parameters_; }
  std::span<const T> parameters() const { return parameters_; }
  std::span<T> gradients() { return gradients_; }
  std::span<const T> gradients() const { return gradients_; }

  // Runs batch x seq tokens (inputs and targets row-major [batch, seq], ids < vocab, which
  // the caller guarantees) and returns the mean cross-entropy. Keeps what backward needs.
  double forward(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch);

  // Adds lossScale * d(mean loss)/d(parameters) of the last forward to the gradients.
  void backward(T lossScale = T(1));

  void zeroGradients();

  // Probabilities of the last forward, [batch, seq, paddedVocab] (padding columns zero).
  std::span<const T> probabilities() const;

 private:
  GptConfig config_;
  ParameterLayout layout_;
  int maxBatch_;
  std::vector<T> parameters_;
  std::vector<T> gradients_;
  ActivationArena<T> arena_;
  std::vector<int32_t> inputs_;
  std::vector<int32_t> targets_;
  int batch_ = 0;
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace cc::parallel
