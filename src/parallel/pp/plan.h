// A pipeline schedule as data: for every stage, the list of what it does in order, compute
// (forward, backward, or backward split into its input-gradient half B and its
// weight-gradient half W) and communication (a group of sends and receives posted
// together, done when all of them are). The schedules themselves (schedules.cc) only say
// the compute order; makePlan adds the transfers: each receive just before the compute
// that reads it, each send just after the compute that produced it, and transfers with no
// compute between them merged into one group (Megatron's send_forward_recv_backward), so
// that two neighbours that send to each other at the same point meet in one group instead
// of each blocking on its send. simulate.h checks a plan and predicts its bubble before
// anything runs; the executor (pipeline.h) runs it.
//
// Placement (Megatron's): stage s holds chunks c = 0..V-1, chunk c being virtual stage
// c·P + s of the V·P the layers are cut into, so the data of a micro-batch goes round the
// stages V times.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cc::parallel {

enum class ScheduleKind : uint8_t { kGPipe, kOneFOneB, kInterleaved, kZeroBubbleH1 };

// "gpipe", "1f1b", "interleaved", "zb-h1"; anything else is an error listing them.
Result<ScheduleKind> parseSchedule(std::string_view name);
const char* scheduleName(ScheduleKind kind);

struct PipelineShape {
  int stages = 1;        // P
  int microBatches = 1;  // M, per optimizer step
  int chunks = 1;        // V, model chunks per stage (interleaved only)

  int virtualStages() const { return stages * chunks; }
  int virtualStage(int stage, int chunk) const { return chunk * stages + stage; }
  int stageOf(int virtualStage) const { return virtualStage % stages; }
  int chunkOf(int virtualStage) const { return virtualStage / stages; }
};

// Whether the schedule can run the shape; the message names what is wrong (P, M or V and
// the rule: interleaved needs V >= 2 and M a multiple of P, the others V = 1).
Status validateShape(ScheduleKind kind, const PipelineShape& shape);

enum class Work : uint8_t {
  kForward,
  kBackward,        // B and W together
  kBackwardInput,   // B: the gradient of the chunk's input (what the previous stage waits for)
  kBackwardWeight,  // W: the gradients of the chunk's weights
};

struct Transfer {
  bool send = false;      // else a receive
  bool gradient = false;  // the hidden state's gradient (backward), else the hidden state
  int microBatch = 0;
  int chunk = 0;      // this stage's chunk the data leaves or enters
  int peer = 0;       // the other stage
  int peerChunk = 0;  // and its chunk
};

struct Action {
  enum class Kind : uint8_t { kCompute, kCommunicate };
  Kind kind = Kind::kCompute;
  Work work = Work::kForward;       // kCompute
  int microBatch = 0;               // kCompute
  int chunk = 0;                    // kCompute
  std::vector<Transfer> transfers;  // kCommunicate

  static Action compute(Work work, int microBatch, int chunk = 0) {
    return Action{Kind::kCompute, work, microBatch, chunk, {}};
  }
};

struct Plan {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  PipelineShape shape;
  std::vector<std::vector<Action>> stages;  // [P], each in execution order
};

// The schedule's compute order for every stage, then the transfers (above). The shape must
// pass validateShape.
Result<Plan> makePlan(ScheduleKind kind, const PipelineShape& shape);

// The compute order alone (schedules.cc): one short function per schedule.
std::vector<Action> gpipeOrder(const PipelineShape& shape, int stage);
std::vector<Action> oneFOneBOrder(const PipelineShape& shape, int stage);
std::vector<Action> interleavedOrder(const PipelineShape& shape, int stage);
std::vector<Action> zeroBubbleH1Order(const PipelineShape& shape, int stage);
// Interleaved's warm-up forwards on a stage (its order is warm-up, pairs, cool-down).
int interleavedWarmup(const PipelineShape& shape, int stage);

// A fingerprint of the whole plan (every stage's actions), which the ranks compare at
// start-up: a rank with another --grad-accum or --schedule has another hash.
uint64_t planHash(const Plan& plan);

// "F3", "B3", "W3" (with ".c" and the chunk where V > 1), "send act 3 -> 1", ...
std::string describe(const Action& action);

}  // namespace cc::parallel
