// The rules of a collective benchmark, shared by cc-bench (tools/cc-bench) and the peer
// programs it compares cc with (ompi_coll.cc, gloo_coll.cc), so that every column of the
// comparison means the same thing: which sizes a sweep visits, how a byte size becomes an
// element count for each collective, how many iterations each size gets, the bus-bandwidth
// factor, and the input values that make a reduction exact in any order (so a check can
// demand bit equality), with the expected result of every output element.
//
// Sizes follow nccl-tests: the size of a row is the bytes of the largest buffer a rank
// holds (for all-gather, reduce-scatter and all-to-all, count * type size * nranks, with
// count the per-rank count passed to the call); algbw = size / time; busbw = algbw times
// 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, and 1
// for broadcast, reduce and send/recv.
//
// Header-only and dependency-free: the peers are built without cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace cc::bench::coll {

enum class Collective {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AllToAll,
  SendRecv
};

// The order of cc's ccDataType_t (include/cc/cc.h), so a value casts straight across.
enum class DataType { Int8, Uint8, Int32, Uint32, Int64, Uint64, Half, Float, Double, Bfloat16 };

// The order of cc's ccRedOp_t.
enum class Op { Sum, Prod, Max, Min, Avg };

inline constexpr Collective kCollectives[] = {
    Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter, Collective::Broadcast,
    Collective::Reduce,    Collective::AllToAll,  Collective::SendRecv};
inline constexpr DataType kDataTypes[] = {
    DataType::Int8,   DataType::Uint8, DataType::Int32, DataType::Uint32, DataType::Int64,
    DataType::Uint64, DataType::Half,  DataType::Float, DataType::Double, DataType::Bfloat16};
inline constexpr Op kOps[] = {Op::Sum, Op::Prod, Op::Max, Op::Min, Op::Avg};

inline const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "allreduce";
    case Collective::AllGather:
      return "allgather";
    case Collective::ReduceScatter:
      return "reducescatter";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Reduce:
      return "reduce";
    case Collective::AllToAll:
      return "alltoall";
    case Collective::SendRecv:
      return "sendrecv";
  }
  return "?";
}

inline const char* dataTypeName(DataType t) {
  static const char* const kNames[] = {"int8",   "uint8", "int32", "uint32", "int64",
                                       "uint64", "half",  "float", "double", "bfloat16"};
  return kNames[static_cast<int>(t)];
}

inline const char* opName(Op op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return kNames[static_cast<int>(op)];
}

template <typename Enum, size_t N>
inline bool parseName(std::string_view text, const Enum (&all)[N], const char* (*name)(Enum),
                      Enum& out) {
  for (Enum value : all) {
    if (text == name(value)) {
      out = value;
      return true;
    }
  }
  return false;
}

inline size_t typeSize(DataType t) {
  static const size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return kSizes[static_cast<int>(t)];
}

inline bool isFloating(DataType t) {
  return t == DataType::Half || t == DataType::Float || t == DataType::Double ||
         t == DataType::Bfloat16;
}

inline bool reduces(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

// One placement's times in microseconds: the row's time nccl-tests prints (each rank's
// mean call, combined over the ranks as -a says: rankTimeUs), and the tail a latency mode
// adds (the slowest rank's call, per iteration: p50, p99, worst).
struct CallTimes {
  double meanUs = -1, p50Us = -1, p99Us = -1, worstUs = -1;
};

// nccl-tests' -a: how the ranks' times make the row's time. A rank's time is its own
// loop's, over the iterations; nccl-tests' default (1) averages them over the ranks.
enum class Average { Rank0 = 0, Mean = 1, Min = 2, Max = 3 };
inline constexpr int kDefaultAverage = static_cast<int>(Average::Mean);
inline const char* averageName(int average) {
  static const char* const kNames[] = {"rank 0's", "the mean over ranks", "the fastest rank's",
                                       "the slowest rank's"};
  return average >= 0 && average <= 3 ? kNames[average] : "?";
}

// The mean of `count` times from `first` (0 for none): a rank's own mean call.
inline double meanSeconds(const double* first, size_t count) {
  double total = 0;
  for (size_t i = 0; i < count; ++i) total += first[i];
  return count == 0 ? 0 : total / static_cast<double>(count);
}

// The row's time from every rank's own mean call (seconds, one per rank, rank 0 first), in
// microseconds.
inline double rankTimeUs(const std::vector<double>& perRank, int average) {
  if (perRank.empty()) return -1;
  double value = perRank[0];
  if (average == static_cast<int>(Average::Mean)) {
    value = meanSeconds(perRank.data(), perRank.size());
  } else if (average == static_cast<int>(Average::Min)) {
    value = *std::min_element(perRank.begin(), perRank.end());
  } else if (average == static_cast<int>(Average::Max)) {
    value = *std::max_element(perRank.begin(), perRank.end());
  }
  return value * 1e6;
}

// From per-iteration seconds; p50 and p99 are the nearest-rank percentiles.
inline CallTimes summarizeCalls(std::vector<double> seconds) {
  CallTimes t;
  if (seconds.empty()) return t;
  std::sort(seconds.begin(), seconds.end());
  auto rank = [&](double q) {
    size_t index = static_cast<size_t>(std::ceil(q * static_cast<double>(seconds.size())));
    return seconds[std::min(seconds.size(), std::max<size_t>(index, 1)) - 1] * 1e6;
  };
  t.meanUs = meanSeconds(seconds.data(), seconds.size()) * 1e6;
  t.p50Us = rank(0.50);
  t.p99Us = rank(0.99);
  t.worstUs = seconds.back() * 1e6;
  return t;
}

// A row's times: the tail from the slowest rank's call per iteration, the time from every
// rank's own mean call (`perRank`, seconds) combined as -a says.
inline CallTimes summarizeRow(std::vector<double> slowestPerIteration,
                              const std::vector<double>& perRank, int average) {
  CallTimes t = summarizeCalls(std::move(slowestPerIteration));
  if (!perRank.empty()) t.meanUs = rankTimeUs(perRank, average);
  return t;
}

inline bool rooted(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

// All-to-all has no in-place form in cc (NCCL has none either); send/recv in place would
// send from the buffer it receives into.
inline bool hasInPlace(Collective c) {
  return c != Collective::AllToAll && c != Collective::SendRecv;
}

inline double busFactor(Collective c, int nranks) {
  double n = nranks;
  switch (c) {
    case Collective::AllReduce:
      return 2 * (n - 1) / n;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
      return (n - 1) / n;
    default:
      return 1;
  }
}

// What one row of a sweep passes to the call and prints.
struct Shape {
  size_t count = 0;      // the count argument of the call (per rank for the n-block ones)
  size_t sendElems = 0;  // elements of the send buffer
  size_t recvElems = 0;  // elements of the receive buffer
  size_t rowBytes = 0;   // the size column: count * type size, times nranks for n-block ones
  size_t rowElems = 0;   // the count column
};

inline bool isBlockCollective(Collective c) {
  return c == Collective::AllGather || c == Collective::ReduceScatter || c == Collective::AllToAll;
}

// A requested size becomes a whole number of elements (at least one per rank).
inline Shape shapeFor(Collective c, size_t bytes, DataType t, int nranks) {
  Shape s;
  size_t n = static_cast<size_t>(nranks);
  size_t unit = typeSize(t) * (isBlockCollective(c) ? n : 1);
  s.count = std::max<size_t>(1, bytes / unit);
  s.rowElems = s.count * (isBlockCollective(c) ? n : 1);
  s.rowBytes = s.rowElems * typeSize(t);
  switch (c) {
    case Collective::AllGather:
      s.sendElems = s.count;
      s.recvElems = s.count * n;
      break;
    case Collective::ReduceScatter:
      s.sendElems = s.count * n;
      s.recvElems = s.count;
      break;
    case Collective::AllToAll:
      s.sendElems = s.recvElems = s.count * n;
      break;
    default:
      s.sendElems = s.recvElems = s.count;
      break;
  }
  return s;
}

// minBytes, minBytes*factor, ... and maxBytes itself when the series steps over it.
inline std::vector<size_t> sizeSeries(size_t minBytes, size_t maxBytes, size_t factor) {
  std::vector<size_t> sizes;
  for (size_t bytes = minBytes;;) {
    sizes.push_back(bytes);
    if (bytes >= maxBytes) break;
    bytes = bytes > maxBytes / factor ? maxBytes : bytes * factor;
  }
  return sizes;
}

// The rows a sweep prints: the shapes of the series, with sizes that round to the same
// shape (small sizes at many ranks) kept once.
inline std::vector<Shape> rowShapes(Collective c, DataType t, int nranks, size_t minBytes,
                                    size_t maxBytes, size_t factor) {
  std::vector<Shape> shapes;
  for (size_t bytes : sizeSeries(minBytes, maxBytes, factor)) {
    Shape s = shapeFor(c, bytes, t, nranks);
    if (shapes.empty() || shapes.back().rowBytes != s.rowBytes) shapes.push_back(s);
  }
  return shapes;
}

// Timed iterations for one row: at most `iterations`, at least 3, and about 256 MiB of
// row bytes in all, so a default sweep stays short. Warm-up: min(warmup, iterations / 4)
// but at least one, so first-touch page faults stay out of the timed loop.
inline constexpr size_t kBytesPerRow = size_t{1} << 28;
inline int iterationsFor(int iterations, size_t rowBytes) {
  size_t budget = kBytesPerRow / std::max<size_t>(rowBytes, 1);
  return std::max(3, static_cast<int>(std::min(static_cast<size_t>(iterations), budget)));
}
inline int warmupFor(int warmup, int iterations) {
  return std::max(std::min(warmup, 1), std::min(warmup, iterations / 4));
}

// ---- element values ---------------------------------------------------------------

inline uint16_t floatToHalf(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  int halfExponent = static_cast<int>(exponent) - 127 + 15;
  if (halfExponent >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (halfExponent <= 0) {
    if (halfExponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - halfExponent);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(halfExponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return static_cast<uint16_t>(sign | half);
}

inline float halfToFloat(uint16_t half) {
  uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value = 0;
  std::memcpy(&value, &bits, 4);
  return value;
}

inline uint16_t floatToBfloat16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

inline float bfloat16ToFloat(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result = 0;
  std::memcpy(&result, &bits, 4);
  return result;
}

// Element `index` of a buffer of type `t`, as a double (exact for every value used here).
inline double loadElement(DataType t, const void* buffer, size_t index) {
  const char* at = static_cast<const char*>(buffer) + index * typeSize(t);
  auto get = [at](auto sample) {
    decltype(sample) value;
    std::memcpy(&value, at, sizeof(value));
    return value;
  };
  switch (t) {
    case DataType::Int8:
      return get(int8_t{});
    case DataType::Uint8:
      return get(uint8_t{});
    case DataType::Int32:
      return get(int32_t{});
    case DataType::Uint32:
      return get(uint32_t{});
    case DataType::Int64:
      return static_cast<double>(get(int64_t{}));
    case DataType::Uint64:
      return static_cast<double>(get(uint64_t{}));
    case DataType::Half:
      return halfToFloat(get(uint16_t{}));
    case DataType::Float:
      return get(float{});
    case DataType::Double:
      return get(double{});
    case DataType::Bfloat16:
      return bfloat16ToFloat(get(uint16_t{}));
  }
  return 0;
}

inline void storeElement(DataType t, void* buffer, size_t index, double value) {
  char* at = static_cast<char*>(buffer) + index * typeSize(t);
  auto put = [at](auto typed) { std::memcpy(at, &typed, sizeof(typed)); };
  switch (t) {
    case DataType::Int8:
      put(static_cast<int8_t>(value));
      break;
    case DataType::Uint8:
      put(static_cast<uint8_t>(value));
      break;
    case DataType::Int32:
      put(static_cast<int32_t>(value));
      break;
    case DataType::Uint32:
      put(static_cast<uint32_t>(value));
      break;
    case DataType::Int64:
      put(static_cast<int64_t>(value));
      break;
    case DataType::Uint64:
      put(static_cast<uint64_t>(value));
      break;
    case DataType::Half:
      put(floatToHalf(static_cast<float>(value)));
      break;
    case DataType::Float:
      put(static_cast<float>(value));
      break;
    case DataType::Double:
      put(value);
      break;
    case DataType::Bfloat16:
      put(floatToBfloat16(static_cast<float>(value)));
      break;
  }
}

// The value rank `rank` contributes at element `index` (of its whole send buffer). Every
// value is a small non-negative integer, exact in every type, and chosen so that the
// reduction over up to 32 ranks is exact in every type and any order: sums stay below
// 128 (int8) and 256 (bfloat16's integer range), a product has at most three factors of 2
// among ones (at most 8), max/min pick among 0..60. Element values vary with the rank and
// the index, so data from the wrong peer or at a shifted offset is caught.
inline double inputValue(Collective c, Op op, int rank, size_t index) {
  uint64_t i = index;
  uint64_t r = static_cast<uint64_t>(rank);
  if (!reduces(c)) return static_cast<double>((r * 17 + i * 3 + 1) % 101);
  switch (op) {
    case Op::Sum:
    case Op::Avg:
      return static_cast<double>((i * 5 + r * 3 + (i >> 7)) % 4);
    case Op::Prod:
      return (i + r * 5) % 7 == 0 ? 2.0 : 1.0;
    case Op::Max:
    case Op::Min:
      return static_cast<double>((i * 13 + r * 29 + 7) % 61);
  }
  return 0;
}

// Value of the element the rank at `index` of the all-to-all send buffer sends: block j
// goes to rank j.
inline double allToAllValue(int sender, int receiver, size_t indexInBlock) {
  uint64_t s = static_cast<uint64_t>(sender);
  uint64_t d = static_cast<uint64_t>(receiver);
  return static_cast<double>((s * 17 + d * 5 + indexInBlock * 3 + 1) % 101);
}

// The reduction over ranks of inputValue(c, op, r, index), as the type holds it.
inline double reducedValue(Collective c, Op op, int nranks, size_t index, DataType t) {
  double result = inputValue(c, op, 0, index);
  for (int r = 1; r < nranks; ++r) {
    double v = inputValue(c, op, r, index);
    switch (op) {
      case Op::Sum:
      case Op::Avg:
        result += v;
        break;
      case Op::Prod:
        result *= v;
        break;
      case Op::Max:
        result = std::max(result, v);
        break;
      case Op::Min:
        result = std::min(result, v);
        break;
    }
  }
  if (op == Op::Avg) {
    result = isFloating(t) ? result / nranks : std::floor(result / nranks);
  }
  // Round through the type, as the library stores it.
  double stored = 0;
  char buffer[8];
  storeElement(t, buffer, 0, result);
  stored = loadElement(t, buffer, 0);
  return stored;
}

// Whether `got` passes for `expected`: bit-exact, except float averages (a sum then a
// division or a multiplication by 1/n, either rounding) within 2 units in the last place.
inline bool matches(DataType t, Op op, double got, double expected) {
  if (got == expected) return true;
  if (op != Op::Avg || !isFloating(t)) return false;
  double ulp = t == DataType::Double  ? std::ldexp(1.0, -52)
               : t == DataType::Float ? std::ldexp(1.0, -23)
               : t == DataType::Half  ? std::ldexp(1.0, -10)
                                      : std::ldexp(1.0, -7);
  return std::fabs(got - expected) <= 2 * ulp * std::max(std::fabs(expected), 1e-30);
}

// Fills `elems` elements with 0xff bytes: NaN in the floating types, and a negative or
// maximal integer that no expected value equals, so a call that writes nothing fails.
inline void poison(DataType t, void* buffer, size_t elems) {
  std::memset(buffer, 0xff, elems * typeSize(t));
}

// ---- one rank's part of a check ------------------------------------------------------
// Each function fills the inputs of rank `rank` before a checked call, or counts the
// wrong output elements after it. In place, `send` and `recv` alias as the layouts say
// (all-gather: send = recv + rank*count; reduce-scatter: recv = send + rank*count).

inline void fillInputs(Collective c, Op op, DataType t, const Shape& s, int rank, int nranks,
                       int root, bool inPlace, void* send, void* recv) {
  size_t n = static_cast<size_t>(nranks);
  if (c == Collective::AllToAll) {
    for (size_t j = 0; j < n; ++j) {
      for (size_t k = 0; k < s.count; ++k)
        storeElement(t, send, j * s.count + k, allToAllValue(rank, static_cast<int>(j), k));
    }
    poison(t, recv, s.recvElems);
    return;
  }
  if (!inPlace) poison(t, recv, s.recvElems);
  if (inPlace && c == Collective::AllGather) poison(t, recv, s.recvElems);  // then our block
  if (c == Collective::Broadcast && rank != root) {
    if (inPlace) poison(t, recv, s.recvElems);
    return;
  }
  for (size_t i = 0; i < s.sendElems; ++i) storeElement(t, send, i, inputValue(c, op, rank, i));
}

// Wrong elements of this rank's output.
inline uint64_t countWrong(Collective c, Op op, DataType t, const Shape& s, int rank, int nranks,
                           int root, const void* recv) {
  uint64_t wrong = 0;
  auto check = [&](size_t index, double expected) {
    if (!matches(t, op, loadElement(t, recv, index), expected)) ++wrong;
  };
  switch (c) {
    case Collective::AllReduce:
      for (size_t i = 0; i < s.count; ++i) check(i, reducedValue(c, op, nranks, i, t));
      break;
    case Collective::Reduce:
      if (rank == root) {
        for (size_t i = 0; i < s.count; ++i) check(i, reducedValue(c, op, nranks, i, t));
      }
      break;
    case Collective::ReduceScatter:
      for (size_t i = 0; i < s.count; ++i)
        check(i, reducedValue(c, op, nranks, static_cast<size_t>(rank) * s.count + i, t));
      break;
    case Collective::Broadcast:
      for (size_t i = 0; i < s.count; ++i) check(i, inputValue(c, op, root, i));
      break;
    case Collective::AllGather:
      for (int r = 0; r < nranks; ++r) {
        for (size_t i = 0; i < s.count; ++i)
          check(static_cast<size_t>(r) * s.count + i, inputValue(c, op, r, i));
      }
      break;
    case Collective::AllToAll:
      for (int r = 0; r < nranks; ++r) {
        for (size_t i = 0; i < s.count; ++i)
          check(static_cast<size_t>(r) * s.count + i, allToAllValue(r, rank, i));
      }
      break;
    case Collective::SendRecv: {
      int from = (rank + nranks - 1) % nranks;
      for (size_t i = 0; i < s.count; ++i) check(i, inputValue(c, op, from, i));
      break;
    }
  }
  return wrong;
}

// ---- what a peer program prints ------------------------------------------------------
// One line per row, after the row ran: "row,<rowBytes>,<oop us>,<oop wrong>,<ip us>,<ip
// wrong>"; a time of -1 means not measured (no in-place form), a wrong count of -1 means
// not checked. cc-bench computes algbw and busbw from the time with the rules above.
inline constexpr const char* kRowPrefix = "row,";

}  // namespace cc::bench::coll
