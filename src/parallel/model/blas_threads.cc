#include "parallel/model/blas_threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace cc::parallel {
namespace {

// Threads that sleep until a job comes; a job's caller sleeps until its last part is done.
// Sleeping (not spinning) is the point: see the header. Every thread, the caller too, claims
// the next unclaimed part until none is left, so a worker that gets no core for a while
// does not hold the job back: the caller runs its part.
class ComputePool {
 public:
  // Where the system refuses a thread, the pool keeps those it has: the caller claims the
  // parts nobody else does.
  explicit ComputePool(int workers) {
    try {
      for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { serve(); });
    } catch (const std::system_error&) {
    }
  }
  ~ComputePool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& thread : threads_) thread.join();
  }

  // False when another caller's job holds the pool, or this thread runs a part of a job.
  bool tryRun(int parts, const std::function<void(int)>& part) {
    if (tInsidePart) return false;
    std::unique_lock<std::mutex> lock(mutex_);
    if (job_ != nullptr) return false;
    job_ = &part;
    parts_ = parts;
    next_ = 0;
    unfinished_ = parts;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    lock.lock();
    runClaimed(lock);
    done_.wait(lock, [&] { return unfinished_ == 0; });
    job_ = nullptr;
    return true;
  }

 private:
  // Runs parts until none is left to claim; `lock` holds mutex_ on entry and on return.
  void runClaimed(std::unique_lock<std::mutex>& lock) {
    while (job_ != nullptr && next_ < parts_) {
      const int index = next_++;
      const std::function<void(int)>* job = job_;
      lock.unlock();
      runPart(*job, index);
      lock.lock();
      if (--unfinished_ == 0) done_.notify_one();
    }
  }

  static void runPart(const std::function<void(int)>& job, int index) noexcept {
    tInsidePart = true;
    job(index);
    tInsidePart = false;
  }

  void serve() {
    // An OpenMP build counts threads per thread: one here too, as on the caller.
    if (openblas_get_parallel() == 2) openblas_set_num_threads(1);
    unsigned long long seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      runClaimed(lock);
    }
  }

  static thread_local bool tInsidePart;

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;  // the running job; one at a time
  int parts_ = 0, next_ = 0, unfinished_ = 0;
  unsigned long long generation_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

thread_local bool ComputePool::tInsidePart = false;

std::mutex poolMutex;
std::shared_ptr<ComputePool> pool;  // null at one thread
std::atomic<int> threadCount{1};

}  // namespace

int cpusToRunOn() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) return std::max(1, CPU_COUNT(&mask));
  // More CPUs than a cpu_set_t holds (1024): the machine's count.
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void setBlasThreads(int threads) {
  if (threads < 1) threads = 1;
  openblas_set_num_threads(1);
  std::shared_ptr<ComputePool> old;
  {
    std::lock_guard<std::mutex> lock(poolMutex);
    old = std::move(pool);
    if (threads > 1) pool = std::make_shared<ComputePool>(threads - 1);
    threadCount = threads;
  }
}

int blasThreads() { return threadCount; }
const char* blasDescription() { return openblas_get_config(); }

bool runPartsAtOnce(int parts, const std::function<void(int)>& part) {
  std::shared_ptr<ComputePool> current;
  {
    std::lock_guard<std::mutex> lock(poolMutex);
    current = pool;
  }
  return current && current->tryRun(parts, part);
}

}  // namespace cc::parallel
