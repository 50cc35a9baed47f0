// cc's side of a collective row: every rank times the calls (out of place, then in place)
// and checks one call of each with exact inputs; rank 0 gathers every rank's per-iteration
// times and wrong counts over ccSend/ccRecv (not through the collective being measured)
// and keeps each rank's mean call, combined as -a says, and the slowest rank's call per
// iteration (the latency table's tail).
#pragma once

#include <cc/cc.h>

#include <cstddef>

#include "coll_options.h"
#include "coll_report.h"

namespace cc::bench {

// The buffers of one rank, big enough for every row of the sweep, page-aligned and touched.
struct CcBuffers {
  std::byte* send = nullptr;
  std::byte* recv = nullptr;
};

// Every rank calls it for every row, in the same order. The result means something on
// rank 0 only.
CollRow measureCcRow(ccComm_t comm, ccStream_t stream, const CollOptions& options,
                     const coll::Shape& shape, int rank, int nranks, CcBuffers buffers);

}  // namespace cc::bench
