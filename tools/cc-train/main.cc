// cc-train: trains the reference model on a token file or the built-in synthetic language,
// with checkpoints, evaluation, a CSV log and an SVG loss curve; on one process, or
// data-parallel with ZeRO under a launcher (mpirun -np N cc-train --dp N --zero K).
// Flags: --help and docs/TRAINING.md.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "loss_plot.h"
#include "options.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/data/byte_tokenizer.h"
#include "parallel/mesh/cc_call.h"
#include "parallel/mesh/mesh.h"
#include "parallel/model/activations.h"
#include "parallel/model/blas_threads.h"
#include "parallel/pp/simulate.h"
#include "progress.h"

namespace cc::parallel::train_tool {
namespace {

int worldRank = 0;  // for messages; 0 on one process
int worldSize = 1;

int fail(const Status& status) {
  if (worldSize > 1) {
    std::fprintf(stderr, "cc-train: rank %d: %s\n", worldRank, status.message().c_str());
  } else {
    std::fprintf(stderr, "cc-train: %s\n", status.message().c_str());
  }
  return 1;
}

// A collective failed (a peer died): say so and leave at once. Tearing the communicators
// down normally could wait on the dead peer, and the job is over anyway.
[[noreturn]] void failCollective(const Status& status) {
  fail(status);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

// The launcher's world size, if any (ccCommInitFromEnv reads the same variables).
int launcherWorldSize() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "SLURM_NTASKS"}) {
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  }
  return 1;
}

// A line of /proc/self/status in MiB ("VmHWM", "RssShmem"), or -1.
double procStatusMiB(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::string key = std::string(field) + ":";
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + key.size()) / 1024.0;  // in kB
  }
  return -1;
}

double peakResidentMiB() {
  // VmHWM, which resetPeakResident() can restart; ru_maxrss where /proc is missing.
  const double highWater = procStatusMiB("VmHWM");
  if (highWater >= 0) return highWater;
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// What the model's state and activations add up to (docs/TRAINING.md, "Memory"); under
// DP, ZeRO's accounting per rank (dp/data_parallel.h).
// The activation elements this rank holds (docs/TRAINING.md's formulas): one arena, or a
// pipeline stage's arenas for its most micro-batches in flight.
size_t activationElements(const Trainer& trainer) {
  if (trainer.pipeline() != nullptr) return trainer.pipeline()->activationElements();
  return activationElementCount(trainer.model().layout(), trainer.options().batch, 1,
                                trainer.options().recompute);
}

double expectedMiB(const Trainer& trainer) {
  const double activations = 4.0 * static_cast<double>(activationElements(trainer));
  const double state = trainer.dataParallel() != nullptr
                           ? trainer.dataParallel()->memoryEstimate().total()
                           : 16.0 * static_cast<double>(trainer.model().layout().totalSize());
  return (state + activations) / (1024.0 * 1024.0);
}

std::string memoryBreakdown(const Trainer& trainer) {
  const double mib = 1024.0 * 1024.0;
  const double activations = 4.0 * static_cast<double>(activationElements(trainer));
  char text[200];
  if (trainer.dataParallel() != nullptr) {
    const MemoryEstimate e = trainer.dataParallel()->memoryEstimate();
    std::snprintf(text, sizeof(text),
                  "parameters %.1f + gradients %.1f + adam %.1f + activations %.1f MiB",
                  e.parameters / mib, e.gradients / mib, e.optimizer / mib, activations / mib);
  } else {
    std::snprintf(text, sizeof(text), "16 bytes x %zu parameters + 4 bytes x %zu activations",
                  trainer.model().layout().totalSize(), activationElements(trainer));
  }
  return text;
}

// Under ZeRO-3 every rank first builds the whole model from the seed and then keeps its
// shard; the training peak is measured from after that (Linux: clear_refs 5 restarts the
// high-water mark).
void resetPeakResident() { std::ofstream("/proc/self/clear_refs") << "5"; }

// The largest peak over the ranks (every rank calls it).
double peakOverRanks(ccComm_t world) {
  double peak = peakResidentMiB();
  if (world != nullptr) (void)ccAllReduce(&peak, &peak, 1, ccFloat64, ccMax, world, nullptr);
  return peak;
}

std::unique_ptr<BatchSource> evalSourceFor(const Options& options, const BatchShape& shape,
                                           std::unique_ptr<BatchSource> fromFile) {
  if (fromFile) return fromFile;
  if (options.dataPath.empty()) {
    return std::make_unique<SyntheticBatches>(options.train.seed, options.train.model.vocab, shape,
                                              true);
  }
  return nullptr;  // evaluated on the training file's first batch instead
}

// --pp-plan: the plan of --schedule over --pp stages and --grad-accum micro-batches, checked
// and simulated (a stage's forward, B and W each cost 1, split over its chunks), drawn, and
// its predicted bubble.
int drawPlan(const Options& options) {
  const PipelineShape shape{options.pp, options.train.gradAccum, options.train.virtualStages};
  auto plan = makePlan(options.train.schedule, shape);
  if (!plan.isOk()) return fail(plan.status());
  // A chunk of an interleaved stage does 1/V of its work.
  const double chunk = 1.0 / shape.chunks;
  auto simulation = simulate(plan.value(), CostModel{chunk, chunk, chunk, 0});
  if (!simulation.isOk()) return fail(simulation.status());
  std::ofstream out(options.planPath);
  out << planSvg(plan.value(), simulation.value());
  if (!out) return fail(Status(ccSystemError, "cannot write " + options.planPath));
  std::printf("plan: %s, %d stages, %d micro-batches, %d chunks per stage -> %s\n",
              scheduleName(options.train.schedule), shape.stages, shape.microBatches, shape.chunks,
              options.planPath.c_str());
  std::printf("predicted_bubble %.4f (mean over stages; per stage", simulation->meanBubble);
  for (double bubble : simulation->bubble) std::printf(" %.4f", bubble);
  std::printf("), peak micro-batches in flight per stage");
  for (int peak : simulation->peakInFlight) std::printf(" %d", peak);
  std::printf("\n");
  return 0;
}

int run(const Options& parsed) {
  Options options = parsed;
  if (!options.prepareText.empty()) {
    auto count = prepareTokenFile(options.prepareText, options.prepareOut);
    if (!count.isOk()) return fail(count.status());
    std::printf("prepared %zu byte tokens (vocab %d) -> %s\n", count.value(), kByteVocabulary,
                options.prepareOut.c_str());
    return 0;
  }
  if (!options.planPath.empty()) return drawPlan(options);
  // No more compute threads than the CPUs this rank may run on: bound to one core (mpirun's
  // default at two ranks or fewer), a second thread would only take turns with the first.
  const int cpus = cpusToRunOn();
  std::string threadNote;
  if (options.threads > cpus) {
    threadNote = " (--threads " + std::to_string(options.threads) + ": this rank may run on " +
                 std::to_string(cpus) + " CPU(s))";
    options.threads = cpus;
  }
  setBlasThreads(options.threads);
  if (!options.loadPath.empty()) {
    auto config = readCheckpointConfig(options.loadPath);
    if (!config.isOk()) return fail(config.status());
    if (!(config.value() == options.train.model)) {
      std::printf("model shape from %s: %s\n", options.loadPath.c_str(),
                  config->describe().c_str());
    }
    // The file gives the shape; how MoE blocks route (capacity, loss coefficients) stays the
    // command line's.
    GptConfig model = config.value();
    model.capacityFactor = options.train.model.capacityFactor;
    model.auxLossCoef = options.train.model.auxLossCoef;
    model.zLossCoef = options.train.model.zLossCoef;
    options.train.model = model;
  }
  const TrainOptions& train = options.train;

  // The job's world: a launcher's ranks, or this process alone (no communicator at all,
  // the exact one-process run) when there is no launcher and --dp is 1.
  struct WorldGuard {  // destroyed after the mesh and the trainer that use it
    ccComm_t comm = nullptr;
    ~WorldGuard() {
      if (comm != nullptr) (void)ccCommDestroy(comm);
    }
  } worldGuard;
  ccComm_t& world = worldGuard.comm;
  std::unique_ptr<Mesh> mesh;
  const bool communicates =
      options.dp > 1 || options.tp > 1 || options.pp > 1 || launcherWorldSize() > 1;
  if (!options.tracePrefix.empty()) {
    if (!communicates) {
      return fail(Status(ccInvalidArgument,
                         "--trace records what the ranks' communicators see: run under a "
                         "launcher (mpirun -np N) or with --dp, --tp or --pp above 1"));
    }
    ::setenv("CC_TRACE", options.tracePrefix.c_str(), 1);
  }
  if (communicates) {
    const Status initialised = ccCall(ccCommInitFromEnv(&world), nullptr, "ccCommInitFromEnv");
    if (!initialised.isOk()) return fail(initialised);
    (void)ccCommUserRank(world, &worldRank);
    (void)ccCommCount(world, &worldSize);
    auto created = Mesh::create(world,
                                MeshShape{options.dp, options.pp, options.tp, options.ppLayers,
                                          train.virtualStages, options.ep},
                                train.model);
    if (!created.isOk()) {
      if (worldSize == 1)
        return fail(
            Status(ccInvalidArgument, created.status().message() + "; start it with mpirun -np " +
                                          std::to_string(options.dp * options.pp * options.tp) +
                                          " (or another launcher)"));
      return fail(created.status());
    }
    mesh = std::move(created).value();
    auto table = mesh->placementTable();
    if (!table.isOk()) return fail(table.status());
    if (worldRank == 0) std::fputs(table->c_str(), stdout);
  }
  const bool leader = worldRank == 0;
  const BatchShape shape{train.batch, train.model.seq, mesh ? mesh->coordinates().dp : 0,
                         options.dp};
  const BatchShape evalShape{train.batch, train.model.seq, 0, 1};
  std::unique_ptr<BatchSource> source;
  if (options.dataPath.empty()) {
    source = std::make_unique<SyntheticBatches>(train.seed, train.model.vocab, shape);
  } else {
    auto opened = TokenFileBatches::open(options.dataPath, shape, train.model.vocab);
    if (!opened.isOk()) return fail(opened.status());
    source = std::move(opened.value());
  }
  std::unique_ptr<BatchSource> evalFile;
  if (!options.evalPath.empty()) {
    auto opened = TokenFileBatches::open(options.evalPath, evalShape, train.model.vocab);
    if (!opened.isOk()) return fail(opened.status());
    evalFile = std::move(opened.value());
  }
  const std::string dataDescription = source->describe();
  Trainer trainer(train, std::move(source), mesh.get());
  if (!trainer.status().isOk()) return fail(trainer.status());
  if (!options.loadPath.empty()) {
    const Status loaded = trainer.load(options.loadPath);
    if (!loaded.isOk()) return fail(loaded);
  }
  std::unique_ptr<BatchSource> evalSource = evalSourceFor(options, evalShape, std::move(evalFile));
  std::unique_ptr<BatchSource> trainingFirstBatch;
  if (!evalSource && !options.dataPath.empty()) {
    trainingFirstBatch =
        std::move(TokenFileBatches::open(options.dataPath, evalShape, train.model.vocab).value());
  }
  const BatchSource& evalBatches = evalSource ? *evalSource : *trainingFirstBatch;

  if (trainer.dataParallel() != nullptr) {
    const double peak = peakOverRanks(world);
    if (leader) {
      std::printf("data parallel: %s\n", trainer.dataParallel()->describe().c_str());
      std::printf(
          "memory at start-up: expected_mib %.1f per rank (%s), peak_rss_mib %.1f during set-up "
          "(largest rank)\n",
          expectedMiB(trainer), memoryBreakdown(trainer).c_str(), peak);
    }
    resetPeakResident();
  }
  std::ofstream log;
  if (!options.logPath.empty() && leader) {
    log.open(options.logPath, std::ios::app);
    if (!log) return fail(invalidArgument("--log " + options.logPath + ": cannot open"));
    log.seekp(0, std::ios::end);
    if (log.tellp() == 0) {
      log << "step,loss,lr,grad_norm,tokens_per_s,eval_loss";
      // Per MoE block: tokens per expert (min, max, max/mean) and the pairs dropped over the
      // step, its load-balancing and z-losses.
      for (int layer = 0; layer < train.model.layers; ++layer) {
        if (!train.model.isMoe(layer)) continue;
        const std::string p = ",moe" + std::to_string(layer) + "_";
        log << p << "min_tokens" << p << "max_tokens" << p << "imbalance" << p << "dropped" << p
            << "aux_loss" << p << "z_loss";
      }
      log << '\n';
    }
  }
  const int64_t first = trainer.completedSteps();
  if (first < train.steps && leader) {
    std::printf(
        "cc-train: %s, batch %d x %d micro-batches, %lld steps from step %lld, %d thread(s)%s, "
        "data: %s\n",
        train.model.describe().c_str(), train.batch, train.gradAccum,
        static_cast<long long>(train.steps), static_cast<long long>(first), options.threads,
        threadNote.c_str(), dataDescription.c_str());
  }
  // Only rank 0 talks; the others print nothing but errors.
  Progress progress(first, train.steps, leader ? options.printEvery : 1 << 30);
  std::vector<std::pair<int64_t, double>> curve, evalCurve;
  std::vector<std::vector<std::pair<int64_t, double>>> imbalanceCurves;  // per MoE block
  std::vector<double> rates, waits, sentPerStep, bubbles;
  std::vector<CostModel> stageCosts;  // this stage's measured forward, B and W, per step
  // Bytes this rank sent during a step (cc's traffic counters), to compare with ZeRO's
  // accounting: 2(N-1)/N of the gradient bytes for stages 0-2, up to 1.5x that for 3.
  auto bytesSent = [&]() -> double {
    if (trainer.dataParallel() == nullptr) return 0;
    auto traffic = trainer.dataParallel()->traffic();
    return traffic.isOk() ? static_cast<double>(traffic->sent) : 0;
  };
  int64_t ranThisTime = 0;
  while (trainer.completedSteps() < train.steps &&
         (options.stopAfter == 0 || ranThisTime < options.stopAfter)) {
    const double sentBefore = bytesSent();
    auto stepped = trainer.tryStep();
    if (!stepped.isOk()) failCollective(stepped.status());
    sentPerStep.push_back(bytesSent() - sentBefore);
    const StepResult& result = stepped.value();
    ++ranThisTime;
    const double rate = static_cast<double>(trainer.tokensPerStep()) / result.seconds;
    rates.push_back(rate);
    waits.push_back(result.gradientWaitSeconds);
    bubbles.push_back(result.pipelineWaitSeconds / result.seconds);
    if (trainer.pipeline() != nullptr) stageCosts.push_back(trainer.pipeline()->lastCosts());
    curve.emplace_back(result.step, result.loss);
    if (!result.moe.empty()) {
      imbalanceCurves.resize(result.moe.size());
      for (size_t i = 0; i < result.moe.size(); ++i)
        imbalanceCurves[i].emplace_back(result.step, result.moe[i].imbalance());
    }
    if (leader) progress.report(result, rate);
    double evalLoss = -1;
    if (options.evalEvery > 0 && result.step % options.evalEvery == 0) {
      evalLoss = trainer.evaluate(evalBatches);
      if (!trainer.status().isOk()) failCollective(trainer.status());
      evalCurve.emplace_back(result.step, evalLoss);
      if (leader) {
        progress.finish();
        std::printf("step %lld eval_loss %.6f\n", static_cast<long long>(result.step), evalLoss);
      }
    }
    if (log) {
      log << result.step << ',' << result.loss << ',' << result.lr << ',' << result.gradNorm << ','
          << rate << ',';
      if (evalLoss >= 0) log << evalLoss;
      for (const MoeStepStatistics& moe : result.moe) {
        log << ',' << moe.minTokens() << ',' << moe.maxTokens() << ',' << moe.imbalance() << ','
            << moe.totalDropped() << ',' << moe.auxLoss << ',' << moe.zLoss;
      }
      log << '\n';
    }
    if (!options.savePath.empty() && options.saveEvery > 0 &&
        result.step % options.saveEvery == 0) {
      const Status saved = trainer.save(options.savePath);
      if (!saved.isOk()) failCollective(saved);
    }
  }
  if (leader) progress.finish();
  if (!options.savePath.empty()) {
    const Status saved = trainer.save(options.savePath);
    if (!saved.isOk()) failCollective(saved);
    if (leader)
      std::printf("saved step %lld to %s (+ %s)\n",
                  static_cast<long long>(trainer.completedSteps()), options.savePath.c_str(),
                  optimizerPath(options.savePath).c_str());
  }
  if (!options.plotPath.empty() && !curve.empty() && leader) {
    const Status plotted = writeLossPlot(options.plotPath, curve, evalCurve, imbalanceCurves);
    if (!plotted.isOk()) return fail(plotted);
  }
  auto median = [](const std::vector<double>& values) {
    // The first step pays for page faults in the arena; the median of the rest.
    std::vector<double> steady(values.size() > 1 ? values.begin() + 1 : values.begin(),
                               values.end());
    std::sort(steady.begin(), steady.end());
    return steady[steady.size() / 2];
  };
  auto mean = [](const std::vector<double>& values) {
    double sum = 0;
    for (double value : values) sum += value;
    return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
  };
  if (!rates.empty() && leader) {
    std::printf("summary: steps %lld final_loss %.6f median_tokens_per_s %.0f threads %d",
                static_cast<long long>(trainer.completedSteps()), curve.back().second,
                median(rates), options.threads);
    if (trainer.dataParallel() != nullptr) {
      std::printf(
          " dp %d pp %d tp %d sp %d zero %d median_gradient_wait_ms %.3f sent_mib_per_step %.2f",
          options.dp, options.pp, options.tp, train.sequenceParallel ? 1 : 0,
          train.parallel.zeroStage, 1e3 * median(waits), mean(sentPerStep) / (1024.0 * 1024.0));
    }
    std::printf("\n");
  }
  if (trainer.pipeline() != nullptr && !rates.empty()) {
    // Per stage (its DP 0, TP 0 rank): the median fraction of a step spent waiting for a
    // neighbour's data, beside the simulator's prediction at unit costs.
    // and beside the prediction at the costs each stage measured (its median forward, B, W).
    auto medianOf = [&](double CostModel::*field) {
      std::vector<double> values;
      for (const CostModel& cost : stageCosts) values.push_back(cost.*field);
      return median(values);
    };
    const double mine[5] = {median(bubbles), medianOf(&CostModel::forward),
                            medianOf(&CostModel::backwardInput),
                            medianOf(&CostModel::backwardWeight), medianOf(&CostModel::transfer)};
    std::vector<double> all(5 * static_cast<size_t>(worldSize));
    (void)ccAllGather(mine, all.data(), 5, ccFloat64, world, nullptr);
    if (leader) {
      std::vector<CostModel> measured;
      std::printf("pipeline: %s, measured_bubble", scheduleName(train.schedule));
      for (int stage = 0; stage < options.pp; ++stage) {
        const double* at = &all[5 * static_cast<size_t>(stage * options.tp)];
        std::printf(" %.3f", at[0]);
        measured.push_back(CostModel{at[1], at[2], at[3], at[4]});
      }
      std::printf(" predicted_bubble");
      for (double bubble : trainer.pipeline()->prediction().bubble) std::printf(" %.3f", bubble);
      auto atMeasured = simulate(trainer.pipeline()->plan(), measured);
      if (atMeasured.isOk()) {
        std::printf(" at_measured_costs");
        for (double bubble : atMeasured->bubble) std::printf(" %.3f", bubble);
      }
      std::printf(" (per stage) link_ms %.3f\n", 1e3 * measured.front().transfer);
    }
  }
  const double peak = peakOverRanks(world);
  // cc's shared-memory rings and staging count in every rank's resident set; the figure
  // says how much of the peak is that rather than the model.
  double shared = procStatusMiB("RssShmem");
  double privateNow = procStatusMiB("RssAnon");
  if (world != nullptr) {
    (void)ccAllReduce(&shared, &shared, 1, ccFloat64, ccMax, world, nullptr);
    (void)ccAllReduce(&privateNow, &privateNow, 1, ccFloat64, ccMax, world, nullptr);
  }
  if (leader) {
    std::printf("memory: peak_rss_mib %.1f expected_mib %.1f (%s)", peak, expectedMiB(trainer),
                memoryBreakdown(trainer).c_str());
    if (world != nullptr) {
      std::printf(
          " per rank, largest rank's peak; of it cc's shared buffers rss_shmem_mib %.1f; private "
          "memory after "
          "the last step rss_anon_mib %.1f",
          shared, privateNow);
    }
    std::printf("\n");
  }
  if (!options.evalPath.empty()) {
    const double evalLoss = trainer.evaluate(evalBatches);
    if (leader) std::printf("eval_loss %.6f\n", evalLoss);
  }
  return 0;
}

}  // namespace
}  // namespace cc::parallel::train_tool

int main(int argc, char** argv) {
  using namespace cc::parallel::train_tool;
  auto options = parseOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (!options.isOk()) {
    std::fprintf(stderr, "cc-train: %s\n", options.status().message().c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(usage(), stdout);
    return 0;
  }
  return run(options.value());
}
