// Tensor parallelism's communication primitives (picotron's tp_communications.py): the
// model's TensorParallelGroup (model/tensor_parallel_group.h) over the mesh's TP
// communicator. Every operator is a blocking collective on that communicator (an
// all-reduce; under sequence parallelism an all-gather or an in-place reduce-scatter):
// the model's pieces need the result before they go on. The first failure is kept (a dead peer
// names itself in it) and every later call does nothing, so the trainer reports the failure after
// the micro-batch instead of computing on half-reduced values.
#pragma once

#include <cc/cc.h>

#include <memory>

#include "parallel/model/tensor_parallel_group.h"

namespace cc::parallel {

class TensorParallelComm final : public TensorParallelGroup {
 public:
  // comm: the TP communicator (kept by the caller, who must keep it alive).
  static Result<std::unique_ptr<TensorParallelComm>> create(ccComm_t comm);

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  ccComm_t comm() const { return comm_; }

  void copyToRegionBackward(std::span<float> gradient) override;
  void copyToRegionBackward(std::span<double> gradient) override;
  void reduceFromRegionForward(std::span<float> partial) override;
  void reduceFromRegionForward(std::span<double> partial) override;
  void gatherSequence(std::span<const float> local, std::span<float> whole) override;
  void gatherSequence(std::span<const double> local, std::span<double> whole) override;
  void reduceScatterSequence(std::span<float> partial) override;
  void reduceScatterSequence(std::span<double> partial) override;
  void allReduceMax(std::span<float> values) override;
  void allReduceMax(std::span<double> values) override;
  void allReduceSum(std::span<float> values) override;
  void allReduceSum(std::span<double> values) override;
  Status status() const override { return error_; }

 private:
  explicit TensorParallelComm(ccComm_t comm) : comm_(comm) {}
  // A blocking all-reduce of values in place, unless an earlier call failed.
  template <typename T>
  void reduce(std::span<T> values, ccRedOp_t op, const char* what);
  template <typename T>
  void gather(std::span<const T> local, std::span<T> whole);
  template <typename T>
  void reduceScatter(std::span<T> partial);

  ccComm_t comm_;
  int size_ = 1;
  int rank_ = 0;
  Status error_;
};

}  // namespace cc::parallel
