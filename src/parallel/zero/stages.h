// The sharding strategy (dp/sharding.h) for a ZeRO stage number: 0 is plain data
// parallelism (dp/replicated.h), 1-3 the ZeRO stages in this folder.
#pragma once

#include <memory>

#include "core/status.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/dp/sharding.h"

namespace cc::parallel {

// Refuses a stage outside 0-3, and tensor-aligned buckets with a sharding stage (their
// ends are not multiples of the world size).
Result<std::unique_ptr<ShardingStrategy>> makeShardingStrategy(const DataParallelOptions& options);

}  // namespace cc::parallel
