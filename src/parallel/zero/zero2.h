// ZeRO stage 2: stage 1, and the gradients sharded too. Each bucket is reduce-scattered
// into a compact gradient shard, and the bucket's full-size gradient pages are given back
// as soon as its reduction has completed, so only a few full-size buckets exist at once
// (DataParallel makes backward wait when more are in flight).
#pragma once

#include "parallel/zero/zero1.h"

namespace cc::parallel {

class ShardedGradients : public ShardedOptimizerState {
 public:
  int stage() const override { return 2; }
  Status attach(const ShardingContext& context) override;
  MemoryEstimate memoryEstimate() const override;
  void clearGradients() override;
  Status launchReduction(size_t index) override;
  bool releasesGradients() const override { return true; }

 protected:
  const float* reducedGradients(const ShardPiece& piece) const override;
  // Full-size gradient bytes produced but not yet reduced, at most.
  double gradientsInFlight() const;

 private:
  std::vector<float> gradientShard_;
};

}  // namespace cc::parallel
