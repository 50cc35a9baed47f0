// Writes a whole file so that a reader sees either the old contents or the new, never a
// mix: a temporary file beside the target, fsync, rename over the target, fsync of the
// directory. A crash mid-write leaves at most a stray temporary file.
#pragma once

#include "core/status.h"

#include <string>
#include <string_view>

namespace cc::parallel {

Status writeFileAtomically(const std::string& path, std::string_view contents);

}  // namespace cc::parallel
