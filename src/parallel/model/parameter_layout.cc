#include "parallel/model/parameter_layout.h"

#include <cstdio>
#include <cstdlib>
#include <map>

namespace cc::parallel {

ModelPart ModelPart::ofChunks(std::vector<LayerRange> ranges, int tpSize, int tpRank) {
  ModelPart part;
  part.firstLayer = ranges.empty() ? 0 : ranges.front().first;
  part.endLayer = ranges.empty() ? 0 : ranges.back().end;
  part.tpSize = tpSize;
  part.tpRank = tpRank;
  if (ranges.size() > 1) part.chunks = std::move(ranges);
  return part;
}

Status validatePart(const GptConfig& config, const ModelPart& part) {
  if (part.firstLayer < 0 || part.endLayer > config.layers || part.firstLayer >= part.endLayer) {
    return invalidArgument("model part: layers [" + std::to_string(part.firstLayer) + ", " +
                           std::to_string(part.endLayer) +
                           ") is not a non-empty range inside the " +
                           std::to_string(config.layers) + " layers");
  }
  if (!part.chunks.empty()) {
    int previousEnd = -1;
    for (const LayerRange& chunk : part.chunks) {
      if (chunk.size() < 1 || chunk.first <= previousEnd) {
        return invalidArgument("model part: chunk [" + std::to_string(chunk.first) + ", " +
                               std::to_string(chunk.end) +
                               ") is empty or not after the previous chunk with a gap");
      }
      previousEnd = chunk.end;
    }
    if (part.chunks.front().first != part.firstLayer || part.chunks.back().end != part.endLayer) {
      return invalidArgument("model part: the chunks do not span layers [" +
                             std::to_string(part.firstLayer) + ", " +
                             std::to_string(part.endLayer) + ")");
    }
  }
  if (part.tpSize < 1 || part.tpRank < 0 || part.tpRank >= part.tpSize) {
    return invalidArgument("model part: tensor-parallel rank " + std::to_string(part.tpRank) +
                           " of " + std::to_string(part.tpSize) + " is out of range");
  }
  if (config.heads % part.tpSize != 0) {
    return invalidArgument("model part: tensor-parallel size " + std::to_string(part.tpSize) +
                           " does not divide the heads " + std::to_string(config.heads));
  }
  if (config.paddedVocab() % part.tpSize != 0) {
    return invalidArgument("model part: tensor-parallel size " + std::to_string(part.tpSize) +
                           " does not divide the padded vocabulary " +
                           std::to_string(config.paddedVocab()));
  }
  if (part.epSize < 1 || part.epRank < 0 || part.epRank >= part.epSize) {
    return invalidArgument("model part: expert-parallel rank " + std::to_string(part.epRank) +
                           " of " + std::to_string(part.epSize) + " is out of range");
  }
  if (part.epSize > 1 && config.experts == 0) {
    return invalidArgument("model part: expert parallelism (ep " + std::to_string(part.epSize) +
                           ") needs a mixture-of-experts model (--experts)");
  }
  if (config.experts > 0 && config.experts % part.epSize != 0) {
    return invalidArgument("model part: expert-parallel size " + std::to_string(part.epSize) +
                           " does not divide the experts " + std::to_string(config.experts));
  }
  if (config.experts > 0 && part.tpSize > 1) {
    return invalidArgument(
        "model part: mixture-of-experts blocks with tensor parallelism are not built (the "
        "experts and the router are not TP-sharded); use --tp 1 with --experts");
  }
  if (part.sequenceParallel && part.tpSize == 1) {
    return invalidArgument(
        "model part: sequence parallelism needs a tensor-parallel size above 1 (it shards the "
        "sequence over the TP group)");
  }
  if (part.sequenceParallel && config.seq % part.tpSize != 0) {
    return invalidArgument("model part: sequence parallelism needs the tensor-parallel size " +
                           std::to_string(part.tpSize) + " to divide the sequence length " +
                           std::to_string(config.seq));
  }
  return Status::ok();
}

ParameterLayout::ParameterLayout(const GptConfig& config)
    : ParameterLayout(config, ModelPart::whole(config)) {}

ParameterLayout::ParameterLayout(const GptConfig& config, const ModelPart& part)
    : config_(config), part_(part), chunks_(part.layerRanges()) {
  const size_t vocab = static_cast<size_t>(config.paddedVocab());
  const size_t seq = static_cast<size_t>(config.seq);
  const size_t width = static_cast<size_t>(config.width);
  shard_.heads = config.heads / part.tpSize;
  shard_.width = shard_.heads * config.headSize();
  shard_.hidden = 4 * config.width / part.tpSize;
  shard_.vocab = config.paddedVocab() / part.tpSize;
  shard_.firstToken = part.tpRank * shard_.vocab;
  shard_.experts = config.experts / part.epSize;
  shard_.firstExpert = part.epRank * shard_.experts;
  if (hasEmbeddings()) {
    wte_ = add("wte.weight", {vocab, width}, true, SplitAxis::kRows);
    wpe_ = add("wpe.weight", {seq, width}, true);
  } else if (hasHead()) {
    headWeight_ = add("wte.weight", {vocab, width}, true, SplitAxis::kRows);
    tensors_.back().tiedCopy = true;
  }
  blockIndex_.assign(static_cast<size_t>(part.endLayer - part.firstLayer), -1);
  for (const LayerRange& chunk : part.layerRanges()) {
    for (int layer = chunk.first; layer < chunk.end; ++layer) {
      blockIndex_[static_cast<size_t>(layer - part.firstLayer)] = static_cast<int>(blocks_.size());
      blocks_.push_back(addBlock(layer));
    }
  }
  if (hasHead()) {
    lnf_ = addLayerNorm("ln_f");
    if (hasEmbeddings()) headWeight_ = wte_;
  }
  // A part's tensors seed their initial values as the one-process model's do.
  if (!part.isWhole(config)) {
    std::map<std::string, size_t> fullIndex;
    const ParameterLayout whole(config);
    for (const TensorSlice& tensor : whole.tensors()) fullIndex[tensor.name] = tensor.fullIndex;
    for (TensorSlice& tensor : tensors_) tensor.fullIndex = fullIndex.at(tensor.name);
  }
}

const BlockOffsets& ParameterLayout::block(int layer) const {
  const int index = layer >= part_.firstLayer && layer < part_.endLayer
                        ? blockIndex_[static_cast<size_t>(layer - part_.firstLayer)]
                        : -1;
  if (index < 0) {
    std::fprintf(stderr, "ParameterLayout: block %d is not in this part (layers [%d, %d))\n", layer,
                 part_.firstLayer, part_.endLayer);
    std::abort();
  }
  return blocks_[static_cast<size_t>(index)];
}

BlockOffsets ParameterLayout::addBlock(int layer) {
  const size_t width = static_cast<size_t>(config_.width);
  const size_t hidden = 4 * width;
  const std::string prefix = "h." + std::to_string(layer) + ".";
  BlockOffsets block;
  block.layer = layer;
  block.begin = totalSize_;
  block.ln1 = addLayerNorm(prefix + "ln_1");
  block.attention.qkv = addLinear(prefix + "attn.c_attn", width, 3 * width, SplitAxis::kColumns, 3);
  block.attention.projection = addLinear(prefix + "attn.c_proj", width, width, SplitAxis::kRows);
  block.ln2 = addLayerNorm(prefix + "ln_2");
  if (config_.isMoe(layer)) {
    block.moe = true;
    MoeOffsets& moe = block.moeMlp;
    moe.router =
        add(prefix + "moe.router.weight", {width, static_cast<size_t>(config_.experts)}, true);
    moe.firstExpert = shard_.firstExpert;
    moe.expertsBegin = totalSize_;
    const size_t expertHidden = static_cast<size_t>(config_.expertHidden());
    for (int e = shard_.firstExpert; e < shard_.firstExpert + shard_.experts; ++e) {
      const std::string expert = prefix + "moe.experts." + std::to_string(e) + ".";
      const size_t first = tensors_.size();
      MlpOffsets mlp;
      mlp.fc = addLinear(expert + "c_fc", width, expertHidden, SplitAxis::kNone);
      mlp.projection = addLinear(expert + "c_proj", expertHidden, width, SplitAxis::kNone);
      for (size_t t = first; t < tensors_.size(); ++t) tensors_[t].expert = e;
      moe.experts.push_back(mlp);
    }
    moe.expertsEnd = totalSize_;
  } else {
    block.mlp.fc = addLinear(prefix + "mlp.c_fc", width, hidden, SplitAxis::kColumns);
    block.mlp.projection = addLinear(prefix + "mlp.c_proj", hidden, width, SplitAxis::kRows);
  }
  block.end = totalSize_;
  return block;
}

LayerNormOffsets ParameterLayout::addLayerNorm(const std::string& name) {
  const size_t width = static_cast<size_t>(config_.width);
  LayerNormOffsets offsets;
  offsets.weight = add(name + ".weight", {width}, false);
  offsets.bias = add(name + ".bias", {width}, false);
  return offsets;
}

LinearOffsets ParameterLayout::addLinear(const std::string& name, size_t in, size_t out,
                                         SplitAxis split, int fusedParts) {
  LinearOffsets offsets;
  offsets.weight = add(name + ".weight", {in, out}, true, split, fusedParts);
  // A column-parallel bias is cut with its columns; a row-parallel one is whole on every
  // rank and added once, after the reduction.
  offsets.bias = add(name + ".bias", {out}, false,
                     split == SplitAxis::kColumns ? split : SplitAxis::kNone, fusedParts);
  return offsets;
}

size_t ParameterLayout::add(std::string name, std::vector<size_t> fullShape, bool decays,
                            SplitAxis split, int fusedParts) {
  std::vector<size_t> shape = fullShape;
  const size_t parts = static_cast<size_t>(part_.tpSize);
  if (split == SplitAxis::kRows) shape.front() /= parts;
  if (split == SplitAxis::kColumns) shape.back() /= parts;
  size_t size = 1;
  for (size_t dim : shape) size *= dim;
  const size_t offset = totalSize_;
  TensorSlice tensor;
  tensor.name = std::move(name);
  tensor.shape = std::move(shape);
  tensor.fullShape = std::move(fullShape);
  tensor.offset = offset;
  tensor.size = size;
  tensor.decays = decays;
  tensor.split = split;
  tensor.fusedParts = split == SplitAxis::kNone ? 1 : fusedParts;
  tensor.fullIndex = tensors_.size();
  tensors_.push_back(std::move(tensor));
  totalSize_ += size;
  return offset;
}

}  // namespace cc::parallel
