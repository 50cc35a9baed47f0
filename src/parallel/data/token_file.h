// llm.c's token file: a header of 256 little-endian int32 (magic 20240520, version 1, the
// token count at [2], the rest zero) followed by that many uint16 tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace cc::parallel {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderInts = 256;

// Checks magic, version and that the file holds exactly the count the header states.
Result<std::vector<uint16_t>> readTokenFile(const std::string& path);

// Written atomically (temporary file, fsync, rename).
Status writeTokenFile(const std::string& path, std::span<const uint16_t> tokens);

}  // namespace cc::parallel
