// A stream: an ordered queue of operations that one background thread runs while the
// caller computes (what DP's overlap of gradient all-reduce with backward stands on).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/communicator.h"

namespace cc::comm {

class Stream {
 public:
  using Task = std::function<Status()>;

  Stream();
  ~Stream();  // runs what is queued, then joins
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // `comms` learn of a failure through ccCommGetAsyncError; the stream keeps them alive
  // until the task has run.
  void enqueue(Task task, std::vector<std::shared_ptr<Communicator>> comms);
  Status synchronize();  // waits for everything queued; returns (and clears) the first error
  Status query();        // ccInProgress while something is queued or running

 private:
  struct Entry {
    Task task;
    std::vector<std::shared_ptr<Communicator>> comms;
  };
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Entry> queue_;
  size_t outstanding_ = 0;  // queued plus running
  bool stopping_ = false;
  Status firstError_;
  std::thread worker_;
};

}  // namespace cc::comm
