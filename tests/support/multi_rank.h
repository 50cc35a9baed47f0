// The multi-rank fixture: forks N ranks (processes) that run the same body, each with
// its rank and the communicator's unique id (made by rank 0 and handed to the others
// through pipes, as a launcher would). A test fails if any rank fails an assertion,
// exits non-zero, dies, or is still running at the deadline (then all are killed).
#pragma once

#include <cc/cc.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>

namespace cc::testing {

struct RankContext {
  int rank = 0;
  int nranks = 1;
  ccUniqueId id{};
  // Makes the communicator for this rank (fails the test on error).
  ccComm_t initComm() const;
};

struct MultiRankOptions {
  int timeoutSeconds = 120;
  // Set in every rank before the body runs. (Sockets stay on loopback: the support
  // library sets CC_SOCKET_IFNAME=lo for the whole test process unless it is set.)
  std::map<std::string, std::string> env;
  std::set<int> expectKilled;  // ranks that end by SIGKILL on purpose
};

// Options for a named transport: "shm", "tcp", "ucx" (UCP over UCX's tcp and shared
// memory transports), or "shm_cma" (shm with the process_vm_readv single copy for
// every message of 4 KiB or more).
MultiRankOptions transportOptions(const std::string& transport);

// Whether Yama lets sibling processes read each other's memory (process_vm_readv, the
// single copy's probe): no Yama, or ptrace_scope 0.
bool yamaAllowsSiblings();

// Runs `body` in `nranks` forked processes and reports their outcome as test failures.
void runRanks(int nranks, const std::function<void(RankContext&)>& body,
              const MultiRankOptions& options = {});

// Names of /dev/shm entries (to check that nothing is left behind).
std::set<std::string> listDevShm();

}  // namespace cc::testing

#define CC_ASSERT_OK(expr)                                                                        \
  do {                                                                                            \
    ccResult_t ccAssertResult_ = (expr);                                                          \
    ASSERT_EQ(ccAssertResult_, ccSuccess)                                                         \
        << #expr << ": " << ccGetErrorString(ccAssertResult_) << ": " << ccGetLastError(nullptr); \
  } while (0)
