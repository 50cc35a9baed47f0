#include "comm/stream.h"

#include "core/log.h"

namespace cc::comm {

Stream::Stream() : worker_([this] { run(); }) {}

Stream::~Stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void Stream::enqueue(Task task, std::vector<std::shared_ptr<Communicator>> comms) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Entry{std::move(task), std::move(comms)});
    ++outstanding_;
  }
  wake_.notify_one();
}

void Stream::run() {
  while (true) {
    Entry entry;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    Status status;
    try {
      status = entry.task();
    } catch (const std::exception& error) {
      status = Status(ccSystemError, std::string("stream operation failed: ") + error.what());
    }
    if (!status.isOk()) {
      for (auto& comm : entry.comms) {
        comm->setAsyncError(status.code());
        comm->setLastError(status.message());
      }
      log::info("stream operation failed: {}", status.message());
    }
    entry.comms.clear();  // may free a communicator destroyed meanwhile, outside the lock
    {
      std::lock_guard lock(mutex_);
      if (!status.isOk() && firstError_.isOk()) firstError_ = status;
      --outstanding_;
    }
    idle_.notify_all();
  }
}

Status Stream::synchronize() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return outstanding_ == 0; });
  Status error = firstError_;
  firstError_ = Status::ok();
  return error;
}

Status Stream::query() {
  std::lock_guard lock(mutex_);
  if (outstanding_ > 0)
    return Status(ccInProgress, "operations still queued or running on the stream");
  return firstError_;
}

}  // namespace cc::comm
