// The skeleton both peer programs (ompi_coll.cc, gloo_coll.cc) share: the command line
// cc-bench passes them, the gate that lets cc-bench interleave the systems size by size,
// and the loop over the rows of a sweep. A backend supplies only the calls themselves.
//
// The gate: with `--gate PREFIX`, rank r opens the FIFO PREFIX.r (made by cc-bench) and,
// before each row, blocks in read() until cc-bench writes one byte. Blocked ranks use no
// CPU, so while cc or another peer measures a row, this one is not competing for the
// cores. End of file (cc-bench closed the gate or died) ends the program.
//
// Rank 0 prints "row,<rowBytes>,<oop us>,<oop wrong>,<ip us>,<ip wrong>,<oop p50>,<oop p99>,
// <oop worst>,<ip p50>,<ip p99>,<ip worst>" (microseconds) after each row (see coll_rules.h).
// A row's time is every rank's own mean call combined as -a says (nccl-tests' -a; the mean
// over ranks by default); p50, p99 and worst are the slowest rank's call per iteration.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "coll_rules.h"

namespace cc::bench::coll {

struct PeerOptions {
  Collective collective = Collective::AllReduce;
  DataType type = DataType::Float;
  Op op = Op::Sum;
  int root = 0;
  size_t minBytes = 8;
  size_t maxBytes = size_t{64} << 20;
  size_t factor = 2;
  int iterations = 20;
  int warmup = 5;
  int average = kDefaultAverage;  // -a, as nccl-tests' (coll_rules.h)
  bool check = true;
  std::string gate;  // --gate PREFIX; empty: run every row at once
  int rank = -1;     // --rank / --size: for programs started without a launcher
  int size = -1;
  std::string store;  // --store DIR: the Gloo rendezvous directory
};

inline bool parseBytes(const char* text, size_t& out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || errno != 0) return false;
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift != 0) ++end;
  if (*end != '\0') return false;
  out = static_cast<size_t>(value) << shift;
  return true;
}

inline const char* const kPeerUsage =
    "usage: PROGRAM COLLECTIVE [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-d TYPE]\n"
    "               [-o OP] [-r ROOT] [-c 0|1] [-a 0|1|2|3] [--gate PREFIX] [--rank R --size N]\n"
    "               [--store DIR]\n"
    "  COLLECTIVE: allreduce allgather reducescatter broadcast reduce alltoall sendrecv\n"
    "  Run by cc-bench --peer; prints one 'row,...' line per size on rank 0.\n";

inline bool parsePeerOptions(int argc, char** argv, PeerOptions& options, std::string& error) {
  if (argc < 2 || !parseName(argv[1], kCollectives, collectiveName, options.collective)) {
    error = "the first argument must name a collective";
    return false;
  }
  for (int i = 2; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (i + 1 >= argc) {
      error = std::string(flag) + " needs a value";
      return false;
    }
    const char* value = argv[++i];
    size_t number = 0;
    bool ok = true;
    if (flag == "-b" || flag == "-e" || flag == "-f" || flag == "-n" || flag == "-w" ||
        flag == "-r" || flag == "-c" || flag == "-a" || flag == "--rank" || flag == "--size") {
      ok = parseBytes(value, number);
      if (flag == "-b") options.minBytes = number;
      if (flag == "-e") options.maxBytes = number;
      if (flag == "-f") options.factor = number;
      if (flag == "-n") options.iterations = static_cast<int>(number);
      if (flag == "-w") options.warmup = static_cast<int>(number);
      if (flag == "-r") options.root = static_cast<int>(number);
      if (flag == "-c") options.check = number != 0;
      if (flag == "-a") {
        ok = ok && number <= 3;
        options.average = static_cast<int>(number);
      }
      if (flag == "--rank") options.rank = static_cast<int>(number);
      if (flag == "--size") options.size = static_cast<int>(number);
    } else if (flag == "-d") {
      ok = parseName(value, kDataTypes, dataTypeName, options.type);
    } else if (flag == "-o") {
      ok = parseName(value, kOps, opName, options.op);
    } else if (flag == "--gate") {
      options.gate = value;
    } else if (flag == "--store") {
      options.store = value;
    } else {
      error = "unknown option " + std::string(flag);
      return false;
    }
    if (!ok) {
      error = std::string(flag) + ": bad value '" + value + "'";
      return false;
    }
  }
  if (options.minBytes < 1 || options.maxBytes < options.minBytes || options.factor < 2 ||
      options.iterations < 1) {
    error = "need 1 <= MIN <= MAX, FACTOR >= 2, ITERS >= 1";
    return false;
  }
  // MPI and Gloo count elements in int.
  if (options.maxBytes / typeSize(options.type) > 0x7fffffff) {
    error = "MAX is too big: the peers count elements in int";
    return false;
  }
  return true;
}

// Blocks before each row until cc-bench says go (see the top of this file).
class Gate {
 public:
  Gate(const std::string& prefix, int rank) {
    if (prefix.empty()) return;
    std::string path = prefix + "." + std::to_string(rank);
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      std::fprintf(stderr, "peer rank %d: cannot open gate %s: %s\n", rank, path.c_str(),
                   std::strerror(errno));
      std::exit(1);
    }
  }
  ~Gate() {
    if (fd_ >= 0) ::close(fd_);
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // False when cc-bench closed the gate: stop.
  bool wait() {
    if (fd_ < 0) return true;
    char byte = 0;
    for (;;) {
      ssize_t got = ::read(fd_, &byte, 1);
      if (got < 0 && errno == EINTR) continue;
      return got == 1 && byte == 'g';
    }
  }

 private:
  int fd_ = -1;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

// Page-aligned and touched, so no page fault lands inside a timed loop.
inline Buffer makeBuffer(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  Buffer buffer(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
  if (!buffer) {
    std::fprintf(stderr, "peer: out of memory for %zu bytes\n", rounded);
    std::exit(1);
  }
  std::memset(buffer.get(), 0, rounded);
  return buffer;
}

// Where a call reads and writes, out of place or in place (NCCL's layouts).
struct Placement {
  void* send = nullptr;
  void* recv = nullptr;
};

inline Placement placementFor(Collective c, bool inPlace, const Shape& s, DataType t, int rank,
                              std::byte* send, std::byte* recv) {
  if (!inPlace) return {send, recv};
  size_t offset = static_cast<size_t>(rank) * s.count * typeSize(t);
  if (c == Collective::AllGather) return {recv + offset, recv};
  if (c == Collective::ReduceScatter) return {send, send + offset};
  return {send, send};
}

// What a backend provides (see ompi_coll.cc, gloo_coll.cc):
//   void barrier();
//   void prepare(bool inPlace, const Shape&, Placement);      // before a row's loop
//   void call(bool inPlace, const Shape&, Placement);         // one collective
//   const void* output(bool inPlace, const Shape&, Placement); // this rank's result
//   void maxToRoot(std::vector<double>&);   // element-wise max over ranks, on rank 0
//                                           // (all ranks call it with the same size)
//   uint64_t sumToRoot(uint64_t);           // sum over ranks, on rank 0
template <typename Backend>
CallTimes timeRow(Backend& backend, const PeerOptions& options, const Shape& shape, bool inPlace,
                  Placement at, int rank, int nranks) {
  int iterations = iterationsFor(options.iterations, shape.rowBytes);
  int warmup = warmupFor(options.warmup, iterations);
  backend.prepare(inPlace, shape, at);
  backend.barrier();
  for (int i = 0; i < warmup; ++i) backend.call(inPlace, shape, at);
  std::vector<double> seconds(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    backend.call(inPlace, shape, at);
    seconds[static_cast<size_t>(i)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Every rank's own mean, gathered through the element-wise max (the others' slots are 0).
  std::vector<double> perRank(static_cast<size_t>(nranks), 0.0);
  perRank[static_cast<size_t>(rank)] = meanSeconds(seconds.data(), seconds.size());
  backend.maxToRoot(perRank);
  backend.maxToRoot(seconds);
  return summarizeRow(std::move(seconds), perRank, options.average);
}

template <typename Backend>
int64_t checkRow(Backend& backend, const PeerOptions& options, const Shape& shape, bool inPlace,
                 Placement at, int rank, int nranks) {
  if (!options.check) return -1;
  fillInputs(options.collective, options.op, options.type, shape, rank, nranks, options.root,
             inPlace, at.send, at.recv);
  backend.prepare(inPlace, shape, at);
  backend.barrier();
  backend.call(inPlace, shape, at);
  uint64_t wrong = countWrong(options.collective, options.op, options.type, shape, rank, nranks,
                              options.root, backend.output(inPlace, shape, at));
  return static_cast<int64_t>(backend.sumToRoot(wrong));
}

template <typename Backend>
int runRows(Backend& backend, const PeerOptions& options, int rank, int nranks) {
  std::vector<Shape> shapes = rowShapes(options.collective, options.type, nranks, options.minBytes,
                                        options.maxBytes, options.factor);
  size_t maxSend = 0;
  size_t maxRecv = 0;
  for (const Shape& s : shapes) {
    maxSend = std::max(maxSend, s.sendElems * typeSize(options.type));
    maxRecv = std::max(maxRecv, s.recvElems * typeSize(options.type));
  }
  Buffer send = makeBuffer(maxSend);
  Buffer recv = makeBuffer(maxRecv);
  Gate gate(options.gate, rank);
  // Every rank has allocated and touched its buffers before rank 0 says it is ready: a rank
  // still faulting in hundreds of MiB would take the cores from cc's first row beside it.
  backend.barrier();
  if (rank == 0) {
    std::printf("# %s %s %s root %d, %d ranks\n", collectiveName(options.collective),
                dataTypeName(options.type), opName(options.op), options.root, nranks);
    std::fflush(stdout);
  }
  for (const Shape& shape : shapes) {
    if (!gate.wait()) return 0;
    CallTimes times[2];
    int64_t wrong[2] = {-1, -1};
    for (int place = 0; place < 2; ++place) {
      bool inPlace = place == 1;
      if (inPlace && !hasInPlace(options.collective)) continue;
      Placement at = placementFor(options.collective, inPlace, shape, options.type, rank,
                                  send.get(), recv.get());
      times[place] = timeRow(backend, options, shape, inPlace, at, rank, nranks);
      wrong[place] = checkRow(backend, options, shape, inPlace, at, rank, nranks);
    }
    if (rank == 0) {
      std::printf("%s%zu,%.3f,%lld,%.3f,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", kRowPrefix,
                  shape.rowBytes, times[0].meanUs, static_cast<long long>(wrong[0]),
                  times[1].meanUs, static_cast<long long>(wrong[1]), times[0].p50Us, times[0].p99Us,
                  times[0].worstUs, times[1].p50Us, times[1].p99Us, times[1].worstUs);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace cc::bench::coll
