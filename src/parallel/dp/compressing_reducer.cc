#include "parallel/dp/compressing_reducer.h"

#include <algorithm>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {
namespace {

ccCompressKind_t kindOf(Compression kind) {
  switch (kind) {
    case Compression::kFp16:
      return ccCompressFp16;
    case Compression::kBf16:
      return ccCompressBf16;
    case Compression::kOneBit:
      return ccCompressOneBit;
    default:
      return ccCompressPowerSgd;
  }
}

// The bucket as a row of tensors: its tensors' shapes, with the stretches between and
// after them (padding, or tensors cut by the bucket's edges) as vectors.
void shapesOf(const Bucket& bucket, std::vector<size_t>& rows, std::vector<size_t>& cols) {
  std::vector<const TensorSlice*> tensors;
  for (const TensorSlice& tensor : bucket.tensors) tensors.push_back(&tensor);
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorSlice* a, const TensorSlice* b) { return a->offset < b->offset; });
  size_t at = bucket.begin;
  const size_t end = bucket.begin + bucket.gradients.size();
  auto vector = [&](size_t count) {
    if (count == 0) return;
    rows.push_back(1);
    cols.push_back(count);
  };
  for (const TensorSlice* tensor : tensors) {
    if (tensor->offset < at || tensor->offset + tensor->size > end) continue;
    vector(tensor->offset - at);
    if (tensor->shape.size() == 2) {
      rows.push_back(tensor->shape[0]);
      cols.push_back(tensor->shape[1]);
    } else {
      vector(tensor->size);
    }
    at = tensor->offset + tensor->size;
  }
  vector(end - at);
}

}  // namespace

Result<Compression> parseCompression(const std::string& name) {
  for (Compression kind : {Compression::kNone, Compression::kFp16, Compression::kBf16,
                           Compression::kOneBit, Compression::kPowerSgd}) {
    if (name == compressionName(kind)) return kind;
  }
  return invalidArgument("compression '" + name + "' is not none, fp16, bf16, onebit or powersgd");
}

const char* compressionName(Compression kind) {
  switch (kind) {
    case Compression::kNone:
      return "none";
    case Compression::kFp16:
      return "fp16";
    case Compression::kBf16:
      return "bf16";
    case Compression::kOneBit:
      return "onebit";
    case Compression::kPowerSgd:
      return "powersgd";
  }
  return "?";
}

Status compressionRefusal(const CompressionOptions& options, int zeroStage) {
  if (zeroStage == 0 || options.kind == Compression::kNone || options.kind == Compression::kFp16 ||
      options.kind == Compression::kBf16) {
    return Status::ok();
  }
  return invalidArgument(std::string("--compress ") + compressionName(options.kind) +
                         " with ZeRO-" + std::to_string(zeroStage) +
                         ": it needs the whole average of each bucket on every rank (its error "
                         "feedback keeps a residual for every element of the bucket), where ZeRO "
                         "reduce-scatters the buckets into shards; use --zero 0, or fp16/bf16");
}

CompressingReducer::CompressingReducer(const CompressionOptions& options) : options_(options) {}

CompressingReducer::~CompressingReducer() {
  for (auto& [index, compressor] : compressors_) (void)ccCompressorDestroy(compressor);
}

std::string CompressingReducer::describe() const {
  std::string text = std::string(compressionName(options_.kind)) + " compressed average";
  if (options_.kind == Compression::kPowerSgd)
    text += " (rank " + std::to_string(options_.rank) + ")";
  if (options_.startStep > 0) {
    text += ", float32 for the first " + std::to_string(options_.startStep) + " steps";
  }
  return text;
}

Result<ccCompressor_t> CompressingReducer::compressorFor(const Bucket& bucket, ccComm_t comm) {
  ccCompressor_t& compressor = compressors_[bucket.index];
  if (compressor == nullptr) {
    std::vector<size_t> rows, cols;
    shapesOf(bucket, rows, cols);
    const ccCompressConfig_t config{kindOf(options_.kind), options_.rank, 0x5eed, 0};
    CC_TRY(ccCall(
        ccCompressorCreate(comm, &config, rows.size(), rows.data(), cols.data(), &compressor), comm,
        "dp: compressor of bucket " + std::to_string(bucket.index)));
  }
  return compressor;
}

Status CompressingReducer::allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) {
  if (calls_[bucket.index]++ < options_.startStep) return plain_.allReduce(bucket, comm, stream);
  CC_ASSIGN_OR_RETURN(ccCompressor_t compressor, compressorFor(bucket, comm));
  return ccCall(ccCompressedAllReduce(compressor, bucket.gradients.data(), stream), comm,
                std::string("dp: ") + compressionName(options_.kind) + " all-reduce of bucket " +
                    std::to_string(bucket.index));
}

Status CompressingReducer::reduceScatter(const Bucket& bucket, std::span<float> shard,
                                         ccComm_t comm, ccStream_t stream) {
  if (calls_[bucket.index]++ < options_.startStep) {
    return plain_.reduceScatter(bucket, shard, comm, stream);
  }
  if (options_.kind != Compression::kFp16 && options_.kind != Compression::kBf16)
    return compressionRefusal(options_, 1);
  CC_ASSIGN_OR_RETURN(ccCompressor_t compressor, compressorFor(bucket, comm));
  return ccCall(
      ccCompressedReduceScatter(compressor, bucket.gradients.data(), shard.data(), stream), comm,
      std::string("dp: ") + compressionName(options_.kind) + " reduce-scatter of bucket " +
          std::to_string(bucket.index));
}

}  // namespace cc::parallel
