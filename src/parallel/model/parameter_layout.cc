#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

ParameterLayout::ParameterLayout(const GptConfig& config) {
  const size_t vocab = static_cast<size_t>(config.paddedVocab());
  const size_t seq = static_cast<size_t>(config.seq);
  const size_t width = static_cast<size_t>(config.width);
  wte_ = add("wte.weight", {vocab, width}, true);
  wpe_ = add("wpe.weight", {seq, width}, true);
  for (int layer = 0; layer < config.layers; ++layer) {
    const std::string prefix = "h." + std::to_string(layer) + ".";
    BlockOffsets block{};
    block.ln1Weight = add(prefix + "ln_1.weight", {width}, false);
    block.ln1Bias = add(prefix + "ln_1.bias", {width}, false);
    block.attnWeight = add(prefix + "attn.c_attn.weight", {width, 3 * width}, true);
    block.attnBias = add(prefix + "attn.c_attn.bias", {3 * width}, false);
    block.attnProjWeight = add(prefix + "attn.c_proj.weight", {width, width}, true);
    block.attnProjBias = add(prefix + "attn.c_proj.bias", {width}, false);
    block.ln2Weight = add(prefix + "ln_2.weight", {width}, false);
    block.ln2Bias = add(prefix + "ln_2.bias", {width}, false);
    block.fcWeight = add(prefix + "mlp.c_fc.weight", {width, 4 * width}, true);
    block.fcBias = add(prefix + "mlp.c_fc.bias", {4 * width}, false);
    block.fcProjWeight = add(prefix + "mlp.c_proj.weight", {4 * width, width}, true);
    block.fcProjBias = add(prefix + "mlp.c_proj.bias", {width}, false);
    blocks_.push_back(block);
  }
  lnfWeight_ = add("ln_f.weight", {width}, false);
  lnfBias_ = add("ln_f.bias", {width}, false);
}

size_t ParameterLayout::add(std::string name, std::vector<size_t> shape, bool decays) {
  size_t size = 1;
  for (size_t dim : shape) size *= dim;
  const size_t offset = totalSize_;
  tensors_.push_back(TensorSlice{std::move(name), std::move(shape), offset, size, decays});
  totalSize_ += size;
  return offset;
}

size_t ParameterLayout::blockEnd(int layer) const {
  const BlockOffsets& offsets = block(layer);
  return offsets.fcProjBias + tensors_[2 + 12 * static_cast<size_t>(layer) + 11].size;
}

}  // namespace cc::parallel
