#include "parallel/zero/zero1.h"

#include <cmath>

#include "parallel/mesh/cc_call.h"
#include "parallel/optim/grad_norm.h"

namespace cc::parallel {

size_t ShardedOptimizerState::optimizerStateSize() const { return shardSize(); }

MemoryEstimate ShardedOptimizerState::memoryEstimate() const {
  const double full = 4.0 * static_cast<double>(context().padded);
  const double shard = 4.0 * static_cast<double>(shardSize());
  return {full, full, 2.0 * shard};
}

void ShardedOptimizerState::clearGradients() { context().model->zeroGradients(); }

Status ShardedOptimizerState::launchReduction(size_t index) {
  const ShardingContext& c = context();
  const ShardPiece& piece = c.pieces[index];
  std::span<float> shard = c.model->paddedGradients().subspan(piece.begin, piece.count);
  return c.reducer->reduceScatter(bucket(index), shard, c.gradComm, c.gradStream);
}

const float* ShardedOptimizerState::reducedGradients(const ShardPiece& piece) const {
  return context().model->paddedGradients().data() + piece.begin;
}

float* ShardedOptimizerState::updatedParameters(const ShardPiece& piece) {
  return context().model->paddedParameters().data() + piece.begin;
}

Result<double> ShardedOptimizerState::gradientNorm() {
  const ShardingContext& c = context();
  TensorParallelGroup* tp = c.model->tensorParallel();
  const bool split = tp != nullptr && tp->size() > 1;
  if (split || c.model->layout().hasTiedCopy()) {
    // A TP shard: the split tensors' squares summed over the TP group as well, the
    // replicated ones (the same on every TP rank) once; a pipeline stage's tied copy not
    // at all (the first stage counts the original).
    double sums[2] = {0, 0};
    for (const ShardPiece& piece : c.pieces) {
      const SquaredSums part =
          squaredSumsBySplit(c.model->layout(), piece.begin,
                             std::span<const float>(reducedGradients(piece), piece.count));
      sums[0] += part.replicated;
      sums[1] += part.split;
    }
    CC_TRY(ccCall(ccAllReduce(sums, sums, 2, ccFloat64, ccSum, c.gradComm, nullptr), c.gradComm,
                  "dp: all-reduce of the gradient norm"));
    if (split) {
      tp->allReduceSum(std::span<double>(&sums[1], 1));
      CC_TRY(tp->status());
    }
    return std::sqrt(sums[0] + sums[1]);
  }
  double sumOfSquares = 0;
  for (const ShardPiece& piece : c.pieces) {
    const float* g = reducedGradients(piece);
    for (size_t i = 0; i < piece.count; ++i) sumOfSquares += static_cast<double>(g[i]) * g[i];
  }
  CC_TRY(ccCall(ccAllReduce(&sumOfSquares, &sumOfSquares, 1, ccFloat64, ccSum, c.gradComm, nullptr),
                c.gradComm, "dp: all-reduce of the gradient norm"));
  return std::sqrt(sumOfSquares);
}

Status ShardedOptimizerState::update(AdamW& optimizer, float lr, float gradientScale) {
  const ShardingContext& c = context();
  std::vector<AdamWPiece> pieces;
  for (const ShardPiece& piece : c.pieces) {
    pieces.push_back({updatedParameters(piece), reducedGradients(piece), piece.begin, piece.count,
                      piece.stateOffset});
  }
  optimizer.updatePieces(pieces, c.model->layout(), lr, gradientScale);
  return afterUpdate();
}

Status ShardedOptimizerState::afterUpdate() {
  const ShardingContext& c = context();
  float* p = c.model->paddedParameters().data();
  for (size_t index = 0; index < c.segments.size(); ++index) {
    const ShardPiece& piece = c.pieces[index];
    CC_TRY(ccCall(ccAllGather(p + piece.begin, p + c.segments[index].begin, piece.count, ccFloat32,
                              c.paramComm, c.paramStream),
                  c.paramComm, "dp: parameter all-gather of bucket " + std::to_string(index)));
  }
  return ccCall(ccStreamSynchronize(c.paramStream), c.paramComm,
                "dp: waiting for the parameter all-gathers");
}

Status ShardedOptimizerState::gatherMoments(const AdamW& optimizer, std::vector<float>& m,
                                            std::vector<float>& v) {
  const ShardingContext& c = context();
  m.assign(c.padded, 0.0f);
  v.assign(c.padded, 0.0f);
  for (size_t index = 0; index < c.segments.size(); ++index) {
    const ShardPiece& piece = c.pieces[index];
    const size_t begin = c.segments[index].begin;
    CC_TRY(ccCall(ccAllGather(optimizer.firstMoment().data() + piece.stateOffset, m.data() + begin,
                              piece.count, ccFloat32, c.paramComm, nullptr),
                  c.paramComm, "dp: all-gather of Adam's m"));
    CC_TRY(ccCall(ccAllGather(optimizer.secondMoment().data() + piece.stateOffset, v.data() + begin,
                              piece.count, ccFloat32, c.paramComm, nullptr),
                  c.paramComm, "dp: all-gather of Adam's v"));
  }
  const size_t total = c.model->layout().totalSize();
  m.resize(total);
  v.resize(total);
  return Status::ok();
}

std::vector<float> ShardedOptimizerState::shardOf(std::span<const float> full) const {
  std::vector<float> shard(optimizerStateSize(), 0.0f);
  for (const ShardPiece& piece : context().pieces) {
    for (size_t i = 0; i < piece.count && piece.begin + i < full.size(); ++i) {
      shard[piece.stateOffset + i] = full[piece.begin + i];
    }
  }
  return shard;
}

}  // namespace cc::parallel
