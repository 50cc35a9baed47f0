// Where each tensor of the model lives in the one contiguous parameter buffer. The order
// is layer-major (wte, wpe, then every tensor of block 0, block 1, ..., then ln_f), so a
// DP bucket or a ZeRO shard is a slice [offset, offset + size) of the buffer, and the
// gradients use the same offsets. Names and shapes are GPT-2's (Conv1D weights stored
// [in, out]), except that wte carries the padded vocabulary rows.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "parallel/model/config.h"

namespace cc::parallel {

struct TensorSlice {
  std::string name;           // GPT-2's name: "h.3.attn.c_attn.weight"
  std::vector<size_t> shape;  // as stored in the buffer
  size_t offset = 0;          // in elements from the start of the buffer
  size_t size = 0;            // elements
  bool decays = false;        // AdamW weight decay applies (matrices and embeddings)
};

// Offsets of one block's tensors, relative to the start of the whole buffer.
struct BlockOffsets {
  size_t ln1Weight, ln1Bias, attnWeight, attnBias, attnProjWeight, attnProjBias;
  size_t ln2Weight, ln2Bias, fcWeight, fcBias, fcProjWeight, fcProjBias;
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const GptConfig& config);

  const std::vector<TensorSlice>& tensors() const { return tensors_; }
  size_t totalSize() const { return totalSize_; }
  size_t wte() const { return wte_; }
  size_t wpe() const { return wpe_; }
  const BlockOffsets& block(int layer) const { return blocks_[static_cast<size_t>(layer)]; }
  size_t lnfWeight() const { return lnfWeight_; }
  size_t lnfBias() const { return lnfBias_; }
  // The slice of the buffer that holds block `layer` (for per-layer buckets).
  size_t blockBegin(int layer) const { return block(layer).ln1Weight; }
  size_t blockEnd(int layer) const;

 private:
  size_t add(std::string name, std::vector<size_t> shape, bool decays);

  std::vector<TensorSlice> tensors_;
  std::vector<BlockOffsets> blocks_;
  size_t totalSize_ = 0;
  size_t wte_ = 0, wpe_ = 0, lnfWeight_ = 0, lnfBias_ = 0;
};

}  // namespace cc::parallel
