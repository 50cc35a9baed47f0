#include "core/status.h"

#include <cstring>

namespace cc {

Status systemError(const std::string& what, int errnoValue) {
  return Status(ccSystemError, what + ": " + std::strerror(errnoValue));
}

}  // namespace cc
