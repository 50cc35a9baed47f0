// ZeRO stage 1: the optimizer state sharded. Each gradient bucket is reduce-scattered in
// place, so that rank r holds the average of its r-th 1/N of the bucket; AdamW updates
// only those pieces (so the rank keeps only their moments), and the updated parameters
// are all-gathered back into every rank's full buffer. Stages 2 and 3 extend it.
#pragma once

#include "parallel/dp/sharding.h"

namespace cc::parallel {

class ShardedOptimizerState : public ShardingStrategy {
 public:
  int stage() const override { return 1; }
  size_t optimizerStateSize() const override;
  MemoryEstimate memoryEstimate() const override;
  void clearGradients() override;
  Status launchReduction(size_t index) override;
  Result<double> gradientNorm() override;
  Status update(AdamW& optimizer, float lr, float gradientScale) override;
  Status gatherMoments(const AdamW& optimizer, std::vector<float>& m,
                       std::vector<float>& v) override;
  std::vector<float> shardOf(std::span<const float> full) const override;

 protected:
  size_t shardSize() const { return context().padded / static_cast<size_t>(context().world); }
  // Where this rank's averaged gradients and the parameters it updates live, per piece.
  virtual const float* reducedGradients(const ShardPiece& piece) const;
  virtual float* updatedParameters(const ShardPiece& piece);
  // After AdamW: every rank's buffer whole again (the all-gathers).
  virtual Status afterUpdate();
};

}  // namespace cc::parallel
