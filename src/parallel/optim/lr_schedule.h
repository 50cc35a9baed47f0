// Learning rate: linear warmup from lr/warmup to lr over `warmup` steps, then cosine decay
// to minFraction*lr at `totalSteps`.
#pragma once

#include <cstdint>

namespace cc::parallel {

struct LrSchedule {
  float maxLr = 3e-4f;
  int64_t warmup = 0;
  int64_t totalSteps = 1;
  float minFraction = 0.1f;

  // step counts from 0.
  float at(int64_t step) const;
};

}  // namespace cc::parallel
