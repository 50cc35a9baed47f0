#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace cc::log {
namespace {

Level parseLevel(const char* text) {
  if (text == nullptr) return Level::kWarn;
  if (strcasecmp(text, "NONE") == 0 || strcasecmp(text, "OFF") == 0) return Level::kNone;
  if (strcasecmp(text, "INFO") == 0) return Level::kInfo;
  if (strcasecmp(text, "TRACE") == 0) return Level::kTrace;
  return Level::kWarn;
}

thread_local int gThreadRank = -1;

const char* levelName(Level level) {
  switch (level) {
    case Level::kWarn:
      return "WARN";
    case Level::kInfo:
      return "INFO";
    case Level::kTrace:
      return "TRACE";
    default:
      return "";
  }
}

const std::string& hostName() {
  static const std::string name = [] {
    char buffer[256] = {};
    if (gethostname(buffer, sizeof(buffer) - 1) != 0) return std::string("?");
    return std::string(buffer);
  }();
  return name;
}

}  // namespace

namespace {
// Cached: reading the environment costs more than a small collective. Re-read whenever a
// communicator is created (Config::fromEnvironment), so that tests and tools that set
// CC_DEBUG after the process started are still heard.
std::atomic<int> gLevel{-1};
}  // namespace

void reloadLevel() {
  gLevel.store(static_cast<int>(parseLevel(std::getenv("CC_DEBUG"))), std::memory_order_relaxed);
}

Level currentLevel() {
  int level = gLevel.load(std::memory_order_relaxed);
  if (level < 0) {
    reloadLevel();
    level = gLevel.load(std::memory_order_relaxed);
  }
  return static_cast<Level>(level);
}

bool enabled(Level level) { return level != Level::kNone && level <= currentLevel(); }

void setThreadRank(int rank) { gThreadRank = rank; }
int threadRank() { return gThreadRank; }

void write(Level level, const std::string& message) {
  std::string line = fmt::format("cc {}:{}", hostName(), getpid());
  if (gThreadRank >= 0) line += fmt::format(" rank {}", gThreadRank);
  line += fmt::format(" {} {}\n", levelName(level), message);
  // One write(2) per line so lines of different ranks and threads never interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace cc::log
