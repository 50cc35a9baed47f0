#include "parallel/zero/zero2.h"

#include <algorithm>

namespace cc::parallel {

Status ShardedGradients::attach(const ShardingContext& context) {
  CC_TRY(ShardedOptimizerState::attach(context));
  gradientShard_.resize(shardSize());
  return Status::ok();
}

double ShardedGradients::gradientsInFlight() const {
  size_t largestSegment = 0;
  for (const Segment& segment : context().segments) {
    largestSegment = std::max(largestSegment, segment.size());
  }
  const double full = 4.0 * static_cast<double>(context().padded);
  return std::min(full, 2.0 * 4.0 * static_cast<double>(largestSegment));
}

MemoryEstimate ShardedGradients::memoryEstimate() const {
  const double full = 4.0 * static_cast<double>(context().padded);
  const double shard = 4.0 * static_cast<double>(shardSize());
  return {full, shard + gradientsInFlight(), 2.0 * shard};
}

void ShardedGradients::clearGradients() {
  // Zero, and out of memory until backward writes.
  context().model->releaseGradients(0, context().padded);
}

Status ShardedGradients::launchReduction(size_t index) {
  const ShardingContext& c = context();
  const ShardPiece& piece = c.pieces[index];
  std::span<float> shard = std::span<float>(gradientShard_).subspan(piece.stateOffset, piece.count);
  return c.reducer->reduceScatter(bucket(index), shard, c.gradComm, c.gradStream);
}

const float* ShardedGradients::reducedGradients(const ShardPiece& piece) const {
  return gradientShard_.data() + piece.stateOffset;
}

}  // namespace cc::parallel
