// The reference GPT-2-style decoder on one process: token and position embeddings, L
// blocks of (LayerNorm, causal self-attention, residual, LayerNorm, GELU MLP, residual),
// final LayerNorm and a head tied to the token embedding. Parameters and gradients are
// each one contiguous buffer in ParameterLayout's order; backward accumulates into the
// gradients, so micro-batches sum by calling forward/backward repeatedly. A template on
// the scalar: float for training, double for the finite-difference tests.
//
// A parallel wrapper (DP, ZeRO) watches forward and backward through a GptObserver: it
// is told before and after each block runs, and how far from the end of the buffer the
// gradients are final, so it can gather a block's parameters just in time and start a
// gradient bucket's reduction while backward goes on.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/model/activations.h"
#include "parallel/model/config.h"
#include "parallel/model/page_buffer.h"
#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

// Called on the thread running forward/backward. Backward finishes the gradients from the
// end of the buffer towards its start (ln_f, the last block, ..., the first block, then
// the embeddings, whose wte rows the tied head also touched first), so "final from
// offset" is one number that only decreases.
class GptObserver {
 public:
  virtual ~GptObserver() = default;
  virtual void beforeBlockForward(int /*layer*/) {}
  virtual void afterBlockForward(int /*layer*/) {}
  virtual void beforeBlockBackward(int /*layer*/) {}
  virtual void afterBlockBackward(int /*layer*/) {}
  // Gradients in [offset, end of the padded buffer) get nothing more from this backward.
  virtual void gradientsFinalFrom(size_t /*offset*/) {}
};

template <typename T>
class Gpt {
 public:
  // The arena is sized for batches of up to maxBatch sequences of config.seq tokens. The
  // parameter and gradient buffers hold max(layout size, bufferElements) elements: data
  // parallelism pads them (with zeros that stay zero) so that shards divide evenly.
  Gpt(const GptConfig& config, int maxBatch, size_t bufferElements = 0);

  const GptConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  int maxBatch() const { return maxBatch_; }
  // The layout's elements (what the optimizer and checkpoints see).
  std::span<T> parameters() { return parameters_.first(layout_.totalSize()); }
  std::span<const T> parameters() const { return parameters_.first(layout_.totalSize()); }
  std::span<T> gradients() { return gradients_.first(layout_.totalSize()); }
  std::span<const T> gradients() const { return gradients_.first(layout_.totalSize()); }
  // The whole buffers, padding included.
  std::span<T> paddedParameters() { return parameters_; }
  std::span<T> paddedGradients() { return gradients_; }
  // Elements [begin, end) read as zero afterwards and their whole pages leave memory.
  void releaseParameters(size_t begin, size_t end) {
    parameterPages_.release(begin * sizeof(T), end * sizeof(T));
  }
  void releaseGradients(size_t begin, size_t end) {
    gradientPages_.release(begin * sizeof(T), end * sizeof(T));
  }

  // nullptr (the default) for none; the observer must outlive its use.
  void setObserver(GptObserver* observer) { observer_ = observer; }

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
  PageBuffer parameterPages_;
  PageBuffer gradientPages_;
  std::span<T> parameters_;
  std::span<T> gradients_;
  GptObserver* observer_ = nullptr;
  ActivationArena<T> arena_;
  std::vector<int32_t> inputs_;
  std::vector<int32_t> targets_;
  int batch_ = 0;
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace cc::parallel
