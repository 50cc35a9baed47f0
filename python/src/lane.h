// A lane: an ordered queue of operations that background threads run one at a time, in
// order, as Gloo's worker threads do, so that `async_op=True` really returns before the
// communication is done.
//
// Waking a thread costs more than a small collective (tens of microseconds on a busy
// machine against a few): so the common blocking call, `dist.all_reduce(t)`, posts and
// at once waits, and the waiting thread takes the queued operations up to its own and
// runs them itself. The worker is not woken for each post; it runs an operation that no
// one took within kGrace of its posting (an async call whose caller computes meanwhile),
// and at once when asked: a future handed out (DDP chains on those) or is_completed()
// polled. Once the lane has been idle for kIdle the worker sleeps until the next post
// wakes it.
//
// An operation's work is completed after the lane is free again, and its future's
// callbacks run there: a callback may post another operation and wait for its future
// (PowerSGD's hook does). While every thread that runs the lane is inside a callback and
// operations are queued, a helper thread runs them (helpers are made as needed and kept).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
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

  // Asks the lane to run it now when it has not started.
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  // With no timeout, runs the lane's queued operations up to this one on the calling
  // thread; with one, waits at most that long and raises when it passes.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Asks the lane to run it now: whoever holds the future waits without stealing.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Called once by whoever ran the operation.
  void complete(std::exception_ptr error);
  bool done();
  uint64_t ticket() const { return ticket_; }
  void setTicket(uint64_t ticket) { ticket_ = ticket; }

 private:
  uint64_t ticket_ = 0;  // its place in the lane's order
  std::vector<at::Tensor> outputs_;
  std::weak_ptr<Lane> lane_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class Lane : public std::enable_shared_from_this<Lane> {
 public:
  using Task = std::function<void()>;  // throws on failure

  Lane();
  ~Lane();  // shutdown()
  // Runs what is queued, then joins the lane's threads; later posts are not run.
  void shutdown();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  void post(c10::intrusive_ptr<Work> work, Task task);
  // Runs queued operations on this thread until `work` has completed.
  void runUntil(Work& work);
  // Wakes the worker for what is queued, without waiting for kGrace.
  void hurry();

  static constexpr std::chrono::microseconds kGrace{200};
  static constexpr std::chrono::milliseconds kIdle{2};

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    c10::intrusive_ptr<Work> work;
    Task task;
    Clock::time_point posted;
  };
  // Pops and runs the oldest queued operation if its ticket is at most `upTo`, then
  // completes its work; false when there was none.
  bool runNext(uint64_t upTo = UINT64_MAX);
  void primaryLoop();
  void helperLoop();
  // With operations queued and every runner inside a callback: wakes or makes a helper.
  // Called with mutex_ held.
  void helpLocked();

  std::mutex run_;  // held while an operation runs: one at a time, in order
  std::mutex mutex_;
  std::condition_variable wakePrimary_;
  std::condition_variable wakeHelpers_;
  std::deque<Entry> queue_;
  uint64_t nextTicket_ = 1;
  bool stopping_ = false;
  bool hurried_ = false;
  bool primarySleeping_ = false;  // waiting with no deadline: a post must wake it
  int completing_ = 0;            // threads inside a work's callbacks
  int idleHelpers_ = 0;
  Clock::time_point lastPost_;
  std::vector<std::thread> workers_;
};

}  // namespace cc::torch_backend
