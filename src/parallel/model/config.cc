#include "parallel/model/config.h"

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
  return Status::ok();
}

std::string GptConfig::describe() const {
  return "L=" + std::to_string(layers) + " H=" + std::to_string(heads) +
         " C=" + std::to_string(width) + " T=" + std::to_string(seq) +
         " V=" + std::to_string(vocab) + " (padded " + std::to_string(paddedVocab()) + ")";
}

bool operator==(const GptConfig& a, const GptConfig& b) {
  return a.vocab == b.vocab && a.seq == b.seq && a.layers == b.layers && a.heads == b.heads &&
         a.width == b.width && a.vocabMultiple == b.vocabMultiple;
}

}  // namespace cc::parallel
