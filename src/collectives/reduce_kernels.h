// Reduction kernels: one per (datatype, op), each compiled three times (generic x86-64,
// AVX2 with F16C, AVX-512) and chosen once at run time from what the CPU supports.
//
// Every kernel has one form: dst = srcs[0] op srcs[1] op ... op srcs[n-1], applied left
// to right, element by element. The order is fixed so that the same inputs in the same
// order give the same bits on every rank. float16 and bfloat16 are accumulated in float32
// across all the sources of one call and rounded once (to nearest even) at the end.
// Integer sums and products wrap. dst may be the same buffer as any source.
#pragma once

#include <cc/cc.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace cc::collectives {

using ReduceKernel = void (*)(void* dst, const void* const* srcs, int sourceCount, size_t count);

enum class Isa { kGeneric, kAvx2, kAvx512 };

// The kernel for (type, op); ccAvg reduces as ccSum (the division is divideForAverage).
// Both must be valid (checked by the caller).
ReduceKernel reduceKernel(ccDataType_t type, ccRedOp_t op);
// The same, for one instruction set (tests and benchmarks compare them).
ReduceKernel reduceKernelFor(Isa isa, ccDataType_t type, ccRedOp_t op);

// The instruction set the kernels use: the best the CPU has, or CC_REDUCE_ISA
// (generic|avx2|avx512) when set and supported.
Isa activeIsa();
const char* isaName(Isa isa);
bool isaSupported(Isa isa);

// data[i] /= divisor (integers truncate toward zero, as C does; halves and bfloat16 go
// through float32).
void divideForAverage(void* data, size_t count, ccDataType_t type, int divisor);

// Conversions used by the kernels, exposed for tests: IEEE binary16 and bfloat16,
// rounding to nearest even, NaN kept NaN.
float halfToFloat(uint16_t bits);
uint16_t floatToHalf(float value);
float bfloat16ToFloat(uint16_t bits);
uint16_t floatToBfloat16(float value);
// The same over whole buffers, vectorised where the CPU has F16C/AVX2 (the same bits).
void floatsTo16Bits(const float* src, uint16_t* dst, size_t count, bool bfloat16);
void floatsFrom16Bits(const uint16_t* src, float* dst, size_t count, bool bfloat16);

size_t dataTypeSize(ccDataType_t type);  // 0 for an unknown type
const char* dataTypeName(ccDataType_t type);
const char* redOpName(ccRedOp_t op);

}  // namespace cc::collectives
