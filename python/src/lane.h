// A lane: an ordered queue of operations that background threads run one at a time, in
// order, as Gloo's worker threads do, so that `async_op=True` really returns before the
// communication is done. A thread that waits for an operation does not sleep while a
// worker wakes up: it takes the queued operations up to its own and runs them itself, in
// order (the workers skip what was taken). That keeps a blocking `dist.all_reduce` at
// cc's latency instead of two thread hand-offs.
//
// An operation's work is completed after the lane is free again, and its future's
// callbacks run there: a callback may post another operation and wait for its future
// (PowerSGD's hook does), which the lane's second worker then runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace cc::torch_backend {

class Lane;

// The work object torch sees: completion, the error, and the future DDP chains on.
class Work : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::shared_ptr<Lane> lane);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  // With no timeout, runs the lane's queued operations up to this one on the calling
  // thread; with one, waits at most that long and raises when it passes.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Called once by whoever ran the operation.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  std::weak_ptr<Lane> lane_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class Lane : public std::enable_shared_from_this<Lane> {
 public:
  using Task = std::function<void()>;  // throws on failure

  Lane();
  ~Lane();  // runs what is queued, then joins
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  void post(c10::intrusive_ptr<Work> work, Task task);
  // Runs queued operations on this thread until `work` has completed.
  void runUntil(Work& work);

 private:
  struct Entry {
    c10::intrusive_ptr<Work> work;
    Task task;
  };
  // Pops and runs the oldest queued operation, then completes its work; false when the
  // queue was empty.
  bool runNext();
  void loop();

  std::mutex run_;  // held while an operation runs: one at a time, in order
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace cc::torch_backend
