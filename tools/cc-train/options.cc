#include "options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>

#include "config_file.h"

namespace cc::parallel::train_tool {
namespace {

template <typename Integer>
Status parseInteger(const std::string& flag, const std::string& text, Integer low, Integer high,
                    Integer* out) {
  Integer value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return invalidArgument(flag + ": \"" + text + "\" is not an integer");
  }
  if (value < low || value > high) {
    return invalidArgument(flag + ": " + text + " is not in [" + std::to_string(low) + ", " +
                           std::to_string(high) + "]");
  }
  *out = value;
  return Status::ok();
}

// A float or double flag (read as a double; a float flag's value is then rounded to it).
template <typename Real>
Status parseReal(const std::string& flag, const std::string& text, Real low, Real high, Real* out) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value)) {
    return invalidArgument(flag + ": \"" + text + "\" is not a number");
  }
  if (value < low || value > high) {
    return invalidArgument(flag + ": " + text + " is not in [" + std::to_string(low) + ", " +
                           std::to_string(high) + "]");
  }
  *out = static_cast<Real>(value);
  return Status::ok();
}

Status parseFloat(const std::string& flag, const std::string& text, float low, float high,
                  float* out) {
  return parseReal(flag, text, low, high, out);
}

Status parseDouble(const std::string& flag, const std::string& text, double low, double high,
                   double* out) {
  return parseReal(flag, text, low, high, out);
}

}  // namespace

const char* usage() {
  return R"(usage: cc-train [flags]
Trains the reference GPT-2-style model on one process (docs/TRAINING.md).

model:     --layers L (4) --heads H (4) --width C (256) --vocab V (256) --seq T (128)
batch:     --batch B (8) --grad-accum K (1)
schedule:  --steps N (200) --lr X (3e-3) --warmup N (20) --weight-decay X (0.1) --clip X (1.0)
           --seed S (1337) --stop-after N (leave after N steps of this run)
data:      --data FILE.bin (default: synthetic data from the seed)
           --prepare TEXT OUT.bin (byte-tokenise a text file, then exit)
state:     --load CKPT --save CKPT --save-every K
eval:      --eval FILE.bin (with --load and no --steps: print eval_loss and exit)
           --eval-every K
output:    --log FILE.csv --plot FILE.svg --print-every K (10)
machine:   --threads N (1, compute threads) --recompute (keep only each block's input in
           forward, rebuild the block in backward: less activation memory, ~1/3 more compute)
parallel:  --dp N (1) --tp N (1; heads and the padded vocab divisible by it) --pp N (1; the
           layers divisible by it, or --pp-layers 3,5: blocks per stage); run under mpirun
           -np DP*PP*TP --zero 0|1|2|3 (0; 0 or 1 with --pp) --bucket-mb X (25)
           --no-overlap (reduce gradients after backward instead of during it)
           --no-register (DP's buffers not registered with cc: peers on a host read them
           through cc's staging instead of in place)
           --sp (sequence parallelism over the TP group; --tp divides --seq)
           --compress none|fp16|bf16|onebit|powersgd (DP's gradient reductions; onebit and
           powersgd with --zero 0) --compress-rank R (4, PowerSGD) --compress-start STEP (0:
           float32 reductions for the first STEP steps) --local-sgd K (no gradient
           reductions; parameters averaged over DP every K steps) --optimizer adamw|onebit-adam
           (1-bit Adam: AdamW for --freeze-step K (20) steps, then the variance frozen and
           the momentum averaged 1-bit compressed)
config:    --config FILE (YAML or JSON: parallel_config, zero_config, model, batch, optimizer,
           training; docs/TRAINING.md; flags given as well override the file)
pipeline:  --schedule gpipe|1f1b|interleaved|zb-h1 (1f1b) over --grad-accum micro-batches
           --virtual-stages V (interleaved: V model chunks per stage; --pp-layers then
           lists pp x V virtual stages) --pp-plan FILE.svg (draw the plan with its
           predicted bubble and exit)
experts:   --experts E (0: dense) --top-k K (2) --moe-every N (1: every block; N: blocks 0, N,
           2N, ...) --expert-width F (4C) --capacity-factor X (1.25; 0 dropless)
           --aux-loss-coef X (0.01) --z-loss-coef X (0) --ep N (1; experts split over N
           of the DP ranks; divides --dp and E; --zero 0, no --pp)
trace:     --trace PREFIX (as CC_TRACE=PREFIX: each rank writes PREFIX.rank<R>.json, its
           forwards and backwards (F, B, W per micro-batch and chunk) and waits beside cc's
           operations, for Perfetto; needs a communicator, i.e. a launcher or a mesh)
)";
}

Result<Options> parseOptions(const std::vector<std::string>& arguments) {
  Options options;
  TrainOptions& train = options.train;
  GptConfig& model = train.model;
  constexpr int64_t kMaxSteps = int64_t{1} << 40;
  using Handler = std::function<Status(const std::string&, const std::string&)>;
  const std::map<std::string, Handler> handlers = {
      {"--layers", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1024, &model.layers); }},
      {"--heads", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1024, &model.heads); }},
      {"--width", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 65536, &model.width); }},
      {"--vocab", [&](auto& f, auto& v) { return parseInteger(f, v, 2, 65536, &model.vocab); }},
      {"--seq", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 65536, &model.seq); }},
      {"--batch", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 20, &train.batch); }},
      {"--grad-accum",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 20, &train.gradAccum); }},
      {"--steps",
       [&](auto& f, auto& v) {
         options.stepsGiven = true;
         return parseInteger<int64_t>(f, v, 0, kMaxSteps, &train.steps);
       }},
      {"--stop-after",
       [&](auto& f, auto& v) {
         return parseInteger<int64_t>(f, v, 1, kMaxSteps, &options.stopAfter);
       }},
      {"--warmup",
       [&](auto& f, auto& v) { return parseInteger<int64_t>(f, v, 0, kMaxSteps, &train.warmup); }},
      {"--lr", [&](auto& f, auto& v) { return parseFloat(f, v, 0.0f, 10.0f, &train.lr); }},
      {"--weight-decay",
       [&](auto& f, auto& v) { return parseFloat(f, v, 0.0f, 10.0f, &train.adamw.weightDecay); }},
      {"--clip", [&](auto& f, auto& v) { return parseFloat(f, v, 0.0f, 1e6f, &train.clip); }},
      {"--seed",
       [&](auto& f, auto& v) { return parseInteger<uint64_t>(f, v, 0, UINT64_MAX, &train.seed); }},
      {"--data",
       [&](auto&, auto& v) {
         options.dataPath = v;
         return Status::ok();
       }},
      {"--load",
       [&](auto&, auto& v) {
         options.loadPath = v;
         return Status::ok();
       }},
      {"--save",
       [&](auto&, auto& v) {
         options.savePath = v;
         return Status::ok();
       }},
      {"--save-every",
       [&](auto& f, auto& v) {
         return parseInteger<int64_t>(f, v, 1, kMaxSteps, &options.saveEvery);
       }},
      {"--eval-every",
       [&](auto& f, auto& v) {
         return parseInteger<int64_t>(f, v, 1, kMaxSteps, &options.evalEvery);
       }},
      {"--eval",
       [&](auto&, auto& v) {
         options.evalPath = v;
         return Status::ok();
       }},
      {"--log",
       [&](auto&, auto& v) {
         options.logPath = v;
         return Status::ok();
       }},
      {"--plot",
       [&](auto&, auto& v) {
         options.plotPath = v;
         return Status::ok();
       }},
      {"--threads",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1024, &options.threads); }},
      {"--print-every",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 30, &options.printEvery); }},
      {"--dp", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 16, &options.dp); }},
      {"--ep", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 16, &options.ep); }},
      {"--experts", [&](auto& f, auto& v) { return parseInteger(f, v, 0, 1024, &model.experts); }},
      {"--top-k", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1024, &model.topK); }},
      {"--moe-every",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1024, &model.moeEvery); }},
      {"--expert-width",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 20, &model.expertWidth); }},
      {"--capacity-factor",
       [&](auto& f, auto& v) { return parseDouble(f, v, 0.0, 1024.0, &model.capacityFactor); }},
      {"--aux-loss-coef",
       [&](auto& f, auto& v) { return parseDouble(f, v, 0.0, 1e6, &model.auxLossCoef); }},
      {"--z-loss-coef",
       [&](auto& f, auto& v) { return parseDouble(f, v, 0.0, 1e6, &model.zLossCoef); }},
      {"--tp", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 16, &options.tp); }},
      {"--pp", [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 16, &options.pp); }},
      {"--pp-layers",
       [&](auto& f, auto& v) -> Status {
         options.ppLayers.clear();
         size_t at = 0;
         while (at <= v.size()) {
           const size_t comma = std::min(v.find(',', at), v.size());
           int layers = 0;
           CC_TRY(parseInteger(f, v.substr(at, comma - at), 1, 1024, &layers));
           options.ppLayers.push_back(layers);
           at = comma + 1;
         }
         return Status::ok();
       }},
      {"--virtual-stages",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 64, &train.virtualStages); }},
      {"--schedule",
       [&](auto& f, auto& v) -> Status {
         auto kind = parseSchedule(v);
         if (!kind.isOk()) return invalidArgument(f + ": " + kind.status().message());
         train.schedule = kind.value();
         return Status::ok();
       }},
      {"--pp-plan",
       [&](auto&, auto& v) {
         options.planPath = v;
         return Status::ok();
       }},
      {"--trace",
       [&](auto& f, auto& v) -> Status {
         if (v.empty()) return invalidArgument(f + " needs a file prefix");
         options.tracePrefix = v;
         return Status::ok();
       }},
      {"--zero",
       [&](auto& f, auto& v) { return parseInteger(f, v, 0, 3, &train.parallel.zeroStage); }},
      {"--compress",
       [&](auto& f, auto& v) -> Status {
         auto kind = parseCompression(v);
         if (!kind.isOk()) return invalidArgument(f + ": " + kind.status().message());
         train.compression.kind = kind.value();
         return Status::ok();
       }},
      {"--optimizer",
       [&](auto& f, auto& v) -> Status {
         if (v != "adamw" && v != "onebit-adam")
           return invalidArgument(f + ": '" + v + "' is not adamw or onebit-adam");
         train.oneBitAdam = v == "onebit-adam";
         return Status::ok();
       }},
      {"--freeze-step",
       [&](auto& f, auto& v) {
         return parseInteger(f, v, int64_t{0}, int64_t{1} << 40, &train.freezeStep);
       }},
      {"--local-sgd",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1 << 20, &train.localSgdSteps); }},
      {"--compress-rank",
       [&](auto& f, auto& v) { return parseInteger(f, v, 1, 1024, &train.compression.rank); }},
      {"--compress-start",
       [&](auto& f, auto& v) {
         return parseInteger(f, v, int64_t{0}, int64_t{1} << 40, &train.compression.startStep);
       }},
      {"--bucket-mb",
       [&](auto& f, auto& v) { return parseFloat(f, v, 1e-3f, 1e5f, &options.bucketMiB); }},
  };
  // Flags that take no value.
  const std::map<std::string, bool*> switches = {{"--no-overlap", nullptr},
                                                 {"--no-register", nullptr},
                                                 {"--sp", &train.sequenceParallel},
                                                 {"--recompute", &train.recompute}};
  auto apply = [&](const std::string& flag, const std::string* value) -> Status {
    const auto toggle = switches.find(flag);
    if (toggle != switches.end()) {
      if (toggle->second != nullptr) *toggle->second = true;
      if (flag == "--no-overlap") train.parallel.overlap = false;
      if (flag == "--no-register") train.parallel.registerBuffers = false;
      return Status::ok();
    }
    const auto handler = handlers.find(flag);
    if (handler == handlers.end()) return invalidArgument("unknown flag " + flag + " (see --help)");
    if (value == nullptr) return invalidArgument(flag + " needs a value");
    return handler->second(flag, *value);
  };
  // --config FILE first: the file's flags, then the command line's, which override them.
  std::vector<std::string> commandLine;
  std::string configPath;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] != "--config") {
      commandLine.push_back(arguments[i]);
      continue;
    }
    if (i + 1 >= arguments.size()) return invalidArgument("--config needs a value");
    configPath = arguments[++i];
  }
  if (!configPath.empty()) {
    CC_ASSIGN_OR_RETURN(std::vector<ConfigFlag> fromFile, readConfigFile(configPath));
    for (const ConfigFlag& entry : fromFile) {
      const Status applied = apply(entry.flag, entry.value.empty() ? nullptr : &entry.value);
      if (!applied.isOk()) {
        return invalidArgument("--config " + configPath + ": " + entry.key + ": " +
                               applied.message());
      }
    }
  }
  for (size_t i = 0; i < commandLine.size(); ++i) {
    const std::string& flag = commandLine[i];
    if (flag == "--help" || flag == "-h") {
      options.help = true;
      continue;
    }
    if (flag == "--prepare") {
      if (i + 2 >= commandLine.size()) return invalidArgument("--prepare needs TEXT and OUT.bin");
      options.prepareText = commandLine[i + 1];
      options.prepareOut = commandLine[i + 2];
      i += 2;
      continue;
    }
    const bool takesValue = switches.count(flag) == 0;
    CC_TRY(apply(flag, takesValue && i + 1 < commandLine.size() ? &commandLine[++i] : nullptr));
  }
  train.parallel.bucketBytes =
      static_cast<size_t>(static_cast<double>(options.bucketMiB) * 1024.0 * 1024.0);
  if (!options.evalPath.empty() && !options.stepsGiven) train.steps = 0;
  if (train.warmup > train.steps) train.warmup = train.steps;
  CC_TRY(model.validate());
  // With --load the shape (experts included) comes from the file; the mesh and the trainer
  // check the combination then.
  const bool shapeFromFile = !options.loadPath.empty();
  if (!shapeFromFile && model.experts == 0 &&
      std::any_of(arguments.begin(), arguments.end(), [](const std::string& argument) {
        return argument == "--top-k" || argument == "--moe-every" || argument == "--expert-width" ||
               argument == "--capacity-factor";
      })) {
    return invalidArgument(
        "--top-k, --moe-every, --expert-width and --capacity-factor shape mixture-of-experts "
        "blocks: they need --experts above 0");
  }
  if (!shapeFromFile && options.ep > 1 && model.experts == 0)
    return invalidArgument("--ep " + std::to_string(options.ep) + " needs --experts above 0");
  if (options.dp % options.ep != 0) {
    return invalidArgument("--ep " + std::to_string(options.ep) + " does not divide --dp " +
                           std::to_string(options.dp) +
                           " (expert parallelism lives inside data parallelism)");
  }
  if (!shapeFromFile && model.experts > 0 && model.experts % options.ep != 0) {
    return invalidArgument("--ep " + std::to_string(options.ep) + " does not divide --experts " +
                           std::to_string(model.experts));
  }
  if (!shapeFromFile && model.experts > 0 && options.tp > 1) {
    return invalidArgument(
        "--experts with --tp " + std::to_string(options.tp) +
        ": mixture-of-experts blocks are not tensor-parallel (the experts and router are not "
        "sharded); use --tp 1, and --ep to split the experts");
  }
  // Interleaved: the layers are cut into pp x V virtual stages.
  const int virtualStages = options.pp * train.virtualStages;
  const std::string stages = train.virtualStages > 1
                                 ? "--pp x --virtual-stages " + std::to_string(virtualStages)
                                 : "--pp " + std::to_string(options.pp);
  if (!options.ppLayers.empty()) {
    int total = 0;
    for (int layers : options.ppLayers) total += layers;
    if (static_cast<int>(options.ppLayers.size()) != virtualStages || total != model.layers) {
      return invalidArgument("--pp-layers: " + std::to_string(options.ppLayers.size()) +
                             " stages of " + std::to_string(total) + " blocks in all, for " +
                             stages + " and --layers " + std::to_string(model.layers));
    }
  } else if (model.layers % virtualStages != 0) {
    return invalidArgument(stages + " does not divide --layers " + std::to_string(model.layers) +
                           " (each stage holds as many blocks; or cut it with --pp-layers)");
  }
  if (train.sequenceParallel && options.tp == 1)
    return invalidArgument("--sp shards the sequence over the TP group: it needs --tp above 1");
  if (train.sequenceParallel && model.seq % options.tp != 0) {
    return invalidArgument("--sp: --tp " + std::to_string(options.tp) +
                           " does not divide the sequence length --seq " +
                           std::to_string(model.seq));
  }
  return options;
}

}  // namespace cc::parallel::train_tool
