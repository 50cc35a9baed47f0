#include "core/config.h"

#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string_view>

#include "core/copy.h"
#include "core/log.h"

namespace cc {
namespace {

// Parses an integer variable within [low, high]; an unset variable keeps `value`.
Status readInteger(const char* name, int64_t low, int64_t high, int64_t& value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::ok();
  int64_t parsed = 0;
  const char* end = text + std::strlen(text);
  auto [pointer, error] = std::from_chars(text, end, parsed);
  if (error != std::errc() || pointer != end || parsed < low || parsed > high) {
    return invalidArgument(std::string(name) + "=" + text + " is not an integer in [" +
                           std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  value = parsed;
  return Status::ok();
}

template <typename T>
Status readInto(const char* name, int64_t low, int64_t high, T& field) {
  int64_t value = static_cast<int64_t>(field);
  CC_TRY(readInteger(name, low, high, value));
  field = static_cast<T>(value);
  return Status::ok();
}

// A variable that is "auto" (stored as -1) or an integer in [0, high].
template <typename T>
Status readAutoInto(const char* name, int64_t high, T& field) {
  const char* text = std::getenv(name);
  if (text != nullptr && std::string_view(text) == "auto") {
    field = -1;
    return Status::ok();
  }
  Status read = readInto(name, 0, high, field);
  if (read.isOk()) return read;
  return invalidArgument(std::string(name) + "=" + text +
                         " is neither auto nor an integer in [0, " + std::to_string(high) + "]");
}

}  // namespace

Result<Config> Config::fromEnvironment() {
  log::reloadLevel();
  Config config;
  CC_TRY(readInto("CC_TIMEOUT_MS", 1, int64_t{1} << 40, config.timeoutMs));
  CC_TRY(readAutoInto("CC_SPIN_US", 10'000'000, config.spinMicros));
  CC_TRY(readAutoInto("CC_SPIN_YIELD", 1, config.spinYield));
  CC_TRY(readInto("CC_NSOCKS_PERTHREAD", 1, 16, config.tcpSocketsPerPeer));
  CC_TRY(readInto("CC_TCP_STRIPE_THRESHOLD", 0, int64_t{1} << 40, config.tcpStripeThreshold));
  CC_TRY(readInto("CC_SHM_SLOT_BYTES", 4096, 64 << 20, config.shmSlotBytes));
  CC_TRY(readInto("CC_SHM_SLOTS", 2, 1024, config.shmSlots));
  CC_TRY(readInto("CC_SHM_CMA_THRESHOLD", 0, int64_t{1} << 50, config.shmCmaThreshold));
  CC_TRY(readAutoInto("CC_SHM_USE_CMA", 1, config.shmUseCma));
  int64_t prefault = config.shmPrefault ? 1 : 0;
  CC_TRY(readInteger("CC_SHM_PREFAULT", 0, 1, prefault));
  config.shmPrefault = prefault != 0;
  CC_TRY(readInto("CC_FLIGHT_RECORDER_ENTRIES", 1, 1 << 20, config.flightRecorderEntries));
  CC_TRY(readInto("CC_CHUNK_BYTES", 0, int64_t{1} << 40, config.chunkBytes));
  CC_TRY(readInto("CC_DIRECT_BYTES", 64 << 10, int64_t{1} << 32, config.directBytes));
  config.directBytes = (config.directBytes + 4095) / 4096 * 4096;
  int64_t check = config.checkCalls ? 1 : 0;
  CC_TRY(readInteger("CC_CHECK", 0, 1, check));
  config.checkCalls = check != 0;
  if (const char* text = std::getenv("CC_ALGO"); text != nullptr && *text != '\0') {
    int found = -1;
    for (int i = 0; i < static_cast<int>(std::size(kAlgorithmNames)); ++i) {
      if (strcasecmp(text, kAlgorithmNames[i]) == 0) found = i;
    }
    if (found < 0) {
      return invalidArgument(
          std::string("CC_ALGO=") + text +
          " is not one of auto, ring, tree, direct, hd, pairwise, bruck, hier, dbt");
    }
    config.algorithm = found;
  }
  config.shmSlotBytes = (config.shmSlotBytes + 63) / 64 * 64;
  if ((config.shmSlots & (config.shmSlots - 1)) != 0) {
    // Slot indices come from 32-bit counters; only a power of two divides 2^32.
    return invalidArgument("CC_SHM_SLOTS=" + std::to_string(config.shmSlots) +
                           " is not a power of two");
  }

  if (const char* text = std::getenv("CC_TRANSPORT"); text != nullptr && *text != '\0') {
    if (strcasecmp(text, "shm") == 0) {
      config.transport = TransportChoice::kShm;
    } else if (strcasecmp(text, "tcp") == 0 || strcasecmp(text, "socket") == 0) {
      config.transport = TransportChoice::kTcp;
    } else if (strcasecmp(text, "ucx") == 0) {
      config.transport = TransportChoice::kUcx;
    } else if (strcasecmp(text, "auto") == 0) {
      config.transport = TransportChoice::kAuto;
    } else {
      return invalidArgument(std::string("CC_TRANSPORT=") + text +
                             " is not one of auto, shm, tcp, ucx");
    }
  }
  if (const char* text = std::getenv("CC_NET"); text != nullptr && *text != '\0') {
    if (strcasecmp(text, "tcp") == 0 || strcasecmp(text, "socket") == 0) {
      config.net = NetChoice::kTcp;
    } else if (strcasecmp(text, "ucx") == 0) {
      config.net = NetChoice::kUcx;
    } else if (strcasecmp(text, "auto") == 0) {
      config.net = NetChoice::kAuto;
    } else {
      return invalidArgument(std::string("CC_NET=") + text + " is not one of auto, tcp, ucx");
    }
  }
  // CC_COPY is read by core/copy.cc, once per process; checked here so that a misspelling
  // fails like any other setting.
  if (const char* text = std::getenv("CC_COPY"); text != nullptr && *text != '\0') {
    if (std::find(std::begin(kCopyNames), std::end(kCopyNames), text) == std::end(kCopyNames)) {
      return invalidArgument(
          fmt::format("CC_COPY={} is not one of {}", text, fmt::join(kCopyNames, ", ")));
    }
  }
  if (const char* text = std::getenv("CC_SOCKET_IFNAME")) config.socketIfname = text;
  if (const char* text = std::getenv("CC_SOCKET_FAMILY"); text != nullptr && *text != '\0') {
    if (strcasecmp(text, "AF_INET") == 0 || strcmp(text, "4") == 0) {
      config.socketFamily = AF_INET;
    } else if (strcasecmp(text, "AF_INET6") == 0 || strcmp(text, "6") == 0) {
      config.socketFamily = AF_INET6;
    } else {
      return invalidArgument(std::string("CC_SOCKET_FAMILY=") + text +
                             " is not AF_INET or AF_INET6");
    }
  }
  if (const char* text = std::getenv("CC_TRACE")) config.tracePath = text;
  return config;
}

}  // namespace cc
