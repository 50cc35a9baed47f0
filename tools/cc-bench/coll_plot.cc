// --plot FILE.svg: bus bandwidth (out of place) against size for cc and each peer, one
// line per system, as a hand-written SVG that any browser shows: a log2 size axis, a
// linear GB/s axis from zero, a legend, and the run's parameters in the title.
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "coll_report.h"

namespace cc::bench {
namespace {

constexpr double kWidth = 800;
constexpr double kHeight = 480;
constexpr double kLeft = 70;
constexpr double kRight = 150;  // room for the legend
constexpr double kTop = 40;
constexpr double kBottom = 60;
const char* const kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"};

std::string sizeLabel(double bytes) {
  const char* const units[] = {"", "K", "M", "G"};
  int unit = 0;
  while (bytes >= 1024 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{:g}{}", bytes, units[unit]);
}

// A round step that splits [0, top] into about five intervals.
double niceStep(double top) {
  double raw = top / 5;
  double magnitude = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

}  // namespace

bool writeCollSvg(const CollReport& report, const std::string& path, std::string& error) {
  const CollOptions& o = *report.options;
  double minLog = 1e300;
  double maxLog = -1e300;
  double maxBus = 0;
  for (const SystemRows& system : report.systems) {
    for (const CollRow& row : system.rows) {
      if (!row.outOfPlace.measured) continue;
      double x = std::log2(static_cast<double>(row.shape.rowBytes));
      minLog = std::min(minLog, x);
      maxLog = std::max(maxLog, x);
      maxBus = std::max(maxBus, busBandwidth(report, row.shape, row.outOfPlace));
    }
  }
  if (minLog > maxLog) {
    minLog = 0;
    maxLog = 1;
  }
  if (maxLog - minLog < 1) maxLog = minLog + 1;
  if (maxBus <= 0) maxBus = 1;
  double step = niceStep(maxBus * 1.05);
  double topBus = std::ceil(maxBus * 1.05 / step) * step;
  double plotWidth = kWidth - kLeft - kRight;
  double plotHeight = kHeight - kTop - kBottom;
  auto xOf = [&](double log2Bytes) {
    return kLeft + (log2Bytes - minLog) / (maxLog - minLog) * plotWidth;
  };
  auto yOf = [&](double bus) { return kTop + plotHeight - bus / topBus * plotHeight; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, kHeight);
  svg += fmt::format(
      "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">cc-bench {}: {} {}, {} "
      "ranks, "
      "out of place</text>\n",
      kLeft + plotWidth / 2, coll::collectiveName(o.collective), coll::dataTypeName(o.type),
      coll::reduces(o.collective) ? coll::opName(o.op) : "", report.nranks);
  // Grid and ticks: y every `step` GB/s, x every power of two (labelled every other one
  // when there are many).
  for (double bus = 0; bus <= topBus + step / 2; bus += step) {
    double y = yOf(bus);
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n",
                       kLeft, y, kLeft + plotWidth, y);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", kLeft - 6,
                       y + 4, bus);
  }
  int first = static_cast<int>(std::ceil(minLog));
  int last = static_cast<int>(std::floor(maxLog));
  int every = last - first > 12 ? 2 : 1;
  for (int e = first; e <= last; ++e) {
    double x = xOf(e);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#eee\"/>\n",
                       x, kTop, x, kTop + plotHeight);
    if ((e - first) % every == 0)
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x,
                         kTop + plotHeight + 16, sizeLabel(std::ldexp(1.0, e)));
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n",
      kLeft, kTop, plotWidth, plotHeight);
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">size (bytes, log2 scale)</text>\n",
      kLeft + plotWidth / 2, kHeight - 18);
  svg += fmt::format(
      "<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0})\">bus "
      "bandwidth "
      "(GB/s)</text>\n",
      kTop + plotHeight / 2);

  size_t index = 0;
  for (const SystemRows& system : report.systems) {
    const char* color = kColors[index % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string points;
    for (const CollRow& row : system.rows) {
      if (!row.outOfPlace.measured) continue;
      double x = xOf(std::log2(static_cast<double>(row.shape.rowBytes)));
      double y = yOf(busBandwidth(report, row.shape, row.outOfPlace));
      points += fmt::format("{:.1f},{:.1f} ", x, y);
      svg +=
          fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", x, y, color);
    }
    if (!points.empty())
      svg +=
          fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                      points, color);
    double legendY = kTop + 10 + 20 * static_cast<double>(index);
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"/>\n",
        kLeft + plotWidth + 15, legendY, kLeft + plotWidth + 40, color);
    svg += fmt::format("<text x=\"{}\" y=\"{}\">{}{}</text>\n", kLeft + plotWidth + 46, legendY + 4,
                       system.name, system.rows.empty() ? " (no data)" : "");
    ++index;
  }
  svg += "</svg>\n";

  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    error = fmt::format("cannot open {}: {}", path, std::strerror(errno));
    return false;
  }
  bool ok = std::fputs(svg.c_str(), file) >= 0;
  if (std::fclose(file) != 0 || !ok) {
    error = fmt::format("writing {} failed: {}", path, std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace cc::bench
