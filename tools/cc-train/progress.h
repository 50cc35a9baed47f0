// What cc-train prints per step: a redrawn progress bar (step, loss, tokens/s, ETA) on a
// terminal, plain lines otherwise (logs, pipes, tests).
#pragma once

#include <cstdint>

#include "parallel/train/trainer.h"

namespace cc::parallel::train_tool {

class Progress {
 public:
  Progress(int64_t firstStep, int64_t lastStep, int printEvery);
  void report(const StepResult& result, double tokensPerSecond);
  // Ends the bar's line before other output.
  void finish();

 private:
  bool terminal_;
  int64_t firstStep_, lastStep_;
  int printEvery_;
  double elapsed_ = 0;
  bool barShown_ = false;
};

}  // namespace cc::parallel::train_tool
