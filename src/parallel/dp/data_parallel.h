// Data parallelism with ZeRO's three stages over one DP communicator (picotron's
// data_parallel.py, with ZeRO folded in as DeepSpeed does). Every rank runs the whole
// model on its own slice of the global batch; this class is the model's observer and
// moves the gradients and parameters:
//
// - stage 0: each gradient bucket (segments.h) is all-reduced (average) on the gradient
//   stream as soon as backward has finished it, while backward goes on with the layers
//   below; the optimizer step waits for the stream.
// - stage 1: the buckets are reduce-scattered in place instead; each rank updates only
//   its pieces (so it keeps only their Adam moments) and the parameters are all-gathered.
// - stage 2: as 1, but the reduce-scatter lands in a compact gradient shard and the
//   bucket's full-size gradient pages are released as soon as it has completed.
// - stage 3: as 2, and the parameters are sharded too (layer_gather.h).
//
// Only the last micro-batch of a step communicates (the others accumulate locally).
// Without overlap the same calls run, in the same order, after backward: the same bits.
//
// Under ZeRO-3 the gradient and parameter traffic use two communicators (the second split
// from the first) with a stream each, so the prefetches never queue behind gradient
// buckets; stages 0-2 use one of each.
#pragma once

#include <cc/cc.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/dp/segments.h"
#include "parallel/model/gpt.h"
#include "parallel/optim/adamw.h"
#include "parallel/zero/layer_gather.h"

namespace cc::parallel {

struct DataParallelOptions {
  int zeroStage = 0;                      // 0, 1, 2 or 3
  size_t bucketBytes = size_t{25} << 20;  // gradient bucket size (stages 0-2)
  bool overlap = true;                    // reduce while backward runs
};

// Bytes per rank by ZeRO's accounting (fp32 parameters, gradients, Adam m and v), with
// the transient full-size pieces stages 2 and 3 hold while a layer is in use.
struct MemoryEstimate {
  double parameters = 0, gradients = 0, optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};

class DataParallel final : public GptObserver {
 public:
  // The model must have been built with paddedBufferSize(layout, world) elements and
  // initialised identically on every rank. Collective over dpComm (kept by the caller).
  static Result<std::unique_ptr<DataParallel>> create(ccComm_t dpComm, Gpt<float>& model,
                                                      const DataParallelOptions& options);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  const DataParallelOptions& options() const { return options_; }
  // Elements of Adam's m (and of v) this rank keeps.
  size_t optimizerStateSize() const;
  MemoryEstimate memoryEstimate() const;
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
  // AdamW on this rank's part, then the parameters made whole again (stages 1-2).
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
  Status gatherParameters();
  Status releaseParameters();
  // The full (layout-sized) Adam moments on every rank, from the shards.
  Status gatherMoments(const AdamW& optimizer, std::vector<float>& m, std::vector<float>& v);
  // After the model's buffer has been filled with full parameters (checkpoint load or
  // initialisation): keep this rank's shard, release the rest (stage 3).
  void shardParameters();
  // This rank's part of full moments, in optimizer-state order.
  std::vector<float> shardOf(std::span<const float> full) const;
  Status barrier();

  void beforeBlockForward(int layer) override;
  void afterBlockForward(int layer) override;
  void beforeBlockBackward(int layer) override;
  void afterBlockBackward(int layer) override;
  void gradientsFinalFrom(size_t offset) override;

 private:
  DataParallel(ccComm_t dpComm, Gpt<float>& model, const DataParallelOptions& options);
  Status launch(size_t segment);
  void releaseCompletedGradients(bool all);
  void record(const Status& status);
  std::vector<AdamWPiece> optimizerPieces();

  Gpt<float>& model_;
  DataParallelOptions options_;
  ccComm_t gradComm_;
  ccComm_t paramComm_ = nullptr;
  ccStream_t gradStream_ = nullptr;
  ccStream_t paramStream_ = nullptr;
  int rank_ = 0;
  int world_ = 1;
  size_t padded_ = 0;
  std::vector<Segment> segments_;      // gradient segments, in launch order
  std::vector<ShardPiece> pieces_;     // this rank's piece of each
  std::vector<float> gradientShard_;   // stages 2-3
  std::vector<float> parameterShard_;  // stage 3
  std::unique_ptr<LayerGather> layers_;
  size_t launched_ = 0;        // segments queued this step
  size_t released_ = 0;        // of them, gradients given back (stages 2-3)
  bool communicates_ = false;  // this micro-batch reduces
  bool inMicroBatch_ = false;
  Status error_;  // first failure inside a hook
  double waitSeconds_ = 0;
};

}  // namespace cc::parallel
