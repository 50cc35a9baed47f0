// Running ompi-pingpong under mpirun and parsing its output (see ompi_peer.h).
#include "ompi_peer.h"

#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string_view>

#include "paths.h"

namespace cc::bench {
namespace {

constexpr int kPeerTimeoutSeconds = 300;

// "size,lat_us,bw_GBps"; false for anything else (headers, mpirun's own messages).
bool parseLine(const std::string& line, OmpiPoint& point) {
  unsigned long long bytes = 0;
  double latency = 0;
  double bandwidth = 0;
  char extra = 0;
  if (std::sscanf(line.c_str(), "%llu,%lf,%lf %c", &bytes, &latency, &bandwidth, &extra) != 3)
    return false;
  point = {static_cast<size_t>(bytes), latency, bandwidth};
  return true;
}

// What pclose's status says about how the command ended.
std::string describeExit(int status, bool guarded) {
  if (status == -1) return "could not be waited for";
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  if (!WIFEXITED(status)) return "stopped";
  if (WEXITSTATUS(status) == 0) return "printed no results";
  if (WEXITSTATUS(status) == 124 && guarded)
    return fmt::format("did not finish within {} s", kPeerTimeoutSeconds);
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

}  // namespace

OmpiRun runOmpiPeer(const SweepOptions& options) {
  OmpiRun run;
  std::string program = executableDirectory() + "/ompi-pingpong";
  if (access(program.c_str(), X_OK) != 0) {
    run.note =
        fmt::format("{} is missing (built only where MPI is found): no Open MPI columns", program);
    return run;
  }
  run.command = fmt::format(
      "mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader {} -b {} -e {} -f {} "
      "-n {} -w {}",
      shellQuote(program), options.minBytes, options.maxBytes, options.factor, options.iterations,
      options.warmup);
  // A hung mpirun must not hang the benchmark: coreutils' timeout ends it (and mpirun its ranks).
  std::string guard;
  if (access("/usr/bin/timeout", X_OK) == 0)
    guard = fmt::format("/usr/bin/timeout {} ", kPeerTimeoutSeconds);
  std::fflush(stdout);
  FILE* pipe = popen((guard + run.command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    run.note = "could not start mpirun (popen failed): no Open MPI columns";
    return run;
  }
  std::deque<std::string> otherLines;  // the last few, to explain a failure
  std::string line;
  char chunk[512];
  while (std::fgets(chunk, sizeof(chunk), pipe) != nullptr) {
    line += chunk;
    if (line.empty() || line.back() != '\n') continue;
    line.pop_back();
    OmpiPoint point;
    if (parseLine(line, point)) {
      run.points.push_back(point);
    } else if (!line.empty() && line[0] != '#') {
      otherLines.push_back(line);
      if (otherLines.size() > 6) otherLines.pop_front();
    }
    line.clear();
  }
  int status = pclose(pipe);
  bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && !run.points.empty();
  if (ok) return run;
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    run.note = "mpirun was not found (Debian: openmpi-bin): no Open MPI columns";
  } else {
    std::string said;
    for (const std::string& other : otherLines) said += "\n#   " + other;
    run.note = fmt::format("'{}' {}: no Open MPI columns; its last words:{}", run.command,
                           describeExit(status, !guard.empty()),
                           said.empty() ? std::string(" none") : said);
  }
  run.points.clear();
  return run;
}

}  // namespace cc::bench
