// Where expert parallelism meets data parallelism's gradient buckets (dp/bucket_reducer.h).
// As in Megatron and DeepSpeed, EP lives inside DP: the dense parameters are the same on
// every DP rank and their gradients are averaged over all of DP, but an expert lives only
// on the dp / ep ranks of its expert-data-parallel group, and its gradient on each of them
// already sums what the ep micro-batches of its EP group sent it. The global-batch mean is
// then the sum over the expert-DP group divided by dp: each rank scales by 1 / ep and
// averages over the expert-DP group (nothing to send when dp = ep).
//
// This reducer splits every bucket into its dense runs, handed to the plain average over
// DP, and its expert runs, reduced as above on the same stream. ZeRO, whose shards would cut
// across experts held by different ranks, is refused (the trainer says so first).
#pragma once

#include <cc/cc.h>

#include <utility>
#include <vector>

#include "parallel/dp/bucket_reducer.h"

namespace cc::parallel {

class ExpertGradientReducer final : public BucketReducer {
 public:
  // experts: the [begin, end) slices of the gradient buffer that hold experts (ascending);
  // expertDp: the expert-data-parallel communicator (kept by the caller), of dp / ep ranks.
  ExpertGradientReducer(std::vector<std::pair<size_t, size_t>> experts, ccComm_t expertDp, int ep);
  Status allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) override;
  Status reduceScatter(const Bucket& bucket, std::span<float> shard, ccComm_t comm,
                       ccStream_t stream) override;
  std::string describe() const override;

 private:
  std::vector<std::pair<size_t, size_t>> experts_;
  ccComm_t expertDp_;
  int expertDpSize_ = 1;
  int ep_;
  AveragingReducer dense_;
};

}  // namespace cc::parallel
