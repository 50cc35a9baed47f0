// Expert parallelism's communication primitives: the model's ExpertParallelGroup
// (model/expert_parallel_group.h) over the mesh's EP communicator. The counts go by
// ccAllToAll (int64), the rows by ccAllToAllv; both are blocking (the experts need their rows,
// the tokens their outputs). The first failure is kept (a dead peer names itself in it) and
// every later call only zero-fills what it would have received, so the trainer reports the
// failure after the micro-batch.
#pragma once

#include <cc/cc.h>

#include <memory>
#include <vector>

#include "parallel/model/expert_parallel_group.h"

namespace cc::parallel {

class ExpertParallelComm final : public ExpertParallelGroup {
 public:
  // comm: the EP communicator (kept by the caller, who must keep it alive).
  static Result<std::unique_ptr<ExpertParallelComm>> create(ccComm_t comm);

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  ccComm_t comm() const { return comm_; }

  void exchangeCounts(std::span<const int64_t> send, std::span<int64_t> receive) override;
  void exchangeRows(std::span<const float> send, std::span<const size_t> sendCounts,
                    std::span<float> receive, std::span<const size_t> receiveCounts) override;
  void exchangeRows(std::span<const double> send, std::span<const size_t> sendCounts,
                    std::span<double> receive, std::span<const size_t> receiveCounts) override;
  Status status() const override { return error_; }

 private:
  explicit ExpertParallelComm(ccComm_t comm) : comm_(comm) {}
  template <typename T>
  void exchange(std::span<const T> send, std::span<const size_t> sendCounts, std::span<T> receive,
                std::span<const size_t> receiveCounts);

  ccComm_t comm_;
  int size_ = 1;
  int rank_ = 0;
  Status error_;
  std::vector<size_t> sendOffsets_, receiveOffsets_;
};

}  // namespace cc::parallel
