// The p2p subcommand (see p2p_command.h).
#include "p2p_command.h"

#include <fmt/core.h>

#include <cstdio>

#include "cc_call.h"
#include "launch.h"
#include "memcpy_bench.h"
#include "ompi_peer.h"
#include "p2p.h"
#include "report.h"

namespace cc::bench {
namespace {

void printPreamble(const P2pOptions& options, bool underMpirun, int nranks) {
  const SweepOptions& sweep = options.sweep;
  fmt::print(
      "# cc-bench p2p: {} ranks ({}), sizes {}..{} B x{}, iterations <= {}, warmup <= {}, window "
      "{}\n",
      nranks, underMpirun ? "mpirun" : "forked here", sweep.minBytes, sweep.maxBytes, sweep.factor,
      sweep.iterations, sweep.warmup, kWindow);
  fmt::print(
      "# lat: half a round trip, median; bw: {} back-to-back sends + 1-byte ack, median; GB = 1e9 "
      "B\n",
      kWindow);
}

}  // namespace

int runP2pCommand(const P2pOptions& options) {
  bool underMpirun = launchedByMpirun();
  P2pReport report;
  report.sizes = sizeSeries(options.sweep);

  RankProgram program;
  if (!underMpirun) {
    program.transports = options.transports;
  } else if (options.transportGiven && options.transports.size() == 1) {
    program.transports = options.transports;
  } else {
    program.transports = {""};  // whatever CC_TRANSPORT in the environment selects
  }
  program.measure = [&](ccComm_t comm, int rank, int nranks, const std::string& transport,
                        bool first) {
    if (first) {
      if (rank == 0) {
        printPreamble(options, underMpirun, nranks);
        std::fflush(stdout);
        report.memcpy = measureMemcpy(options.sweep);
      }
      checkCc(ccBarrier(comm, nullptr), comm, "ccBarrier after the memcpy measurement");
    }
    Clock::time_point start = Clock::now();
    std::vector<P2pPoint> points;
    if (rank <= 1) points = measureP2p(comm, rank, options.sweep);
    checkCc(ccBarrier(comm, nullptr), comm, "ccBarrier after the p2p sweep");
    if (rank == 0) {
      fmt::print("# {}: {} sizes in {:.1f} s\n", transport, points.size(),
                 secondsBetween(start, Clock::now()));
      std::fflush(stdout);
      report.transports.push_back({transport, std::move(points)});
    }
  };

  program.finish = [&](int rank) {
    if (rank != 0) return;
    if (options.peerMpi && underMpirun) {
      fmt::print(
          "# note: --peer mpi is ignored under mpirun (run cc-bench by hand to compare with Open "
          "MPI)\n");
    } else if (options.peerMpi) {
      Clock::time_point start = Clock::now();
      OmpiRun run = runOmpiPeer(options.sweep);
      if (run.note.empty()) {
        fmt::print("# ompi: {} sizes in {:.1f} s: {}\n", run.points.size(),
                   secondsBetween(start, Clock::now()), run.command);
        report.ompi = std::move(run.points);
      } else {
        fmt::print("# note: {}\n", run.note);
      }
    }
    printP2pTable(report, stdout);
    std::fflush(stdout);
    if (!options.jsonPath.empty()) {
      std::string error;
      if (!writeP2pJson(report, options.jsonPath, error)) failRank(error);
    }
  };

  if (underMpirun && options.nranks != 2) {
    std::fprintf(stderr, "cc-bench: -np is ignored under mpirun (mpirun chose the ranks)\n");
  }
  return underMpirun ? runUnderMpirun(program) : runForked(options.nranks, program);
}

}  // namespace cc::bench
