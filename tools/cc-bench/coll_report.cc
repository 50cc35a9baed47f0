// The collective tables, the comparison, and the JSON and CSV rows (see coll_report.h;
// the SVG chart is in coll_plot.cc).
#include "coll_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>

#include "sweep.h"

namespace cc::bench {

Timing timingOf(const coll::CallTimes& times, int64_t wrong) {
  Timing timing;
  timing.measured = times.meanUs >= 0;
  timing.timeUs = times.meanUs;
  timing.wrong = wrong;
  timing.p50Us = times.p50Us;
  timing.p99Us = times.p99Us;
  timing.worstUs = times.worstUs;
  return timing;
}

double algBandwidth(const coll::Shape& shape, const Timing& timing) {
  if (!timing.measured || timing.timeUs <= 0) return 0;
  return static_cast<double>(shape.rowBytes) / (timing.timeUs * 1e-6) / 1e9;
}

double busBandwidth(const CollReport& report, const coll::Shape& shape, const Timing& timing) {
  return algBandwidth(shape, timing) * coll::busFactor(report.options->collective, report.nranks);
}

namespace {

std::string formatTime(double us) {
  return us < 1e4 ? fmt::format("{:.2f}", us) : fmt::format("{:.0f}", us);
}

// "time algbw busbw #wrong" of one placement, nccl-tests' widths.
std::string placementColumns(const CollReport& report, const coll::Shape& shape,
                             const Timing& timing) {
  if (!timing.measured)
    return fmt::format("  {:>8}  {:>6}  {:>6}  {:>6}", "N/A", "N/A", "N/A", "N/A");
  std::string wrong = timing.wrong < 0 ? "N/A" : fmt::format("{}", timing.wrong);
  return fmt::format("  {:>8}  {:>6.2f}  {:>6.2f}  {:>6}", formatTime(timing.timeUs),
                     algBandwidth(shape, timing), busBandwidth(report, shape, timing), wrong);
}

std::string redopName(const CollOptions& options) {
  return coll::reduces(options.collective) ? coll::opName(options.op) : "none";
}

int rootColumn(const CollOptions& options) {
  return coll::rooted(options.collective) ? options.root : -1;
}

void printTable(const CollReport& report, const SystemRows& system, std::FILE* out) {
  printCollHeader(out);
  for (const CollRow& row : system.rows) printCollRow(report, row, out);
  printCollFooter(report, system, out);
}

const SystemRows* findSystem(const CollReport& report, const std::string& name) {
  for (const SystemRows& s : report.systems) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const CollRow* findRow(const SystemRows& system, size_t rowBytes) {
  for (const CollRow& row : system.rows) {
    if (row.shape.rowBytes == rowBytes) return &row;
  }
  return nullptr;
}

const Timing* timingOf(const SystemRows& system, size_t rowBytes, bool inPlace) {
  const CollRow* row = findRow(system, rowBytes);
  if (row == nullptr) return nullptr;
  const Timing& t = inPlace ? row->inPlace : row->outOfPlace;
  return t.measured ? &t : nullptr;
}

std::optional<double> busOf(const CollReport& report, const SystemRows& system, size_t rowBytes,
                            bool inPlace) {
  const Timing* t = timingOf(system, rowBytes, inPlace);
  if (t == nullptr) return std::nullopt;
  return busBandwidth(report, findRow(system, rowBytes)->shape, *t);
}

std::optional<double> timeOf(const SystemRows& system, size_t rowBytes, bool inPlace) {
  const Timing* t = timingOf(system, rowBytes, inPlace);
  if (t == nullptr) return std::nullopt;
  return t->timeUs;
}

std::string cell(std::optional<double> value, int decimals) {
  return value ? fmt::format("{:.{}f}", *value, decimals) : std::string("n/a");
}

std::optional<double> ratio(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

// One row of JSON/CSV per (system, row, placement).
struct FlatRow {
  const SystemRows* system;
  const CollRow* row;
  bool inPlace;
  const Timing* timing;
};

std::vector<FlatRow> flatRows(const CollReport& report) {
  std::vector<FlatRow> rows;
  for (const SystemRows& system : report.systems) {
    for (const CollRow& row : system.rows) {
      rows.push_back({&system, &row, false, &row.outOfPlace});
      if (row.inPlace.measured) rows.push_back({&system, &row, true, &row.inPlace});
    }
  }
  return rows;
}

std::FILE* openForWriting(const std::string& path, std::string& error) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) error = fmt::format("cannot open {}: {}", path, std::strerror(errno));
  return file;
}

bool closeWritten(std::FILE* file, const std::string& path, std::string& error) {
  if (std::fclose(file) != 0) {
    error = fmt::format("writing {} failed: {}", path, std::strerror(errno));
    return false;
  }
  return true;
}

std::string number(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : "null";
}

}  // namespace

void printCollHeader(std::FILE* out) {
  fmt::print(out, "#{:>75}{:>33}\n", "out-of-place", "in-place");
  fmt::print(out,
             "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  {:>6}  {:>8}  {:>6}  "
             "{:>6}  {:>6}\n",
             "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
             "algbw", "busbw", "#wrong");
  fmt::print(out,
             "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  {:>6}  {:>8}  {:>6}  "
             "{:>6}  {:>6}\n",
             "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
             "(GB/s)", "");
}

void printCollRow(const CollReport& report, const CollRow& row, std::FILE* out) {
  const CollOptions& options = *report.options;
  fmt::print(out, "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}\n", row.shape.rowBytes,
             row.shape.rowElems, coll::dataTypeName(options.type), redopName(options),
             rootColumn(options), placementColumns(report, row.shape, row.outOfPlace),
             placementColumns(report, row.shape, row.inPlace));
  std::fflush(out);
}

int64_t printCollFooter(const CollReport& report, const SystemRows& system, std::FILE* out) {
  int64_t wrong = 0;
  bool checked = false;
  double busSum = 0;
  int busCount = 0;
  for (const CollRow& row : system.rows) {
    for (const Timing* t : {&row.outOfPlace, &row.inPlace}) {
      if (!t->measured) continue;
      if (t->wrong >= 0) {
        wrong += t->wrong;
        checked = true;
      }
      busSum += busBandwidth(report, row.shape, *t);
      ++busCount;
    }
  }
  if (!checked) {
    fmt::print(out, "# Wrong elements       : not checked (-c 0)\n");
  } else {
    fmt::print(out, "# Wrong elements       : {} {}\n", wrong, wrong == 0 ? "OK" : "FAILED");
  }
  fmt::print(out, "# Avg bus bandwidth    : {:.4f}\n", busCount > 0 ? busSum / busCount : 0.0);
  return wrong;
}

void printLatency(const CollReport& report, std::FILE* out) {
  std::vector<const SystemRows*> systems;
  for (const SystemRows& system : report.systems) {
    if (!system.rows.empty()) systems.push_back(&system);
  }
  if (systems.empty()) return;
  fmt::print(out,
             "#\n# per-call time, out of place (us; the slowest rank's calls): p50, p99 and the "
             "worst of each size's iterations\n");
  std::string header = fmt::format("#{:>11}", "size(B)");
  for (const SystemRows* s : systems) {
    header += fmt::format("  {:>10}  {:>10}  {:>10}", s->name + "-p50", s->name + "-p99",
                          s->name + "-worst");
  }
  fmt::print(out, "{}\n", header);
  for (const CollRow& row : systems.front()->rows) {
    std::string line = fmt::format("{:>12}", row.shape.rowBytes);
    for (const SystemRows* s : systems) {
      const Timing* timing = nullptr;
      for (const CollRow& theirs : s->rows) {
        if (theirs.shape.rowBytes == row.shape.rowBytes) timing = &theirs.outOfPlace;
      }
      if (timing == nullptr || !timing->measured || timing->p50Us < 0) {
        line += fmt::format("  {:>10}  {:>10}  {:>10}", "N/A", "N/A", "N/A");
        continue;
      }
      line += fmt::format("  {:>10}  {:>10}  {:>10}", formatTime(timing->p50Us),
                          formatTime(timing->p99Us), formatTime(timing->worstUs));
    }
    fmt::print(out, "{}\n", line);
  }
}

void printPeerTables(const CollReport& report, std::FILE* out) {
  for (size_t i = 1; i < report.systems.size(); ++i) {
    const SystemRows& peer = report.systems[i];
    fmt::print(out, "#\n# {}: {}\n", peer.name, peer.description);
    if (!peer.note.empty()) fmt::print(out, "# note: {}\n", peer.note);
    if (!peer.rows.empty()) printTable(report, peer, out);
  }
}

namespace {

// One comparison table, out of place or in place, and its summary lines (the scripts under
// bench/ read a table from its heading to "time at the smallest").
void printComparisonTable(const CollReport& report, const SystemRows& cc,
                          const std::vector<const SystemRows*>& peers, bool inPlace,
                          std::FILE* out) {
  fmt::print(out, "#\n# cc against its peers, {} (ratio > 1: cc has more bus bandwidth)\n",
             inPlace ? "in place" : "out of place");
  std::string header = fmt::format("#{:>11}  {:>9}", "size(B)", "cc-busbw");
  for (const SystemRows* p : peers) header += fmt::format("  {:>10}", p->name + "-busbw");
  for (const SystemRows* p : peers) header += fmt::format("  {:>8}", "cc/" + p->name);
  header += fmt::format("  {:>11}", "cc-time(us)");
  for (const SystemRows* p : peers) header += fmt::format("  {:>11}", p->name + "-time(us)");
  fmt::print(out, "{}\n", header);
  for (const CollRow& row : cc.rows) {
    size_t bytes = row.shape.rowBytes;
    std::optional<double> ccBus = busOf(report, cc, bytes, inPlace);
    std::string line = fmt::format("{:>12}  {:>9}", bytes, cell(ccBus, 3));
    for (const SystemRows* p : peers)
      line += fmt::format("  {:>10}", cell(busOf(report, *p, bytes, inPlace), 3));
    for (const SystemRows* p : peers)
      line += fmt::format("  {:>8}", cell(ratio(ccBus, busOf(report, *p, bytes, inPlace)), 2));
    line += fmt::format("  {:>11}", cell(timeOf(cc, bytes, inPlace), 2));
    for (const SystemRows* p : peers)
      line += fmt::format("  {:>11}", cell(timeOf(*p, bytes, inPlace), 2));
    fmt::print(out, "{}\n", line);
  }
  // Latency at the smallest row (8 bytes in a default sweep), and the big-message ratio.
  size_t smallest = cc.rows.empty() ? 0 : cc.rows.front().shape.rowBytes;
  for (const SystemRows* p : peers) {
    std::optional<double> ccTime = timeOf(cc, smallest, inPlace);
    std::optional<double> peerTime = timeOf(*p, smallest, inPlace);
    fmt::print(out, "# time at the smallest size ({} B): cc {} us, {} {} us, cc/{} {}\n", smallest,
               cell(ccTime, 2), p->name, cell(peerTime, 2), p->name,
               ratio(ccTime, peerTime) ? fmt::format("{:.3g}", *ratio(ccTime, peerTime)) : "n/a");
    std::vector<double> bigRatios;
    for (const CollRow& row : cc.rows) {
      if (row.shape.rowBytes < (size_t{1} << 20)) continue;
      std::optional<double> r = ratio(busOf(report, cc, row.shape.rowBytes, inPlace),
                                      busOf(report, *p, row.shape.rowBytes, inPlace));
      if (r) bigRatios.push_back(*r);
    }
    if (!bigRatios.empty()) {
      fmt::print(out, "# busbw cc/{}, median over the {} sizes >= 1 MiB: {:.2f}\n", p->name,
                 bigRatios.size(), median(bigRatios));
    }
  }
}

}  // namespace

void printComparison(const CollReport& report, std::FILE* out) {
  const SystemRows* cc = findSystem(report, "cc");
  std::vector<const SystemRows*> peers;
  for (size_t i = 1; i < report.systems.size(); ++i) {
    if (!report.systems[i].rows.empty()) peers.push_back(&report.systems[i]);
  }
  if (cc == nullptr || peers.empty()) return;
  printComparisonTable(report, *cc, peers, false, out);
  // In place as well where the collective has it: the equal-work comparison for broadcast,
  // whose out-of-place root also copies its input to its output (MPI_Bcast has one buffer).
  bool inPlace = std::any_of(cc->rows.begin(), cc->rows.end(),
                             [](const CollRow& row) { return row.inPlace.measured; });
  if (inPlace) printComparisonTable(report, *cc, peers, true, out);
}

bool writeCollJson(const CollReport& report, const std::string& path, std::string& error) {
  std::FILE* file = openForWriting(path, error);
  if (file == nullptr) return false;
  const CollOptions& o = *report.options;
  std::vector<FlatRow> rows = flatRows(report);
  fmt::print(file, "[\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const FlatRow& r = rows[i];
    fmt::print(
        file,
        "  {{\"system\": \"{}\", \"collective\": \"{}\", \"nranks\": {}, \"bytes\": {}, "
        "\"count\": {}, \"type\": \"{}\", \"op\": \"{}\", \"root\": {}, \"inplace\": {}, "
        "\"time_us\": {}, \"average\": {}, \"algbw\": {}, \"busbw\": {}, \"wrong\": {}}}{}\n",
        r.system->name, coll::collectiveName(o.collective), report.nranks, r.row->shape.rowBytes,
        r.row->shape.rowElems, coll::dataTypeName(o.type), redopName(o), rootColumn(o),
        r.inPlace ? "true" : "false", number(r.timing->timeUs), o.average,
        number(algBandwidth(r.row->shape, *r.timing)),
        number(busBandwidth(report, r.row->shape, *r.timing)),
        r.timing->wrong < 0 ? std::string("null") : fmt::format("{}", r.timing->wrong),
        i + 1 < rows.size() ? "," : "");
  }
  fmt::print(file, "]\n");
  return closeWritten(file, path, error);
}

bool writeCollCsv(const CollReport& report, const std::string& path, std::string& error) {
  std::FILE* file = openForWriting(path, error);
  if (file == nullptr) return false;
  const CollOptions& o = *report.options;
  fmt::print(
      file,
      "system,collective,nranks,bytes,count,type,op,root,inplace,time_us,average,algbw,busbw,"
      "wrong\n");
  for (const FlatRow& r : flatRows(report)) {
    fmt::print(file, "{},{},{},{},{},{},{},{},{},{:.3f},{},{:.6f},{:.6f},{}\n", r.system->name,
               coll::collectiveName(o.collective), report.nranks, r.row->shape.rowBytes,
               r.row->shape.rowElems, coll::dataTypeName(o.type), redopName(o), rootColumn(o),
               r.inPlace ? 1 : 0, r.timing->timeUs, o.average,
               algBandwidth(r.row->shape, *r.timing), busBandwidth(report, r.row->shape, *r.timing),
               r.timing->wrong < 0 ? std::string() : fmt::format("{}", r.timing->wrong));
  }
  return closeWritten(file, path, error);
}

}  // namespace cc::bench
