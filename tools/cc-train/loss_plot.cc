#include "loss_plot.h"

#include <algorithm>
#include <cstdio>

#include "parallel/io/atomic_file.h"

namespace cc::parallel::train_tool {

Status writeLossPlot(const std::string& path, const std::vector<std::pair<int64_t, double>>& points,
                     const std::vector<std::pair<int64_t, double>>& evalPoints,
                     const std::vector<std::vector<std::pair<int64_t, double>>>& imbalance) {
  if (points.empty()) return invalidArgument("--plot " + path + ": no steps to plot");
  constexpr double kWidth = 640, kHeight = 400, kMargin = 50, kPanel = 260;
  const double totalHeight = imbalance.empty() ? kHeight : kHeight + kPanel;
  double minLoss = points[0].second, maxLoss = points[0].second;
  for (const auto& point : points) {
    minLoss = std::min(minLoss, point.second);
    maxLoss = std::max(maxLoss, point.second);
  }
  if (maxLoss - minLoss < 1e-9) maxLoss = minLoss + 1;
  const double firstStep = static_cast<double>(points.front().first);
  const double lastStep = std::max(firstStep + 1, static_cast<double>(points.back().first));
  auto x = [&](int64_t step) {
    return kMargin + (static_cast<double>(step) - firstStep) / (lastStep - firstStep) *
                         (kWidth - 2 * kMargin);
  };
  auto y = [&](double loss) {
    return kHeight - kMargin - (loss - minLoss) / (maxLoss - minLoss) * (kHeight - 2 * kMargin);
  };
  std::string svg;
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n",
                kWidth, totalHeight);
  svg += buffer;
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buffer, sizeof(buffer),
                "<path d=\"M%.0f %.0f V%.0f H%.0f\" stroke=\"black\" fill=\"none\"/>\n", kMargin,
                kMargin, kHeight - kMargin, kWidth - kMargin);
  svg += buffer;
  std::snprintf(
      buffer, sizeof(buffer),
      "<text x=\"5\" y=\"%.0f\">%.3f</text><text x=\"5\" y=\"%.0f\">%.3f</text>\n"
      "<text x=\"%.0f\" y=\"%.0f\">step %lld</text><text x=\"%.0f\" y=\"%.0f\">step %lld</text>\n"
      "<text x=\"%.0f\" y=\"20\">training loss</text>\n",
      kMargin, maxLoss, kHeight - kMargin, minLoss, kMargin, kHeight - kMargin + 20,
      static_cast<long long>(points.front().first), kWidth - kMargin - 60, kHeight - kMargin + 20,
      static_cast<long long>(points.back().first), kWidth / 2 - 40);
  svg += buffer;
  svg += "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"1.5\" points=\"";
  for (const auto& [step, loss] : points) {
    std::snprintf(buffer, sizeof(buffer), "%.1f,%.1f ", x(step), y(loss));
    svg += buffer;
  }
  svg += "\"/>\n";
  for (const auto& [step, loss] : evalPoints) {
    std::snprintf(buffer, sizeof(buffer),
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"darkorange\"/>\n", x(step),
                  y(std::clamp(loss, minLoss, maxLoss)));
    svg += buffer;
  }
  if (!imbalance.empty()) {
    // The second panel: each MoE block's max/mean tokens per expert, from 1 (balanced) up.
    double top = 1.0;
    for (const auto& series : imbalance)
      for (const auto& point : series) top = std::max(top, point.second);
    const double panelTop = kHeight + 10, panelBottom = totalHeight - kMargin;
    auto py = [&](double value) {
      return panelBottom -
             (value - 1.0) / std::max(1e-9, top - 1.0) * (panelBottom - panelTop - 20);
    };
    std::snprintf(buffer, sizeof(buffer),
                  "<path d=\"M%.0f %.0f V%.0f H%.0f\" stroke=\"black\" fill=\"none\"/>\n"
                  "<text x=\"5\" y=\"%.0f\">%.2f</text><text x=\"5\" y=\"%.0f\">1.00</text>\n"
                  "<text x=\"%.0f\" y=\"%.0f\">expert imbalance (max / mean tokens) per MoE "
                  "block</text>\n",
                  kMargin, panelTop, panelBottom, kWidth - kMargin, py(top) + 4, top, panelBottom,
                  kWidth / 2 - 150, panelTop + 12);
    svg += buffer;
    static const char* colours[] = {"steelblue", "darkorange",  "seagreen", "crimson",
                                    "purple",    "saddlebrown", "teal",     "gray"};
    for (size_t i = 0; i < imbalance.size(); ++i) {
      svg += "<polyline fill=\"none\" stroke=\"";
      svg += colours[i % 8];
      svg += "\" stroke-width=\"1.2\" points=\"";
      for (const auto& [step, value] : imbalance[i]) {
        std::snprintf(buffer, sizeof(buffer), "%.1f,%.1f ", x(step), py(value));
        svg += buffer;
      }
      svg += "\"/>\n";
    }
  }
  svg += "</svg>\n";
  return writeFileAtomically(path, svg);
}

}  // namespace cc::parallel::train_tool
