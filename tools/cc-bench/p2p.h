// The point-to-point measurement between ranks 0 and 1 of a communicator, on the NULL
// stream (every call completes before it returns), per size of the sweep:
//   - latency: half a ccSend/ccRecv round trip, each round trip timed on its own,
//     median over the iterations;
//   - bandwidth: rank 0 sends a window of kWindow messages back to back, rank 1 answers
//     with a 1-byte ack; window bytes / window time (GB = 1e9 bytes), median over windows;
//   - wrong bytes: the last round trip and the last window's last message are checked
//     against a pattern (pattern.h); rank 1 reports its count to rank 0.
// bench/ompi_pingpong.c measures Open MPI with the same rules.
#pragma once

#include <cc/cc.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sweep.h"

namespace cc::bench {

inline constexpr int kWindow = 16;

struct P2pPoint {
  size_t bytes = 0;
  double latencyUs = 0;
  double bandwidthGBps = 0;
  uint64_t wrongBytes = 0;
};

// Called by ranks 0 and 1 of `comm` together; rank 0's points hold the results (rank 1's
// hold only the sizes).
std::vector<P2pPoint> measureP2p(ccComm_t comm, int rank, const SweepOptions& options);

}  // namespace cc::bench
