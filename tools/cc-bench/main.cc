// cc-bench: cc's benchmark program. One subcommand per kind of measurement: `p2p`
// (ccSend/ccRecv latency and bandwidth against memcpy and Open MPI) and one per collective
// (nccl-tests' table, against Open MPI and Gloo). Each subcommand parses its own options
// and returns the process's exit status.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "coll_command.h"
#include "coll_options.h"
#include "options.h"
#include "p2p_command.h"

namespace {

const char* const kUsage =
    "usage: cc-bench <command> [options]\n"
    "commands:\n"
    "  p2p            point-to-point latency and bandwidth (cc-bench p2p --help)\n"
    "  allreduce      nccl-tests' table for a collective, with --peer mpi,gloo\n"
    "  allgather      (cc-bench allreduce --help)\n"
    "  reducescatter\n"
    "  broadcast\n"
    "  reduce\n"
    "  alltoall\n"
    "  sendrecv\n";

int runCollective(cc::bench::coll::Collective collective,
                  const std::vector<std::string_view>& args) {
  for (std::string_view arg : args) {
    if (arg == "-h" || arg == "--help") {
      std::fputs(cc::bench::kCollUsage, stdout);
      return 0;
    }
  }
  std::string error;
  std::optional<cc::bench::CollOptions> options =
      cc::bench::parseCollOptions(collective, args, error);
  if (!options) {
    std::fprintf(stderr, "cc-bench %s: %s\n%s", cc::bench::coll::collectiveName(collective),
                 error.c_str(), cc::bench::kCollUsage);
    return 2;
  }
  return cc::bench::runCollCommand(*options);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  cc::bench::coll::Collective collective{};
  if (cc::bench::coll::parseName(args[0], cc::bench::coll::kCollectives,
                                 cc::bench::coll::collectiveName, collective)) {
    return runCollective(collective, std::vector<std::string_view>(args.begin() + 1, args.end()));
  }
  if (args[0] != "p2p") {
    std::fprintf(stderr, "cc-bench: unknown command '%s'\n%s", std::string(args[0]).c_str(),
                 kUsage);
    return 2;
  }
  std::vector<std::string_view> p2pArgs(args.begin() + 1, args.end());
  for (std::string_view arg : p2pArgs) {
    if (arg == "-h" || arg == "--help") {
      std::fputs(cc::bench::kP2pUsage, stdout);
      return 0;
    }
  }
  std::string error;
  std::optional<cc::bench::P2pOptions> options = cc::bench::parseP2pOptions(p2pArgs, error);
  if (!options) {
    std::fprintf(stderr, "cc-bench p2p: %s\n%s", error.c_str(), cc::bench::kP2pUsage);
    return 2;
  }
  return cc::bench::runP2pCommand(*options);
}
