#include "parallel/checkpoint/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>

#include "parallel/checkpoint/safetensors.h"

namespace cc::parallel {
namespace {

constexpr std::string_view kSuffix = ".safetensors";

std::map<std::string, std::string> configMetadata(const GptConfig& config) {
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"cc.vocab", std::to_string(config.vocab)},
      {"cc.vocab_multiple", std::to_string(config.vocabMultiple)},
      {"cc.seq", std::to_string(config.seq)},
      {"cc.layers", std::to_string(config.layers)},
      {"cc.heads", std::to_string(config.heads)},
      {"cc.width", std::to_string(config.width)}};
  // A mixture-of-experts model's shape (a dense model's file is as it always was).
  if (config.experts > 0) {
    metadata["cc.experts"] = std::to_string(config.experts);
    metadata["cc.top_k"] = std::to_string(config.topK);
    metadata["cc.moe_every"] = std::to_string(config.moeEvery);
    metadata["cc.expert_width"] = std::to_string(config.expertHidden());
  }
  return metadata;
}

Result<int64_t> metadataInt(const std::map<std::string, std::string>& metadata,
                            const std::string& key, const std::string& path) {
  const auto found = metadata.find(key);
  if (found == metadata.end()) return invalidArgument(path + ": metadata has no " + key);
  int64_t value = 0;
  const std::string& text = found->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return invalidArgument(path + ": metadata " + key + " = \"" + text + "\" is not an integer");
  }
  return value;
}

Result<GptConfig> configFromMetadata(const std::map<std::string, std::string>& metadata,
                                     const std::string& path) {
  GptConfig config;
  auto field = [&](const char* key, int* target) -> Status {
    CC_ASSIGN_OR_RETURN(int64_t value, metadataInt(metadata, key, path));
    if (value < 0 || value > INT32_MAX)
      return invalidArgument(path + ": metadata " + key + " out of range");
    *target = static_cast<int>(value);
    return Status::ok();
  };
  CC_TRY(field("cc.vocab", &config.vocab));
  CC_TRY(field("cc.vocab_multiple", &config.vocabMultiple));
  CC_TRY(field("cc.seq", &config.seq));
  CC_TRY(field("cc.layers", &config.layers));
  CC_TRY(field("cc.heads", &config.heads));
  CC_TRY(field("cc.width", &config.width));
  if (metadata.count("cc.experts") != 0) {
    CC_TRY(field("cc.experts", &config.experts));
    CC_TRY(field("cc.top_k", &config.topK));
    CC_TRY(field("cc.moe_every", &config.moeEvery));
    CC_TRY(field("cc.expert_width", &config.expertWidth));
  }
  CC_TRY(config.validate().withContext(path));
  return config;
}

// The checkpoint's shape of a layout tensor: wte without its padded rows.
std::vector<size_t> fileShape(const TensorSlice& tensor, const GptConfig& config) {
  if (tensor.name == "wte.weight")
    return {static_cast<size_t>(config.vocab), static_cast<size_t>(config.width)};
  return tensor.shape;
}

std::string shapeText(const std::vector<size_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

std::string optimizerPath(const std::string& modelPath) {
  if (modelPath.size() > kSuffix.size() && modelPath.ends_with(kSuffix)) {
    return modelPath.substr(0, modelPath.size() - kSuffix.size()) + ".optim" + std::string(kSuffix);
  }
  return modelPath + ".optim";
}

Status saveCheckpoint(const std::string& modelPath, const Gpt<float>& model,
                      const AdamW* optimizer) {
  if (!model.layout().part().isWhole(model.config())) {
    return invalidArgument(modelPath + ": a part of the model cannot be saved alone (assemble it)");
  }
  return saveCheckpoint(modelPath, model.config(), model.parameters(), optimizer);
}

Status saveCheckpoint(const std::string& modelPath, const GptConfig& config,
                      std::span<const float> parameters, const AdamW* optimizer) {
  const ParameterLayout layout(config);
  std::vector<TensorToWrite> tensors;
  for (const TensorSlice& tensor : layout.tensors()) {
    std::vector<size_t> shape = fileShape(tensor, config);
    size_t elements = 1;
    for (size_t dim : shape) elements *= dim;
    tensors.push_back({tensor.name, shape, parameters.subspan(tensor.offset, elements)});
  }
  // The optimizer file first: a crash between the two leaves the old model beside new
  // moments, which loadCheckpoint notices by the step recorded in both.
  std::map<std::string, std::string> metadata = configMetadata(config);
  if (optimizer != nullptr) {
    metadata["cc.step"] = std::to_string(optimizer->step());
    const size_t total = layout.totalSize();
    const TensorToWrite state[] = {{"adamw.m", {total}, optimizer->firstMoment()},
                                   {"adamw.v", {total}, optimizer->secondMoment()}};
    CC_TRY(writeSafetensors(optimizerPath(modelPath), state, metadata));
  }
  return writeSafetensors(modelPath, tensors, metadata);
}

Result<GptConfig> readCheckpointConfig(const std::string& modelPath) {
  CC_ASSIGN_OR_RETURN(SafetensorsContents contents, readSafetensors(modelPath));
  return configFromMetadata(contents.metadata, modelPath);
}

Status loadCheckpoint(const std::string& modelPath, Gpt<float>& model, AdamW* optimizer,
                      bool* loadedOptimizer) {
  return loadCheckpoint(modelPath, model.config(), model.parameters(), optimizer, loadedOptimizer);
}

Status loadCheckpoint(const std::string& modelPath, const GptConfig& config,
                      std::span<float> destination, AdamW* optimizer, bool* loadedOptimizer) {
  const ParameterLayout layout(config);
  if (destination.size() != layout.totalSize()) {
    return invalidArgument(modelPath + ": loading into " + std::to_string(destination.size()) +
                           " elements, the model has " + std::to_string(layout.totalSize()));
  }
  CC_ASSIGN_OR_RETURN(SafetensorsContents contents, readSafetensors(modelPath));
  CC_ASSIGN_OR_RETURN(GptConfig fileConfig, configFromMetadata(contents.metadata, modelPath));
  if (!(fileConfig == config)) {
    return invalidArgument(modelPath + ": written for " + fileConfig.describe() +
                           ", the model is " + config.describe());
  }
  // Names: exactly the layout's, no more, no fewer.
  std::set<std::string> expected;
  for (const TensorSlice& tensor : layout.tensors()) expected.insert(tensor.name);
  for (const auto& [name, tensor] : contents.tensors) {
    if (!expected.contains(name)) return invalidArgument(modelPath + ": unexpected tensor " + name);
  }
  std::vector<float> parameters(layout.totalSize(), 0.0f);  // padded rows stay 0
  for (const TensorSlice& tensor : layout.tensors()) {
    const auto found = contents.tensors.find(tensor.name);
    if (found == contents.tensors.end())
      return invalidArgument(modelPath + ": missing tensor " + tensor.name);
    const std::vector<size_t> shape = fileShape(tensor, config);
    if (found->second.shape != shape) {
      return invalidArgument(modelPath + ": tensor " + tensor.name + " has shape " +
                             shapeText(found->second.shape) + ", expected " + shapeText(shape));
    }
    std::copy(found->second.data.begin(), found->second.data.end(),
              parameters.begin() + static_cast<std::ptrdiff_t>(tensor.offset));
  }

  bool haveOptimizer = false;
  std::vector<float> m, v;
  int64_t step = 0;
  if (optimizer != nullptr && std::filesystem::exists(optimizerPath(modelPath))) {
    const std::string path = optimizerPath(modelPath);
    CC_ASSIGN_OR_RETURN(SafetensorsContents state, readSafetensors(path));
    CC_ASSIGN_OR_RETURN(GptConfig stateConfig, configFromMetadata(state.metadata, path));
    if (!(stateConfig == config))
      return invalidArgument(path + ": written for " + stateConfig.describe());
    CC_ASSIGN_OR_RETURN(step, metadataInt(state.metadata, "cc.step", path));
    CC_ASSIGN_OR_RETURN(int64_t modelStep, metadataInt(contents.metadata, "cc.step", modelPath));
    if (step != modelStep || step < 0) {
      return invalidArgument(path + ": step " + std::to_string(step) +
                             " does not match the model file's step " + std::to_string(modelStep) +
                             " (an interrupted save?)");
    }
    const std::vector<size_t> shape = {layout.totalSize()};
    for (const char* name : {"adamw.m", "adamw.v"}) {
      const auto found = state.tensors.find(name);
      if (found == state.tensors.end())
        return invalidArgument(path + ": missing tensor " + std::string(name));
      if (found->second.shape != shape) {
        return invalidArgument(path + ": tensor " + std::string(name) + " has shape " +
                               shapeText(found->second.shape) + ", expected " + shapeText(shape));
      }
    }
    if (state.tensors.size() != 2)
      return invalidArgument(path + ": unexpected tensors beside adamw.m and adamw.v");
    m = std::move(state.tensors["adamw.m"].data);
    v = std::move(state.tensors["adamw.v"].data);
    haveOptimizer = true;
  }
  // Everything checked: commit.
  std::copy(parameters.begin(), parameters.end(), destination.begin());
  if (haveOptimizer) optimizer->restore(std::move(m), std::move(v), step);
  if (loadedOptimizer != nullptr) *loadedOptimizer = haveOptimizer;
  return Status::ok();
}

}  // namespace cc::parallel
