// The parallelism layer talks to cc only through the public C API; this turns a
// ccResult_t into a Status whose message says which of our operations failed and what
// cc said about it (for a dead peer, ccGetLastError names the rank).
#pragma once

#include <cc/cc.h>

#include <string>

#include "core/status.h"

namespace cc::parallel {

inline Status ccCall(ccResult_t result, ccComm_t comm, const std::string& what) {
  if (result == ccSuccess) return Status::ok();
  // The communicator's message, and this thread's where it says something else (a queued
  // operation's failure may be reported on either).
  std::string detail = comm != nullptr ? ccGetLastError(comm) : "";
  const std::string thread = ccGetLastError(nullptr);
  if (detail.empty()) {
    detail = thread;
  } else if (!thread.empty() && thread != detail) {
    detail += " (" + thread + ")";
  }
  return Status(result,
                what + ": " + ccGetErrorString(result) + (detail.empty() ? "" : ": " + detail));
}

}  // namespace cc::parallel
