// Every cc call in cc-bench goes through checkCc: a benchmark that carries on after a
// failed call prints numbers for work that never happened. On failure it prints what
// was called, ccGetErrorString and ccGetLastError, and ends this rank's process with a
// non-zero status (the launcher, ours or mpirun, then reports the failure).
#pragma once

#include <cc/cc.h>

#include <string_view>

namespace cc::bench {

// The rank named in failure messages; -1 before it is known.
void setRankForMessages(int rank);

void checkCc(ccResult_t result, ccComm_t comm, std::string_view what);

// Prints "cc-bench: rank R: message" to stderr and ends the process with status 1.
[[noreturn]] void failRank(std::string_view message);

}  // namespace cc::bench
