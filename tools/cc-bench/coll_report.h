// What `cc-bench COLLECTIVE` prints and writes: nccl-tests' table for each system (cc,
// then each peer), a comparison of cc with the peers, and the same rows as JSON, CSV and
// an SVG chart of bus bandwidth against size. Every output is computed from one list of
// rows, with algbw and busbw derived from the time by the rules of bench/coll_rules.h, so
// no two outputs can disagree.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "coll_options.h"
#include "coll_rules.h"

namespace cc::bench {

// One placement (out of place or in place) of one row.
struct Timing {
  bool measured = false;  // false: no in-place form, or the system did not run it
  double timeUs = 0;      // each rank's mean call, combined over the ranks as -a says
  int64_t wrong = -1;     // wrong elements over all ranks; -1: not checked
  // The slowest rank's per-call times: median, 99th percentile, worst (--latency).
  double p50Us = -1, p99Us = -1, worstUs = -1;
};

// A Timing from a row's times (coll::summarizeRow) and the wrong count.
Timing timingOf(const coll::CallTimes& times, int64_t wrong);

struct CollRow {
  coll::Shape shape;
  Timing outOfPlace;
  Timing inPlace;
};

struct SystemRows {
  std::string name;         // "cc", "mpi", "gloo"
  std::string description;  // for the table's title line
  std::vector<CollRow> rows;
  std::string note;  // why rows are missing; empty when the run was whole
};

struct CollReport {
  const CollOptions* options = nullptr;
  int nranks = 0;
  std::vector<SystemRows> systems;  // cc first
};

double algBandwidth(const coll::Shape& shape, const Timing& timing);  // GB/s
double busBandwidth(const CollReport& report, const coll::Shape& shape, const Timing& timing);

// The nccl-tests column header; then printCollRow for each row as it is measured.
void printCollHeader(std::FILE* out);
void printCollRow(const CollReport& report, const CollRow& row, std::FILE* out);
// "# wrong ..." and "# Avg bus bandwidth : X" for one system; returns its wrong count.
int64_t printCollFooter(const CollReport& report, const SystemRows& system, std::FILE* out);

// The peers' tables and the comparison with cc (nothing without a peer that has rows).
void printPeerTables(const CollReport& report, std::FILE* out);
void printComparison(const CollReport& report, std::FILE* out);
// --latency: per size, every system's p50, p99 and worst call, out of place.
void printLatency(const CollReport& report, std::FILE* out);

// False, with `error` set, when the file cannot be written.
bool writeCollJson(const CollReport& report, const std::string& path, std::string& error);
bool writeCollCsv(const CollReport& report, const std::string& path, std::string& error);
bool writeCollSvg(const CollReport& report, const std::string& path, std::string& error);

}  // namespace cc::bench
