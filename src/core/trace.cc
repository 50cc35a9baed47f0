#include "core/trace.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/log.h"

namespace cc {

int64_t nowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<TraceSink> TraceSink::open(const std::string& prefix, int rank) {
  if (prefix.empty()) return nullptr;
  return std::shared_ptr<TraceSink>(
      new TraceSink(prefix + ".rank" + std::to_string(rank) + ".json", rank));
}

void TraceSink::record(const char* name, int lane, int64_t startNs, int64_t endNs, int peer,
                       size_t bytes, uint64_t sequence) {
  std::lock_guard lock(mutex_);
  events_.push_back({name, lane, startNs, endNs, peer, bytes, sequence});
}

namespace {

// `text` as a JSON string's contents (user ranges may name anything).
std::string jsonEscaped(const char* text) {
  std::string escaped;
  for (const char* c = text; *c != '\0'; ++c) {
    const auto byte = static_cast<unsigned char>(*c);
    if (*c == '"' || *c == '\\') {
      escaped += '\\';
      escaped += *c;
    } else if (byte < 0x20) {
      escaped += fmt::format("\\u{:04x}", byte);
    } else {
      escaped += *c;
    }
  }
  return escaped;
}

}  // namespace

void TraceSink::recordRange(const std::string& name, int64_t startNs, int64_t endNs) {
  std::lock_guard lock(mutex_);
  const char* stored = names_.insert(name).first->c_str();
  events_.push_back({stored, kUserLane, startNs, endNs, -1, 0, 0});
}

TraceSink::~TraceSink() {
  std::FILE* file = std::fopen(path_.c_str(), "w");
  if (file == nullptr) {
    log::warn("CC_TRACE: cannot write {}", path_);
    return;
  }
  std::fprintf(file, "{\"traceEvents\":[\n");
  std::fprintf(file,
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d "
               "(pid %d)\"}}",
               rank_, rank_, getpid());
  std::fprintf(file,
               ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
               "\"name\":\"user ranges\"}}",
               rank_, kUserLane);
  for (const Event& event : events_) {
    std::fprintf(file,
                 ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                 "\"args\":{\"peer\":%d,\"bytes\":%zu,\"seq\":%llu}}",
                 jsonEscaped(event.name).c_str(), rank_, event.lane,
                 static_cast<double>(event.startNs) / 1e3,
                 static_cast<double>(event.endNs - event.startNs) / 1e3, event.peer, event.bytes,
                 static_cast<unsigned long long>(event.sequence));
  }
  std::fprintf(file, "\n]}\n");
  std::fclose(file);
}

OpRecord* FlightRecorder::find(uint64_t sequence) {
  OpRecord& record = records_[sequence % records_.size()];
  return record.sequence == sequence ? &record : nullptr;
}

void FlightRecorder::begin(uint64_t sequence, const char* kind, const char* direction, int peer,
                           size_t bytes, int64_t nowNs) {
  records_[sequence % records_.size()] =
      OpRecord{sequence, kind, direction, peer, bytes, nowNs, 0, OpState::kRunning};
  newest_ = sequence;
  any_ = true;
}

void FlightRecorder::finish(uint64_t sequence, OpState state, int64_t nowNs) {
  if (OpRecord* record = find(sequence)) {
    record->state = state;
    record->endNs = nowNs;
  }
}

void FlightRecorder::setStart(uint64_t sequence, int64_t nowNs) {
  if (OpRecord* record = find(sequence)) record->startNs = nowNs;
}

std::string FlightRecorder::dump(size_t count) const {
  if (!any_) return "  (no operations yet)\n";
  static const char* kStateNames[] = {"queued", "RUNNING", "done", "FAILED"};
  std::string text;
  uint64_t first = newest_ + 1 > count ? newest_ + 1 - count : 0;
  int64_t now = nowNanos();
  for (uint64_t sequence = first; sequence <= newest_; ++sequence) {
    const OpRecord& record = records_[sequence % records_.size()];
    if (record.sequence != sequence || record.kind[0] == '\0') continue;
    bool plain = std::strcmp(record.kind, record.direction) == 0;
    text += fmt::format("  #{} {}{}{} {} rank {}, {} bytes: {}", record.sequence, record.kind,
                        plain ? "" : " ", plain ? "" : record.direction,
                        std::strcmp(record.direction, "send") == 0 ? "to" : "from", record.peer,
                        record.bytes, kStateNames[static_cast<int>(record.state)]);
    if (record.state != OpState::kDone && record.startNs != 0) {
      int64_t end = record.endNs != 0 ? record.endNs : now;
      text += fmt::format(" after {:.3f} ms", static_cast<double>(end - record.startNs) / 1e6);
    }
    text += "\n";
  }
  return text;
}

}  // namespace cc
