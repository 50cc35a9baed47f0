#include "parallel/model/config.h"

#include <cstdio>

namespace cc::parallel {

Status GptConfig::validate() const {
  // Bounds keep every buffer size well inside size_t and the token ids inside uint16
  // (the llm.c .bin format stores tokens as uint16).
  auto inRange = [](int value, int low, int high) { return value >= low && value <= high; };
  if (!inRange(vocab, 2, 65536))
    return invalidArgument("vocab " + std::to_string(vocab) + " not in [2, 65536]");
  if (!inRange(seq, 1, 65536))
    return invalidArgument("seq " + std::to_string(seq) + " not in [1, 65536]");
  if (!inRange(layers, 1, 1024))
    return invalidArgument("layers " + std::to_string(layers) + " not in [1, 1024]");
  if (!inRange(heads, 1, 1024))
    return invalidArgument("heads " + std::to_string(heads) + " not in [1, 1024]");
  if (!inRange(width, 1, 65536))
    return invalidArgument("width " + std::to_string(width) + " not in [1, 65536]");
  if (!inRange(vocabMultiple, 1, 65536)) {
    return invalidArgument("vocab multiple " + std::to_string(vocabMultiple) +
                           " not in [1, 65536]");
  }
  if (width % heads != 0) {
    return invalidArgument("width " + std::to_string(width) + " is not a multiple of heads " +
                           std::to_string(heads));
  }
  if (experts != 0) {
    if (!inRange(experts, 1, 1024))
      return invalidArgument("experts " + std::to_string(experts) + " not in [1, 1024]");
    if (!inRange(topK, 1, experts)) {
      return invalidArgument("top-k " + std::to_string(topK) + " not in [1, experts " +
                             std::to_string(experts) + "]");
    }
    if (!inRange(moeEvery, 1, layers)) {
      return invalidArgument("moe-every " + std::to_string(moeEvery) + " not in [1, layers " +
                             std::to_string(layers) + "]");
    }
    if (!inRange(expertWidth, 0, 1 << 20))
      return invalidArgument("expert width " + std::to_string(expertWidth) + " not in [0, 2^20]");
    if (!(capacityFactor >= 0 && capacityFactor <= 1024)) {
      return invalidArgument("capacity factor " + std::to_string(capacityFactor) +
                             " not in [0, 1024] (0 is dropless)");
    }
    if (!(auxLossCoef >= 0 && auxLossCoef <= 1e6))
      return invalidArgument("aux loss coefficient " + std::to_string(auxLossCoef) + " not >= 0");
    if (!(zLossCoef >= 0 && zLossCoef <= 1e6))
      return invalidArgument("z-loss coefficient " + std::to_string(zLossCoef) + " not >= 0");
  }
  return Status::ok();
}

int GptConfig::moeLayers() const {
  int count = 0;
  for (int layer = 0; layer < layers; ++layer) count += isMoe(layer) ? 1 : 0;
  return count;
}

std::string GptConfig::describe() const {
  if (experts > 0) {
    char capacity[32];
    std::snprintf(capacity, sizeof(capacity), "%g", capacityFactor);
    return "L=" + std::to_string(layers) + " H=" + std::to_string(heads) +
           " C=" + std::to_string(width) + " T=" + std::to_string(seq) +
           " V=" + std::to_string(vocab) + " (padded " + std::to_string(paddedVocab()) +
           "), MoE every " + std::to_string(moeEvery) + ": E=" + std::to_string(experts) +
           " K=" + std::to_string(topK) + " F=" + std::to_string(expertHidden()) + " capacity " +
           (capacityFactor == 0 ? std::string("dropless") : capacity);
  }
  return "L=" + std::to_string(layers) + " H=" + std::to_string(heads) +
         " C=" + std::to_string(width) + " T=" + std::to_string(seq) +
         " V=" + std::to_string(vocab) + " (padded " + std::to_string(paddedVocab()) + ")";
}

bool operator==(const GptConfig& a, const GptConfig& b) {
  return a.vocab == b.vocab && a.seq == b.seq && a.layers == b.layers && a.heads == b.heads &&
         a.width == b.width && a.vocabMultiple == b.vocabMultiple && a.experts == b.experts &&
         (a.experts == 0 ||
          (a.topK == b.topK && a.moeEvery == b.moeEvery && a.expertHidden() == b.expertHidden()));
}

}  // namespace cc::parallel
