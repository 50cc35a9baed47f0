#include "lane.h"

#include <ATen/core/ivalue.h>

namespace cc::torch_backend {

Work::Work(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::shared_ptr<Lane> lane)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      lane_(lane),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool Work::done() {
  std::lock_guard lock(mutex_);
  return completed_;
}

// Complete once the future is too: wait() and is_completed() never return before
// get_future().value() may be read.
bool Work::isCompleted() {
  if (!done()) {
    if (auto lane = lane_.lock()) lane->hurry();
  }
  return done() && future_->completed();
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
  if (!done()) {
    if (auto lane = lane_.lock()) lane->hurry();
  }
  return future_;
}

bool Work::isSuccess() const {
  std::lock_guard lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard lock(mutex_);
  return exception_;
}

bool Work::wait(std::chrono::milliseconds timeout) {
  auto lane = lane_.lock();
  if (timeout == kNoTimeout) {
    if (lane) lane->runUntil(*this);
  } else if (lane) {
    lane->hurry();
  }
  std::unique_lock lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    throw std::runtime_error("cc: the operation did not complete within the " +
                             std::to_string(timeout.count()) + " ms given to wait()");
  }
  if (exception_) std::rethrow_exception(exception_);
  lock.unlock();
  // Marked just after completion (a callback on it may itself wait for this work).
  future_->wait();
  return true;
}

void Work::complete(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    completed_ = true;
    exception_ = error;
  }
  cv_.notify_all();
  // After the work is complete: a callback chained on the future (DDP's) may wait on it.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

Lane::Lane() {
  workers_.emplace_back([this] { primaryLoop(); });
}

Lane::~Lane() { shutdown(); }

void Lane::shutdown() {
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wakePrimary_.notify_all();
  wakeHelpers_.notify_all();
  // Helpers may still be made while the queue drains: join until none is left.
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (workers_.empty()) break;
      workers.swap(workers_);
    }
    for (std::thread& worker : workers) {
      // The last reference dropped on one of the lane's own threads (in a callback).
      if (worker.get_id() == std::this_thread::get_id()) {
        worker.detach();
      } else {
        worker.join();
      }
    }
    workers.clear();
  }
}

void Lane::helpLocked() {
  if (queue_.empty() || completing_ == 0) return;
  if (idleHelpers_ > 0) {
    wakeHelpers_.notify_one();
  } else {
    workers_.emplace_back([this] { helperLoop(); });
  }
}

void Lane::post(c10::intrusive_ptr<Work> work, Task task) {
  bool wakePrimary = false;
  {
    std::lock_guard lock(mutex_);
    lastPost_ = Clock::now();
    work->setTicket(nextTicket_++);
    queue_.push_back(Entry{std::move(work), std::move(task), lastPost_});
    // A sleeping primary sets itself a deadline; one already waiting with a deadline
    // looks at the queue when it passes. Two untaken operations: the caller is not
    // waiting for the first, so start it.
    wakePrimary = primarySleeping_ || queue_.size() > 1;
    helpLocked();
  }
  if (wakePrimary) wakePrimary_.notify_one();
}

void Lane::hurry() {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    wake = !queue_.empty() && !hurried_;
    hurried_ = hurried_ || wake;
  }
  if (wake) wakePrimary_.notify_one();
}

bool Lane::runNext(uint64_t upTo) {
  Entry entry;
  std::exception_ptr error;
  {
    std::lock_guard running(run_);
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty() || queue_.front().work->ticket() > upTo) return false;
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      entry.task();
    } catch (...) {
      error = std::current_exception();
    }
  }
  {
    std::lock_guard lock(mutex_);
    ++completing_;
    helpLocked();
  }
  entry.work->complete(error);
  {
    std::lock_guard lock(mutex_);
    --completing_;
  }
  return true;
}

void Lane::runUntil(Work& work) {
  // Only operations posted before this one (ahead of it in the order): a later one may
  // need a peer that first waits for something this caller does after the wait. Stops
  // when a worker has taken this one; the caller then waits for it to finish.
  while (!work.done() && runNext(work.ticket())) {
  }
}

void Lane::primaryLoop() {
  std::unique_lock lock(mutex_);
  while (true) {
    if (queue_.empty()) {
      if (stopping_) return;
      hurried_ = false;
      const auto idleFor = Clock::now() - lastPost_;
      if (idleFor >= kIdle) {
        primarySleeping_ = true;
        wakePrimary_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        primarySleeping_ = false;
      } else {
        wakePrimary_.wait_for(lock, kIdle - idleFor);
      }
      continue;
    }
    const auto age = Clock::now() - queue_.front().posted;
    if (age < kGrace && !hurried_ && !stopping_) {
      wakePrimary_.wait_for(lock, kGrace - age);
      continue;
    }
    hurried_ = false;
    lock.unlock();
    runNext();
    lock.lock();
  }
}

void Lane::helperLoop() {
  std::unique_lock lock(mutex_);
  while (true) {
    ++idleHelpers_;
    wakeHelpers_.wait(lock, [&] { return stopping_ || (!queue_.empty() && completing_ > 0); });
    --idleHelpers_;
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    lock.unlock();
    runNext();
    lock.lock();
  }
}

}  // namespace cc::torch_backend
