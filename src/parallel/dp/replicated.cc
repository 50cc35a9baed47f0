#include "parallel/dp/replicated.h"

#include <cmath>

#include "parallel/optim/grad_norm.h"

namespace cc::parallel {

std::vector<Segment> Replicated::segments(const Gpt<float>& model, size_t padded, int world,
                                          size_t bucketElements) const {
  if (alignToTensors_) return tensorAlignedBuckets(model.layout(), padded, bucketElements);
  return ShardingStrategy::segments(model, padded, world, bucketElements);
}

size_t Replicated::optimizerStateSize() const { return context().model->layout().totalSize(); }

MemoryEstimate Replicated::memoryEstimate() const {
  const double full = 4.0 * static_cast<double>(context().padded);
  return {full, full, 8.0 * static_cast<double>(context().model->layout().totalSize())};
}

void Replicated::clearGradients() { context().model->zeroGradients(); }

Status Replicated::launchReduction(size_t index) {
  const ShardingContext& c = context();
  return c.reducer->allReduce(bucket(index), c.gradComm, c.gradStream);
}

Result<double> Replicated::gradientNorm() {
  Gpt<float>& model = *context().model;
  TensorParallelGroup* tp = model.tensorParallel();
  const bool split = tp != nullptr && tp->size() > 1;
  if (!split && !model.layout().hasTiedCopy()) return globalNorm(model.gradients());
  // A TP shard: its split tensors' squares summed over the group, the replicated ones once;
  // a pipeline stage's tied copy not at all.
  SquaredSums sums = squaredSumsBySplit(model.layout(), 0, model.gradients());
  if (split) {
    tp->allReduceSum(std::span<double>(&sums.split, 1));
    CC_TRY(tp->status());
  }
  return std::sqrt(sums.replicated + sums.split);
}

Status Replicated::update(AdamW& optimizer, float lr, float gradientScale) {
  Gpt<float>& model = *context().model;
  optimizer.update(model.parameters(), model.gradients(), model.layout(), lr, gradientScale);
  return Status::ok();
}

Status Replicated::gatherMoments(const AdamW& optimizer, std::vector<float>& m,
                                 std::vector<float>& v) {
  m.assign(optimizer.firstMoment().begin(), optimizer.firstMoment().end());
  v.assign(optimizer.secondMoment().begin(), optimizer.secondMoment().end());
  return Status::ok();
}

std::vector<float> Replicated::shardOf(std::span<const float> full) const {
  return {full.begin(), full.end()};
}

}  // namespace cc::parallel
