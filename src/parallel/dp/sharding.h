// What a ZeRO stage decides, behind one interface, so that data parallelism
// (data_parallel.h) holds no branch on the stage. DataParallel owns the communicators,
// the streams and the bucket launching; a ShardingStrategy says how the buffer is cut into
// segments, what a finished segment's reduction is, which part of the state this rank
// keeps, and how the optimizer step and the parameters get back to every rank.
//
// - Replicated (dp/replicated.h): stage 0, every rank keeps everything; all-reduce.
// - ZeRO-1, 2, 3 (zero/): the optimizer state, then the gradients, then the parameters
//   sharded; zero/stages.h makes the strategy for a stage number.
#pragma once

#include <cc/cc.h>

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/dp/bucket_reducer.h"
#include "parallel/dp/segments.h"
#include "parallel/model/gpt.h"
#include "parallel/optim/adamw.h"

namespace cc::parallel {

// Bytes per rank by ZeRO's accounting (fp32 parameters, gradients, Adam m and v), with
// the transient full-size pieces stages 2 and 3 hold while a layer is in use.
struct MemoryEstimate {
  double parameters = 0, gradients = 0, optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};

// What DataParallel shares with its strategy; filled before ShardingStrategy::attach.
struct ShardingContext {
  Gpt<float>* model = nullptr;
  int rank = 0;
  int world = 1;
  size_t padded = 0;  // the model's buffer, padded to a multiple of world
  ccComm_t gradComm = nullptr;
  ccComm_t paramComm = nullptr;  // gradComm unless ownParameterChannel()
  ccStream_t gradStream = nullptr;
  ccStream_t paramStream = nullptr;
  BucketReducer* reducer = nullptr;
  std::vector<Segment> segments;   // in launch order (the order backward finishes them)
  std::vector<ShardPiece> pieces;  // this rank's piece of each
};

class ShardingStrategy {
 public:
  virtual ~ShardingStrategy() = default;
  virtual int stage() const = 0;
  // The segments' name in messages ("gradient buckets").
  virtual const char* segmentKind() const { return "gradient buckets"; }
  // Cuts the padded buffer, in launch order; bucketElements from the options.
  virtual std::vector<Segment> segments(const Gpt<float>& model, size_t padded, int world,
                                        size_t bucketElements) const;
  // Parameter traffic during forward and backward needs its own communicator and stream.
  virtual bool ownParameterChannel() const { return false; }
  // Called once, after the context is complete.
  virtual Status attach(const ShardingContext& context) {
    context_ = &context;
    return Status::ok();
  }

  // Elements of Adam's m (and of v) this rank keeps.
  virtual size_t optimizerStateSize() const = 0;
  virtual MemoryEstimate memoryEstimate() const = 0;

  // Gradients zero (or out of memory until backward writes) at the start of a step.
  virtual void clearGradients() = 0;
  // Queues the reduction of segment `index`, once backward has finished it.
  virtual Status launchReduction(size_t index) = 0;
  // Whether a segment's full-size gradients are given back once its reduction completed
  // (then backward waits when more than a few are in flight).
  virtual bool releasesGradients() const { return false; }
  // The global norm of the averaged gradient, after the reductions (collective).
  virtual Result<double> gradientNorm() = 0;
  // AdamW on this rank's part, then the parameters made whole again where needed.
  virtual Status update(AdamW& optimizer, float lr, float gradientScale) = 0;

  // Full (layout-sized) Adam moments on every rank, from this rank's state (collective).
  virtual Status gatherMoments(const AdamW& optimizer, std::vector<float>& m,
                               std::vector<float>& v) = 0;
  // This rank's part of full moments, in optimizer-state order.
  virtual std::vector<float> shardOf(std::span<const float> full) const = 0;
  // After the model's buffer was filled with full parameters: keep what this rank keeps.
  virtual void shardParameters() {}
  // Every parameter in the model's buffer (blocking) / back to what this rank keeps.
  virtual Status gatherParameters() { return Status::ok(); }
  virtual Status releaseParameters() { return Status::ok(); }

  // The model's block hooks during a step's micro-batches (ZeRO-3's layer gathers).
  virtual Status beginMicroBatch() { return Status::ok(); }
  virtual Status endMicroBatch() { return Status::ok(); }
  virtual Status beforeBlockForward(int /*layer*/) { return Status::ok(); }
  virtual Status afterBlockForward(int /*layer*/) { return Status::ok(); }
  virtual Status beforeBlockBackward(int /*layer*/) { return Status::ok(); }
  virtual Status afterBlockBackward(int /*layer*/) { return Status::ok(); }

 protected:
  const ShardingContext& context() const { return *context_; }
  Bucket bucket(size_t index) const;

 private:
  const ShardingContext* context_ = nullptr;
};

}  // namespace cc::parallel
