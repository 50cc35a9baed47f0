// `cc-bench p2p`: ties the pieces together. Every rank measures (memcpy first on rank 0,
// then the ccSend/ccRecv sweep per transport), rank 0 runs the Open MPI peer when asked
// and prints the report.
#pragma once

#include "options.h"

namespace cc::bench {

// Returns the process's exit status.
int runP2pCommand(const P2pOptions& options);

}  // namespace cc::bench
