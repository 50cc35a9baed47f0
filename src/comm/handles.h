// The communicator behind a C handle, for tests and tools inside the tree that reach
// below the C API (for example to force an algorithm per call).
#pragma once

#include <cc/cc.h>

#include <memory>

#include "comm/communicator.h"

namespace cc::comm {

// Null for a NULL, destroyed or made-up handle.
std::shared_ptr<Communicator> communicatorOf(ccComm_t handle);

}  // namespace cc::comm
