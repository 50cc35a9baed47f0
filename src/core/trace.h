// Seeing what happened: a Chrome trace-event file per rank (CC_TRACE=PREFIX writes
// PREFIX.rank<R>.json, which Perfetto opens), and a flight recorder that keeps each
// communicator's last operations so that a timeout or a dead peer can print which
// operation this rank was in and which peer it was waiting for.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace cc {

int64_t nowNanos();  // steady clock

class TraceSink {
 public:
  // Returns null when `prefix` is empty.
  static std::shared_ptr<TraceSink> open(const std::string& prefix, int rank);
  ~TraceSink();  // writes the file
  TraceSink(const TraceSink&) = delete;
  TraceSink& operator=(const TraceSink&) = delete;

  void record(const char* name, int lane, int64_t startNs, int64_t endNs, int peer, size_t bytes,
              uint64_t sequence);
  // A user range (ccTraceRangePush/Pop), on the user lane; the name is copied.
  void recordRange(const std::string& name, int64_t startNs, int64_t endNs);
  static constexpr int kUserLane = 1 << 20;  // communicators' lanes count from 0

 private:
  TraceSink(std::string path, int rank) : path_(std::move(path)), rank_(rank) {}
  struct Event {
    const char* name;
    int lane;
    int64_t startNs;
    int64_t endNs;
    int peer;
    size_t bytes;
    uint64_t sequence;
  };
  std::string path_;
  int rank_;
  std::mutex mutex_;
  std::vector<Event> events_;
  std::set<std::string> names_;  // user ranges' names, which events point into
};

enum class OpState { kQueued, kRunning, kDone, kFailed };

struct OpRecord {
  uint64_t sequence = 0;
  const char* kind = "";       // what the user called: "send", "recv", "barrier", ...
  const char* direction = "";  // "send" or "recv" for the message itself
  int peer = -1;
  size_t bytes = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  OpState state = OpState::kQueued;
};

// Not thread-safe by itself: a communicator's recorder is touched only under its
// operation lock, which already orders every operation.
class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity) : records_(capacity) {}
  // `nowNs`: the caller's clock reading (one per call of the executor, not per message).
  void begin(uint64_t sequence, const char* kind, const char* direction, int peer, size_t bytes,
             int64_t nowNs);
  void finish(uint64_t sequence, OpState state, int64_t nowNs = 0);
  // When the operation started waiting (the executor learns it lazily).
  void setStart(uint64_t sequence, int64_t nowNs);
  // The last `count` operations, oldest first, one per line.
  std::string dump(size_t count) const;

 private:
  OpRecord* find(uint64_t sequence);
  std::vector<OpRecord> records_;
  uint64_t newest_ = 0;
  bool any_ = false;
};

}  // namespace cc
