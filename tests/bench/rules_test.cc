// How a benchmark row's time is taken from the ranks' samples (bench/coll_rules.h, shared by
// cc-bench and its peers): nccl-tests' -a combines each rank's own mean call; the tail
// (p50, p99, worst) comes from the slowest rank's call in each iteration.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "coll_rules.h"

namespace cc::bench::coll {
namespace {

using Samples = std::vector<std::vector<double>>;  // [rank][iteration], seconds

// Ranks whose calls take turns being slow, as the ranks of a rooted collective do when
// they run ahead of each other: `iterations` calls each, drawn from `seed`. A rank's mean
// is then at most (100 + 3 x 2) / 4 = 26.5 us, every iteration's slowest call at least 80.
Samples unevenRanks(int ranks, int iterations, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> fast(1e-6, 2e-6);
  std::uniform_real_distribution<double> slow(80e-6, 100e-6);
  Samples samples(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < iterations; ++i) {
      const bool mySlowTurn = (i + r) % ranks == 0;
      samples[static_cast<size_t>(r)].push_back(mySlowTurn ? slow(random) : fast(random));
    }
  }
  return samples;
}

std::vector<double> meansOf(const Samples& samples) {
  std::vector<double> means;
  for (const std::vector<double>& rank : samples)
    means.push_back(meanSeconds(rank.data(), rank.size()));
  return means;
}

std::vector<double> slowestPerIteration(const Samples& samples) {
  std::vector<double> slowest = samples[0];
  for (const std::vector<double>& rank : samples) {
    for (size_t i = 0; i < slowest.size(); ++i) slowest[i] = std::max(slowest[i], rank[i]);
  }
  return slowest;
}

TEST(BenchRules, EachAverageModeCombinesTheRanksMeansAsNcclTestsDoes) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const Samples samples = unevenRanks(4, 40, seed);
    const std::vector<double> means = meansOf(samples);
    double total = 0;
    for (double m : means) total += m;
    const auto us = [](double seconds) { return seconds * 1e6; };
    EXPECT_DOUBLE_EQ(rankTimeUs(means, 0), us(means[0]));
    EXPECT_DOUBLE_EQ(rankTimeUs(means, 1), us(total / 4));
    EXPECT_DOUBLE_EQ(rankTimeUs(means, 2), us(*std::min_element(means.begin(), means.end())));
    EXPECT_DOUBLE_EQ(rankTimeUs(means, 3), us(*std::max_element(means.begin(), means.end())));
    EXPECT_LE(rankTimeUs(means, 2), rankTimeUs(means, 1));
    EXPECT_LE(rankTimeUs(means, 1), rankTimeUs(means, 3));
  }
}

// The slowest rank's own loop never takes longer per call than the mean of each
// iteration's slowest call (the time cc-bench printed before -a), and where the ranks
// take turns being slow it takes much less: that mean charges every iteration with
// some rank's slow call.
TEST(BenchRules, TheSlowestRanksLoopIsAtMostTheMeanOfEachIterationsSlowestCall) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const Samples samples = unevenRanks(4, 40, seed);
    const CallTimes row = summarizeRow(slowestPerIteration(samples), meansOf(samples), 3);
    const CallTimes before = summarizeCalls(slowestPerIteration(samples));
    EXPECT_LE(row.meanUs, before.meanUs);
    EXPECT_LT(row.meanUs, 0.5 * before.meanUs) << "turn-taking ranks: a quarter of each "
                                                  "rank's calls are slow, every iteration has one";
    // The tail is the slowest rank's per iteration either way.
    EXPECT_EQ(row.p50Us, before.p50Us);
    EXPECT_EQ(row.p99Us, before.p99Us);
    EXPECT_EQ(row.worstUs, before.worstUs);
  }
}

// Ranks in lock step (every rank's i-th call takes the same time) give the same time in
// every mode, equal to the old per-iteration figure.
TEST(BenchRules, RanksInLockStepGiveOneTimeInEveryMode) {
  Samples samples(3, std::vector<double>{3e-6, 5e-6, 4e-6, 8e-6});
  const std::vector<double> means = meansOf(samples);
  const double before = summarizeCalls(slowestPerIteration(samples)).meanUs;
  for (int average = 0; average <= 3; ++average) {
    EXPECT_NEAR(summarizeRow(slowestPerIteration(samples), means, average).meanUs, before, 1e-9)
        << average;
  }
}

}  // namespace
}  // namespace cc::bench::coll
