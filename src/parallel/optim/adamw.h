// AdamW (Loshchilov & Hutter): Adam's moments with bias correction, and weight decay
// applied to the parameter directly (decoupled), only to tensors the layout marks as
// decaying (matrices and embeddings, not biases or LayerNorm). The state is two buffers
// in the parameters' layout, so ZeRO can shard it by the same slices.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weightDecay = 0.1f;
};

// A run of consecutive elements of the parameter buffer that one rank updates (ZeRO):
// elements [begin, begin + count) of the layout, whose parameters and gradients are at
// the given pointers and whose moments start at stateOffset in this AdamW's state.
struct AdamWPiece {
  float* parameters;
  const float* gradients;
  size_t begin;
  size_t count;
  size_t stateOffset;
};

class AdamW {
 public:
  // stateSize: the elements whose moments this optimizer keeps (the whole buffer on one
  // process, a shard under ZeRO).
  AdamW(size_t stateSize, AdamWOptions options);

  // One step at learning rate lr; each gradient is multiplied by gradientScale first
  // (clipping and micro-batch averaging fold into it). Advances step().
  void update(std::span<float> parameters, std::span<const float> gradients,
              const ParameterLayout& layout, float lr, float gradientScale);

  // The same step over pieces only (elements past the layout, ZeRO's padding, never
  // decay). Element by element the arithmetic is update()'s, so a sharded step changes
  // each parameter exactly as the whole-buffer step would. Advances step().
  void updatePieces(std::span<const AdamWPiece> pieces, const ParameterLayout& layout, float lr,
                    float gradientScale);

  // 1-bit Adam's compressed stage (Tang et al. 2021), on the whole buffer: v stays as the
  // last update() left it (its bias correction too), m takes this rank's own gradient, then
  // `average` replaces m by its average over the ranks (1-bit compressed, with error
  // feedback), then the step. Advances step(); returns average's failure.
  Status updateFrozenVariance(std::span<float> parameters, std::span<const float> gradients,
                              const ParameterLayout& layout, float lr, float gradientScale,
                              const std::function<Status(std::span<float>)>& average);

  int64_t step() const { return step_; }
  const AdamWOptions& options() const { return options_; }
  std::span<float> firstMoment() { return m_; }
  std::span<float> secondMoment() { return v_; }
  std::span<const float> firstMoment() const { return m_; }
  std::span<const float> secondMoment() const { return v_; }
  // For checkpoint loading: replaces the whole state at once.
  void restore(std::vector<float> m, std::vector<float> v, int64_t step);

 private:
  AdamWOptions options_;
  std::vector<float> m_;
  std::vector<float> v_;
  int64_t step_ = 0;
  int64_t varianceStep_ = 0;  // the step of v's last update
};

}  // namespace cc::parallel
