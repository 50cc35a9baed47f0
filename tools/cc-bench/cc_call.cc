// Checking cc's results (see cc_call.h).
#include "cc_call.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>

namespace cc::bench {
namespace {

int gRankForMessages = -1;

}  // namespace

void setRankForMessages(int rank) { gRankForMessages = rank; }

void failRank(std::string_view message) {
  fmt::print(stderr, "cc-bench: rank {}: {}\n", gRankForMessages, message);
  std::fflush(stdout);
  std::fflush(stderr);
  // _exit, not exit: cc's background threads may still hold locks that static
  // destructors would need.
  _exit(1);
}

void checkCc(ccResult_t result, ccComm_t comm, std::string_view what) {
  if (result == ccSuccess) return;
  const char* detail = ccGetLastError(comm);
  failRank(fmt::format("{} failed: {} ({})", what, ccGetErrorString(result),
                       detail != nullptr && *detail != '\0' ? detail : "no detail"));
}

}  // namespace cc::bench
