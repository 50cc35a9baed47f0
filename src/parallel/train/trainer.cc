#include "parallel/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "parallel/checkpoint/checkpoint.h"
#include "parallel/model/initialize.h"
#include "parallel/optim/grad_norm.h"

namespace cc::parallel {
namespace {

int worldOf(ccComm_t comm) {
  int count = 1;
  if (comm != nullptr && ccCommCount(comm, &count) != ccSuccess) count = 1;
  return count;
}

}  // namespace

Trainer::Trainer(const TrainOptions& options, std::unique_ptr<BatchSource> source, ccComm_t dpComm)
    : options_(options),
      source_(std::move(source)),
      world_(worldOf(dpComm)),
      model_(options.model, options.batch,
             dpComm != nullptr
                 ? paddedBufferSize(ParameterLayout(options.model).totalSize(), world_)
                 : 0),
      dataParallel_([&]() -> std::unique_ptr<DataParallel> {
        // Every rank initialises the whole model from the seed (the same bits), then
        // ZeRO-3 keeps only its shard.
        initializeParameters(model_.parameters(), options.model, model_.layout(), options.seed);
        if (dpComm == nullptr) return nullptr;
        auto created = DataParallel::create(dpComm, model_, options.parallel);
        if (!created.isOk()) {
          status_ = created.status();
          return nullptr;
        }
        return std::move(created).value();
      }()),
      optimizer_(dataParallel_ ? dataParallel_->optimizerStateSize() : model_.layout().totalSize(),
                 options.adamw),
      schedule_{options.lr, options.warmup, options.steps},
      inputs_(static_cast<size_t>(options.batch) * static_cast<size_t>(options.model.seq)),
      targets_(inputs_.size()) {}

Trainer::~Trainer() = default;

size_t Trainer::tokensPerStep() const {
  return inputs_.size() * static_cast<size_t>(options_.gradAccum) * static_cast<size_t>(world_);
}

StepResult Trainer::step() {
  Result<StepResult> result = tryStep();
  if (!result.isOk()) {
    std::fprintf(stderr, "Trainer::step: %s\n", result.status().message().c_str());
    std::abort();
  }
  return result.value();
}

Result<StepResult> Trainer::tryStep() {
  CC_TRY(status_);
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  if (dataParallel_) {
    const Status stepped = collectiveStep(result);
    if (!stepped.isOk()) {
      status_ = stepped;
      return stepped;
    }
  } else {
    const int64_t stepIndex = optimizer_.step();
    model_.zeroGradients();
    double lossSum = 0;
    const float microScale = 1.0f / static_cast<float>(options_.gradAccum);
    for (int micro = 0; micro < options_.gradAccum; ++micro) {
      source_->fill(stepIndex * options_.gradAccum + micro, inputs_, targets_);
      lossSum += model_.forward(inputs_, targets_, options_.batch);
      model_.backward(microScale);
    }
    result.gradNorm = globalNorm(model_.gradients());
    result.lr = schedule_.at(stepIndex);
    optimizer_.update(model_.parameters(), model_.gradients(), model_.layout(), result.lr,
                      clipScale(result.gradNorm, options_.clip));
    result.loss = lossSum / options_.gradAccum;
  }
  result.step = optimizer_.step();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Status Trainer::collectiveStep(StepResult& result) {
  DataParallel& dp = *dataParallel_;
  const int64_t stepIndex = optimizer_.step();
  CC_TRY(dp.beginStep());
  double lossSum = 0;
  const float microScale = 1.0f / static_cast<float>(options_.gradAccum);
  for (int micro = 0; micro < options_.gradAccum; ++micro) {
    // The source was made with this rank's (rank, world): global batch index x world + rank.
    source_->fill(stepIndex * options_.gradAccum + micro, inputs_, targets_);
    CC_TRY(dp.beginMicroBatch(micro + 1 == options_.gradAccum));
    lossSum += model_.forward(inputs_, targets_, options_.batch);
    model_.backward(microScale);
    CC_TRY(dp.endMicroBatch());
  }
  CC_ASSIGN_OR_RETURN(result.gradNorm, dp.finishGradients());
  result.gradientWaitSeconds = dp.gradientWaitSeconds();
  CC_ASSIGN_OR_RETURN(result.loss, dp.average(lossSum / options_.gradAccum));
  result.lr = schedule_.at(stepIndex);
  return dp.update(optimizer_, result.lr, clipScale(result.gradNorm, options_.clip));
}

double Trainer::evaluate(const BatchSource& source, int batches) {
  // ZeRO-3 evaluates with every layer gathered (the observer is idle outside a step).
  if (dataParallel_ && status_.isOk()) status_ = dataParallel_->gatherParameters();
  double total = 0;
  for (int index = 0; index < batches; ++index) {
    source.fill(index, inputs_, targets_);
    total += model_.forward(inputs_, targets_, options_.batch);
  }
  if (dataParallel_ && status_.isOk()) status_ = dataParallel_->releaseParameters();
  return total / batches;
}

Result<std::vector<float>> Trainer::fullParameters() {
  if (dataParallel_) CC_TRY(dataParallel_->gatherParameters());
  std::vector<float> parameters(model_.parameters().begin(), model_.parameters().end());
  if (dataParallel_) CC_TRY(dataParallel_->releaseParameters());
  return parameters;
}

Status Trainer::save(const std::string& path) {
  if (!dataParallel_) return saveCheckpoint(path, model_, &optimizer_);
  CC_TRY(status_);
  DataParallel& dp = *dataParallel_;
  std::vector<float> m, v;
  CC_TRY(dp.gatherMoments(optimizer_, m, v));
  CC_TRY(dp.gatherParameters());
  Status saved = Status::ok();
  if (dp.rank() == 0) {
    AdamW full(0, options_.adamw);
    full.restore(std::move(m), std::move(v), optimizer_.step());
    saved = saveCheckpoint(path, model_, &full);
  }
  CC_TRY(dp.releaseParameters());
  // Nobody goes on before the files exist (a rank that dies next can be resumed from them).
  CC_TRY(dp.barrier());
  return saved;
}

Status Trainer::load(const std::string& path) {
  if (!dataParallel_) return loadCheckpoint(path, model_, &optimizer_);
  CC_TRY(status_);
  DataParallel& dp = *dataParallel_;
  AdamW full(model_.layout().totalSize(), options_.adamw);
  bool loadedOptimizer = false;
  CC_TRY(loadCheckpoint(path, model_, &full, &loadedOptimizer));
  dp.shardParameters();
  if (loadedOptimizer)
    optimizer_.restore(dp.shardOf(full.firstMoment()), dp.shardOf(full.secondMoment()),
                       full.step());
  return Status::ok();
}

}  // namespace cc::parallel
