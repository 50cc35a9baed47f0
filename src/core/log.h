// Logging to stderr, filtered by CC_DEBUG (NONE, WARN, INFO, TRACE; default WARN).
// Every line names the host, the process and, where known, the rank:
//   cc host-a:1234 rank 3 INFO transport to rank 2: shm (same host)
#pragma once

#include <fmt/format.h>

#include <string>

namespace cc::log {

enum class Level { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

Level currentLevel();
bool enabled(Level level);
// Reads CC_DEBUG again (the level is cached; communicator creation calls this).
void reloadLevel();
// Rank shown in this thread's lines (-1: none). Set while a communicator works.
void setThreadRank(int rank);
int threadRank();
void write(Level level, const std::string& message);

template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void trace(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::kTrace))
    write(Level::kTrace, fmt::format(format, std::forward<Args>(args)...));
}

// Sets the rank shown in this thread's log lines for the lifetime of the object.
class ScopedRank {
 public:
  explicit ScopedRank(int rank) : previous_(threadRank()) { setThreadRank(rank); }
  ~ScopedRank() { setThreadRank(previous_); }
  ScopedRank(const ScopedRank&) = delete;
  ScopedRank& operator=(const ScopedRank&) = delete;

 private:
  int previous_;
};

}  // namespace cc::log
