#include "parallel/data/token_file.h"

#include <array>
#include <bit>
#include <cstring>
#include <fstream>

#include "parallel/io/atomic_file.h"

namespace cc::parallel {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

Result<std::vector<uint16_t>> readTokenFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return invalidArgument("token file " + path + ": cannot open");
  const auto fileSize = static_cast<uint64_t>(file.tellg());
  file.seekg(0);
  std::array<int32_t, kTokenFileHeaderInts> header{};
  const uint64_t headerBytes = sizeof(header);
  if (fileSize < headerBytes) {
    return invalidArgument("token file " + path + ": " + std::to_string(fileSize) +
                           " bytes, shorter than the 1024-byte header");
  }
  file.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(headerBytes));
  if (header[0] != kTokenFileMagic) {
    return invalidArgument("token file " + path + ": magic " + std::to_string(header[0]) +
                           ", expected " + std::to_string(kTokenFileMagic));
  }
  if (header[1] != kTokenFileVersion) {
    return invalidArgument("token file " + path + ": version " + std::to_string(header[1]) +
                           ", expected " + std::to_string(kTokenFileVersion));
  }
  if (header[2] < 0) return invalidArgument("token file " + path + ": negative token count");
  const uint64_t count = static_cast<uint64_t>(header[2]);
  if (fileSize != headerBytes + 2 * count) {
    return invalidArgument("token file " + path + ": header says " + std::to_string(count) +
                           " tokens (" + std::to_string(headerBytes + 2 * count) +
                           " bytes) but the file has " + std::to_string(fileSize) + " bytes");
  }
  std::vector<uint16_t> tokens(count);
  file.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(2 * count));
  if (!file) return invalidArgument("token file " + path + ": read failed");
  return tokens;
}

Status writeTokenFile(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return invalidArgument("token file " + path + ": " + std::to_string(tokens.size()) +
                           " tokens do not fit the header's int32 count");
  }
  std::array<int32_t, kTokenFileHeaderInts> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(sizeof(header) + 2 * tokens.size(), '\0');
  std::memcpy(bytes.data(), header.data(), sizeof(header));
  if (!tokens.empty()) std::memcpy(bytes.data() + sizeof(header), tokens.data(), 2 * tokens.size());
  return writeFileAtomically(path, bytes);
}

}  // namespace cc::parallel
