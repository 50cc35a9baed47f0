// The loss curve as a small standalone SVG (no plotting library needed to look at a run).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace cc::parallel::train_tool {

// points: (step, loss); evalPoints drawn as dots when present. imbalance: per MoE block,
// (step, max/mean tokens per expert), drawn in a second panel below when present.
Status writeLossPlot(const std::string& path, const std::vector<std::pair<int64_t, double>>& points,
                     const std::vector<std::pair<int64_t, double>>& evalPoints,
                     const std::vector<std::vector<std::pair<int64_t, double>>>& imbalance = {});

}  // namespace cc::parallel::train_tool
