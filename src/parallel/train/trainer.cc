#include "parallel/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "parallel/checkpoint/checkpoint.h"
#include "parallel/model/initialize.h"
#include "parallel/optim/grad_norm.h"
#include "parallel/zero/stages.h"

namespace cc::parallel {
namespace {

// This rank's part of the model: the whole of it but for a mesh's pipeline stage or TP shard.
ParameterLayout layoutFor(const GptConfig& config, const Mesh* mesh) {
  if (mesh == nullptr || !validatePart(config, mesh->modelPart(config)).isOk()) {
    return ParameterLayout(config);
  }
  return ParameterLayout(config, mesh->modelPart(config));
}

}  // namespace

Trainer::Trainer(const TrainOptions& options, std::unique_ptr<BatchSource> source, const Mesh* mesh)
    : options_(options),
      source_(std::move(source)),
      world_(mesh != nullptr ? mesh->shape().dp : 1),
      model_(layoutFor(options.model, mesh), options.batch,
             mesh != nullptr ? paddedBufferSize(layoutFor(options.model, mesh).totalSize(), world_)
                             : 0),
      dataParallel_([&]() -> std::unique_ptr<DataParallel> {
        // Every rank initialises the whole model from the seed (the same bits), then
        // ZeRO-3 keeps only its shard.
        initializeParameters(model_.parameters(), options.model, model_.layout(), options.seed);
        if (mesh == nullptr) return nullptr;
        if (mesh->shape().pp > 1 || mesh->shape().tp > 1) {
          status_ = invalidArgument("trainer: mesh pp " + std::to_string(mesh->shape().pp) +
                                    " x tp " + std::to_string(mesh->shape().tp) +
                                    ": pipeline and tensor parallelism are not in the trainer yet");
          return nullptr;
        }
        auto strategy = makeShardingStrategy(options.parallel);
        if (!strategy.isOk()) {
          status_ = strategy.status();
          return nullptr;
        }
        auto created =
            DataParallel::create(mesh->dp(), model_, options.parallel, std::move(strategy).value());
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
  const Status stepped = runStep(result);
  if (!stepped.isOk()) {
    status_ = stepped;
    return stepped;
  }
  result.step = optimizer_.step();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

// The one step loop. Each parallel kind plugs in at its hooks: data parallelism starts
// the gradient reductions from the model's observer during the last micro-batch's
// backward, waits for them in finishGradients and owns the optimizer step's sharding.
Status Trainer::runStep(StepResult& result) {
  DataParallel* dp = dataParallel_.get();
  const int64_t stepIndex = optimizer_.step();
  if (dp != nullptr) {
    CC_TRY(dp->beginStep());
  } else {
    model_.zeroGradients();
  }
  double lossSum = 0;
  const float microScale = 1.0f / static_cast<float>(options_.gradAccum);
  for (int micro = 0; micro < options_.gradAccum; ++micro) {
    // The source was made with this rank's (rank, world): global batch index x world + rank.
    source_->fill(stepIndex * options_.gradAccum + micro, inputs_, targets_);
    if (dp != nullptr) CC_TRY(dp->beginMicroBatch(micro + 1 == options_.gradAccum));
    lossSum += model_.forward(inputs_, targets_, options_.batch);
    model_.backward(microScale);
    if (dp != nullptr) CC_TRY(dp->endMicroBatch());
  }
  CC_ASSIGN_OR_RETURN(result.gradNorm, finishGradients());
  result.loss = lossSum / options_.gradAccum;
  if (dp != nullptr) {
    result.gradientWaitSeconds = dp->gradientWaitSeconds();
    CC_ASSIGN_OR_RETURN(result.loss, dp->average(result.loss));
  }
  result.lr = schedule_.at(stepIndex);
  return update(result.lr, clipScale(result.gradNorm, options_.clip));
}

Result<double> Trainer::finishGradients() {
  if (dataParallel_) return dataParallel_->finishGradients();
  return globalNorm(model_.gradients());
}

Status Trainer::update(float lr, float gradientScale) {
  if (dataParallel_) return dataParallel_->update(optimizer_, lr, gradientScale);
  optimizer_.update(model_.parameters(), model_.gradients(), model_.layout(), lr, gradientScale);
  return Status::ok();
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
