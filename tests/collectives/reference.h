// Inputs and sequential references for the collective tests. Every rank can compute
// every rank's input (a hash of rank, element and seed), so each rank checks its own
// result against a reference computed in fp64 (floats, with a bound derived from the
// summation order) or exactly with wrap-around (integers).
#pragma once

#include <cc/cc.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce_kernels.h"

namespace cc::testing {

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline bool isFloat(ccDataType_t type) {
  return type == ccFloat16 || type == ccFloat32 || type == ccFloat64 || type == ccBfloat16;
}
inline bool isSigned(ccDataType_t type) {
  return type == ccInt8 || type == ccInt32 || type == ccInt64;
}

// Unit roundoff of each float type.
inline double unitRoundoff(ccDataType_t type) {
  switch (type) {
    case ccFloat16:
      return std::ldexp(1.0, -11);
    case ccBfloat16:
      return std::ldexp(1.0, -8);
    case ccFloat32:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// Element `i` of a typed buffer as a double (floats) or as raw integer bits.
inline double loadFloat(const std::byte* data, size_t i, ccDataType_t type) {
  switch (type) {
    case ccFloat16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return collectives::halfToFloat(h);
    }
    case ccBfloat16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return collectives::bfloat16ToFloat(h);
    }
    case ccFloat32: {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, data + 8 * i, 8);
      return d;
    }
  }
}
inline void storeFloat(std::byte* data, size_t i, ccDataType_t type, double value) {
  switch (type) {
    case ccFloat16: {
      uint16_t h = collectives::floatToHalf(static_cast<float>(value));
      std::memcpy(data + 2 * i, &h, 2);
      break;
    }
    case ccBfloat16: {
      uint16_t h = collectives::floatToBfloat16(static_cast<float>(value));
      std::memcpy(data + 2 * i, &h, 2);
      break;
    }
    case ccFloat32: {
      auto f = static_cast<float>(value);
      std::memcpy(data + 4 * i, &f, 4);
      break;
    }
    default:
      std::memcpy(data + 8 * i, &value, 8);
      break;
  }
}
inline uint64_t loadBits(const std::byte* data, size_t i, size_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, data + size * i, size);
  return bits;
}
inline int64_t signExtend(uint64_t bits, size_t size) {
  if (size == 8) return static_cast<int64_t>(bits);
  unsigned shift = static_cast<unsigned>(64 - 8 * size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

// The input of `rank` at element `i`: floats in [-1, 1) for sums, [0.75, 1.25) for
// products (so a product of 8 stays in range), integers anything.
inline void fillInput(std::byte* data, size_t count, ccDataType_t type, ccRedOp_t op, int rank,
                      uint64_t seed) {
  size_t size = collectives::dataTypeSize(type);
  for (size_t i = 0; i < count; ++i) {
    uint64_t h =
        mix(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(rank) * 0x100000001b3ULL + i);
    if (isFloat(type)) {
      double unit = static_cast<double>(h >> 11) * 0x1.0p-53;
      storeFloat(data, i, type, op == ccProd ? 0.75 + unit / 2 : 2 * unit - 1);
    } else {
      std::memcpy(data + size * i, &h, size);
    }
  }
}

// Checks element i of a reduction of `inputs` (one per rank, same layout, offset
// `inputOffset` elements). Returns an empty string when right.
inline std::string checkReduced(const std::byte* result, size_t resultIndex,
                                const std::vector<std::vector<std::byte>>& inputs,
                                size_t inputIndex, ccDataType_t type, ccRedOp_t op) {
  const size_t size = collectives::dataTypeSize(type);
  const int n = static_cast<int>(inputs.size());
  if (isFloat(type)) {
    double exact = op == ccProd ? 1 : 0;
    double magnitude = op == ccProd ? 1 : 0;
    double best = loadFloat(inputs[0].data(), inputIndex, type);
    for (int r = 0; r < n; ++r) {
      double x = loadFloat(inputs[static_cast<size_t>(r)].data(), inputIndex, type);
      if (op == ccProd) {
        exact *= x;
        magnitude *= std::fabs(x);
      } else {
        exact += x;
        magnitude += std::fabs(x);
      }
      if (op == ccMax) best = std::max(best, x);
      if (op == ccMin) best = std::min(best, x);
    }
    double got = loadFloat(result, resultIndex, type);
    double bound = 0;
    if (op == ccMax || op == ccMin) {
      exact = best;  // exact: the result is one of the inputs
    } else {
      // n-1 roundings in the reduction plus the final one (and the division for avg),
      // each at most u relative to a partial result bounded by `magnitude`.
      bound = 2.0 * (n + 1) * unitRoundoff(type) * magnitude;
      if (op == ccAvg) {
        exact /= n;
        bound = bound / n + 2 * unitRoundoff(type) * std::fabs(exact);
      }
    }
    if (std::fabs(got - exact) <= bound) return "";
    return "element " + std::to_string(resultIndex) + ": got " + std::to_string(got) +
           ", expected " + std::to_string(exact) + " within " + std::to_string(bound);
  }
  // Integers: exact, with wrap-around.
  uint64_t mask = size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
  uint64_t acc = loadBits(inputs[0].data(), inputIndex, size);
  for (int r = 1; r < n; ++r) {
    uint64_t x = loadBits(inputs[static_cast<size_t>(r)].data(), inputIndex, size);
    switch (op) {
      case ccSum:
      case ccAvg:
        acc = (acc + x) & mask;
        break;
      case ccProd:
        acc = (acc * x) & mask;
        break;
      case ccMax:
      case ccMin: {
        bool less = isSigned(type) ? signExtend(x, size) < signExtend(acc, size) : x < acc;
        if ((op == ccMin) == less) acc = x;
        break;
      }
      default:
        break;
    }
  }
  if (op == ccAvg) {
    if (isSigned(type)) {
      acc = static_cast<uint64_t>(signExtend(acc, size) / n) & mask;
    } else {
      acc = acc / static_cast<uint64_t>(n);
    }
  }
  uint64_t got = loadBits(result, resultIndex, size);
  if (got == acc) return "";
  return "element " + std::to_string(resultIndex) + ": got bits " + std::to_string(got) +
         ", expected " + std::to_string(acc);
}

}  // namespace cc::testing
