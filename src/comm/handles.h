// The communicator behind a C handle, for tests and tools inside the tree that reach
// below the C API (for example to force an algorithm per call).
#pragma once

#include <cc/cc.h>

#include <memory>

#include "comm/communicator.h"

namespace cc::comm {

// Null for a NULL, destroyed or made-up handle.
std::shared_ptr<Communicator> communicatorOf(ccComm_t handle);

class Stream;
// The stream behind a handle: null for NULL (run now), an error for a dead handle.
Result<std::shared_ptr<Stream>> streamOf(ccStream_t handle);

// What the C API returns for `status`, after recording its message as this thread's (and
// the communicator's, when given) last error: for entry points outside api.cc.
ccResult_t reportStatus(const Status& status, const std::shared_ptr<Communicator>& comm = nullptr);

}  // namespace cc::comm
