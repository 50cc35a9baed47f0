// Parsing of `cc-bench COLLECTIVE` options (see coll_options.h).
#include "coll_options.h"

#include <charconv>

#include "options.h"

namespace cc::bench {

const char* const kCollUsage =
    "usage: cc-bench allreduce|allgather|reducescatter|broadcast|reduce|alltoall|sendrecv\n"
    "         [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-d TYPE] [-o OP] [-r ROOT] [-n ITERS]\n"
    "         [-w WARMUP] [-c 0|1] [-z 0|1] [-R 0|1] [-a 0|1|2|3] [--stream] [-np N]\n"
    "         [--peer mpi|gloo|mpi,gloo]\n"
    "         [--json FILE] [--csv FILE] [--plot FILE.svg] [--latency] [--busy N]\n"
    "  nccl-tests' table for one collective: per size, out-of-place then in-place time (us),\n"
    "  algbw and busbw (GB/s, 1e9 B) and the number of wrong elements; then the average bus\n"
    "  bandwidth. As in nccl-tests, a rank's time is its loop's over the iterations, and -a\n"
    "  combines the ranks' times: 0 rank 0's, 1 their mean (default), 2 the least, 3 the most.\n"
    "  -d int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16 (default float)\n"
    "  -o sum|prod|max|min|avg (default sum)   -r root of broadcast and reduce (default 0)\n"
    "  -c 1 checks each size once, with inputs that make every reduction exact (default 1)\n"
    "  Calls go on the NULL stream, which blocks; --stream queues them on a ccStream_t and\n"
    "  synchronizes every iteration (-z 1, default) or once after the loop (-z 0).\n"
    "  -R 1 runs cc on registered buffers (ccMemAlloc + ccCommRegister): the ranks of a host\n"
    "  read each other's buffers in place. The peers keep their own buffers.\n"
    "  Sizes take K, M, G (1024s). Defaults: -b 8 -e 64M -f 2 -n 20 -w 5 -np 2.\n"
    "  Started by hand, cc-bench forks -np ranks here; under mpirun it uses\n"
    "  ccCommInitFromEnv and ignores -np and --peer.\n"
    "  --peer mpi runs the same sweep through Open MPI (ompi-coll under mpirun), --peer gloo\n"
    "  through Gloo (gloo-coll, TCP on 127.0.0.1), interleaved with cc size by size; their\n"
    "  tables follow cc's, then a comparison (busbw ratios, times).\n"
    "  --json, --csv: every row of every system; --plot: busbw against size as SVG.\n"
    "  --latency: a table of the median, 99th-percentile and worst call per size (the\n"
    "  slowest rank's, out of place) for cc and each peer; use a large -n.\n"
    "  --busy N: N busy processes (a spinning loop each) run beside the ranks for the whole\n"
    "  sweep, cc's rows and the peers' alike: training's compute threads on the same cores.\n";

namespace {

std::optional<int> parseInt(std::string_view text, int low, int high) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high)
    return std::nullopt;
  return value;
}

}  // namespace

std::optional<CollOptions> parseCollOptions(coll::Collective collective,
                                            const std::vector<std::string_view>& args,
                                            std::string& error) {
  CollOptions options;
  options.collective = collective;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (flag == "--stream") {
      options.useStream = true;
      continue;
    }
    if (flag == "--latency") {
      options.latency = true;
      continue;
    }
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
      (flag == "-b" ? options.minBytes : flag == "-e" ? options.maxBytes : options.factor) = *bytes;
    } else if (flag == "-d") {
      if (!coll::parseName(value, coll::kDataTypes, coll::dataTypeName, options.type)) return bad();
    } else if (flag == "-o") {
      if (!coll::parseName(value, coll::kOps, coll::opName, options.op)) return bad();
    } else if (flag == "-r") {
      std::optional<int> root = parseInt(value, 0, 1 << 20);
      if (!root) return bad();
      options.root = *root;
    } else if (flag == "-a") {
      std::optional<int> average = parseInt(value, 0, 3);
      if (!average) return bad();
      options.average = *average;
    } else if (flag == "-n" || flag == "-w") {
      std::optional<int> count = parseInt(value, flag == "-n" ? 1 : 0, 1'000'000);
      if (!count) return bad();
      (flag == "-n" ? options.iterations : options.warmup) = *count;
    } else if (flag == "-c" || flag == "-z" || flag == "-R") {
      std::optional<int> on = parseInt(value, 0, 1);
      if (!on) return bad();
      (flag == "-c"   ? options.check
       : flag == "-z" ? options.blocking
                      : options.registered) = *on == 1;
    } else if (flag == "-np") {
      std::optional<int> count = parseInt(value, 1, 256);
      if (!count) return bad();
      options.nranks = *count;
      options.nranksGiven = true;
    } else if (flag == "--peer") {
      // "mpi", "gloo", "mpi,gloo"; may be given more than once.
      std::string_view rest = value;
      while (!rest.empty()) {
        size_t comma = rest.find(',');
        std::string_view name = rest.substr(0, comma);
        if (name == "mpi") {
          options.peerMpi = true;
        } else if (name == "gloo") {
          options.peerGloo = true;
        } else {
          return bad();
        }
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else if (flag == "--busy") {
      std::optional<int> count = parseInt(value, 0, 64);
      if (!count) return bad();
      options.busy = *count;
    } else if (flag == "--json") {
      options.jsonPath = std::string(value);
    } else if (flag == "--csv") {
      options.csvPath = std::string(value);
    } else if (flag == "--plot") {
      options.plotPath = std::string(value);
    } else {
      error = "unknown option " + std::string(flag);
      return std::nullopt;
    }
  }
  if (options.minBytes < 1 || options.maxBytes < options.minBytes) {
    error = "sizes must satisfy 1 <= MINBYTES <= MAXBYTES";
    return std::nullopt;
  }
  if (options.factor < 2) {
    error = "FACTOR must be at least 2";
    return std::nullopt;
  }
  if (options.root >= options.nranks && options.nranksGiven) {
    error = "ROOT must be below -np";
    return std::nullopt;
  }
  return options;
}

}  // namespace cc::bench
