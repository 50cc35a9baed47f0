// The vocabulary split across tensor-parallel ranks (Megatron's vocab-parallel embedding
// and cross-entropy): a rank holds the rows [first, first + count) of the padded token
// embedding, looks up only the tokens it owns (the others read zero until the group sums
// the lookups) and computes the logits of its columns only. The loss never gathers the
// logits: each rank reduces its columns to a row max, then to a row sum of exponentials
// and its share of the target logit, and the group sums those [rows] vectors; the padded
// columns (vocab and above) stay out of both. These are the kernels between the group's
// reductions; model/gpt.cc runs them in order.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "parallel/model/layers/fast_math.h"

namespace cc::parallel::layers {

// The columns of a shard that are real tokens: [first, first + count) ∩ [0, vocab).
inline size_t realColumns(size_t first, size_t count, size_t vocab) {
  return first >= vocab ? 0 : (first + count <= vocab ? count : vocab - first);
}

// out[row] = wte[token - first] for the tokens this shard owns, 0 for the others.
template <typename T>
void vocabParallelEmbeddingForward(T* out, const int32_t* tokens, const T* wteShard, size_t first,
                                   size_t count, size_t rows, size_t width) {
  for (size_t row = 0; row < rows; ++row) {
    const size_t token = static_cast<size_t>(tokens[row]);
    T* outRow = out + row * width;
    if (token >= first && token < first + count) {
      const T* tokenRow = wteShard + (token - first) * width;
      for (size_t i = 0; i < width; ++i) outRow[i] = tokenRow[i];
    } else {
      for (size_t i = 0; i < width; ++i) outRow[i] = T(0);
    }
  }
}

// out[i] += wpe[t] for rows i of [rows, width], which are rows [firstRow, firstRow + rows)
// of the row-major [batch, seq] tokens (t = row % seq), after the group has summed the
// lookups.
template <typename T>
void addPositions(T* out, const T* wpe, size_t firstRow, size_t rows, int seq, size_t width) {
  for (size_t i = 0; i < rows; ++i) {
    const T* positionRow = wpe + ((firstRow + i) % static_cast<size_t>(seq)) * width;
    T* outRow = out + i * width;
    for (size_t j = 0; j < width; ++j) outRow[j] += positionRow[j];
  }
}

// Accumulates the owned tokens' rows of dwteShard and every row of dwpe, in token order
// (per element the one-process order).
template <typename T>
void vocabParallelEmbeddingBackward(T* dwteShard, T* dwpe, const T* dout, const int32_t* tokens,
                                    size_t first, size_t count, int batch, int seq, size_t width) {
  for (size_t row = 0; row < static_cast<size_t>(batch) * static_cast<size_t>(seq); ++row) {
    const size_t token = static_cast<size_t>(tokens[row]);
    const T* doutRow = dout + row * width;
    T* positionRow = dwpe + (row % static_cast<size_t>(seq)) * width;
    if (token >= first && token < first + count) {
      T* tokenRow = dwteShard + (token - first) * width;
      for (size_t i = 0; i < width; ++i) tokenRow[i] += doutRow[i];
    }
    for (size_t i = 0; i < width; ++i) positionRow[i] += doutRow[i];
  }
}

// Step 1: rowMax[r] = the largest real logit of the shard's row r (lowest() where the
// shard has no real column).
template <typename T>
void shardRowMax(T* rowMax, const T* logits, size_t rows, size_t columns, size_t real) {
  for (size_t r = 0; r < rows; ++r) {
    rowMax[r] = real > 0 ? maxOf(logits + r * columns, real) : std::numeric_limits<T>::lowest();
  }
}

// Step 2, with the group's row max: the real logits become exponentials in place (padded
// ones 0); sums[r] = their sum, targetLogits[r] = the target's logit where this shard owns
// the target, 0 elsewhere.
template <typename T>
void shardExponentials(T* logitsToExps, T* sums, T* targetLogits, const T* rowMax,
                       const int32_t* targets, size_t rows, size_t columns, size_t first,
                       size_t real) {
  for (size_t r = 0; r < rows; ++r) {
    T* row = logitsToExps + r * columns;
    const size_t target = static_cast<size_t>(targets[r]);
    targetLogits[r] = target >= first && target < first + real ? row[target - first] : T(0);
    for (size_t j = 0; j < real; ++j) row[j] = expOf(row[j] - rowMax[r]);
    for (size_t j = real; j < columns; ++j) row[j] = T(0);
    sums[r] = sumOf(row, real);
  }
}

// Step 3, with the group's sums and target logits: probabilities in place, the per-row
// loss log(sum) - (target - max); returns the mean loss, summed in fp64 in row order.
template <typename T>
double shardProbabilities(T* expsToProbs, T* losses, const T* sums, const T* targetLogits,
                          const T* rowMax, size_t rows, size_t columns, size_t real) {
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    T* row = expsToProbs + r * columns;
    const T inverseSum = T(1) / sums[r];
    for (size_t j = 0; j < real; ++j) row[j] *= inverseSum;
    losses[r] = std::log(sums[r]) - (targetLogits[r] - rowMax[r]);
    total += static_cast<double>(losses[r]);
  }
  return total / static_cast<double>(rows);
}

// Accumulates dlogits += scale * (p - onehot(target)) on the shard's real columns.
template <typename T>
void vocabParallelCrossEntropyBackward(T* dlogits, const T* probs, const int32_t* targets,
                                       size_t rows, size_t columns, size_t first, size_t real,
                                       T scale) {
  for (size_t r = 0; r < rows; ++r) {
    const T* p = probs + r * columns;
    T* d = dlogits + r * columns;
    for (size_t j = 0; j < real; ++j) d[j] += scale * p[j];
    const size_t target = static_cast<size_t>(targets[r]);
    if (target >= first && target < first + real) d[target - first] -= scale;
  }
}

}  // namespace cc::parallel::layers
