#include "parallel/data/synthetic.h"

#include <cmath>

#include "parallel/model/rng.h"

namespace cc::parallel {
namespace {

// Cumulative probabilities of the four successors, in 1/100 units (integer maths, so the
// choice is the same everywhere).
constexpr int kCumulative[SyntheticLanguage::kSuccessors] = {55, 80, 95, 100};

}  // namespace

SyntheticLanguage::SyntheticLanguage(uint64_t seed, int vocab)
    : seed_(seed), vocab_(vocab), successors_(static_cast<size_t>(vocab) * kSuccessors) {
  Rng rng(mixSeed(seed, 0x5EED));
  for (int32_t& successor : successors_)
    successor = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
}

void SyntheticLanguage::generateRow(uint64_t rowIndex, std::span<int32_t> tokens) const {
  Rng rng(mixSeed(seed_, 0xDA7A, rowIndex));
  int32_t current = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab_)));
  for (int32_t& token : tokens) {
    token = current;
    const int draw = static_cast<int>(rng.below(100));
    int pick = 0;
    while (draw >= kCumulative[pick]) ++pick;
    current = successors_[static_cast<size_t>(current) * kSuccessors + static_cast<size_t>(pick)];
  }
}

double SyntheticLanguage::entropy() {
  double total = 0;
  int previous = 0;
  for (int cumulative : kCumulative) {
    const double p = (cumulative - previous) / 100.0;
    total -= p * std::log(p);
    previous = cumulative;
  }
  return total;
}

}  // namespace cc::parallel
