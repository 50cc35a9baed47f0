#include "parallel/train/trainer.h"

#include "parallel/checkpoint/checkpoint.h"
#include "parallel/model/initialize.h"
#include "parallel/optim/grad_norm.h"

#include <chrono>

namespace cc::parallel {

Trainer::Trainer(const TrainOptions& options, std::unique_ptr<BatchSource> source)
    : options_(options),
      source_(std::move(source)),
      model_(options.model, options.batch),
      optimizer_(model_.layout().totalSize(), options.adamw),
      schedule_{options.lr, options.warmup, options.steps},
      inputs_(static_cast<size_t>(options.batch) * static_cast<size_t>(options.model.seq)),
      targets_(inputs_.size()) {
  initializeParameters(model_.parameters(), options.model, model_.layout(), options.seed);
}

size_t Trainer::tokensPerStep() const { return inputs_.size() * static_cast<size_t>(options_.gradAccum); }

StepResult Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t stepIndex = optimizer_.step();
  model_.zeroGradients();
  double lossSum = 0;
  const float microScale = 1.0f / static_cast<float>(options_.gradAccum);
  for (int micro = 0; micro < options_.gradAccum; ++micro) {
    source_->fill(stepIndex * options_.gradAccum + micro, inputs_, targets_);
    lossSum += model_.forward(inputs_, targets_, options_.batch);
    model_.backward(microScale);
  }
  StepResult result;
  result.gradNorm = globalNorm(model_.gradients());
  result.lr = schedule_.at(stepIndex);
  optimizer_.update(model_.parameters(), model_.gradients(), model_.layout(), result.lr,
                    clipScale(result.gradNorm, options_.clip));
  result.step = optimizer_.step();
  result.loss = lossSum / options_.gradAccum;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

double Trainer::evaluate(const BatchSource& source, int batches) {
  double total = 0;
  for (int index = 0; index < batches; ++index) {
    source.fill(index, inputs_, targets_);
    total += model_.forward(inputs_, targets_, options_.batch);
  }
  return total / batches;
}

Status Trainer::save(const std::string& path) const { return saveCheckpoint(path, model_, &optimizer_); }

Status Trainer::load(const std::string& path) { return loadCheckpoint(path, model_, &optimizer_); }

}  // namespace cc::parallel
