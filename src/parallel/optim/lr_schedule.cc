#include "parallel/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace cc::parallel {

float LrSchedule::at(int64_t step) const {
  if (step < warmup) return maxLr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const int64_t decaySteps = std::max<int64_t>(1, totalSteps - warmup);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decaySteps));
  const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  const double minLr = static_cast<double>(minFraction) * maxLr;
  return static_cast<float>(minLr + (maxLr - minLr) * cosine);
}

}  // namespace cc::parallel
