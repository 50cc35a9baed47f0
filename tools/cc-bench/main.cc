// cc-bench: cc's benchmark program. One subcommand per kind of measurement; the first
// is `p2p` (ccSend/ccRecv latency and bandwidth against memcpy and Open MPI). Each
// subcommand parses its own options and returns the process's exit status.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "options.h"
#include "p2p_command.h"

namespace {

const char* const kUsage =
    "usage: cc-bench <command> [options]\n"
    "commands:\n"
    "  p2p   point-to-point latency and bandwidth (cc-bench p2p --help)\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
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
