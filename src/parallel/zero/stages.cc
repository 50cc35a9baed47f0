#include "parallel/zero/stages.h"

#include "parallel/dp/replicated.h"
#include "parallel/zero/zero1.h"
#include "parallel/zero/zero2.h"
#include "parallel/zero/zero3.h"

namespace cc::parallel {

Result<std::unique_ptr<ShardingStrategy>> makeShardingStrategy(const DataParallelOptions& options) {
  if (options.alignBucketsToTensors && options.zeroStage != 0) {
    return invalidArgument("dp: buckets aligned to tensors need zero stage 0, not " +
                           std::to_string(options.zeroStage) +
                           " (a sharded bucket must be a multiple of the DP world size)");
  }
  switch (options.zeroStage) {
    case 0:
      return std::unique_ptr<ShardingStrategy>(
          std::make_unique<Replicated>(options.alignBucketsToTensors));
    case 1:
      return std::unique_ptr<ShardingStrategy>(std::make_unique<ShardedOptimizerState>());
    case 2:
      return std::unique_ptr<ShardingStrategy>(std::make_unique<ShardedGradients>());
    case 3:
      return std::unique_ptr<ShardingStrategy>(std::make_unique<ShardedParameters>());
    default:
      return invalidArgument("zero stage " + std::to_string(options.zeroStage) +
                             " is not 0, 1, 2 or 3");
  }
}

}  // namespace cc::parallel
