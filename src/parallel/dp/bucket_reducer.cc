#include "parallel/dp/bucket_reducer.h"

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {
namespace {

std::string describeBucket(const char* operation, const Bucket& bucket) {
  return "dp: gradient " + std::string(operation) + " of bucket " + std::to_string(bucket.index) +
         " [" + std::to_string(bucket.begin) + ", " +
         std::to_string(bucket.begin + bucket.gradients.size()) + ")";
}

}  // namespace

Status AveragingReducer::allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) {
  float* values = bucket.gradients.data();
  return ccCall(
      ccAllReduce(values, values, bucket.gradients.size(), ccFloat32, ccAvg, comm, stream), comm,
      describeBucket("all-reduce", bucket));
}

Status AveragingReducer::reduceScatter(const Bucket& bucket, std::span<float> shard, ccComm_t comm,
                                       ccStream_t stream) {
  return ccCall(ccReduceScatter(bucket.gradients.data(), shard.data(), shard.size(), ccFloat32,
                                ccAvg, comm, stream),
                comm, describeBucket("reduce-scatter", bucket));
}

}  // namespace cc::parallel
