// cc-train's command line. Every flag is documented in docs/TRAINING.md and in --help.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/train/trainer.h"

namespace cc::parallel::train_tool {

struct Options {
  TrainOptions train;
  bool stepsGiven = false;
  std::string dataPath;     // --data: token file; empty = synthetic
  std::string loadPath;     // --load
  std::string savePath;     // --save
  int64_t saveEvery = 0;    // --save-every
  int64_t evalEvery = 0;    // --eval-every
  std::string evalPath;     // --eval
  std::string prepareText;  // --prepare TEXT OUT
  std::string prepareOut;
  std::string logPath;        // --log
  std::string plotPath;       // --plot
  int threads = 1;            // --threads
  int64_t stopAfter = 0;      // --stop-after: leave after this many steps of this run
  int printEvery = 10;        // --print-every (plain output)
  int dp = 1;                 // --dp: data-parallel ranks
  int tp = 1;                 // --tp: tensor-parallel ranks (dp x pp x tp = the launcher's world)
  int pp = 1;                 // --pp: pipeline stages
  int ep = 1;                 // --ep: expert-parallel ranks inside DP (divides --dp)
  std::vector<int> ppLayers;  // --pp-layers: blocks per stage (empty: an even cut)
  std::string planPath;       // --pp-plan: draw the pipeline plan as an SVG, then exit
  std::string tracePrefix;    // --trace: CC_TRACE for this run's communicators
  float bucketMiB = 25.0f;    // --bucket-mb (train.parallel.bucketBytes)
  bool help = false;
};

// Parses argv; an unknown flag, a missing or malformed value, or an inconsistent
// combination is an error whose message names the flag.
Result<Options> parseOptions(const std::vector<std::string>& arguments);

const char* usage();

}  // namespace cc::parallel::train_tool
