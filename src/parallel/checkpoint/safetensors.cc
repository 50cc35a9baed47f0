#include "parallel/checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "parallel/io/atomic_file.h"

namespace cc::parallel {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

Status writeSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    size_t elements = 1;
    for (size_t dim : tensor.shape) elements *= dim;
    if (elements != tensor.data.size()) {
      return invalidArgument("safetensors " + path + ": tensor " + tensor.name + " has " +
                             std::to_string(tensor.data.size()) + " elements, its shape says " +
                             std::to_string(elements));
    }
    const uint64_t bytes = 4 * static_cast<uint64_t>(elements);
    header[tensor.name] = {
        {"dtype", "F32"}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  // Pad with spaces so the tensor data starts 8-byte aligned (what the format recommends).
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t headerLength = json.size();
  std::string contents(8 + json.size() + offset, '\0');
  std::memcpy(contents.data(), &headerLength, 8);
  std::memcpy(contents.data() + 8, json.data(), json.size());
  char* data = contents.data() + 8 + json.size();
  for (const TensorToWrite& tensor : tensors) {
    std::memcpy(data, tensor.data.data(), 4 * tensor.data.size());
    data += 4 * tensor.data.size();
  }
  return writeFileAtomically(path, contents);
}

namespace {

struct Entry {
  std::string name;
  std::vector<size_t> shape;
  uint64_t begin = 0, end = 0;
};

Result<uint64_t> nonNegative(const nlohmann::json& value, const std::string& what) {
  if (!value.is_number_unsigned()) return invalidArgument(what + " is not a non-negative integer");
  return value.get<uint64_t>();
}

Result<Entry> parseEntry(const std::string& name, const nlohmann::json& value,
                         const std::string& where) {
  const std::string prefix = where + ": tensor " + name;
  if (!value.is_object()) return invalidArgument(prefix + ": entry is not an object");
  for (const auto& [key, field] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return invalidArgument(prefix + ": unknown field \"" + key + "\"");
    }
  }
  if (!value.contains("dtype") || !value["dtype"].is_string())
    return invalidArgument(prefix + ": no dtype");
  if (value["dtype"].get<std::string>() != "F32") {
    return invalidArgument(prefix + ": dtype " + value["dtype"].get<std::string>() +
                           ", only F32 is supported");
  }
  if (!value.contains("shape") || !value["shape"].is_array())
    return invalidArgument(prefix + ": no shape array");
  Entry entry;
  entry.name = name;
  uint64_t elements = 1;
  for (const auto& dim : value["shape"]) {
    CC_ASSIGN_OR_RETURN(uint64_t size, nonNegative(dim, prefix + ": a shape dimension"));
    if (size > (uint64_t{1} << 40) || (size != 0 && elements > (uint64_t{1} << 40) / size)) {
      return invalidArgument(prefix + ": shape too large");
    }
    elements *= size;
    entry.shape.push_back(static_cast<size_t>(size));
  }
  const auto& offsets = value.contains("data_offsets") ? value["data_offsets"] : nlohmann::json();
  if (!offsets.is_array() || offsets.size() != 2)
    return invalidArgument(prefix + ": data_offsets is not [begin, end]");
  CC_ASSIGN_OR_RETURN(entry.begin, nonNegative(offsets[0], prefix + ": data_offsets begin"));
  CC_ASSIGN_OR_RETURN(entry.end, nonNegative(offsets[1], prefix + ": data_offsets end"));
  if (entry.end < entry.begin || entry.end - entry.begin != 4 * elements) {
    return invalidArgument(prefix + ": data_offsets [" + std::to_string(entry.begin) + ", " +
                           std::to_string(entry.end) + ") do not hold the " +
                           std::to_string(elements) + " F32 elements of its shape");
  }
  return entry;
}

}  // namespace

Result<SafetensorsContents> parseSafetensors(std::span<const uint8_t> bytes,
                                             const std::string& source) {
  if (bytes.size() < 8) {
    return invalidArgument(source + ": " + std::to_string(bytes.size()) +
                           " bytes, too short for a safetensors header");
  }
  uint64_t headerLength = 0;
  std::memcpy(&headerLength, bytes.data(), 8);
  if (headerLength > kMaxSafetensorsHeader || headerLength > bytes.size() - 8) {
    return invalidArgument(source + ": header length " + std::to_string(headerLength) +
                           " exceeds the file (" + std::to_string(bytes.size()) +
                           " bytes) or the limit");
  }
  const auto* headerBegin = reinterpret_cast<const char*>(bytes.data() + 8);
  const nlohmann::json header =
      nlohmann::json::parse(headerBegin, headerBegin + headerLength, nullptr, false);
  if (header.is_discarded()) return invalidArgument(source + ": header is not valid JSON");
  if (!header.is_object()) return invalidArgument(source + ": header is not a JSON object");

  SafetensorsContents contents;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return invalidArgument(source + ": __metadata__ is not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string())
          return invalidArgument(source + ": metadata " + key + " is not a string");
        contents.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    CC_ASSIGN_OR_RETURN(Entry entry, parseEntry(name, value, source));
    entries.push_back(std::move(entry));
  }
  // The tensors must tile the data section exactly: no gap, no overlap, nothing after.
  const uint64_t dataSize = bytes.size() - 8 - headerLength;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Entry& entry : entries) {
    if (entry.begin != expected) {
      return invalidArgument(source + ": tensor " + entry.name + " starts at byte " +
                             std::to_string(entry.begin) + " of the data, expected " +
                             std::to_string(expected) + " (a gap or an overlap)");
    }
    if (entry.end > dataSize) {
      return invalidArgument(source + ": tensor " + entry.name + " ends at byte " +
                             std::to_string(entry.end) + " but the data section has " +
                             std::to_string(dataSize) + " (truncated file?)");
    }
    expected = entry.end;
  }
  if (expected != dataSize) {
    return invalidArgument(source + ": the tensors cover " + std::to_string(expected) +
                           " bytes of a " + std::to_string(dataSize) + "-byte data section");
  }
  const uint8_t* data = bytes.data() + 8 + headerLength;
  for (Entry& entry : entries) {
    LoadedTensor tensor;
    tensor.shape = std::move(entry.shape);
    tensor.data.resize((entry.end - entry.begin) / 4);
    if (!tensor.data.empty())
      std::memcpy(tensor.data.data(), data + entry.begin, entry.end - entry.begin);
    contents.tensors.emplace(entry.name, std::move(tensor));
  }
  return contents;
}

Result<SafetensorsContents> readSafetensors(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return invalidArgument("safetensors " + path + ": cannot open");
  const auto size = static_cast<size_t>(file.tellg());
  file.seekg(0);
  std::vector<uint8_t> bytes(size);
  file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!file) return invalidArgument("safetensors " + path + ": read failed");
  return parseSafetensors(bytes, path);
}

}  // namespace cc::parallel
