// libFuzzer target for every parser of bytes that arrive from outside the process: the
// bootstrap's challenge, response, frame header, registration, peer table, unique id,
// the shared-memory setup messages, and hex ids read from PMI-1. Each must return a
// value or an error for any input, without crashing, reading out of bounds or
// allocating without limit.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the parser, so one corpus covers all of them.
  auto bytes = std::as_bytes(std::span(data + 1, size - 1));
  using namespace cc::wire;
  switch (data[0] % 9) {
    case 0:
      (void)parseChallenge(bytes);
      break;
    case 1:
      (void)parseResponse(bytes);
      break;
    case 2:
      (void)parseFrameHeader(bytes, kMaxFrameBytes);
      break;
    case 3: {
      auto message = parseRegister(bytes);
      if (message.isOk()) (void)encodeRegister(message.value());
      break;
    }
    case 4:
      (void)parsePeerTable(bytes, 1 + (size % 7));
      break;
    case 5:
      (void)parseUniqueId(bytes);
      break;
    case 6:
      (void)parseShmSetup(bytes);
      break;
    case 7:
      (void)parseShmSetupReply(bytes);
      break;
    case 8: {
      std::array<std::byte, CC_UNIQUE_ID_BYTES> id{};
      (void)fromHex(std::string(reinterpret_cast<const char*>(data + 1), size - 1),
                    id);  // a PMI-1 value
      break;
    }
  }
  return 0;
}
