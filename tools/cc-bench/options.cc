// Parsing of `cc-bench p2p` options (see options.h).
#include "options.h"

#include <charconv>
#include <limits>

namespace cc::bench {

const char* const kP2pUsage =
    "usage: cc-bench p2p [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
    "                    [-np N] [--transport shm|tcp|both] [--peer mpi] [--json FILE]\n"
    "  Point-to-point latency (half a ccSend/ccRecv round trip) and streaming bandwidth\n"
    "  (16 back-to-back ccSend, then a 1-byte ack) between ranks 0 and 1, beside memcpy\n"
    "  and, with --peer mpi, Open MPI (bench/ompi-pingpong). Sizes take K, M, G (1024s).\n"
    "  Defaults: -b 8 -e 256M -f 4 -n 50 -w 5 -np 2 --transport both.\n"
    "  Started by hand, cc-bench forks -np ranks on this host and measures each transport\n"
    "  with a fresh communicator. Under mpirun it measures only the transport the\n"
    "  environment selects (CC_TRANSPORT, default auto), or the one --transport names;\n"
    "  -np and --peer mpi are ignored there.\n";

std::optional<size_t> parseSize(std::string_view text) {
  size_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  std::string_view suffix(end, static_cast<size_t>(text.data() + text.size() - end));
  int shift = 0;
  if (suffix == "K" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g") {
    shift = 30;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  if (value > (std::numeric_limits<size_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

namespace {

std::optional<int> parseCount(std::string_view text, int low, int high) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high)
    return std::nullopt;
  return value;
}

}  // namespace

std::optional<P2pOptions> parseP2pOptions(const std::vector<std::string_view>& args,
                                          std::string& error) {
  P2pOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (i + 1 >= args.size()) {
      error = std::string(flag) + " needs a value";
      return std::nullopt;
    }
    std::string_view value = args[++i];
    auto bad = [&]() {
      error = std::string(flag) + ": bad value '" + std::string(value) + "'";
      return std::nullopt;
    };
    if (flag == "-b" || flag == "-e" || flag == "-f") {
      std::optional<size_t> bytes = parseSize(value);
      if (!bytes) return bad();
      (flag == "-b"   ? options.sweep.minBytes
       : flag == "-e" ? options.sweep.maxBytes
                      : options.sweep.factor) = *bytes;
    } else if (flag == "-n") {
      std::optional<int> count = parseCount(value, 1, 1'000'000);
      if (!count) return bad();
      options.sweep.iterations = *count;
    } else if (flag == "-w") {
      std::optional<int> count = parseCount(value, 0, 1'000'000);
      if (!count) return bad();
      options.sweep.warmup = *count;
    } else if (flag == "-np") {
      std::optional<int> count = parseCount(value, 2, 256);
      if (!count) return bad();
      options.nranks = *count;
    } else if (flag == "--transport") {
      if (value == "both") {
        options.transports = {"shm", "tcp"};
      } else if (value == "shm" || value == "tcp") {
        options.transports = {std::string(value)};
      } else {
        return bad();
      }
      options.transportGiven = true;
    } else if (flag == "--peer") {
      if (value != "mpi") return bad();
      options.peerMpi = true;
    } else if (flag == "--json") {
      options.jsonPath = std::string(value);
    } else {
      error = "unknown option " + std::string(flag);
      return std::nullopt;
    }
  }
  const SweepOptions& sweep = options.sweep;
  if (sweep.minBytes < 1 || sweep.maxBytes < sweep.minBytes) {
    error = "sizes must satisfy 1 <= MINBYTES <= MAXBYTES";
    return std::nullopt;
  }
  if (sweep.factor < 2) {
    error = "FACTOR must be at least 2";
    return std::nullopt;
  }
  return options;
}

}  // namespace cc::bench
