// A gradient bucket reducer over cc's compressed all-reduce (include/cc/compress.h): fp16,
// bf16, 1-bit with error feedback or PowerSGD, in place of the float32 average. Each bucket
// has its own compressor (the error-feedback residuals and PowerSGD's Qs are per bucket),
// made at the bucket's first reduction from its tensors' shapes (a weight [in, out] is an
// in x out matrix; biases, LayerNorms and any padding are vectors). A bucket's first
// `startStep` reductions are the plain float32 average (the uncompressed warm-up of torch's
// PowerSGD hook and of 1-bit Adam), counted by the reducer (a resumed run warms up again).
//
// ZeRO reduce-scatters its buckets: fp16 and bf16 do that in 16 bits, queued on the
// gradient stream like the all-reduce (ccCompressedReduceScatter); 1-bit and PowerSGD
// need the whole average on every rank (their error feedback is per element of the whole
// bucket) and refuse, naming why (compressionRefusal says so before anything runs).
#pragma once

#include <cc/compress.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/dp/bucket_reducer.h"

namespace cc::parallel {

enum class Compression { kNone, kFp16, kBf16, kOneBit, kPowerSgd };

// "none", "fp16", "bf16", "onebit", "powersgd"; anything else is an error listing them.
Result<Compression> parseCompression(const std::string& name);
const char* compressionName(Compression kind);

struct CompressionOptions {
  Compression kind = Compression::kNone;
  int rank = 4;           // PowerSGD's
  int64_t startStep = 0;  // uncompressed reductions per bucket first
};

// Why `kind` cannot run under ZeRO stage `zeroStage`, or ok.
Status compressionRefusal(const CompressionOptions& options, int zeroStage);

class CompressingReducer final : public BucketReducer {
 public:
  explicit CompressingReducer(const CompressionOptions& options);
  ~CompressingReducer() override;
  Status allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) override;
  Status reduceScatter(const Bucket& bucket, std::span<float> shard, ccComm_t comm,
                       ccStream_t stream) override;
  std::string describe() const override;

 private:
  // The bucket's compressor, made at its first compressed reduction.
  Result<ccCompressor_t> compressorFor(const Bucket& bucket, ccComm_t comm);
  CompressionOptions options_;
  AveragingReducer plain_;
  std::map<size_t, ccCompressor_t> compressors_;  // per bucket index
  std::map<size_t, int64_t> calls_;               // reductions per bucket index
};

}  // namespace cc::parallel
