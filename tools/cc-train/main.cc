// cc-train: trains the reference model on one process, on a token file or the built-in
// synthetic language, with checkpoints, evaluation, a CSV log and an SVG loss curve.
// Flags: --help and docs/TRAINING.md.
#include "loss_plot.h"
#include "options.h"
#include "progress.h"

#include "parallel/checkpoint/checkpoint.h"
#include "parallel/data/byte_tokenizer.h"
#include "parallel/model/activations.h"
#include "parallel/model/blas_threads.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace cc::parallel::train_tool {
namespace {

int fail(const Status& status) {
  std::fprintf(stderr, "cc-train: %s\n", status.message().c_str());
  return 1;
}

double peakResidentMiB() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// What the model's state and activations add up to (docs/TRAINING.md, "Memory").
double expectedMiB(const Trainer& trainer) {
  const double parameters = static_cast<double>(trainer.model().layout().totalSize());
  const double activations = static_cast<double>(
      ActivationArena<float>::elementCount(trainer.model().config(), trainer.options().batch));
  return (16.0 * parameters + 4.0 * activations) / (1024.0 * 1024.0);
}

std::unique_ptr<BatchSource> evalSourceFor(const Options& options, const BatchShape& shape,
                                           std::unique_ptr<BatchSource> fromFile) {
  if (fromFile) return fromFile;
  if (options.dataPath.empty()) {
    return std::make_unique<SyntheticBatches>(options.train.seed, options.train.model.vocab, shape, true);
  }
  return nullptr;  // evaluated on the training file's first batch instead
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
  setBlasThreads(options.threads);
  if (!options.loadPath.empty()) {
    auto config = readCheckpointConfig(options.loadPath);
    if (!config.isOk()) return fail(config.status());
    if (!(config.value() == options.train.model)) {
      std::printf("model shape from %s: %s\n", options.loadPath.c_str(), config->describe().c_str());
    }
    options.train.model = config.value();
  }
  const TrainOptions& train = options.train;
  const BatchShape shape{train.batch, train.model.seq, 0, 1};
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
    auto opened = TokenFileBatches::open(options.evalPath, shape, train.model.vocab);
    if (!opened.isOk()) return fail(opened.status());
    evalFile = std::move(opened.value());
  }
  const std::string dataDescription = source->describe();
  Trainer trainer(train, std::move(source));
  if (!options.loadPath.empty()) {
    const Status loaded = trainer.load(options.loadPath);
    if (!loaded.isOk()) return fail(loaded);
  }
  std::unique_ptr<BatchSource> evalSource = evalSourceFor(options, shape, std::move(evalFile));
  std::unique_ptr<BatchSource> trainingFirstBatch;
  if (!evalSource && !options.dataPath.empty()) {
    trainingFirstBatch = std::move(TokenFileBatches::open(options.dataPath, shape, train.model.vocab).value());
  }
  const BatchSource& evalBatches = evalSource ? *evalSource : *trainingFirstBatch;

  std::ofstream log;
  if (!options.logPath.empty()) {
    log.open(options.logPath, std::ios::app);
    if (!log) return fail(invalidArgument("--log " + options.logPath + ": cannot open"));
    log.seekp(0, std::ios::end);
    if (log.tellp() == 0) log << "step,loss,lr,grad_norm,tokens_per_s,eval_loss\n";
  }
  const int64_t first = trainer.completedSteps();
  if (first < train.steps) {
    std::printf("cc-train: %s, batch %d x %d micro-batches, %lld steps from step %lld, %d thread(s), data: %s\n",
                train.model.describe().c_str(), train.batch, train.gradAccum, static_cast<long long>(train.steps),
                static_cast<long long>(first), options.threads, dataDescription.c_str());
  }
  Progress progress(first, train.steps, options.printEvery);
  std::vector<std::pair<int64_t, double>> curve, evalCurve;
  std::vector<double> rates;
  int64_t ranThisTime = 0;
  while (trainer.completedSteps() < train.steps && (options.stopAfter == 0 || ranThisTime < options.stopAfter)) {
    const StepResult result = trainer.step();
    ++ranThisTime;
    const double rate = static_cast<double>(trainer.tokensPerStep()) / result.seconds;
    rates.push_back(rate);
    curve.emplace_back(result.step, result.loss);
    progress.report(result, rate);
    double evalLoss = -1;
    if (options.evalEvery > 0 && result.step % options.evalEvery == 0) {
      evalLoss = trainer.evaluate(evalBatches);
      evalCurve.emplace_back(result.step, evalLoss);
      progress.finish();
      std::printf("step %lld eval_loss %.6f\n", static_cast<long long>(result.step), evalLoss);
    }
    if (log) {
      log << result.step << ',' << result.loss << ',' << result.lr << ',' << result.gradNorm << ',' << rate << ',';
      if (evalLoss >= 0) log << evalLoss;
      log << '\n';
    }
    if (!options.savePath.empty() && options.saveEvery > 0 && result.step % options.saveEvery == 0) {
      const Status saved = trainer.save(options.savePath);
      if (!saved.isOk()) return fail(saved);
    }
  }
  progress.finish();
  if (!options.savePath.empty()) {
    const Status saved = trainer.save(options.savePath);
    if (!saved.isOk()) return fail(saved);
    std::printf("saved step %lld to %s (+ %s)\n", static_cast<long long>(trainer.completedSteps()),
                options.savePath.c_str(), optimizerPath(options.savePath).c_str());
  }
  if (!options.plotPath.empty() && !curve.empty()) {
    const Status plotted = writeLossPlot(options.plotPath, curve, evalCurve);
    if (!plotted.isOk()) return fail(plotted);
  }
  if (!rates.empty()) {
    // The first step pays for page faults in the arena; the median of the rest is the rate.
    std::vector<double> steady(rates.size() > 1 ? rates.begin() + 1 : rates.begin(), rates.end());
    std::sort(steady.begin(), steady.end());
    std::printf("summary: steps %lld final_loss %.6f median_tokens_per_s %.0f threads %d\n",
                static_cast<long long>(trainer.completedSteps()), curve.back().second, steady[steady.size() / 2],
                options.threads);
  }
  std::printf("memory: peak_rss_mib %.1f expected_mib %.1f (16 bytes x %zu parameters + 4 bytes x %zu activations)\n",
              peakResidentMiB(), expectedMiB(trainer), trainer.model().layout().totalSize(),
              ActivationArena<float>::elementCount(trainer.model().config(), train.batch));
  if (!options.evalPath.empty()) {
    std::printf("eval_loss %.6f\n", trainer.evaluate(evalBatches));
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
