// Single-thread memcpy bandwidth for the sizes of a sweep: the ceiling a one-copy
// transport on this host can hope for, so cc's shm bandwidth is quoted as a fraction of
// it (measured in the same run, as the machine's speed moves).
#pragma once

#include <cstddef>
#include <vector>

#include "sweep.h"

namespace cc::bench {

struct MemcpyPoint {
  size_t bytes = 0;
  double bandwidthGBps = 0;  // bytes copied / time, GB = 1e9 bytes (traffic is twice this)
};

std::vector<MemcpyPoint> measureMemcpy(const SweepOptions& options);

}  // namespace cc::bench
