#include "loss_plot.h"

#include <algorithm>
#include <cstdio>

#include "parallel/io/atomic_file.h"

namespace cc::parallel::train_tool {

Status writeLossPlot(const std::string& path, const std::vector<std::pair<int64_t, double>>& points,
                     const std::vector<std::pair<int64_t, double>>& evalPoints) {
  if (points.empty()) return invalidArgument("--plot " + path + ": no steps to plot");
  constexpr double kWidth = 640, kHeight = 400, kMargin = 50;
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
                kWidth, kHeight);
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
  svg += "</svg>\n";
  return writeFileAtomically(path, svg);
}

}  // namespace cc::parallel::train_tool
