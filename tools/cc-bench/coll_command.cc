// The collective subcommands (see coll_command.h).
#include "coll_command.h"

#include <fmt/core.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "cc_call.h"
#include "coll_cc.h"
#include "coll_peer.h"
#include "coll_peers.h"
#include "coll_report.h"
#include "launch.h"

namespace cc::bench {
namespace {

// -R 1: a buffer from ccMemAlloc, registered with the communicator, touched (no page
// fault inside a timed loop); deregistered and freed when it goes.
class RegisteredBuffer {
 public:
  RegisteredBuffer(ccComm_t comm, size_t bytes) : comm_(comm) {
    const size_t size = std::max<size_t>(bytes, 1);
    checkCc(ccMemAlloc(&data_, size), comm, "ccMemAlloc");
    std::memset(data_, 0, size);
    checkCc(ccCommRegister(comm, data_, size, &handle_), comm, "ccCommRegister");
  }
  ~RegisteredBuffer() {
    checkCc(ccCommDeregister(comm_, handle_), comm_, "ccCommDeregister");
    checkCc(ccMemFree(data_), comm_, "ccMemFree");
  }
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  ccComm_t comm_;
  void* data_ = nullptr;
  void* handle_ = nullptr;
};

void printPreamble(const CollOptions& o, bool underMpirun, int nranks,
                   const std::vector<PeerRun*>& peers) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  fmt::print("# cc-bench {}: {} ranks ({}) on {}\n", coll::collectiveName(o.collective), nranks,
             underMpirun ? "mpirun" : "forked here", host);
  fmt::print(
      "# minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {} "
      "stream: {}\n",
      o.minBytes, o.maxBytes, o.factor, o.warmup, o.iterations, o.check ? 1 : 0,
      !o.useStream ? "NULL (blocking)"
      : o.blocking ? "ccStream_t, synchronized every iteration"
                   : "ccStream_t, synchronized after the loop");
  fmt::print(
      "# time: each rank's loop over the iterations, {} (-a {}); GB = 1e9 B; bus factor {:.3f}\n",
      coll::averageName(o.average), o.average, coll::busFactor(o.collective, nranks));
  if (o.registered) {
    fmt::print("# cc's buffers: registered (ccMemAlloc, ccCommRegister); the peers': their own\n");
  }
  if (o.busy > 0) {
    fmt::print("# load: {} busy process(es) (a spinning loop each) beside every system's ranks\n",
               o.busy);
  }
  if (!peers.empty()) {
    std::string names;
    for (const PeerRun* p : peers) names += (names.empty() ? "" : ", ") + p->rows().name;
    fmt::print("# peers: {}, run row by row between cc's rows (their tables follow cc's)\n", names);
  }
  fmt::print("#\n");
  std::fflush(stdout);
}

// Rank 0, after the sweep: the rest of the output and the files. Returns cc's wrong count.
int64_t report(CollReport& report, std::vector<std::unique_ptr<PeerRun>>& peers) {
  const CollOptions& o = *report.options;
  int64_t wrong = printCollFooter(report, report.systems.front(), stdout);
  for (std::unique_ptr<PeerRun>& peer : peers) {
    peer->finish();
    report.systems.push_back(peer->rows());
  }
  printPeerTables(report, stdout);
  printComparison(report, stdout);
  if (o.latency) printLatency(report, stdout);
  std::fflush(stdout);
  std::string error;
  if (!o.jsonPath.empty() && !writeCollJson(report, o.jsonPath, error)) failRank(error);
  if (!o.csvPath.empty() && !writeCollCsv(report, o.csvPath, error)) failRank(error);
  if (!o.plotPath.empty() && !writeCollSvg(report, o.plotPath, error)) failRank(error);
  return wrong;
}

// --busy N: processes that spin until killed (or until cc-bench dies: the parent-death
// signal), started before the ranks and the peers and stopped after them.
class BusyProcesses {
 public:
  explicit BusyProcesses(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t parent = getpid();
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyProcesses() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;
  size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace

int runCollCommand(const CollOptions& options) {
  bool underMpirun = launchedByMpirun();
  bool wantPeers = (options.peerMpi || options.peerGloo) && !underMpirun;
  if (underMpirun && (options.peerMpi || options.peerGloo)) {
    std::fprintf(stderr,
                 "cc-bench: --peer is ignored under mpirun (run cc-bench by hand to compare)\n");
  }
  if (underMpirun && options.nranksGiven) {
    std::fprintf(stderr, "cc-bench: -np is ignored under mpirun (mpirun chose the ranks)\n");
  }
  // The gates and Gloo's store live here; made before the fork so every rank sees them.
  std::unique_ptr<TempDirectory> work;
  std::string ccGates;
  if (wantPeers) {
    work = std::make_unique<TempDirectory>();
    std::string error;
    if (work->path().empty()) {
      std::fprintf(stderr, "cc-bench: cannot make a temporary directory for the peers\n");
      return 1;
    }
    ccGates = work->path() + "/cc";
    if (!GateSet::create(ccGates, 1, options.nranks, error)) {
      std::fprintf(stderr, "cc-bench: %s\n", error.c_str());
      return 1;
    }
  }

  RankProgram program;
  program.transports = {""};  // whatever CC_TRANSPORT selects (auto: shm on one host)
  program.measure = [&](ccComm_t comm, int rank, int nranks, const std::string&, bool) {
    if (options.root >= nranks)
      failRank(fmt::format("root {} is not a rank of {}", options.root, nranks));
    CollReport collReport;
    collReport.options = &options;
    collReport.nranks = nranks;
    collReport.systems.push_back({"cc", "cc", {}, {}});
    std::vector<coll::Shape> shapes =
        coll::rowShapes(options.collective, options.type, nranks, options.minBytes,
                        options.maxBytes, options.factor);
    size_t maxSend = 0;
    size_t maxRecv = 0;
    for (const coll::Shape& s : shapes) {
      maxSend = std::max(maxSend, s.sendElems * coll::typeSize(options.type));
      maxRecv = std::max(maxRecv, s.recvElems * coll::typeSize(options.type));
    }
    coll::Buffer plainSend;
    coll::Buffer plainRecv;
    std::optional<RegisteredBuffer> registeredSend;
    std::optional<RegisteredBuffer> registeredRecv;
    CcBuffers buffers;
    if (options.registered) {
      registeredSend.emplace(comm, maxSend);
      registeredRecv.emplace(comm, maxRecv);
      buffers = {registeredSend->data(), registeredRecv->data()};
    } else {
      plainSend = coll::makeBuffer(maxSend);
      plainRecv = coll::makeBuffer(maxRecv);
      buffers = {plainSend.get(), plainRecv.get()};
    }
    ccStream_t stream = nullptr;
    if (options.useStream) checkCc(ccStreamCreate(&stream), comm, "ccStreamCreate");

    // Rank 0 starts the peers and holds every gate; the other ranks wait at theirs.
    std::vector<std::unique_ptr<PeerRun>> peers;
    GateSet gates;
    std::unique_ptr<coll::Gate> myGate;
    if (wantPeers && rank == 0) {
      std::string error;
      if (!gates.open(ccGates, 1, nranks, error)) failRank(error);
      if (options.peerMpi)
        peers.push_back(std::make_unique<PeerRun>("mpi", options, nranks, work->path()));
      if (options.peerGloo)
        peers.push_back(std::make_unique<PeerRun>("gloo", options, nranks, work->path()));
      std::vector<PeerRun*> views;
      for (auto& p : peers) views.push_back(p.get());
      printPreamble(options, underMpirun, nranks, views);
      for (auto& p : peers) {
        if (!p->start()) fmt::print("# note: {}\n", p->rows().note);
      }
    } else if (rank == 0) {
      printPreamble(options, underMpirun, nranks, {});
    }
    if (wantPeers && rank != 0) myGate = std::make_unique<coll::Gate>(ccGates, rank);
    if (rank == 0) printCollHeader(stdout);

    for (const coll::Shape& shape : shapes) {
      if (wantPeers) {
        if (rank == 0)
          gates.release();
        else if (!myGate->wait())
          break;
      }
      CollRow row = measureCcRow(comm, stream, options, shape, rank, nranks, buffers);
      if (rank != 0) continue;
      printCollRow(collReport, row, stdout);
      collReport.systems.front().rows.push_back(row);
      for (auto& p : peers) p->step(shape);
    }
    if (stream != nullptr) checkCc(ccStreamDestroy(stream), comm, "ccStreamDestroy");
    // No rank frees its registered buffers while a peer may still read them.
    if (options.registered) checkCc(ccBarrier(comm, nullptr), comm, "ccBarrier after the sweep");
    registeredSend.reset();
    registeredRecv.reset();
    if (rank != 0) return;
    gates.close();
    int64_t wrong = report(collReport, peers);
    if (wrong > 0) failRank(fmt::format("cc gave {} wrong elements", wrong));
  };
  program.finish = [](int) {};

  if (underMpirun && options.busy > 0) {
    std::fprintf(stderr,
                 "cc-bench: --busy is ignored under mpirun (start the busy processes beside "
                 "mpirun, or run cc-bench by hand)\n");
  }
  if (underMpirun) return runUnderMpirun(program);
  BusyProcesses busy(options.busy);
  if (static_cast<int>(busy.size()) != options.busy) {
    std::fprintf(stderr, "cc-bench: --busy %d: fork failed: %s\n", options.busy,
                 std::strerror(errno));
    return 1;
  }
  return runForked(options.nranks, program);
}

}  // namespace cc::bench
