#include "parallel/model/initialize.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "parallel/model/rng.h"
#include "parallel/model/tensor_split.h"

namespace cc::parallel {
namespace {

// The one-process values of a tensor.
void initializeFull(std::span<float> values, const TensorSlice& tensor, const GptConfig& config,
                    uint64_t seed) {
  constexpr double kStd = 0.02;
  const double residualStd = kStd / std::sqrt(2.0 * config.layers);
  const std::string_view name = tensor.name;
  if (name.ends_with(".bias")) {
    std::fill(values.begin(), values.end(), 0.0f);
  } else if (name.ends_with("ln_1.weight") || name.ends_with("ln_2.weight") ||
             name == "ln_f.weight") {
    std::fill(values.begin(), values.end(), 1.0f);
  } else {
    const bool residualProjection =
        name.ends_with("c_proj.weight");  // attn, mlp and every expert's
    const double std = residualProjection ? residualStd : kStd;
    Rng rng(mixSeed(seed, tensor.fullIndex + 1));
    for (float& value : values) value = static_cast<float>(std * rng.normal());
  }
  if (name == "wte.weight") {
    // The padded vocabulary rows stay zero: no token selects them and their logits are
    // masked, so they never receive a gradient either.
    const size_t width = static_cast<size_t>(config.width);
    std::fill(
        values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(config.vocab) * width),
        values.end(), 0.0f);
  }
}

}  // namespace

void initializeParameters(std::span<float> parameters, const GptConfig& config,
                          const ParameterLayout& layout, uint64_t seed) {
  const ModelPart& part = layout.part();
  std::vector<float> full;
  for (const TensorSlice& tensor : layout.tensors()) {
    std::span<float> values = parameters.subspan(tensor.offset, tensor.size);
    if (tensor.split == SplitAxis::kNone || part.tpSize == 1) {
      initializeFull(values, tensor, config, seed);
      continue;
    }
    size_t fullSize = 1;
    for (size_t dim : tensor.fullShape) fullSize *= dim;
    full.resize(fullSize);
    initializeFull(full, tensor, config, seed);
    takeShard<float>(tensor, part.tpRank, part.tpSize, full, values);
  }
}

}  // namespace cc::parallel
