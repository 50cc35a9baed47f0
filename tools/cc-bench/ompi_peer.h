// `--peer mpi`: runs Open MPI's side of the comparison (bench/ompi_pingpong.c, installed
// beside cc-bench as ompi-pingpong) under mpirun with the same sweep, and reads back its
// "size,lat_us,bw_GBps" lines. Run right after cc's measurements, so both sides see the
// machine in the same mood.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sweep.h"

namespace cc::bench {

struct OmpiPoint {
  size_t bytes = 0;
  double latencyUs = 0;
  double bandwidthGBps = 0;
};

struct OmpiRun {
  std::vector<OmpiPoint> points;
  std::string command;  // what was run
  std::string note;     // why there are no points; empty on success
};

OmpiRun runOmpiPeer(const SweepOptions& options);

}  // namespace cc::bench
