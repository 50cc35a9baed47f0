// Data checks for the benchmark: the sender fills its buffer with a pattern that depends
// on the size and the iteration, the receiver counts the bytes that differ. The pattern
// does not repeat within a buffer, so data landing at a shifted offset or from a stale
// iteration is caught too. Receivers poison their buffer with the pattern's complement
// first, so a receive that writes nothing cannot pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace cc::bench {

// A seed for one check: what was sent (size, iteration) and in which phase.
uint64_t patternSeed(size_t bytes, int iteration, int phase);

void fillPattern(std::span<std::byte> buffer, uint64_t seed);
// Every byte differs from the pattern's.
void fillPoison(std::span<std::byte> buffer, uint64_t seed);
// Bytes of `buffer` that differ from the pattern.
uint64_t countMismatches(std::span<const std::byte> buffer, uint64_t seed);

}  // namespace cc::bench
