// The loss curve as a small standalone SVG (no plotting library needed to look at a run).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace cc::parallel::train_tool {

// points: (step, loss); evalPoints drawn as dots when present.
Status writeLossPlot(const std::string& path, const std::vector<std::pair<int64_t, double>>& points,
                     const std::vector<std::pair<int64_t, double>>& evalPoints);

}  // namespace cc::parallel::train_tool
