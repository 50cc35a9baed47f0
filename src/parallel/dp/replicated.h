// Data parallelism without sharding (ZeRO stage 0, PyTorch's DDP): every rank keeps the
// whole model, its gradients and Adam's moments; each gradient bucket is all-reduced
// (averaged) as soon as backward has finished it, and every rank takes the same optimizer
// step on the same averaged gradients.
#pragma once

#include "parallel/dp/sharding.h"

namespace cc::parallel {

class Replicated final : public ShardingStrategy {
 public:
  // alignToTensors: buckets of whole tensors (tensorAlignedBuckets) instead of equal ones.
  explicit Replicated(bool alignToTensors = false) : alignToTensors_(alignToTensors) {}
  int stage() const override { return 0; }
  std::vector<Segment> segments(const Gpt<float>& model, size_t padded, int world,
                                size_t bucketElements) const override;

  size_t optimizerStateSize() const override;
  MemoryEstimate memoryEstimate() const override;
  void clearGradients() override;
  Status launchReduction(size_t index) override;
  Result<double> gradientNorm() override;
  Status update(AdamW& optimizer, float lr, float gradientScale) override;
  Status gatherMoments(const AdamW& optimizer, std::vector<float>& m,
                       std::vector<float>& v) override;
  std::vector<float> shardOf(std::span<const float> full) const override;

 private:
  bool alignToTensors_;
};

}  // namespace cc::parallel
