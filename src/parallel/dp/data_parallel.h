// Data parallelism over one DP communicator (picotron's data_parallel.py). Every rank runs
// the whole model part on its own slice of the global batch; this class is the model's
// observer and moves the gradients: each segment of the gradient buffer (segments.h) is
// handed to the bucket reducer (bucket_reducer.h) on the gradient stream as soon as
// backward has finished it, while backward goes on with the layers below; the optimizer
// step waits for the stream. What a segment's reduction is, which part of the state this
// rank keeps, and how the parameters get back to every rank is the sharding strategy's
// (sharding.h: replicated, or a ZeRO stage from zero/), so nothing here branches on it.
//
// Only the last micro-batch of a step communicates (the others accumulate locally).
// Without overlap the same calls run, in the same order, after backward: the same bits.
//
// A strategy that moves parameters during forward and backward (ZeRO-3) gets a second
// communicator (split from the first) with a stream of its own, so its prefetches never
// queue behind gradient buckets; otherwise both kinds of traffic share one of each.
#pragma once

#include <cc/cc.h>

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/dp/bucket_reducer.h"
#include "parallel/dp/segments.h"
#include "parallel/dp/sharding.h"
#include "parallel/model/gpt.h"
#include "parallel/optim/adamw.h"

namespace cc::parallel {

struct DataParallelOptions {
  int zeroStage = 0;                      // 0, 1, 2 or 3 (zero/stages.h)
  size_t bucketBytes = size_t{25} << 20;  // gradient bucket size (stages 0-2)
  bool overlap = true;                    // reduce while backward runs
  // Register the model's gradient and parameter buffers with the DP communicators when
  // they come from ccMemAlloc (Gpt's `shareable`): the ranks of a host then read each
  // other's buckets in place instead of through cc's staging.
  bool registerBuffers = true;
  // Buckets of whole tensors (stage 0 only), for a reducer that needs matrices.
  bool alignBucketsToTensors = false;
};

class DataParallel final : public GptObserver {
 public:
  // The model must have been built with paddedBufferSize(layout, world) elements and
  // initialised identically on every rank. Collective over dpComm (kept by the caller).
  // reducer: null for the plain float32 average.
  static Result<std::unique_ptr<DataParallel>> create(
      ccComm_t dpComm, Gpt<float>& model, const DataParallelOptions& options,
      std::unique_ptr<ShardingStrategy> strategy, std::unique_ptr<BucketReducer> reducer = nullptr);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return context_.rank; }
  int world() const { return context_.world; }
  const DataParallelOptions& options() const { return options_; }
  int zeroStage() const { return strategy_->stage(); }
  // Elements of Adam's m (and of v) this rank keeps.
  size_t optimizerStateSize() const { return strategy_->optimizerStateSize(); }
  MemoryEstimate memoryEstimate() const { return strategy_->memoryEstimate(); }
  std::string describe() const;

  // One optimizer step: beginStep, then per micro-batch beginMicroBatch / forward /
  // backward / endMicroBatch, then finishGradients and update.
  Status beginStep();
  Status beginMicroBatch(bool communicates);
  Status endMicroBatch();
  // Waits for the reductions; returns the global norm of the averaged gradient.
  Result<double> finishGradients();
  // How long finishGradients waited for the stream: the communication backward did not
  // hide (all of it with overlap off).
  double gradientWaitSeconds() const { return waitSeconds_; }
  // AdamW on this rank's part, then the parameters made whole again where needed.
  Status update(AdamW& optimizer, float lr, float gradientScale);
  // Average of a per-rank scalar over the DP ranks (the logged loss).
  Result<double> average(double value);
  // Bytes this rank has sent and received for data parallelism so far (the collectives
  // on its gradient and parameter communicators; ccCommGetTraffic), for the log and the
  // byte-count tests.
  struct Traffic {
    uint64_t sent = 0;
    uint64_t received = 0;
  };
  Result<Traffic> traffic() const;

  // Every parameter in the model's buffer (stage 3 gathers, blocking) / back to shards.
  Status gatherParameters() { return strategy_->gatherParameters(); }
  Status releaseParameters() { return strategy_->releaseParameters(); }
  // The full (layout-sized) Adam moments on every rank, from the shards.
  Status gatherMoments(const AdamW& optimizer, std::vector<float>& m, std::vector<float>& v) {
    return strategy_->gatherMoments(optimizer, m, v);
  }
  // After the model's buffer has been filled with full parameters (checkpoint load or
  // initialisation): keep this rank's shard, release the rest (stage 3).
  void shardParameters() { strategy_->shardParameters(); }
  // This rank's part of full moments, in optimizer-state order.
  std::vector<float> shardOf(std::span<const float> full) const { return strategy_->shardOf(full); }
  Status barrier();

  void beforeBlockForward(int layer) override;
  void afterBlockForward(int layer) override;
  void beforeBlockBackward(int layer) override;
  void afterBlockBackward(int layer) override;
  void gradientsFinalFrom(size_t offset) override;

 private:
  DataParallel(Gpt<float>& model, const DataParallelOptions& options,
               std::unique_ptr<ShardingStrategy> strategy, std::unique_ptr<BucketReducer> reducer);
  void releaseCompletedGradients(bool all);
  void record(const Status& status);
  bool ownParameterChannel() const { return context_.paramComm != context_.gradComm; }
  Status registerBuffers();

  Gpt<float>& model_;
  DataParallelOptions options_;
  std::unique_ptr<ShardingStrategy> strategy_;
  std::unique_ptr<BucketReducer> reducer_;
  ShardingContext context_;
  size_t launched_ = 0;        // segments queued this step
  size_t released_ = 0;        // of them, gradients given back (strategies that release)
  bool communicates_ = false;  // this micro-batch reduces
  bool inMicroBatch_ = false;
  std::vector<std::pair<ccComm_t, void*>> registrations_;  // ccCommRegister's handles
  Status error_;                                           // first failure inside a hook
  double waitSeconds_ = 0;
};

}  // namespace cc::parallel
