// How cc-bench's ranks start and get a communicator.
//
// Under a launcher (mpirun: OMPI_COMM_WORLD_SIZE or PMIX_RANK; MPICH: PMI_RANK;
// torchrun-style: WORLD_SIZE) every rank calls
// ccCommInitFromEnv once, so only the transport the environment selects is measured.
// Started by hand, cc-bench forks N ranks on this host. Rank 0 makes a ccUniqueId per
// transport and hands it to the others over pipes opened before the fork; each rank sets
// CC_TRANSPORT (read when a communicator is created) and joins a fresh communicator, so
// one run measures shm and tcp side by side. The parent only waits for its children.
#pragma once

#include <cc/cc.h>

#include <functional>
#include <string>
#include <vector>

namespace cc::bench {

struct RankProgram {
  // Transports to measure, in order; each gets its own communicator. An empty string
  // leaves CC_TRANSPORT as the environment has it.
  std::vector<std::string> transports;
  // Runs on every rank with each communicator; `first` is true for the first one.
  std::function<void(ccComm_t comm, int rank, int nranks, const std::string& transport, bool first)>
      measure;
  // Runs on every rank after the last communicator is destroyed.
  std::function<void(int rank)> finish;
};

bool launchedByMpirun();

// Both return the process's exit status.
int runUnderMpirun(const RankProgram& program);
int runForked(int nranks, const RankProgram& program);

}  // namespace cc::bench
