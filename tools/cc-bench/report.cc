// The p2p table, its summary and its JSON twin (see report.h). Both outputs come from one
// list of columns, so they cannot disagree about what was measured.
#include "report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace cc::bench {
namespace {

struct Column {
  std::string header;
  std::string jsonKey;
  int decimals = 2;
  std::vector<std::optional<double>> values;  // one per size; nullopt: not measured
};

template <typename Point>
const Point* findPoint(const std::vector<Point>& points, size_t bytes) {
  auto it =
      std::find_if(points.begin(), points.end(), [&](const Point& p) { return p.bytes == bytes; });
  return it == points.end() ? nullptr : &*it;
}

// The transport the ratios are taken for: shm when it was measured, else the first.
const TransportResult* ratioTransport(const P2pReport& report) {
  for (const TransportResult& t : report.transports) {
    if (t.name == "shm") return &t;
  }
  return report.transports.empty() ? nullptr : &report.transports.front();
}

std::optional<double> ratio(std::optional<double> numerator, std::optional<double> denominator) {
  if (!numerator || !denominator || *denominator == 0) return std::nullopt;
  return *numerator / *denominator;
}

std::vector<Column> buildColumns(const P2pReport& report) {
  const std::vector<size_t>& sizes = report.sizes;
  auto column = [&](std::string header, std::string jsonKey, int decimals, auto valueAt) {
    Column c{std::move(header), std::move(jsonKey), decimals, {}};
    for (size_t bytes : sizes) c.values.push_back(valueAt(bytes));
    return c;
  };
  auto transportValue = [](const TransportResult& t, auto field) {
    return [&t, field](size_t bytes) -> std::optional<double> {
      const P2pPoint* p = findPoint(t.points, bytes);
      return p ? std::optional<double>(p->*field) : std::nullopt;
    };
  };
  auto ompiValue = [&](double OmpiPoint::*field) {
    return [&report, field](size_t bytes) -> std::optional<double> {
      const OmpiPoint* p = report.ompi ? findPoint(*report.ompi, bytes) : nullptr;
      return p ? std::optional<double>(p->*field) : std::nullopt;
    };
  };
  auto memcpyValue = [&](size_t bytes) -> std::optional<double> {
    const MemcpyPoint* p = findPoint(report.memcpy, bytes);
    return p ? std::optional<double>(p->bandwidthGBps) : std::nullopt;
  };
  const TransportResult* base = ratioTransport(report);

  std::vector<Column> columns;
  columns.push_back(column("size(B)", "size", 0,
                           [](size_t bytes) { return std::optional<double>(double(bytes)); }));
  for (const TransportResult& t : report.transports) {
    columns.push_back(column(t.name + "-lat(us)", t.name + "_lat_us", 2,
                             transportValue(t, &P2pPoint::latencyUs)));
  }
  if (report.ompi) {
    columns.push_back(column("ompi-lat(us)", "ompi_lat_us", 2, ompiValue(&OmpiPoint::latencyUs)));
    if (base != nullptr) {
      auto baseLatency = transportValue(*base, &P2pPoint::latencyUs);
      auto ompiLatency = ompiValue(&OmpiPoint::latencyUs);
      columns.push_back(
          column(base->name + "/ompi-lat", base->name + "_over_ompi_lat", 2,
                 [&](size_t bytes) { return ratio(baseLatency(bytes), ompiLatency(bytes)); }));
    }
  }
  for (const TransportResult& t : report.transports) {
    columns.push_back(column(t.name + "-bw(GB/s)", t.name + "_bw_GBps", 3,
                             transportValue(t, &P2pPoint::bandwidthGBps)));
  }
  if (report.ompi)
    columns.push_back(
        column("ompi-bw(GB/s)", "ompi_bw_GBps", 3, ompiValue(&OmpiPoint::bandwidthGBps)));
  if (!report.memcpy.empty()) {
    columns.push_back(column("memcpy(GB/s)", "memcpy_GBps", 2, memcpyValue));
    if (base != nullptr) {
      auto baseBandwidth = transportValue(*base, &P2pPoint::bandwidthGBps);
      columns.push_back(
          column(base->name + "-bw/memcpy", base->name + "_bw_over_memcpy", 3,
                 [&](size_t bytes) { return ratio(baseBandwidth(bytes), memcpyValue(bytes)); }));
    }
  }
  columns.push_back(column("#wrong", "wrong", 0, [&](size_t bytes) {
    double wrong = 0;
    for (const TransportResult& t : report.transports) {
      if (const P2pPoint* p = findPoint(t.points, bytes))
        wrong += static_cast<double>(p->wrongBytes);
    }
    return std::optional<double>(wrong);
  }));
  return columns;
}

std::string tableText(const Column& column, size_t row) {
  const std::optional<double>& value = column.values[row];
  if (!value) return "n/a";
  return fmt::format("{:.{}f}", *value, column.decimals);
}

std::string jsonText(const Column& column, size_t row) {
  const std::optional<double>& value = column.values[row];
  if (!value || !std::isfinite(*value)) return "null";
  if (column.decimals == 0) return fmt::format("{:.0f}", *value);
  return fmt::format("{}", *value);
}

void printSummary(const P2pReport& report, std::FILE* out) {
  const TransportResult* base = ratioTransport(report);
  if (base == nullptr) return;
  std::vector<double> bigRatios;
  for (const P2pPoint& p : base->points) {
    const MemcpyPoint* m = findPoint(report.memcpy, p.bytes);
    if (p.bytes >= (size_t{4} << 20) && m != nullptr && m->bandwidthGBps > 0) {
      bigRatios.push_back(p.bandwidthGBps / m->bandwidthGBps);
    }
  }
  if (bigRatios.empty()) {
    fmt::print(out, "# {}-bw/memcpy: no size >= 4 MiB was measured\n", base->name);
  } else {
    fmt::print(out, "# {}-bw/memcpy, median over the {} sizes >= 4 MiB: {:.3f}\n", base->name,
               bigRatios.size(), median(bigRatios));
  }

  // Latency at 8 bytes, or at the smallest size when 8 was not in the sweep.
  if (base->points.empty()) return;
  const P2pPoint* small = findPoint(base->points, 8);
  if (small == nullptr) small = &base->points.front();
  const OmpiPoint* ompiSmall = report.ompi ? findPoint(*report.ompi, small->bytes) : nullptr;
  if (ompiSmall != nullptr && ompiSmall->latencyUs > 0) {
    fmt::print(out, "# {}-byte latency {}/ompi: {:.2f} ({} {:.2f} us, ompi {:.2f} us)\n",
               small->bytes, base->name, small->latencyUs / ompiSmall->latencyUs, base->name,
               small->latencyUs, ompiSmall->latencyUs);
  } else {
    fmt::print(out, "# {}-byte latency {}: {:.2f} us (no Open MPI run to compare with)\n",
               small->bytes, base->name, small->latencyUs);
  }
}

}  // namespace

void printP2pTable(const P2pReport& report, std::FILE* out) {
  std::vector<Column> columns = buildColumns(report);
  std::vector<size_t> widths;
  for (const Column& column : columns) {
    size_t width = std::max<size_t>(column.header.size(), 6);
    for (size_t row = 0; row < report.sizes.size(); ++row)
      width = std::max(width, tableText(column, row).size());
    widths.push_back(width);
  }
  std::string header;
  for (size_t c = 0; c < columns.size(); ++c)
    header += fmt::format("  {:>{}}", columns[c].header, widths[c]);
  header[0] = '#';
  fmt::print(out, "{}\n", header);
  uint64_t totalWrong = 0;
  for (size_t row = 0; row < report.sizes.size(); ++row) {
    std::string line;
    for (size_t c = 0; c < columns.size(); ++c)
      line += fmt::format("  {:>{}}", tableText(columns[c], row), widths[c]);
    fmt::print(out, "{}\n", line);
    totalWrong += static_cast<uint64_t>(columns.back().values[row].value_or(0));
  }
  printSummary(report, out);
  fmt::print(out, "# wrong bytes: {} ({})\n", totalWrong,
             totalWrong == 0 ? "OK" : "DATA CORRUPTED: the last message of each size was checked");
}

bool writeP2pJson(const P2pReport& report, const std::string& path, std::string& error) {
  std::vector<Column> columns = buildColumns(report);
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    error = fmt::format("cannot open {}: {}", path, std::strerror(errno));
    return false;
  }
  fmt::print(file, "[\n");
  for (size_t row = 0; row < report.sizes.size(); ++row) {
    std::string object;
    for (const Column& column : columns) {
      object += fmt::format("{}\"{}\": {}", object.empty() ? "" : ", ", column.jsonKey,
                            jsonText(column, row));
    }
    fmt::print(file, "  {{{}}}{}\n", object, row + 1 < report.sizes.size() ? "," : "");
  }
  fmt::print(file, "]\n");
  if (std::fclose(file) != 0) {
    error = fmt::format("writing {} failed: {}", path, std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace cc::bench
