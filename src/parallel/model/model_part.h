// Which part of the model one rank holds: a pipeline stage's contiguous range of blocks
// (the first stage also holds the embeddings, the last the final LayerNorm and the tied
// head) and, within it, one tensor-parallel rank's shard of every block and of the
// vocabulary. Under sequence parallelism a TP rank also holds only its chunk of the
// residual stream's rows (activations.h). The whole model on one process is
// ModelPart::whole(config).
#pragma once

#include "core/status.h"
#include "parallel/model/config.h"

namespace cc::parallel {

struct ModelPart {
  int firstLayer = 0;  // blocks [firstLayer, endLayer) of the whole model
  int endLayer = 0;
  int tpSize = 1;  // tensor-parallel ranks sharing these blocks
  int tpRank = 0;
  // Sequence parallelism (Korthikanti et al. 2022): the LayerNorms, residual adds and the
  // hidden state between blocks hold N / tpSize of the N = batch x seq token rows.
  bool sequenceParallel = false;

  static ModelPart whole(const GptConfig& config) { return ModelPart{0, config.layers, 1, 0}; }
  bool hasEmbeddings() const { return firstLayer == 0; }
  bool hasHead(const GptConfig& config) const { return endLayer == config.layers; }
  bool isWhole(const GptConfig& config) const {
    return hasEmbeddings() && hasHead(config) && tpSize == 1;
  }
};

// A non-empty layer range inside the model, a TP rank inside [0, tpSize), tpSize dividing
// the heads and the padded vocabulary, and sequence parallelism only with tpSize > 1
// dividing the sequence length; the message names what is wrong.
Status validatePart(const GptConfig& config, const ModelPart& part);

}  // namespace cc::parallel
