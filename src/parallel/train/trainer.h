// One process's training loop: the model, AdamW, the learning-rate schedule and a batch
// source, stepped one optimizer step at a time. A step runs `gradAccum` micro-batches
// (batch index = step x gradAccum + micro-batch), averages their gradients, clips by the
// global norm and updates. Everything that decides a step's result is a function of the
// step number and the checkpointed state, so a resumed run is bit-for-bit the same run.
#pragma once

#include "core/status.h"
#include "parallel/data/batch_source.h"
#include "parallel/model/gpt.h"
#include "parallel/optim/adamw.h"
#include "parallel/optim/lr_schedule.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cc::parallel {

struct TrainOptions {
  GptConfig model;
  int batch = 8;           // B, sequences per micro-batch
  int gradAccum = 1;       // micro-batches per optimizer step
  int64_t steps = 200;     // length of the schedule
  float lr = 3e-3f;
  int64_t warmup = 20;
  float clip = 1.0f;       // global-norm clipping; <= 0 turns it off
  AdamWOptions adamw;
  uint64_t seed = 1337;
};

struct StepResult {
  int64_t step = 0;       // the step just completed, from 1
  double loss = 0;        // mean over its micro-batches
  float lr = 0;
  double gradNorm = 0;    // before clipping
  double seconds = 0;
};

class Trainer {
 public:
  Trainer(const TrainOptions& options, std::unique_ptr<BatchSource> source);

  StepResult step();
  // Steps completed (0 for a fresh model, the checkpoint's step after load()).
  int64_t completedSteps() const { return optimizer_.step(); }

  // Mean loss over `batches` batches of `source`, without touching the gradients.
  double evaluate(const BatchSource& source, int batches = 1);

  Status save(const std::string& path) const;
  // Model and, where present, optimizer state; a failure changes nothing.
  Status load(const std::string& path);

  Gpt<float>& model() { return model_; }
  const Gpt<float>& model() const { return model_; }
  const AdamW& optimizer() const { return optimizer_; }
  const TrainOptions& options() const { return options_; }
  size_t tokensPerStep() const;

 private:
  TrainOptions options_;
  std::unique_ptr<BatchSource> source_;
  Gpt<float> model_;
  AdamW optimizer_;
  LrSchedule schedule_;
  std::vector<int32_t> inputs_;
  std::vector<int32_t> targets_;
};

}  // namespace cc::parallel
