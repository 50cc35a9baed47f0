#include "collectives/reduce_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "core/log.h"

namespace cc::collectives {
namespace {

struct Half {
  uint16_t bits;
};
struct Bfloat16 {
  uint16_t bits;
};

inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint16_t floatToHalfBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN (NaN stays NaN: keep a mantissa bit)
    return static_cast<uint16_t>(
        sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (magnitude < 0x38800000u) {
    // Result is subnormal (or zero): value * 2^24 rounded to an integer, nearest even.
    if (magnitude < 0x33000000u) return sign;  // below half the smallest subnormal
    uint32_t exponent = magnitude >> 23;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;  // value * 2^24 = mantissa * 2^(exponent - 126)
    uint32_t result = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias, round the 13 dropped bits to nearest even (a carry into the
  // exponent is the right answer, including overflow to inf).
  uint32_t rebased = magnitude - 0x38000000u;
  uint32_t result = rebased >> 13;
  uint32_t remainder = rebased & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

inline float bfloatBitsToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint16_t floatToBfloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
struct Traits {
  using Acc = T;
  static T load(T x) { return x; }
  static T store(T x) { return x; }
};
template <>
struct Traits<Half> {
  using Acc = float;
  static float load(Half x) { return halfBitsToFloat(x.bits); }
  static Half store(float x) { return Half{floatToHalfBits(x)}; }
};
template <>
struct Traits<Bfloat16> {
  using Acc = float;
  static float load(Bfloat16 x) { return bfloatBitsToFloat(x.bits); }
  static Bfloat16 store(float x) { return Bfloat16{floatToBfloatBits(x)}; }
};

// Integer sums and products wrap: computed in the unsigned type (defined behaviour),
// converted back (modular since C++20).
template <typename A, bool = std::is_integral_v<A>>
struct ArithmeticOf {
  using type = A;
};
template <typename A>
struct ArithmeticOf<A, true> {
  using type = std::make_unsigned_t<A>;
};
template <typename A>
using Arithmetic = typename ArithmeticOf<A>::type;

struct OpSum {
  template <typename A>
  static A apply(A a, A b) {
    using U = Arithmetic<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
};
struct OpProd {
  template <typename A>
  static A apply(A a, A b) {
    using U = Arithmetic<A>;
    if constexpr (std::is_integral_v<A> && sizeof(A) < sizeof(unsigned)) {
      return static_cast<A>(static_cast<unsigned>(static_cast<U>(a)) *
                            static_cast<unsigned>(static_cast<U>(b)));
    } else {
      return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    }
  }
};
struct OpMax {
  template <typename A>
  static A apply(A a, A b) {
    return a < b ? b : a;
  }
};
struct OpMin {
  template <typename A>
  static A apply(A a, A b) {
    return b < a ? b : a;
  }
};

constexpr size_t kBlockElements = 1024;

namespace generic {
#define CC_KERNEL_F16C 0
#include "collectives/reduce_kernels_impl.inc"
#undef CC_KERNEL_F16C
}  // namespace generic

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c,fma")
#endif
namespace avx2 {
#define CC_KERNEL_F16C 1
#include "collectives/reduce_kernels_impl.inc"
#undef CC_KERNEL_F16C
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(                                                    \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,fma"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,fma")
#endif
namespace avx512 {
#define CC_KERNEL_F16C 1
#include "collectives/reduce_kernels_impl.inc"
#undef CC_KERNEL_F16C
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

Isa detectIsa() {
  Isa best = Isa::kGeneric;
  if (isaSupported(Isa::kAvx512)) {
    best = Isa::kAvx512;
  } else if (isaSupported(Isa::kAvx2)) {
    best = Isa::kAvx2;
  }
  const char* forced = std::getenv("CC_REDUCE_ISA");
  if (forced == nullptr || *forced == '\0') return best;
  std::string_view name(forced);
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (name != isaName(isa)) continue;
    if (isaSupported(isa)) return isa;
    log::warn("CC_REDUCE_ISA={}: this CPU lacks it; using {}", forced, isaName(best));
    return best;
  }
  log::warn("CC_REDUCE_ISA={} is not generic, avx2 or avx512; using {}", forced, isaName(best));
  return best;
}

template <typename T>
void divideAll(T* data, size_t count, int divisor) {
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, Bfloat16>) {
      data[i] = Traits<T>::store(Traits<T>::load(data[i]) / static_cast<float>(divisor));
    } else {
      data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
    }
  }
}

}  // namespace

bool isaSupported(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
             __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return isaSupported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa activeIsa() {
  static const Isa isa = detectIsa();
  return isa;
}

ReduceKernel reduceKernelFor(Isa isa, ccDataType_t type, ccRedOp_t op) {
  switch (isa) {
    case Isa::kGeneric:
      return generic::kernelFor(type, op);
    case Isa::kAvx2:
      return avx2::kernelFor(type, op);
    case Isa::kAvx512:
      return avx512::kernelFor(type, op);
  }
  return nullptr;
}

void floatsTo16Bits(const float* src, uint16_t* dst, size_t count, bool bfloat16) {
  switch (activeIsa()) {
    case Isa::kGeneric:
      return generic::narrowFloats(dst, src, count, bfloat16);
    case Isa::kAvx2:
      return avx2::narrowFloats(dst, src, count, bfloat16);
    case Isa::kAvx512:
      return avx512::narrowFloats(dst, src, count, bfloat16);
  }
}

void floatsFrom16Bits(const uint16_t* src, float* dst, size_t count, bool bfloat16) {
  switch (activeIsa()) {
    case Isa::kGeneric:
      return generic::widenToFloats(dst, src, count, bfloat16);
    case Isa::kAvx2:
      return avx2::widenToFloats(dst, src, count, bfloat16);
    case Isa::kAvx512:
      return avx512::widenToFloats(dst, src, count, bfloat16);
  }
}

ReduceKernel reduceKernel(ccDataType_t type, ccRedOp_t op) {
  // One table per process, filled on first use.
  static const auto table = [] {
    std::array<std::array<ReduceKernel, ccNumOps>, ccNumTypes> kernels{};
    for (int t = 0; t < ccNumTypes; ++t) {
      for (int o = 0; o < ccNumOps; ++o) {
        kernels[t][o] =
            reduceKernelFor(activeIsa(), static_cast<ccDataType_t>(t), static_cast<ccRedOp_t>(o));
      }
    }
    return kernels;
  }();
  return table[static_cast<size_t>(type)][static_cast<size_t>(op)];
}

void divideForAverage(void* data, size_t count, ccDataType_t type, int divisor) {
  switch (type) {
    case ccInt8:
      divideAll(static_cast<int8_t*>(data), count, divisor);
      break;
    case ccUint8:
      divideAll(static_cast<uint8_t*>(data), count, divisor);
      break;
    case ccInt32:
      divideAll(static_cast<int32_t*>(data), count, divisor);
      break;
    case ccUint32:
      divideAll(static_cast<uint32_t*>(data), count, divisor);
      break;
    case ccInt64:
      divideAll(static_cast<int64_t*>(data), count, divisor);
      break;
    case ccUint64:
      divideAll(static_cast<uint64_t*>(data), count, divisor);
      break;
    case ccFloat16:
      divideAll(static_cast<Half*>(data), count, divisor);
      break;
    case ccFloat32:
      divideAll(static_cast<float*>(data), count, divisor);
      break;
    case ccFloat64:
      divideAll(static_cast<double*>(data), count, divisor);
      break;
    case ccBfloat16:
      divideAll(static_cast<Bfloat16*>(data), count, divisor);
      break;
    default:
      break;
  }
}

float halfToFloat(uint16_t bits) { return halfBitsToFloat(bits); }
uint16_t floatToHalf(float value) { return floatToHalfBits(value); }
float bfloat16ToFloat(uint16_t bits) { return bfloatBitsToFloat(bits); }
uint16_t floatToBfloat16(float value) { return floatToBfloatBits(value); }

size_t dataTypeSize(ccDataType_t type) {
  switch (type) {
    case ccInt8:
    case ccUint8:
      return 1;
    case ccFloat16:
    case ccBfloat16:
      return 2;
    case ccInt32:
    case ccUint32:
    case ccFloat32:
      return 4;
    case ccInt64:
    case ccUint64:
    case ccFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* dataTypeName(ccDataType_t type) {
  switch (type) {
    case ccInt8:
      return "int8";
    case ccUint8:
      return "uint8";
    case ccInt32:
      return "int32";
    case ccUint32:
      return "uint32";
    case ccInt64:
      return "int64";
    case ccUint64:
      return "uint64";
    case ccFloat16:
      return "half";
    case ccFloat32:
      return "float";
    case ccFloat64:
      return "double";
    case ccBfloat16:
      return "bfloat16";
    default:
      return "?";
  }
}

const char* redOpName(ccRedOp_t op) {
  switch (op) {
    case ccSum:
      return "sum";
    case ccProd:
      return "prod";
    case ccMax:
      return "max";
    case ccMin:
      return "min";
    case ccAvg:
      return "avg";
    default:
      return "?";
  }
}

}  // namespace cc::collectives
