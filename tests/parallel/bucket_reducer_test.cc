// The gradient-reduction seam (dp/bucket_reducer.h): data parallelism hands every bucket
// to the reducer it was given, once per step, covering the whole padded buffer; with
// buckets aligned to tensors each bucket is a run of whole tensors and says which; a
// sharding stage refuses aligned buckets with a message naming the stage.
#include "parallel/dp/bucket_reducer.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "parallel/dp/data_parallel.h"
#include "parallel/model/initialize.h"
#include "parallel/zero/stages.h"
#include "support/multi_rank.h"

namespace cc::parallel {
namespace {

using cc::testing::RankContext;
using cc::testing::runRanks;

// Averages as the plain reducer does, and remembers what it was handed.
class RecordingReducer final : public BucketReducer {
 public:
  struct Seen {
    size_t begin, size, tensors, tensorElements;
  };
  explicit RecordingReducer(std::vector<Seen>* seen) : seen_(seen) {}
  Status allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) override {
    record(bucket);
    return plain_.allReduce(bucket, comm, stream);
  }
  Status reduceScatter(const Bucket& bucket, std::span<float> shard, ccComm_t comm,
                       ccStream_t stream) override {
    record(bucket);
    return plain_.reduceScatter(bucket, shard, comm, stream);
  }
  std::string describe() const override { return "recording"; }

 private:
  void record(const Bucket& bucket) {
    size_t elements = 0;
    for (const TensorSlice& tensor : bucket.tensors) elements += tensor.size;
    seen_->push_back({bucket.begin, bucket.gradients.size(), bucket.tensors.size(), elements});
  }
  std::vector<Seen>* seen_;
  AveragingReducer plain_;
};

GptConfig smallConfig() {
  GptConfig config;
  config.vocab = 200;
  config.seq = 16;
  config.layers = 2;
  config.heads = 2;
  config.width = 32;
  return config;
}

TEST(BucketReducer, DataParallelHandsItEveryBucketOnce) {
  for (bool aligned : {false, true}) {
    runRanks(2, [aligned](RankContext& context) {
      ccComm_t comm = context.initComm();
      {
        const GptConfig config = smallConfig();
        const ParameterLayout layout(config);
        const size_t padded = paddedBufferSize(layout.totalSize(), 2);
        Gpt<float> model(config, 1, padded);
        initializeParameters(model.parameters(), config, layout, 3);
        DataParallelOptions options;
        options.bucketBytes = 16 << 10;
        options.alignBucketsToTensors = aligned;
        auto strategy = makeShardingStrategy(options);
        ASSERT_TRUE(strategy.isOk()) << strategy.status().message();
        std::vector<RecordingReducer::Seen> seen;
        auto dp = DataParallel::create(comm, model, options, std::move(strategy).value(),
                                       std::make_unique<RecordingReducer>(&seen));
        ASSERT_TRUE(dp.isOk()) << dp.status().message();
        std::vector<int32_t> tokens(static_cast<size_t>(config.seq), 7);
        ASSERT_TRUE(dp.value()->beginStep().isOk());
        ASSERT_TRUE(dp.value()->beginMicroBatch(true).isOk());
        model.forward(tokens, tokens, 1);
        model.backward(1.0f);
        ASSERT_TRUE(dp.value()->endMicroBatch().isOk());
        ASSERT_TRUE(dp.value()->finishGradients().isOk());
        ASSERT_GT(seen.size(), 2u) << "several buckets on this model";
        std::sort(seen.begin(), seen.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
        size_t at = 0;
        for (const auto& bucket : seen) {
          EXPECT_EQ(bucket.begin, at) << "each bucket once, tiling the buffer";
          at += bucket.size;
          if (aligned) {
            // Whole tensors, and the padding past the layout in the last bucket only.
            const size_t padding =
                bucket.begin + bucket.size == padded ? padded - layout.totalSize() : 0;
            EXPECT_EQ(bucket.tensorElements + padding, bucket.size);
            EXPECT_GT(bucket.tensors, 0u);
          }
        }
        EXPECT_EQ(at, padded);
        EXPECT_NE(dp.value()->describe().find("reducer recording"), std::string::npos);
      }
      ccCommDestroy(comm);
    });
  }
}

TEST(BucketReducer, ShardingStagesRefuseTensorAlignedBuckets) {
  DataParallelOptions options;
  options.alignBucketsToTensors = true;
  for (int stage : {1, 2, 3}) {
    options.zeroStage = stage;
    auto strategy = makeShardingStrategy(options);
    ASSERT_FALSE(strategy.isOk());
    EXPECT_EQ(strategy.status().code(), ccInvalidArgument);
    EXPECT_NE(strategy.status().message().find("zero stage 0, not " + std::to_string(stage)),
              std::string::npos)
        << strategy.status().message();
  }
  options.alignBucketsToTensors = false;
  options.zeroStage = 4;
  EXPECT_NE(makeShardingStrategy(options).status().message().find("zero stage 4"),
            std::string::npos);
}

}  // namespace
}  // namespace cc::parallel
