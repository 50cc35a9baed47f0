// Softmax cross-entropy over the real vocabulary: the logits of the padded rows (columns
// vocab .. paddedVocab-1) are neither in the softmax nor in the loss, so padding changes
// nothing a checkpoint reader can see.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "parallel/model/layers/fast_math.h"

namespace cc::parallel::layers {

// Turns each row of `logits` into probabilities in place (padded columns set to 0) and
// writes the per-row loss -log p[target]. Returns the mean loss, summed in fp64 in row
// order.
template <typename T>
double crossEntropyForward(T* logitsToProbs, T* losses, const int32_t* targets, size_t rows,
                           size_t vocab, size_t paddedVocab) {
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    T* row = logitsToProbs + r * paddedVocab;
    const T rowMax = maxOf(row, vocab);
    const T targetLogit = row[static_cast<size_t>(targets[r])];
    for (size_t j = 0; j < vocab; ++j) row[j] = expOf(row[j] - rowMax);
    const T sum = sumOf(row, vocab);
    const T inverseSum = T(1) / sum;
    for (size_t j = 0; j < vocab; ++j) row[j] *= inverseSum;
    for (size_t j = vocab; j < paddedVocab; ++j) row[j] = 0;
    // log-sum-exp form: accurate even where p[target] underflows.
    losses[r] = std::log(sum) - (targetLogit - rowMax);
    total += static_cast<double>(losses[r]);
  }
  return total / static_cast<double>(rows);
}

// Accumulates dlogits += scale * (p - onehot(target)) on the real columns; `scale` is
// d(loss)/d(mean loss) divided by the row count.
template <typename T>
void crossEntropyBackward(T* dlogits, const T* probs, const int32_t* targets, size_t rows,
                          size_t vocab, size_t paddedVocab, T scale) {
  for (size_t r = 0; r < rows; ++r) {
    const T* p = probs + r * paddedVocab;
    T* d = dlogits + r * paddedVocab;
    for (size_t j = 0; j < vocab; ++j) d[j] += scale * p[j];
    d[static_cast<size_t>(targets[r])] -= scale;
  }
}

}  // namespace cc::parallel::layers
