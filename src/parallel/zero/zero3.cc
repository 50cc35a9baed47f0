#include "parallel/zero/zero3.h"

#include <cstring>

namespace cc::parallel {

std::vector<Segment> ShardedParameters::segments(const Gpt<float>& model, size_t padded, int world,
                                                 size_t /*bucketElements*/) const {
  // Backward finishes the units from the last to the first.
  std::vector<Segment> units = layerUnits(model.layout(), padded, world);
  return {units.rbegin(), units.rend()};
}

Status ShardedParameters::attach(const ShardingContext& context) {
  const ParameterLayout& layout = context.model->layout();
  if (!layout.hasEmbeddings() || !layout.hasHead()) {
    // The layer units and the gather schedule assume the embeddings, every block and ln_f.
    return invalidArgument(
        "zero-3: the model part holds layers [" + std::to_string(layout.firstLayer()) + ", " +
        std::to_string(layout.endLayer()) + "); ZeRO-3 over a pipeline stage is not supported yet");
  }
  CC_TRY(ShardedGradients::attach(context));
  std::vector<Segment> units(context.segments.rbegin(), context.segments.rend());
  std::vector<ShardPiece> unitPieces(context.pieces.rbegin(), context.pieces.rend());
  parameterShard_.resize(shardSize());
  layers_ = std::make_unique<LayerGather>(*context.model, std::move(units), std::move(unitPieces),
                                          context.paramComm, context.paramStream);
  layers_->setShard(parameterShard_);
  shardParameters();
  return Status::ok();
}

MemoryEstimate ShardedParameters::memoryEstimate() const {
  const double shard = 4.0 * static_cast<double>(shardSize());
  const double gathered = 4.0 * static_cast<double>(layers_->peakResidentElements());
  return {shard + gathered, shard + gradientsInFlight(), 2.0 * shard};
}

void ShardedParameters::shardParameters() {
  const ShardingContext& c = context();
  const float* p = c.model->paddedParameters().data();
  for (const ShardPiece& piece : c.pieces) {
    std::memcpy(parameterShard_.data() + piece.stateOffset, p + piece.begin,
                piece.count * sizeof(float));
  }
  c.model->releaseParameters(0, c.padded);
}

float* ShardedParameters::updatedParameters(const ShardPiece& piece) {
  return parameterShard_.data() + piece.stateOffset;
}

}  // namespace cc::parallel
