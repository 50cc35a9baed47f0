// The tuner: for each call, the algorithm and chunk size an alpha-beta cost model says
// is fastest (tuner.cc has the model and its constants), unless CC_ALGO or
// CC_CHUNK_BYTES say otherwise.
#pragma once

#include <string>

#include "collectives/collective.h"

namespace cc::collectives {

struct Choice {
  Algorithm algorithm = Algorithm::kRing;
  size_t chunkBytes = 0;
  bool oneShot = false;  // direct all-reduce: one synchronisation, everyone reduces all
  double predictedMicros = 0;
  std::string why;  // for CC_DEBUG=INFO
};

// The algorithms that can run this collective on this communicator (no allocation:
// this runs on every call).
struct Candidates {
  Algorithm list[8] = {};
  int count = 0;
  const Algorithm* begin() const { return list; }
  const Algorithm* end() const { return list + count; }
};
Candidates candidates(const comm::Communicator& comm, CollectiveKind kind);

// `forced`: CC_ALGO (kAuto: the model decides); `forcedChunkBytes`: CC_CHUNK_BYTES (0: the
// model's). Deterministic: every rank with the same call and configuration chooses the
// same, which the algorithms rely on.
Choice choose(const comm::Communicator& comm, const CollectiveArgs& args, Algorithm forced,
              size_t forcedChunkBytes);

}  // namespace cc::collectives
