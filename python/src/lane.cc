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

bool Work::isCompleted() {
  if (done()) return true;
  if (auto lane = lane_.lock()) lane->hurry();
  return done();
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
  workers_.emplace_back([this] { secondaryLoop(); });
}

Lane::~Lane() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wakePrimary_.notify_all();
  wakeSecondary_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void Lane::post(c10::intrusive_ptr<Work> work, Task task) {
  bool wakePrimary = false;
  bool wakeSecondary = false;
  {
    std::lock_guard lock(mutex_);
    lastPost_ = Clock::now();
    queue_.push_back(Entry{std::move(work), std::move(task), lastPost_});
    // A sleeping primary sets itself a deadline; one already waiting with a deadline
    // looks at the queue when it passes. Two untaken operations: the caller is not
    // waiting for the first, so start it.
    wakePrimary = primarySleeping_ || queue_.size() > 1;
    wakeSecondary = primaryCompleting_;
  }
  if (wakePrimary) wakePrimary_.notify_one();
  if (wakeSecondary) wakeSecondary_.notify_one();
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

bool Lane::runNext(bool* completing) {
  Entry entry;
  std::exception_ptr error;
  {
    std::lock_guard running(run_);
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) return false;
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      entry.task();
    } catch (...) {
      error = std::current_exception();
    }
  }
  bool wakeSecondary = false;
  if (completing != nullptr) {
    std::lock_guard lock(mutex_);
    *completing = true;
    wakeSecondary = !queue_.empty();
  }
  if (wakeSecondary) wakeSecondary_.notify_one();
  entry.work->complete(error);
  if (completing != nullptr) {
    std::lock_guard lock(mutex_);
    *completing = false;
  }
  return true;
}

void Lane::runUntil(Work& work) {
  // Stops when the queue is empty: a worker is then finishing this work.
  while (!work.done() && runNext()) {
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
    runNext(&primaryCompleting_);
    lock.lock();
  }
}

void Lane::secondaryLoop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wakeSecondary_.wait(lock, [&] { return stopping_ || (primaryCompleting_ && !queue_.empty()); });
    if (stopping_) return;
    lock.unlock();
    runNext();
    lock.lock();
  }
}

}  // namespace cc::torch_backend
