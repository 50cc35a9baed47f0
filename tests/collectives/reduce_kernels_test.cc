// The reduction kernels on their own: the float16 and bfloat16 conversions against
// their definitions (every half value, rounding at every tie), every instruction set
// giving the same bits as the generic code for every type and op, odd lengths and
// aliased destinations, and float16 sums accumulated in float32 across sources.
#include "collectives/reduce_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace cc::collectives {
namespace {

double halfValue(uint16_t bits) {
  int sign = bits >> 15 ? -1 : 1;
  int exponent = (bits >> 10) & 0x1f;
  int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(HalfConversion, EveryHalfValueConvertsExactlyAndBack) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    auto h = static_cast<uint16_t>(bits);
    double expected = halfValue(h);
    float got = halfToFloat(h);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << bits;
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(got)))) << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), expected) << bits;
    ASSERT_EQ(floatToHalf(got), h) << bits;
  }
}

TEST(HalfConversion, RoundsToNearestEvenAtEveryTie) {
  // Between consecutive finite positive halves a and b, the midpoint rounds to the one
  // with an even mantissa, and anything off the midpoint to the nearer one.
  for (uint32_t bits = 0; bits < 0x7bff; ++bits) {
    double a = halfValue(static_cast<uint16_t>(bits));
    double b = halfValue(static_cast<uint16_t>(bits + 1));
    auto mid = static_cast<float>((a + b) / 2);
    if (static_cast<double>(mid) != (a + b) / 2) continue;  // not representable in float
    uint16_t even = (bits & 1) == 0 ? static_cast<uint16_t>(bits) : static_cast<uint16_t>(bits + 1);
    ASSERT_EQ(floatToHalf(mid), even) << bits;
    ASSERT_EQ(floatToHalf(std::nextafter(mid, 0.0f)), bits) << bits;
    ASSERT_EQ(floatToHalf(std::nextafter(mid, INFINITY)), bits + 1) << bits;
  }
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
}

TEST(Bfloat16Conversion, TruncatedFloatsRoundToNearestEven) {
  std::mt19937 random(3);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = random();
    float value;
    std::memcpy(&value, &bits, 4);
    uint16_t rounded = floatToBfloat16(value);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(bfloat16ToFloat(rounded)));
      continue;
    }
    // The result is one of the two neighbours, the nearer, ties to even.
    auto low = static_cast<uint16_t>(bits >> 16);
    uint32_t remainder = bits & 0xffff;
    uint16_t expected = remainder > 0x8000 || (remainder == 0x8000 && (low & 1))
                            ? static_cast<uint16_t>(low + 1)
                            : low;
    ASSERT_EQ(rounded, expected) << std::hex << bits;
  }
}

const ccDataType_t kTypes[] = {ccInt8,   ccUint8,   ccInt32,   ccUint32,  ccInt64,
                               ccUint64, ccFloat16, ccFloat32, ccFloat64, ccBfloat16};
const ccRedOp_t kOps[] = {ccSum, ccProd, ccMax, ccMin, ccAvg};

std::vector<std::byte> randomBytes(size_t bytes, uint32_t seed, ccDataType_t type) {
  std::mt19937 random(seed);
  std::vector<std::byte> data(bytes);
  for (auto& b : data) b = static_cast<std::byte>(random());
  // Keep float inputs finite (NaN payloads may legitimately differ between paths).
  size_t size = dataTypeSize(type);
  for (size_t i = 0; i < bytes / size; ++i) {
    float f = static_cast<float>(random() % 2000) / 64.0f - 15.0f;
    if (type == ccFloat32) std::memcpy(&data[i * 4], &f, 4);
    if (type == ccFloat64) {
      double d = f;
      std::memcpy(&data[i * 8], &d, 8);
    }
    if (type == ccFloat16) {
      uint16_t h = floatToHalf(f);
      std::memcpy(&data[i * 2], &h, 2);
    }
    if (type == ccBfloat16) {
      uint16_t h = floatToBfloat16(f);
      std::memcpy(&data[i * 2], &h, 2);
    }
  }
  return data;
}

TEST(ReduceKernels, EveryInstructionSetMatchesGenericForEveryTypeAndOp) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isaSupported(isa)) {
      std::printf("note: this CPU lacks %s; its kernels are not compared\n", isaName(isa));
      continue;
    }
    for (ccDataType_t type : kTypes) {
      for (ccRedOp_t op : kOps) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{1023},
                             size_t{1025}, size_t{5003}}) {
          for (int sources : {2, 3, 8}) {
            size_t bytes = count * dataTypeSize(type);
            std::vector<std::vector<std::byte>> inputs;
            std::vector<const void*> pointers;
            for (int s = 0; s < sources; ++s)
              inputs.push_back(randomBytes(bytes + 1, static_cast<uint32_t>(s + 17 * count), type));
            for (auto& input : inputs) pointers.push_back(input.data());
            std::vector<std::byte> expected(bytes + 1), got(bytes + 1);
            reduceKernelFor(Isa::kGeneric, type, op)(expected.data(), pointers.data(), sources,
                                                     count);
            reduceKernelFor(isa, type, op)(got.data(), pointers.data(), sources, count);
            ASSERT_EQ(std::memcmp(expected.data(), got.data(), bytes), 0)
                << isaName(isa) << " " << dataTypeName(type) << " " << redOpName(op) << " count "
                << count << " sources " << sources;
            // In place: the destination is the first source.
            std::vector<std::byte> inPlace = inputs[0];
            pointers[0] = inPlace.data();
            reduceKernelFor(isa, type, op)(inPlace.data(), pointers.data(), sources, count);
            ASSERT_EQ(std::memcmp(expected.data(), inPlace.data(), bytes), 0)
                << "in place: " << isaName(isa) << " " << dataTypeName(type) << " " << redOpName(op)
                << " count " << count;
          }
        }
      }
    }
  }
}

TEST(ReduceKernels, IntegersWrapAndHalvesAccumulateInFloat32) {
  int8_t a[3] = {127, -128, 100};
  int8_t b[3] = {1, -1, 100};
  int8_t out[3];
  const void* sources[2] = {a, b};
  reduceKernel(ccInt8, ccSum)(out, sources, 2, 3);
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 127);
  EXPECT_EQ(out[2], -56);
  // 2048 + 1 + 1 in float16: pairwise rounding gives 2048 (2049 is not representable and
  // ties to even twice); one rounding of the float32 sum gives 2050.
  uint16_t x = floatToHalf(2048.0f), y = floatToHalf(1.0f), z = floatToHalf(1.0f);
  uint16_t result;
  const void* halves[3] = {&x, &y, &z};
  reduceKernel(ccFloat16, ccSum)(&result, halves, 3, 1);
  EXPECT_EQ(halfToFloat(result), 2050.0f);
}

TEST(ReduceKernels, AverageDividesAfterTheSum) {
  int32_t ints[3] = {7, -7, 8};
  divideForAverage(ints, 3, ccInt32, 2);
  EXPECT_EQ(ints[0], 3);
  EXPECT_EQ(ints[1], -3);
  EXPECT_EQ(ints[2], 4);
  float floats[2] = {3.0f, 1.0f};
  divideForAverage(floats, 2, ccFloat32, 4);
  EXPECT_EQ(floats[0], 0.75f);
  EXPECT_EQ(floats[1], 0.25f);
}

}  // namespace
}  // namespace cc::collectives
