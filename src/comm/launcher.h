// ccCommInitFromEnv: where the ranks of a launcher's job learn their rank, the world
// size and the unique id (root address and secret). docs/LAUNCHERS.md is the user's view.
#pragma once

#include "core/config.h"
#include "core/wire.h"

namespace cc::comm {

struct LaunchInfo {
  int rank = 0;
  int nranks = 1;
  wire::UniqueIdContents id;
  std::string launcher;  // "pmix", "pmi1", "torchrun", "slurm", "single"
};

// Detects the launcher (PMIx, PMI-1, torchrun-style, Slurm, none) and agrees on an id:
// rank 0 starts the root and publishes the id through the launcher where it can.
Result<LaunchInfo> rendezvousFromEnvironment(const Config& config);

}  // namespace cc::comm
