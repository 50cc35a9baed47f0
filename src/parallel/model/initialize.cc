#include "parallel/model/initialize.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "parallel/model/rng.h"

namespace cc::parallel {

void initializeParameters(std::span<float> parameters, const GptConfig& config,
                          const ParameterLayout& layout, uint64_t seed) {
  constexpr double kStd = 0.02;
  const double residualStd = kStd / std::sqrt(2.0 * config.layers);
  const auto& tensors = layout.tensors();
  for (size_t index = 0; index < tensors.size(); ++index) {
    const TensorSlice& tensor = tensors[index];
    std::span<float> values = parameters.subspan(tensor.offset, tensor.size);
    const std::string_view name = tensor.name;
    auto endsWith = [name](std::string_view suffix) {
      return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
    };
    if (endsWith(".bias")) {
      std::fill(values.begin(), values.end(), 0.0f);
    } else if (endsWith("ln_1.weight") || endsWith("ln_2.weight") || name == "ln_f.weight") {
      std::fill(values.begin(), values.end(), 1.0f);
    } else {
      const bool residualProjection =
          endsWith("attn.c_proj.weight") || endsWith("mlp.c_proj.weight");
      const double std = residualProjection ? residualStd : kStd;
      Rng rng(mixSeed(seed, index + 1));
      for (float& value : values) value = static_cast<float>(std * rng.normal());
    }
  }
  // The padded vocabulary rows stay zero: no token selects them and their logits are
  // masked, so they never receive a gradient either.
  const size_t width = static_cast<size_t>(config.width);
  std::fill(
      parameters.begin() +
          static_cast<std::ptrdiff_t>(layout.wte() + static_cast<size_t>(config.vocab) * width),
      parameters.begin() + static_cast<std::ptrdiff_t>(
                               layout.wte() + static_cast<size_t>(config.paddedVocab()) * width),
      0.0f);
}

}  // namespace cc::parallel
