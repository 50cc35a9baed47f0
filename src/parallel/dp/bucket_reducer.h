// The seam where a gradient bucket meets the wire. Data parallelism hands each finished
// bucket to a BucketReducer, which queues the average over the DP group on the gradient
// stream: all-reduced in place (no sharding) or reduce-scattered into this rank's shard
// (ZeRO). The plain reducer sends float32 with ccAvg; a compressing one (fp16/bf16,
// 1-bit with error feedback, PowerSGD) replaces it without touching data parallelism.
// PowerSGD needs whole matrices: with DataParallelOptions::alignBucketsToTensors every
// bucket is a run of whole tensors, listed in Bucket::tensors.
#pragma once

#include <cc/cc.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "core/status.h"
#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

struct Bucket {
  size_t index = 0;            // in launch order
  size_t begin = 0;            // its slice of the padded gradient buffer: [begin, begin + size)
  std::span<float> gradients;  // that slice
  // The layout's tensors lying wholly inside the bucket (all of its tensors when buckets
  // are aligned to tensors; otherwise a tensor may straddle two buckets and is not listed).
  std::span<const TensorSlice> tensors;
};

class BucketReducer {
 public:
  virtual ~BucketReducer() = default;
  // Queues bucket.gradients = the average of every rank's bucket.gradients.
  virtual Status allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) = 0;
  // Queues shard = this rank's 1/N of that average (shard.size() = bucket size / N).
  virtual Status reduceScatter(const Bucket& bucket, std::span<float> shard, ccComm_t comm,
                               ccStream_t stream) = 0;
  virtual std::string describe() const = 0;
};

// float32, ccAvg, what the wire carries is what backward produced.
class AveragingReducer final : public BucketReducer {
 public:
  Status allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) override;
  Status reduceScatter(const Bucket& bucket, std::span<float> shard, ccComm_t comm,
                       ccStream_t stream) override;
  std::string describe() const override { return "float32 average"; }
};

// Gradients that stay on their rank, after the first `averagedSteps` reductions of each
// bucket (the float32 average): local SGD (Lin et al. 2020, the seed's "update locally for
// K steps, then synchronise": the trainer averages the parameters every K steps) and 1-bit
// Adam after its warm-up (the optimizer averages the momentum instead). Under ZeRO there is
// no whole gradient to keep: refused.
class LocalReducer final : public BucketReducer {
 public:
  LocalReducer(int64_t averagedSteps, std::string what)
      : averagedSteps_(averagedSteps), what_(std::move(what)) {}
  Status allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) override {
    if (calls_[bucket.index]++ < averagedSteps_) return plain_.allReduce(bucket, comm, stream);
    return Status::ok();
  }
  Status reduceScatter(const Bucket&, std::span<float>, ccComm_t, ccStream_t) override {
    return invalidArgument("dp: " + what_ + " keeps each rank's whole gradient; it needs --zero 0");
  }
  std::string describe() const override { return "none (" + what_ + ")"; }

 private:
  int64_t averagedSteps_;
  std::string what_;
  AveragingReducer plain_;
  std::map<size_t, int64_t> calls_;
};

}  // namespace cc::parallel
