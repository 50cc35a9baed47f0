// GPT-2's initialisation, from a seed: matrices and embeddings N(0, 0.02), the two
// projections that write into the residual stream scaled by 1/sqrt(2L), LayerNorm weights
// 1, biases 0, the padded vocabulary rows 0. Each tensor draws from its own stream
// (seed, the tensor's index in the one-process layout), so the values do not depend on how
// many tensors came before, and a pipeline stage or a tensor-parallel shard (the layout's
// part) gets exactly its piece of the one-process model's values.
#pragma once

#include <cstdint>
#include <span>

#include "parallel/model/config.h"
#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

void initializeParameters(std::span<float> parameters, const GptConfig& config,
                          const ParameterLayout& layout, uint64_t seed);

}  // namespace cc::parallel
