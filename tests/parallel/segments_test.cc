// How DP and ZeRO cut the flat buffer (dp/segments.h): buckets and layer units tile the
// padded buffer in whole shards, and tensor-aligned buckets are runs of whole tensors.
#include "parallel/dp/segments.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "parallel/model/parameter_layout.h"

namespace cc::parallel {
namespace {

TEST(Segments, TileThePaddedBufferInWholeShards) {
  GptConfig config;  // the DP tests' model: vocab 200 padded to 256, an odd layout size
  config.layers = 2;
  config.heads = 2;
  config.width = 64;
  config.seq = 32;
  config.vocab = 200;
  const ParameterLayout layout(config);
  for (int world : {1, 2, 3, 4, 7}) {
    const size_t padded = paddedBufferSize(layout.totalSize(), world);
    EXPECT_EQ(padded % static_cast<size_t>(world), 0u);
    EXPECT_LT(padded - layout.totalSize(), static_cast<size_t>(world));
    for (const std::vector<Segment>& segments :
         {gradientBuckets(padded, 10000, world), layerUnits(layout, padded, world)}) {
      // Gradient buckets run downwards, units upwards: sort to check the tiling.
      std::vector<Segment> sorted = segments;
      std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
      size_t at = 0;
      for (const Segment& segment : sorted) {
        EXPECT_EQ(segment.begin, at);
        EXPECT_EQ(segment.begin % static_cast<size_t>(world), 0u);
        EXPECT_EQ(segment.size() % static_cast<size_t>(world), 0u);
        at = segment.end;
      }
      EXPECT_EQ(at, padded);
      size_t owned = 0;
      for (int rank = 0; rank < world; ++rank) {
        for (const ShardPiece& piece : shardPieces(segments, rank, world)) owned += piece.count;
      }
      EXPECT_EQ(owned, padded);
    }
    const std::vector<Segment> buckets = gradientBuckets(padded, 10000, world);
    EXPECT_EQ(buckets.front().end, padded) << "the first bucket is the one backward finishes first";
  }
}

TEST(Segments, TensorAlignedBucketsAreRunsOfWholeTensors) {
  GptConfig config;
  config.layers = 3;
  config.width = 64;
  config.heads = 2;
  const ParameterLayout layout(config);
  const size_t padded = paddedBufferSize(layout.totalSize(), 3);
  for (size_t bucketElements : {size_t{1}, size_t{10000}, size_t{1} << 30}) {
    const std::vector<Segment> buckets = tensorAlignedBuckets(layout, padded, bucketElements);
    ASSERT_FALSE(buckets.empty());
    EXPECT_EQ(buckets.front().end, padded) << "the first bucket holds the padding";
    EXPECT_EQ(buckets.back().begin, 0u);
    for (size_t i = 0; i + 1 < buckets.size(); ++i) {
      EXPECT_EQ(buckets[i].begin, buckets[i + 1].end) << "contiguous, highest offsets first";
      EXPECT_GE(buckets[i].size(), bucketElements) << "only the lowest bucket may be short";
    }
    for (const Segment& bucket : buckets) {
      bool startsATensor = false;
      for (const TensorSlice& tensor : layout.tensors()) {
        startsATensor |= tensor.offset == bucket.begin;
        const bool straddles =
            tensor.offset < bucket.begin && tensor.offset + tensor.size > bucket.begin;
        EXPECT_FALSE(straddles) << tensor.name << " straddles a bucket boundary";
      }
      EXPECT_TRUE(startsATensor);
    }
    if (bucketElements == 1) {
      EXPECT_EQ(buckets.size(), layout.tensors().size());
    }
    if (bucketElements == (size_t{1} << 30)) {
      EXPECT_EQ(buckets.size(), 1u);
    }
  }
}

}  // namespace
}  // namespace cc::parallel
