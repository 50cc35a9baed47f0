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

  // Mixture of experts (Switch/GShard). experts = 0: every block is dense. Otherwise the
  // MLP of every moeEvery-th block, counting from block 0 (Megatron's moe_layer_freq: blocks
  // 0, N, 2N, ...), is `experts` GELU MLPs of expertWidth hidden columns (0: 4C) behind a
  // router that sends each token to its topK most probable experts.
  int experts = 0;
  int topK = 2;
  int moeEvery = 1;
  int expertWidth = 0;
  // Slots per expert and micro-batch: ceil(tokens x topK / experts x capacityFactor); 0 is
  // dropless (every token reaches every expert it chose).
  double capacityFactor = 1.25;
  // The Switch load-balancing loss alpha E sum_i f_i P_i and the router z-loss beta mean
  // (logsumexp of the logits)^2, both added to the objective per MoE block.
  double auxLossCoef = 0.01;
  double zLossCoef = 0.0;

  bool isMoe(int layer) const { return experts > 0 && layer % moeEvery == 0; }
  int expertHidden() const { return expertWidth > 0 ? expertWidth : 4 * width; }
  int moeLayers() const;
  int paddedVocab() const { return (vocab + vocabMultiple - 1) / vocabMultiple * vocabMultiple; }
  int headSize() const { return width / heads; }

  // Each field in range and C divisible by H; the message names the offending field.
  Status validate() const;
  std::string describe() const;
};

bool operator==(const GptConfig& a, const GptConfig& b);

}  // namespace cc::parallel
