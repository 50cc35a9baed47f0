// Running the collective peers row by row (see coll_peers.h).
#include "coll_peers.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "paths.h"

namespace cc::bench {
namespace {

// A peer that hangs must not hang cc-bench for ever; a whole sweep of the biggest sizes
// stays well inside this.
constexpr int kPeerTimeoutSeconds = 3600;

std::string peerArguments(const CollOptions& o) {
  return fmt::format("{} -b {} -e {} -f {} -n {} -w {} -d {} -o {} -r {} -c {} -a {}",
                     coll::collectiveName(o.collective), o.minBytes, o.maxBytes, o.factor,
                     o.iterations, o.warmup, coll::dataTypeName(o.type), coll::opName(o.op), o.root,
                     o.check ? 1 : 0, o.average);
}

std::string timeoutGuard() {
  return access("/usr/bin/timeout", X_OK) == 0
             ? fmt::format("/usr/bin/timeout {} ", kPeerTimeoutSeconds)
             : std::string();
}

std::string describeExit(int status) {
  if (status == -1) return "could not be waited for";
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  if (!WIFEXITED(status)) return "stopped";
  if (WEXITSTATUS(status) == 124) return fmt::format("ran past {} s", kPeerTimeoutSeconds);
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

}  // namespace

TempDirectory::TempDirectory() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/cc-bench-XXXXXX";
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDirectory::~TempDirectory() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

GateSet::~GateSet() { close(); }

bool GateSet::create(const std::string& prefix, int first, int nranks, std::string& error) {
  for (int rank = first; rank < nranks; ++rank) {
    std::string path = fmt::format("{}.{}", prefix, rank);
    if (mkfifo(path.c_str(), 0600) != 0) {
      error = fmt::format("mkfifo {} failed: {}", path, std::strerror(errno));
      return false;
    }
  }
  return true;
}

bool GateSet::open(const std::string& prefix, int first, int nranks, std::string& error) {
  for (int rank = first; rank < nranks; ++rank) {
    std::string path = fmt::format("{}.{}", prefix, rank);
    // Read-write: a FIFO opened so never blocks on Linux, and keeps the readers' opens
    // from blocking too.
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      error = fmt::format("opening gate {} failed: {}", path, std::strerror(errno));
      return false;
    }
    fds_.push_back(fd);
  }
  return true;
}

void GateSet::release() {
  for (int fd : fds_) {
    char go = 'g';
    while (write(fd, &go, 1) < 0 && errno == EINTR) {
    }
  }
}

void GateSet::close() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

PeerRun::PeerRun(std::string name, const CollOptions& options, int nranks,
                 const std::string& workDir)
    : name_(std::move(name)), options_(options), nranks_(nranks) {
  rows_.name = name_;
  gatePrefix_ = workDir + "/" + name_;
  std::string arguments = peerArguments(options) + " --gate " + shellQuote(gatePrefix_);
  std::string guard = timeoutGuard();
  if (name_ == "mpi") {
    std::string program = executableDirectory() + "/ompi-coll";
    rows_.description = fmt::format("Open MPI ({} under mpirun, btl self,vader)", program);
    if (access(program.c_str(), X_OK) != 0) {
      rows_.note =
          fmt::format("{} is missing (built only where MPI is found): no Open MPI rows", program);
      return;
    }
    // Loopback only, for the runtime's own connections too (the data goes over vader).
    command_ = fmt::format(
        "OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo {}mpirun "
        "--allow-run-as-root --oversubscribe -np {} --mca btl self,vader {} {}",
        guard, nranks, shellQuote(program), arguments);
  } else {
    std::string program = executableDirectory() + "/gloo-coll";
    rows_.description = fmt::format("Gloo ({}, {} processes, TCP on 127.0.0.1)", program, nranks);
    if (access(program.c_str(), X_OK) != 0) {
      rows_.note = fmt::format(
          "{} is missing (built only where Gloo is found; Debian: apt-get install libgloo-dev, "
          "then rebuild): no Gloo rows",
          program);
      return;
    }
    // N processes; the shell waits for all and fails if any failed.
    std::string store = workDir + "/gloo-store";
    std::filesystem::create_directory(store);
    std::string script;
    for (int rank = 0; rank < nranks; ++rank) {
      script += fmt::format("{}{} {} --rank {} --size {} --store {} & p{}=$!; ", guard,
                            shellQuote(program), arguments, rank, nranks, shellQuote(store), rank);
    }
    script += "s=0; ";
    for (int rank = 0; rank < nranks; ++rank) script += fmt::format("wait $p{} || s=1; ", rank);
    command_ = script + "exit $s";
  }
}

PeerRun::~PeerRun() { finish(); }

void PeerRun::fail(const std::string& why) {
  std::string said;
  for (const std::string& line : lastLines_) said += "\n#   " + line;
  rows_.note =
      fmt::format("{}; its last words:{}", why, said.empty() ? std::string(" none") : said);
  running_ = false;
  finish();
}

std::optional<std::string> PeerRun::readLine() {
  std::string line;
  char chunk[512];
  while (std::fgets(chunk, sizeof(chunk), output_) != nullptr) {
    line += chunk;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      return line;
    }
  }
  if (!line.empty()) return line;
  return std::nullopt;
}

bool PeerRun::start() {
  if (command_.empty()) return false;
  std::string error;
  if (!GateSet::create(gatePrefix_, 0, nranks_, error) ||
      !gates_.open(gatePrefix_, 0, nranks_, error)) {
    rows_.note = error + ": no " + name_ + " rows";
    return false;
  }
  std::fflush(stdout);
  output_ = popen((command_ + " 2>&1").c_str(), "r");
  if (output_ == nullptr) {
    rows_.note = fmt::format("could not start '{}': {}", command_, std::strerror(errno));
    return false;
  }
  running_ = true;
  // Rank 0 prints "# COLLECTIVE ..." once every rank has joined and allocated.
  std::string ready = std::string("# ") + coll::collectiveName(options_.collective) + " ";
  while (std::optional<std::string> line = readLine()) {
    if (line->rfind(ready, 0) == 0) return true;
    if (line->rfind("# unsupported", 0) == 0) {
      rows_.note = line->substr(2);
      running_ = false;
      finish();
      return false;
    }
    lastLines_.push_back(*line);
    if (lastLines_.size() > 6) lastLines_.pop_front();
  }
  fail("it ended before its first row");
  return false;
}

bool PeerRun::step(const coll::Shape& shape) {
  if (!running_) return false;
  gates_.release();
  while (std::optional<std::string> line = readLine()) {
    if (line->rfind(coll::kRowPrefix, 0) != 0) {
      lastLines_.push_back(*line);
      if (lastLines_.size() > 6) lastLines_.pop_front();
      continue;
    }
    unsigned long long bytes = 0;
    coll::CallTimes times[2];
    long long wrong[2] = {0, 0};
    if (std::sscanf(line->c_str() + std::strlen(coll::kRowPrefix),
                    "%llu,%lf,%lld,%lf,%lld,%lf,%lf,%lf,%lf,%lf,%lf", &bytes, &times[0].meanUs,
                    &wrong[0], &times[1].meanUs, &wrong[1], &times[0].p50Us, &times[0].p99Us,
                    &times[0].worstUs, &times[1].p50Us, &times[1].p99Us, &times[1].worstUs) != 11) {
      fail(fmt::format("it printed a row cc-bench cannot read: '{}'", *line));
      return false;
    }
    if (bytes != shape.rowBytes) {
      fail(fmt::format("its row has {} bytes where cc's has {}", bytes, shape.rowBytes));
      return false;
    }
    CollRow row;
    row.shape = shape;
    row.outOfPlace = timingOf(times[0], wrong[0]);
    row.inPlace = timingOf(times[1], wrong[1]);
    rows_.rows.push_back(row);
    return true;
  }
  fail("it ended in the middle of the sweep");
  return false;
}

void PeerRun::finish() {
  gates_.close();
  if (output_ == nullptr) return;
  while (std::optional<std::string> line = readLine()) {
    if (line->rfind("#", 0) == 0) continue;
    lastLines_.push_back(*line);
    if (lastLines_.size() > 6) lastLines_.pop_front();
  }
  int status = pclose(output_);
  output_ = nullptr;
  bool clean = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (running_ && !clean) {
    running_ = false;
    std::string said;
    for (const std::string& line : lastLines_) said += "\n#   " + line;
    if (rows_.note.empty())
      rows_.note = fmt::format("'{}' {}{}", command_, describeExit(status), said);
  }
  running_ = false;
}

}  // namespace cc::bench
