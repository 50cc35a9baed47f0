// What `cc-bench p2p` prints: one row per size in the style of nccl-tests (a '#' header
// line, right-aligned columns), columns only for what was measured, then a short summary
// of the two numbers that matter (shm bandwidth as a fraction of memcpy at big sizes,
// small-message latency against Open MPI). --json writes the same rows as objects.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "memcpy_bench.h"
#include "ompi_peer.h"
#include "p2p.h"

namespace cc::bench {

struct TransportResult {
  std::string name;  // "shm", "tcp" or, under mpirun, "auto"
  std::vector<P2pPoint> points;
};

struct P2pReport {
  std::vector<size_t> sizes;
  std::vector<TransportResult> transports;
  std::vector<MemcpyPoint> memcpy;
  std::optional<std::vector<OmpiPoint>> ompi;  // absent without --peer mpi or when it failed
};

void printP2pTable(const P2pReport& report, std::FILE* out);

// Writes the rows as a JSON array of objects; false (with `error` set) when the file
// cannot be written.
bool writeP2pJson(const P2pReport& report, const std::string& path, std::string& error);

}  // namespace cc::bench
