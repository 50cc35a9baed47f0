// The model's own random numbers: SplitMix64 and a Box-Muller normal, written out so that
// a seed gives the same bits with any standard library (std::normal_distribution's output
// is implementation-defined).
#pragma once

#include <cmath>
#include <cstdint>

namespace cc::parallel {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t nextU64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in (0, 1]: 53 random bits, never 0 (Box-Muller takes its log).
  double uniform() { return (static_cast<double>(nextU64() >> 11) + 1.0) * 0x1.0p-53; }

  // Uniform integer in [0, bound), bound > 0 (rejection keeps it unbiased).
  uint64_t below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t value = nextU64();
    while (value >= limit) value = nextU64();
    return value % bound;
  }

  double normal() {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 6.283185307179586 * uniform();
    return radius * std::cos(angle);
  }

 private:
  uint64_t state_;
};

// Mixes several numbers into one seed (for per-tensor and per-row streams).
inline uint64_t mixSeed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  Rng rng(seed ^ (a * 0xD1B54A32D192ED03ull) ^ (b * 0xABC98388FB8FAC03ull));
  return rng.nextU64();
}

}  // namespace cc::parallel
