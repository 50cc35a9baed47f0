// The built-in synthetic language, generated from the seed so that tests and the demo
// need no download: a first-order Markov chain in which every token has four possible
// successors with probabilities 0.55/0.25/0.15/0.05. A model that learns the transition
// table reaches the chain's entropy (at most 1.11 nats, against ln(256) = 5.55 at
// initialisation), and a bigram is learnable in a few hundred steps.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cc::parallel {

class SyntheticLanguage {
 public:
  static constexpr int kSuccessors = 4;

  SyntheticLanguage(uint64_t seed, int vocab);

  // Row `rowIndex` of the stream: a sequence whose first token is uniform and whose later
  // tokens follow the chain. Depends only on (seed, rowIndex), so rows can be generated
  // in any order and by any rank.
  void generateRow(uint64_t rowIndex, std::span<int32_t> tokens) const;

  // Expected loss of the true model: the entropy of the successor distribution, in nats.
  static double entropy();

 private:
  uint64_t seed_;
  int vocab_;
  std::vector<int32_t> successors_;  // [vocab, kSuccessors]
};

}  // namespace cc::parallel
