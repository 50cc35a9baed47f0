// Writes a whole file so that a reader sees either the old contents or the new, never a
// mix: a temporary file beside the target, fsync, rename over the target, fsync of the
// directory. A crash mid-write leaves at most a stray temporary file.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace cc::parallel {

Status writeFileAtomically(const std::string& path, std::string_view contents);

}  // namespace cc::parallel
