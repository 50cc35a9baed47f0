// The shape of the reference GPT-2-style decoder. Everything else (the parameter layout,
// the activation arena, the checkpoint's tensor shapes) is derived from these numbers.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace cc::parallel {

struct GptConfig {
  int vocab = 256;  // V: tokens the data can contain
  int seq = 128;    // T: context length (also the number of position embeddings)
  int layers = 4;   // L
  int heads = 4;    // H
  int width = 256;  // C: must be a multiple of H
  // The token embedding (and LM head) is padded to a multiple of this, so that a
  // vocab-sharded head splits evenly; the padded logits never enter the loss.
  int vocabMultiple = 64;

  int paddedVocab() const { return (vocab + vocabMultiple - 1) / vocabMultiple * vocabMultiple; }
  int headSize() const { return width / heads; }

  // Each field in range and C divisible by H; the message names the offending field.
  Status validate() const;
  std::string describe() const;
};

bool operator==(const GptConfig& a, const GptConfig& b);

}  // namespace cc::parallel
