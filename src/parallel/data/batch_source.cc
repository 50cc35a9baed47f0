#include "parallel/data/batch_source.h"

#include <algorithm>

#include "parallel/data/token_file.h"

namespace cc::parallel {

Result<std::unique_ptr<TokenFileBatches>> TokenFileBatches::open(const std::string& path,
                                                                 BatchShape shape, int vocab) {
  CC_ASSIGN_OR_RETURN(std::vector<uint16_t> tokens, readTokenFile(path));
  if (tokens.size() < shape.tokens() + 1) {
    return invalidArgument("token file " + path + ": " + std::to_string(tokens.size()) +
                           " tokens, fewer than B*T+1 = " + std::to_string(shape.tokens() + 1));
  }
  const auto largest = std::max_element(tokens.begin(), tokens.end());
  if (*largest >= vocab) {
    return invalidArgument("token file " + path + ": token " + std::to_string(*largest) +
                           " is outside the model's vocabulary of " + std::to_string(vocab));
  }
  return std::make_unique<TokenFileBatches>(std::move(tokens), shape, path);
}

TokenFileBatches::TokenFileBatches(std::vector<uint16_t> tokens, BatchShape shape, std::string path)
    : tokens_(std::move(tokens)), shape_(shape), path_(std::move(path)) {}

void TokenFileBatches::fill(int64_t batchIndex, std::span<int32_t> inputs,
                            std::span<int32_t> targets) const {
  const size_t span = shape_.tokens();
  // Whole batches that fit in the file; the loader wraps around (an epoch) after them.
  const uint64_t batchesInFile = (tokens_.size() - 1) / span;
  const uint64_t global = static_cast<uint64_t>(batchIndex) * static_cast<uint64_t>(shape_.world) +
                          static_cast<uint64_t>(shape_.rank);
  const size_t start = static_cast<size_t>(global % batchesInFile) * span;
  for (size_t i = 0; i < span; ++i) {
    inputs[i] = tokens_[start + i];
    targets[i] = tokens_[start + i + 1];
  }
}

std::string TokenFileBatches::describe() const {
  return path_ + " (" + std::to_string(tokens_.size()) + " tokens)";
}

SyntheticBatches::SyntheticBatches(uint64_t seed, int vocab, BatchShape shape, bool heldOut)
    : language_(seed, vocab), shape_(shape), heldOut_(heldOut) {}

void SyntheticBatches::fill(int64_t batchIndex, std::span<int32_t> inputs,
                            std::span<int32_t> targets) const {
  // Held-out rows come from the top half of the row space, training rows never reach it.
  constexpr uint64_t kHeldOutBase = uint64_t{1} << 62;
  const uint64_t global = static_cast<uint64_t>(batchIndex) * static_cast<uint64_t>(shape_.world) +
                          static_cast<uint64_t>(shape_.rank);
  const size_t seq = static_cast<size_t>(shape_.seq);
  std::vector<int32_t> row(seq + 1);
  for (size_t b = 0; b < static_cast<size_t>(shape_.batch); ++b) {
    const uint64_t rowIndex =
        (heldOut_ ? kHeldOutBase : 0) + global * static_cast<uint64_t>(shape_.batch) + b;
    language_.generateRow(rowIndex, row);
    std::copy(row.begin(), row.end() - 1, inputs.begin() + static_cast<std::ptrdiff_t>(b * seq));
    std::copy(row.begin() + 1, row.end(), targets.begin() + static_cast<std::ptrdiff_t>(b * seq));
  }
}

std::string SyntheticBatches::describe() const {
  return std::string("synthetic Markov language") + (heldOut_ ? " (held-out rows)" : "");
}

}  // namespace cc::parallel
