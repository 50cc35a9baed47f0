// ZeRO-3's parameter schedule: each rank keeps only its shard of the parameters; a layer
// unit (segments.h) is all-gathered into the model's full-size buffer just before it is
// needed and its pages are released right after, once in forward and again in backward.
// The next unit's gather is queued on the parameter stream before this layer computes,
// so it travels while the layer runs (prefetch). The embeddings and ln_f (small, and
// used at both ends of forward and backward) stay gathered for the whole micro-batch.
//
// Block l reads unit l+1 and the first < N elements of unit l+2 (units start rounded
// down to a multiple of N), so "block l is ready" means both are gathered.
#pragma once

#include <cc/cc.h>

#include <span>
#include <vector>

#include "core/status.h"
#include "parallel/dp/segments.h"
#include "parallel/model/gpt.h"

namespace cc::parallel {

class LayerGather {
 public:
  // units ascending (layerUnits); pieces[u] is this rank's piece of units[u], whose
  // values live at shard[pieces[u].stateOffset].
  LayerGather(Gpt<float>& model, std::vector<Segment> units, std::vector<ShardPiece> pieces,
              ccComm_t comm, ccStream_t stream);

  void setShard(std::span<const float> shard) { shard_ = shard; }

  Status beginMicroBatch();
  Status beforeBlockForward(int layer);
  Status afterBlockForward(int layer);
  Status beforeBlockBackward(int layer);
  Status afterBlockBackward(int layer);
  // Everything back to the shard only (end of a micro-batch, after an evaluation).
  Status releaseAll();
  // Every unit gathered (evaluation, checkpoint save), blocking.
  Status gatherAll();
  // Largest number of elements gathered at once (for the memory estimate).
  size_t peakResidentElements() const;

 private:
  enum class State { kReleased, kInFlight, kReady };
  Status gather(size_t unit);  // queue, if released
  Status ensure(size_t unit);  // gathered and arrived
  Status waitInFlight();
  Status release(size_t unit);
  size_t lastUnit() const { return units_.size() - 1; }

  Gpt<float>& model_;
  std::vector<Segment> units_;
  std::vector<ShardPiece> pieces_;
  std::vector<State> states_;
  std::span<const float> shard_;
  ccComm_t comm_;
  ccStream_t stream_;
};

}  // namespace cc::parallel
