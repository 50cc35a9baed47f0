// The byte-level tokenizer: token = byte value (vocabulary 256), so any text file becomes a
// token file and back without loss (`cc-train --prepare text.txt out.bin`).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cc::parallel {

inline constexpr int kByteVocabulary = 256;

std::vector<uint16_t> encodeBytes(std::string_view text);
// Tokens >= 256 (not bytes) are an error.
Result<std::string> decodeBytes(std::span<const uint16_t> tokens);

// Reads a text file and writes its byte tokens as a token file; returns the token count.
Result<size_t> prepareTokenFile(const std::string& textPath, const std::string& binPath);

}  // namespace cc::parallel
