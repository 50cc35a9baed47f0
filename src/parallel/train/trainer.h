// One process's training loop: the model, AdamW, the learning-rate schedule and a batch
// source, stepped one optimizer step at a time. A step runs `gradAccum` micro-batches
// (batch index = step x gradAccum + micro-batch), averages their gradients, clips by the
// global norm and updates. Everything that decides a step's result is a function of the
// step number and the checkpointed state, so a resumed run is bit-for-bit the same run.
//
// Given the job's mesh (mesh/mesh.h), the same loop runs over it: the model holds this
// rank's part (mesh.modelPart), and data parallelism (dp/data_parallel.h, with the ZeRO
// stage from zero/stages.h) plugs into the loop's hooks: each rank reads its own slice of
// every global batch (the source's rank/world), the gradients are averaged over the DP
// ranks, and with ZeRO the optimizer state, gradients and parameters are sharded. Rank
// count N with B sequences per rank is the one-process run with N x B sequences, to fp32
// rounding. With tp > 1 each rank holds its TP shard of every block and of the
// vocabulary (tp/, Megatron's split) and DP acts on that shard; the TP ranks of a DP rank
// read the same batches. Checkpoints keep the one-process layout: shards are assembled on
// save and cut on load. Pipeline parallelism (pp > 1) is refused until its issue lands.
#pragma once

#include <cc/compress.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/data/batch_source.h"
#include "parallel/dp/compressing_reducer.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/ep/expert_parallel_comm.h"
#include "parallel/mesh/mesh.h"
#include "parallel/model/gpt.h"
#include "parallel/optim/adamw.h"
#include "parallel/optim/lr_schedule.h"
#include "parallel/pp/pipeline.h"
#include "parallel/tp/tensor_parallel_comm.h"

namespace cc::parallel {

struct TrainOptions {
  GptConfig model;
  int batch = 8;        // B, sequences per micro-batch
  int gradAccum = 1;    // micro-batches per optimizer step
  int64_t steps = 200;  // length of the schedule
  float lr = 3e-3f;
  int64_t warmup = 20;
  float clip = 1.0f;  // global-norm clipping; <= 0 turns it off
  AdamWOptions adamw;
  uint64_t seed = 1337;
  DataParallelOptions parallel;  // used when the trainer is given a mesh
  // Under the mesh's tp > 1: shard the residual stream's rows too (model_part.h).
  bool sequenceParallel = false;
  // Activation recomputation (Gpt's recompute), with or without a mesh.
  bool recompute = false;
  // Under the mesh's pp > 1: the pipeline schedule over the gradAccum micro-batches.
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int virtualStages = 1;  // model chunks per stage (interleaved)
  // DP's gradient reductions compressed (dp/compressing_reducer.h); needs a mesh.
  CompressionOptions compression;
  // Local SGD: 0 off; K > 0: no gradient reductions, each DP rank steps alone and the
  // parameters are averaged over DP after every K-th step (ZeRO-0, no compression).
  int localSgdSteps = 0;
  // 1-bit Adam (Tang et al. 2021): plain AdamW with averaged gradients for freezeStep steps,
  // then the variance frozen and the momentum, from each rank's own gradients, averaged by
  // cc's 1-bit compressed all-reduce (ZeRO-0, no other compression).
  bool oneBitAdam = false;
  int64_t freezeStep = 20;
};

// One MoE block's routing over a whole step: every micro-batch of every DP rank.
struct MoeStepStatistics {
  int layer = 0;
  std::vector<int64_t> tokens;   // [E]: (token, choice) pairs routed to each expert
  std::vector<int64_t> dropped;  // [E]: of them, beyond capacity
  double auxLoss = 0;            // the load-balancing loss, mean over the micro-batches
  double zLoss = 0;
  int64_t minTokens() const;
  int64_t maxTokens() const;
  // max / mean tokens per expert (1 is perfect balance)
  double imbalance() const;
  int64_t totalDropped() const;
};

struct StepResult {
  int64_t step = 0;  // the step just completed, from 1
  double loss = 0;   // mean over its micro-batches
  float lr = 0;
  double gradNorm = 0;  // before clipping
  double seconds = 0;
  double gradientWaitSeconds = 0;      // DP: waiting for gradient reductions at the step
  double pipelineWaitSeconds = 0;      // PP: this stage waiting for its neighbours' data
  std::vector<MoeStepStatistics> moe;  // per MoE block of the model, in layer order
};

class Trainer {
 public:
  // mesh: none for one process (no communicator at all); else the job's mesh, which must
  // outlive the trainer (collective construction; check status()). The source must
  // already read this rank's slice.
  Trainer(const TrainOptions& options, std::unique_ptr<BatchSource> source,
          const Mesh* mesh = nullptr);
  ~Trainer();

  // Whether setting up data parallelism worked (always ok on one process).
  const Status& status() const { return status_; }

  // One optimizer step; fails only when a collective does (a peer died: the message
  // names it), and the trainer is unusable afterwards.
  Result<StepResult> tryStep();
  // tryStep for the one-process trainer, which cannot fail.
  StepResult step();
  // Steps completed (0 for a fresh model, the checkpoint's step after load()).
  int64_t completedSteps() const { return optimizer_.step(); }

  // Mean loss over `batches` batches of `source`, without touching the gradients.
  double evaluate(const BatchSource& source, int batches = 1);

  // Collective under DP: gathers the shards; DP rank 0 writes.
  Status save(const std::string& path);
  // Model and, where present, optimizer state; a failure changes nothing. Under DP every
  // rank reads the files and keeps its shard.
  Status load(const std::string& path);

  Gpt<float>& model() { return model_; }
  const Gpt<float>& model() const { return model_; }
  const AdamW& optimizer() const { return optimizer_; }
  const TrainOptions& options() const { return options_; }
  // The parameters as one process holds them (collective under ZeRO-3, which gathers).
  Result<std::vector<float>> fullParameters();

  // Tokens of one global step (all DP ranks).
  size_t tokensPerStep() const;
  // Null on one process.
  const DataParallel* dataParallel() const { return dataParallel_.get(); }
  // Null without pipeline parallelism.
  const PipelineStage* pipeline() const { return pipeline_.get(); }

 private:
  Status runStep(StepResult& result);
  // The first failure of the TP group's collectives (ok without TP).
  Status tensorParallelStatus() const;
  // The first failure of the TP and EP groups' collectives (ok without them).
  Status groupStatus() const;
  // Sums the routing of every MoE block over the micro-batches and the ranks (collective over
  // the world under a mesh).
  Result<std::vector<MoeStepStatistics>> moeStatistics();
  // Collective over EP: the other EP ranks' experts put into a whole-model buffer.
  Status gatherExperts(std::span<const float> local, std::vector<float>& whole);
  // Collective over TP: the one-process values of a buffer in this rank's layout (every TP
  // rank's shards put in place), and the reverse for this rank.
  Result<std::vector<float>> assembleWhole(std::span<const float> local);
  // Collective over PP: stage 0 gets every stage's tensors of a whole-model buffer (the
  // other stages' buffers are left as they were).
  Status gatherStages(std::vector<float>& whole);
  std::vector<float> cutLocal(std::span<const float> whole) const;
  Result<double> finishGradients();
  Status update(float lr, float gradientScale);
  ccCompressor_t momentumCompressor_ = nullptr;  // 1-bit Adam's, made at the freeze

  TrainOptions options_;
  std::unique_ptr<BatchSource> source_;
  int world_ = 1;
  Status status_;  // before dataParallel_, whose construction may set it
  std::unique_ptr<TensorParallelComm> tensorParallel_;  // tp > 1; outlives the model's use
  std::unique_ptr<ExpertParallelComm> expertParallel_;  // ep > 1; outlives the model's use
  Gpt<float> model_;
  std::unique_ptr<DataParallel> dataParallel_;
  // pp > 1: this rank's stage of the plan, the model's observer in front of DP's.
  std::unique_ptr<PipelineStage> pipeline_;
  const Mesh* mesh_ = nullptr;
  AdamW optimizer_;
  LrSchedule schedule_;
  std::vector<int32_t> inputs_;
  std::vector<int32_t> targets_;
};

}  // namespace cc::parallel
