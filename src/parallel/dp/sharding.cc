#include "parallel/dp/sharding.h"

#include <algorithm>

namespace cc::parallel {

std::vector<Segment> ShardingStrategy::segments(const Gpt<float>& /*model*/, size_t padded,
                                                int world, size_t bucketElements) const {
  return gradientBuckets(padded, bucketElements, world);
}

Bucket ShardingStrategy::bucket(size_t index) const {
  const ShardingContext& c = context();
  const Segment& segment = c.segments[index];
  const std::vector<TensorSlice>& tensors = c.model->layout().tensors();
  // The tensors wholly inside [begin, end): a contiguous run, since the layout is ordered.
  auto first = std::find_if(tensors.begin(), tensors.end(),
                            [&](const TensorSlice& t) { return t.offset >= segment.begin; });
  auto last = std::find_if(first, tensors.end(),
                           [&](const TensorSlice& t) { return t.offset + t.size > segment.end; });
  Bucket bucket;
  bucket.index = index;
  bucket.begin = segment.begin;
  bucket.gradients = c.model->paddedGradients().subspan(segment.begin, segment.size());
  bucket.tensors = std::span<const TensorSlice>(tensors.data() + (first - tensors.begin()),
                                                static_cast<size_t>(last - first));
  return bucket;
}

}  // namespace cc::parallel
