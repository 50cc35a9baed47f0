// The safetensors container (what Hugging Face loads): 8 bytes of little-endian header
// length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {string: string}}, then the tensor bytes. cc writes and reads F32 only.
// The reader trusts nothing: every length, offset and shape is checked against the file
// before a byte of tensor data is used, and any inconsistency is an error naming the
// file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace cc::parallel {

struct TensorToWrite {
  std::string name;
  std::vector<size_t> shape;
  std::span<const float> data;  // shape's product of elements
};

struct LoadedTensor {
  std::vector<size_t> shape;
  std::vector<float> data;
};

struct SafetensorsContents {
  std::map<std::string, std::string> metadata;
  std::map<std::string, LoadedTensor> tensors;
};

// Larger headers are refused before they are read (a lying length cannot exhaust memory).
inline constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;

// Tensors are laid out in the order given; written atomically.
Status writeSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata);

Result<SafetensorsContents> readSafetensors(const std::string& path);

// The same checks on bytes already in memory (`source` names them in errors).
Result<SafetensorsContents> parseSafetensors(std::span<const uint8_t> bytes,
                                             const std::string& source);

}  // namespace cc::parallel
