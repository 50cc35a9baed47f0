// Google Benchmark suite for the reduction kernels: every (type, op) with two sources,
// per instruction set, at sizes from L1-resident to far beyond the last-level cache, and
// memcpy of the same output size beside them as the yardstick. bytes_per_second counts
// what the kernel moves: two inputs read and one output written.
//
//   build/bin/reduce-kernels-bench --benchmark_filter='float/sum'
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce_kernels.h"

namespace {

using cc::collectives::Isa;

void reduceTwo(benchmark::State& state, Isa isa, ccDataType_t type, ccRedOp_t op) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / cc::collectives::dataTypeSize(type);
  std::vector<std::byte> a(bytes, std::byte{1}), b(bytes, std::byte{2}), out(bytes);
  const void* sources[2] = {a.data(), b.data()};
  auto kernel = cc::collectives::reduceKernelFor(isa, type, op);
  for (auto _ : state) {
    kernel(out.data(), sources, 2, count);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 3 * bytes));
}

void copy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<std::byte> in(bytes, std::byte{1}), out(bytes);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), bytes);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * bytes));
}

const int registered = [] {
  const ccDataType_t types[] = {ccInt8,   ccUint8,   ccInt32,   ccUint32,  ccInt64,
                                ccUint64, ccFloat16, ccFloat32, ccFloat64, ccBfloat16};
  const ccRedOp_t ops[] = {ccSum, ccProd, ccMax, ccMin};
  benchmark::RegisterBenchmark("memcpy", copy)->RangeMultiplier(16)->Range(16 << 10, 64 << 20);
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (!cc::collectives::isaSupported(isa)) continue;
    for (ccDataType_t type : types) {
      for (ccRedOp_t op : ops) {
        std::string name = std::string(cc::collectives::isaName(isa)) + "/" +
                           cc::collectives::dataTypeName(type) + "/" +
                           cc::collectives::redOpName(op);
        benchmark::RegisterBenchmark(name.c_str(), reduceTwo, isa, type, op)
            ->RangeMultiplier(16)
            ->Range(16 << 10, 64 << 20);
      }
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
