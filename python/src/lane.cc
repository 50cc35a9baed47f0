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

bool Work::isCompleted() {
  std::lock_guard lock(mutex_);
  return completed_;
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
  if (timeout == kNoTimeout) {
    if (auto lane = lane_.lock()) lane->runUntil(*this);
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
  for (int i = 0; i < 2; ++i) workers_.emplace_back([this] { loop(); });
}

Lane::~Lane() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void Lane::post(c10::intrusive_ptr<Work> work, Task task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Entry{std::move(work), std::move(task)});
  }
  wake_.notify_one();
}

bool Lane::runNext() {
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
  entry.work->complete(error);
  return true;
}

void Lane::runUntil(Work& work) {
  // Stops when the queue is empty: a worker is then finishing this work.
  while (!work.isCompleted() && runNext()) {
  }
}

void Lane::loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
    }
    runNext();
  }
}

}  // namespace cc::torch_backend
