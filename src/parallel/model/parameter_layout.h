// Where each tensor of the model lives in a rank's contiguous parameter buffer. A layout
// describes one part of the model (model_part.h): a pipeline stage's blocks and a
// tensor-parallel rank's shards of them; ParameterLayout(config) is the whole model on
// one process. The order is layer-major (wte, wpe, then every tensor of the first block,
// the next, ..., then ln_f), so a DP bucket or a ZeRO shard is a slice [offset, offset +
// size) of the buffer, and the gradients use the same offsets. A last stage that does not
// also hold the embeddings keeps its copy of the tied head weight first, at offset 0 as
// wte is on the first stage: its gradient is final only once the pipeline has summed the
// two copies' gradients (pp/pipeline.h), after everything else, and "gradients final from
// offset" (gpt.h) must only decrease.
//
// Names and shapes are GPT-2's (Conv1D weights stored [in, out]), except that wte carries
// the padded vocabulary rows. A sharded tensor stores this rank's columns (or rows) as
// one contiguous [in, out / tp] (or [in / tp, out]) block; c_attn's shard is this rank's
// heads of q, then of k, then of v (its fused parts), so that attention runs on a shard
// exactly as on the whole with fewer heads. Each tensor says how it was split
// (tensor_split.h puts a shard back into the one-process tensor, for checkpoints).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "parallel/model/config.h"
#include "parallel/model/model_part.h"

namespace cc::parallel {

// How a tensor is cut across the tensor-parallel ranks.
enum class SplitAxis {
  kNone,     // replicated: every TP rank holds all of it
  kRows,     // the first dimension (wte's vocabulary, a row-parallel linear's input)
  kColumns,  // the last dimension (a column-parallel linear's output, its bias)
};

struct TensorSlice {
  std::string name;               // GPT-2's name: "h.3.attn.c_attn.weight"
  std::vector<size_t> shape;      // as stored in this rank's buffer
  std::vector<size_t> fullShape;  // in the one-process model
  size_t offset = 0;              // in elements from the start of the buffer
  size_t size = 0;                // elements
  bool decays = false;            // AdamW weight decay applies (matrices and embeddings)
  SplitAxis split = SplitAxis::kNone;
  // Split separately, each into tp pieces: c_attn's q, k and v (3); 1 for the rest.
  int fusedParts = 1;
  // Its position in the one-process layout's tensors(): what initialisation seeds from,
  // so that every part of the model starts from the one-process values.
  size_t fullIndex = 0;
  // The last pipeline stage's copy of the tied wte (the first stage holds the original):
  // the same values, and the same gradient once the pipeline has summed them, so a norm
  // counts it once, on the first stage.
  bool tiedCopy = false;
  // The expert it belongs to (an MoE block's experts), or -1. An expert's gradient is summed
  // over the ranks holding that expert, not over all of data parallelism.
  int expert = -1;
};

struct LayerNormOffsets {
  size_t weight = 0, bias = 0;
};

struct LinearOffsets {
  size_t weight = 0, bias = 0;
};

// The attention half of a block: c_attn (column-parallel by heads) and c_proj
// (row-parallel, its bias replicated and added once after the reduction).
struct AttentionOffsets {
  LinearOffsets qkv, projection;
};

// A GELU MLP: c_fc (column-parallel) and c_proj (row-parallel). An expert layer is a set
// of these behind a router.
struct MlpOffsets {
  LinearOffsets fc, projection;
};

// A mixture-of-experts MLP (config.h): the router [C, E] (no bias), then the experts this
// part holds, each an MlpOffsets of expertHidden columns, named h.{i}.moe.experts.{e}.*.
struct MoeOffsets {
  size_t router = 0;
  int firstExpert = 0;              // the first expert held (EP rank x E / epSize)
  std::vector<MlpOffsets> experts;  // experts [firstExpert, firstExpert + size)
  // The slice of the buffer the held experts fill, [expertsBegin, expertsEnd).
  size_t expertsBegin = 0;
  size_t expertsEnd = 0;
};

// Offsets of one block's tensors, from the start of the whole buffer.
struct BlockOffsets {
  int layer = 0;     // in the whole model
  size_t begin = 0;  // the block's slice of the buffer: [begin, end)
  size_t end = 0;
  LayerNormOffsets ln1;
  AttentionOffsets attention;
  LayerNormOffsets ln2;
  MlpOffsets mlp;  // dense blocks
  bool moe = false;
  MoeOffsets moeMlp;  // MoE blocks (config.isMoe(layer))
};

// The sizes a rank's shard of a block computes with.
struct ShardDimensions {
  int heads = 0;       // attention heads of this rank
  int width = 0;       // heads x head size: c_attn's q (k, v) columns, c_proj's rows
  int hidden = 0;      // MLP hidden columns (4 C / tp)
  int vocab = 0;       // rows of the padded token embedding (columns of the logits): Vp / tp
  int firstToken = 0;  // the first of them: tpRank x vocab
  int experts = 0;     // experts held per MoE block: E / epSize
  int firstExpert = 0;
};

class ParameterLayout {
 public:
  // The whole model, on one process.
  explicit ParameterLayout(const GptConfig& config);
  // A part of it: the caller has checked validatePart(config, part).
  ParameterLayout(const GptConfig& config, const ModelPart& part);

  const GptConfig& config() const { return config_; }
  const ModelPart& part() const { return part_; }
  const std::vector<TensorSlice>& tensors() const { return tensors_; }
  size_t totalSize() const { return totalSize_; }
  const ShardDimensions& shard() const { return shard_; }
  // Whether the part holds a tied copy (TensorSlice::tiedCopy): a last stage without the
  // embeddings.
  bool hasTiedCopy() const { return hasHead() && !hasEmbeddings(); }

  // Blocks [firstLayer, endLayer) of the whole model (the span of the chunks where the part
  // has several), and the chunks: the ranges of blocks it holds, in the buffer's order.
  int firstLayer() const { return part_.firstLayer; }
  int endLayer() const { return part_.endLayer; }
  const std::vector<LayerRange>& chunks() const { return chunks_; }
  // Every block the part holds, ascending.
  const std::vector<BlockOffsets>& blocks() const { return blocks_; }
  bool hasEmbeddings() const { return part_.hasEmbeddings(); }
  bool hasHead() const { return part_.hasHead(config_); }

  // Only where hasEmbeddings().
  size_t wte() const { return wte_; }
  size_t wpe() const { return wpe_; }
  // Only where hasHead(): ln_f, and the tied head's weight (wte itself when this part also
  // holds the embeddings, else its copy at offset 0).
  size_t lnfWeight() const { return lnf_.weight; }
  size_t lnfBias() const { return lnf_.bias; }
  size_t headWeight() const { return headWeight_; }
  // `layer` counts in the whole model and is one of the part's blocks (else aborts).
  const BlockOffsets& block(int layer) const;
  // The slice of the buffer that holds block `layer` (for per-layer buckets).
  size_t blockBegin(int layer) const { return block(layer).begin; }
  size_t blockEnd(int layer) const { return block(layer).end; }

 private:
  size_t add(std::string name, std::vector<size_t> fullShape, bool decays,
             SplitAxis split = SplitAxis::kNone, int fusedParts = 1);
  LinearOffsets addLinear(const std::string& name, size_t in, size_t out, SplitAxis split,
                          int fusedParts = 1);
  LayerNormOffsets addLayerNorm(const std::string& name);
  BlockOffsets addBlock(int layer);

  GptConfig config_;
  ModelPart part_;
  ShardDimensions shard_;
  std::vector<TensorSlice> tensors_;
  std::vector<LayerRange> chunks_;
  std::vector<BlockOffsets> blocks_;
  std::vector<int> blockIndex_;  // per layer of [firstLayer, endLayer): into blocks_, or -1
  size_t totalSize_ = 0;
  size_t wte_ = 0, wpe_ = 0, headWeight_ = 0;
  LayerNormOffsets lnf_;
};

}  // namespace cc::parallel
