// Which part of the model one rank holds: a pipeline stage's contiguous range of blocks
// (the first stage also holds the embeddings, the last the final LayerNorm and the tied
// head), or under an interleaved schedule its several non-adjacent ranges (its model
// chunks), and, within it, one tensor-parallel rank's shard of every block and of the
// vocabulary. Under sequence parallelism a TP rank also holds only its chunk of the
// residual stream's rows (activations.h). The whole model on one process is
// ModelPart::whole(config).
#pragma once

#include <vector>

#include "core/status.h"
#include "parallel/model/config.h"

namespace cc::parallel {

// Blocks [first, end) of the whole model.
struct LayerRange {
  int first = 0;
  int end = 0;
  int size() const { return end - first; }
  bool contains(int layer) const { return layer >= first && layer < end; }
};

struct ModelPart {
  int firstLayer = 0;  // blocks [firstLayer, endLayer) of the whole model, or the span of
  int endLayer = 0;    // the chunks where there are several
  int tpSize = 1;      // tensor-parallel ranks sharing these blocks
  int tpRank = 0;
  // Sequence parallelism (Korthikanti et al. 2022): the LayerNorms, residual adds and the
  // hidden state between blocks hold N / tpSize of the N = batch x seq token rows.
  bool sequenceParallel = false;
  // Expert parallelism: the experts of every MoE block are split over epSize ranks, rank r
  // holding experts [r E / epSize, (r + 1) E / epSize); everything else is whole.
  int epSize = 1;
  int epRank = 0;
  // An interleaved pipeline's model chunks (Megatron's virtual stages): the ranges of
  // blocks this part holds, ascending with gaps between them, the first starting at
  // firstLayer and the last ending at endLayer. Empty: one chunk, [firstLayer, endLayer).
  std::vector<LayerRange> chunks;

  static ModelPart whole(const GptConfig& config) { return ModelPart{0, config.layers, 1, 0}; }
  // A part of these chunks (ascending), its span set from them.
  static ModelPart ofChunks(std::vector<LayerRange> ranges, int tpSize = 1, int tpRank = 0);
  // The chunks, or the one range [firstLayer, endLayer).
  std::vector<LayerRange> layerRanges() const {
    return chunks.empty() ? std::vector<LayerRange>{{firstLayer, endLayer}} : chunks;
  }
  bool hasEmbeddings() const { return firstLayer == 0; }
  bool hasHead(const GptConfig& config) const { return endLayer == config.layers; }
  bool isWhole(const GptConfig& config) const {
    return hasEmbeddings() && hasHead(config) && tpSize == 1 && epSize == 1 && chunks.size() <= 1;
  }
};

// A non-empty layer range inside the model (chunks: each non-empty, ascending, apart, and
// spanning [firstLayer, endLayer)), a TP rank inside [0, tpSize), tpSize dividing
// the heads and the padded vocabulary, and sequence parallelism only with tpSize > 1
// dividing the sequence length, an EP size dividing the experts (and MoE blocks not
// tensor-parallel); the message names what is wrong.
Status validatePart(const GptConfig& config, const ModelPart& part);

}  // namespace cc::parallel
