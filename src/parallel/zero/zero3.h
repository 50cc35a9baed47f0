// ZeRO stage 3: stage 2, and the parameters sharded too. Each rank keeps only its shard of
// the parameters; the segments are layer units (segments.h), and layer_gather.h gathers a
// unit into the model's full-size buffer just before a block runs and releases it after,
// prefetching the next. AdamW updates the parameter shard in place, so nothing is
// gathered after the step: the next forward gathers what it needs. Parameter gathers run
// on a communicator and stream of their own, beside the gradient buckets.
#pragma once

#include <memory>

#include "parallel/zero/layer_gather.h"
#include "parallel/zero/zero2.h"

namespace cc::parallel {

class ShardedParameters final : public ShardedGradients {
 public:
  int stage() const override { return 3; }
  const char* segmentKind() const override { return "layer units"; }
  std::vector<Segment> segments(const Gpt<float>& model, size_t padded, int world,
                                size_t bucketElements) const override;
  bool ownParameterChannel() const override { return true; }
  Status attach(const ShardingContext& context) override;
  MemoryEstimate memoryEstimate() const override;

  void shardParameters() override;
  Status gatherParameters() override { return layers_->gatherAll(); }
  Status releaseParameters() override { return layers_->releaseAll(); }

  Status beginMicroBatch() override { return layers_->beginMicroBatch(); }
  Status endMicroBatch() override { return layers_->releaseAll(); }
  Status beforeBlockForward(int layer) override { return layers_->beforeBlockForward(layer); }
  Status afterBlockForward(int layer) override { return layers_->afterBlockForward(layer); }
  Status beforeBlockBackward(int layer) override { return layers_->beforeBlockBackward(layer); }
  Status afterBlockBackward(int layer) override { return layers_->afterBlockBackward(layer); }

 protected:
  float* updatedParameters(const ShardPiece& piece) override;
  Status afterUpdate() override { return Status::ok(); }

 private:
  std::vector<float> parameterShard_;
  std::unique_ptr<LayerGather> layers_;
};

}  // namespace cc::parallel
