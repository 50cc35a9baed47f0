// The check pattern (see pattern.h): byte j is byte j%8 of a hash of (seed, j/8).
#include "pattern.h"

#include <algorithm>
#include <cstring>

namespace cc::bench {
namespace {

// SplitMix64's finalizer: cheap, and every word differs from its neighbours.
uint64_t patternWord(uint64_t seed, uint64_t index) {
  uint64_t x = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void fill(std::span<std::byte> buffer, uint64_t seed, uint64_t mask) {
  size_t words = buffer.size() / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t value = patternWord(seed, w) ^ mask;
    std::memcpy(buffer.data() + 8 * w, &value, 8);
  }
  if (size_t tail = buffer.size() % 8; tail != 0) {
    uint64_t value = patternWord(seed, words) ^ mask;
    std::memcpy(buffer.data() + 8 * words, &value, tail);
  }
}

}  // namespace

uint64_t patternSeed(size_t bytes, int iteration, int phase) {
  return patternWord(static_cast<uint64_t>(bytes),
                     static_cast<uint64_t>(iteration) * 16 + static_cast<uint64_t>(phase));
}

void fillPattern(std::span<std::byte> buffer, uint64_t seed) { fill(buffer, seed, 0); }

void fillPoison(std::span<std::byte> buffer, uint64_t seed) { fill(buffer, seed, ~uint64_t{0}); }

uint64_t countMismatches(std::span<const std::byte> buffer, uint64_t seed) {
  uint64_t wrong = 0;
  for (size_t offset = 0; offset < buffer.size(); offset += 8) {
    size_t length = std::min<size_t>(8, buffer.size() - offset);
    std::byte expected[8];
    uint64_t word = patternWord(seed, offset / 8);
    std::memcpy(expected, &word, 8);
    if (std::memcmp(expected, buffer.data() + offset, length) == 0) continue;
    for (size_t b = 0; b < length; ++b) wrong += expected[b] != buffer[offset + b];
  }
  return wrong;
}

}  // namespace cc::bench
