// Command-line options of `cc-bench COLLECTIVE` (allreduce, allgather, reducescatter,
// broadcast, reduce, alltoall, sendrecv): nccl-tests' flags with nccl-tests' meaning, plus
// the launch (-np), the peers (--peer mpi,gloo) and the output files.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coll_rules.h"

namespace cc::bench {

struct CollOptions {
  coll::Collective collective = coll::Collective::AllReduce;
  size_t minBytes = 8;                          // -b
  size_t maxBytes = size_t{64} << 20;           // -e
  size_t factor = 2;                            // -f
  coll::DataType type = coll::DataType::Float;  // -d
  coll::Op op = coll::Op::Sum;                  // -o
  int root = 0;                                 // -r
  int iterations = 20;                          // -n
  int warmup = 5;                               // -w
  int average = coll::kDefaultAverage;          // -a: how the ranks' times combine
  bool check = true;                            // -c
  bool blocking = true;                         // -z (with --stream: synchronize every iteration)
  bool useStream = false;  // --stream: calls on a ccStream_t, not the NULL stream
  int nranks = 2;          // -np, for ranks forked here
  bool nranksGiven = false;
  bool peerMpi = false;     // --peer mpi
  bool peerGloo = false;    // --peer gloo
  std::string jsonPath;     // --json FILE
  std::string csvPath;      // --csv FILE
  std::string plotPath;     // --plot FILE.svg
  bool latency = false;     // --latency: p50, p99 and the worst call per size, every system
  int busy = 0;             // --busy N: N busy processes beside the ranks for the whole run
  bool registered = false;  // -R 1: cc's buffers from ccMemAlloc, registered with ccCommRegister
};

// Parses the arguments after the collective's name. On a bad line, returns nullopt and
// sets `error`.
std::optional<CollOptions> parseCollOptions(coll::Collective collective,
                                            const std::vector<std::string_view>& args,
                                            std::string& error);

extern const char* const kCollUsage;

}  // namespace cc::bench
