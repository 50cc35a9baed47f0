// The loss curve as a small standalone SVG (no plotting library needed to look at a run).
#pragma once

#include "core/status.h"

#include <string>
#include <utility>
#include <vector>

namespace cc::parallel::train_tool {

// points: (step, loss); evalPoints drawn as dots when present.
Status writeLossPlot(const std::string& path, const std::vector<std::pair<int64_t, double>>& points,
                     const std::vector<std::pair<int64_t, double>>& evalPoints);

}  // namespace cc::parallel::train_tool
