// The pipeline executor: runs this rank's stage of a plan (plan.h) over its model part, one
// optimizer step at a time, and carries what a pipeline adds to a step.
//
// - Activations and gradients travel on the pipeline communicator as the plan groups them:
//   each group is queued (ccGroupStart/End around its ccSend/ccRecv calls) on a stream
//   that runs the groups in plan order while the stage computes, and a compute that reads
//   received data first waits for the stream; simulate.h checked, before the first step,
//   that no plan order can deadlock so, whatever the transport buffers.
// - Each micro-batch in flight has an activation arena and a hidden-state gradient buffer
//   (a slot; zb-h1 adds what its B leaves its W), as many as the plan ever holds at once on
//   this stage (1F1B: P - s, GPipe: M, zb-h1: P); a slot whose last send may still be queued
//   is waited for before it is written again. An interleaved stage runs V model chunks
//   (non-adjacent ranges of blocks, in one parameter buffer): its slots are per chunk, each
//   chunk's arenas over that chunk's blocks.
// - The tied embedding: the first stage's wte and the last stage's copy (at offset 0 of
//   both buffers) each get half of the gradient; after the plan, the two stages exchange
//   theirs and both add, so both hold the sum (a + b = b + a: the same bits on both). As the
//   model's observer it holds back "gradients final" for [0, size of the tied tensor) from
//   the data-parallel observer behind it, so DP reduces the tied gradient only after the sum.
// - The step's last backward on this stage is data parallelism's communicating micro-batch;
//   it stays open until the tied sum is done, so DP launches the rest then. With chunks,
//   it opens at the last chunk's last backward (the chunks finish from the last to the
//   first, as their gradients lie from the buffer's end towards its start), and the model's
//   "gradients final" reaches DP only from each chunk's last backward.
#pragma once

#include <cc/cc.h>

#include <functional>
#include <memory>
#include <vector>

#include "parallel/model/gpt.h"
#include "parallel/pp/plan.h"
#include "parallel/pp/simulate.h"

namespace cc::parallel {

class PipelineStage final : public GptObserver {
 public:
  // world: every rank of the job (the plans' hashes are compared over it: another
  // --grad-accum or --schedule anywhere is an error everywhere); pp: the mesh's pipeline
  // communicator (its rank is the stage). The model is this stage's part and must outlive
  // the stage; inner is the observer behind this one (data parallelism; may be null).
  // The model part holds the plan's chunks (Mesh: --pp x --virtual-stages).
  static Result<std::unique_ptr<PipelineStage>> create(ccComm_t world, ccComm_t pp,
                                                       Gpt<float>& model, const Plan& plan,
                                                       int microBatchRows, GptObserver* inner);
  ~PipelineStage() override;
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  int stage() const { return stage_; }
  int stages() const { return plan_.shape.stages; }
  const Simulation& prediction() const { return prediction_; }

  struct StepHooks {
    // The tokens of micro-batch i of this step (inputs and targets, [rows, seq]).
    std::function<void(int microBatch, std::vector<int32_t>& inputs, std::vector<int32_t>& targets)>
        fill;
    // Around each backward compute; communicates on the step's last one (data parallelism).
    std::function<Status(bool communicates)> beginBackward;
    std::function<Status()> endBackward;
    // After each compute (the TP group's first failure).
    std::function<Status()> afterCompute;
  };
  // Runs the step's plan. Returns the sum of the micro-batches' mean losses on the last
  // stage, 0 elsewhere. lossScale as Gpt::headBackward's.
  Result<double> runStep(const StepHooks& hooks, float lossScale);
  // Forward only, one batch through every stage (evaluation): the mean loss on the last
  // stage, 0 elsewhere.
  Result<double> forwardOnly(std::span<const int32_t> inputs, std::span<const int32_t> targets);
  // How long this stage waited for received data in the last step (the measured bubble).
  double lastWaitSeconds() const { return waitSeconds_; }
  // The mean time of this stage's forward, B and W in the last step, in seconds (a whole
  // backward counts half as B, half as W), and the link's time for one activation
  // (measured at creation), for simulate() with measured costs.
  CostModel lastCosts() const;
  const Plan& plan() const { return plan_; }
  // Activation elements this stage holds: its arenas (per chunk, the most micro-batches the
  // plan holds of it at once), the model's workspace and zb-h1's stashes.
  size_t activationElements() const;

  void beforeBlockForward(int layer) override;
  void afterBlockForward(int layer) override;
  void beforeBlockBackward(int layer) override;
  void afterBlockBackward(int layer) override;
  void gradientsFinalFrom(size_t offset) override;

 private:
  PipelineStage(ccComm_t pp, Gpt<float>& model, const Plan& plan, int stage, int rows,
                GptObserver* inner);
  bool firstStage() const { return stage_ == 0; }
  bool lastStage() const { return stage_ == plan_.shape.stages - 1; }
  size_t hiddenCount() const;
  // The slot of (micro-batch, chunk), taking a free one of the chunk's; released by key
  // microBatch x chunks + chunk.
  int slotFor(int microBatch, int chunk);
  void releaseSlot(int key);
  void releaseFinishedSlots();
  Status enqueue(const Action& group);
  Status waitForTransfers();
  Status waitForSends(int slot);
  Status sumTiedGradients();
  // One activation's time on the links: every stage sends one to the next stage and
  // receives one from the previous (a ring shift, all links at once, as a plan's paired
  // groups move them), seven times; the median, the slowest stage's.
  Result<double> measureLink();

  ccComm_t pp_;
  Gpt<float>& model_;
  Plan plan_;
  Simulation prediction_;
  int stage_;
  int rows_;
  GptObserver* inner_;
  size_t tiedEnd_ = 0;  // [0, tiedEnd_): the tied tensor, where this stage holds one
  ccStream_t stream_ = nullptr;
  std::vector<LayerRange> chunkLayers_;  // the blocks of each chunk
  // Slots: an arena, a hidden-state gradient and (zb-h1) a stash each; the chunk's slots
  // are firstSlot_[chunk], ... (arenas of that chunk's blocks).
  std::vector<ActivationArena<float>> arenas_;
  std::vector<std::vector<float>> gradients_;
  std::vector<std::vector<float>> stashes_;  // zb-h1: what each slot's B leaves its W
  std::vector<int> firstSlot_;               // per chunk
  std::vector<int> slotOf_;                  // per micro-batch x chunks + chunk, -1 when none
  std::vector<std::vector<int>> freeSlots_;  // per chunk
  std::vector<int> finished_;                // keys whose slots free at the next compute
  bool forwardFinal_ = true;                 // the running compute is its chunk's last
  std::vector<uint64_t> lastSend_;           // per slot: the group that last sent from it
  uint64_t queued_ = 0, drained_ = 0;        // groups queued, and all before drained_ are done
  double waitSeconds_ = 0;
  double linkSeconds_ = 0;
  double computeSeconds_[4] = {0, 0, 0, 0};  // per Work, in the last step
  int computes_[4] = {0, 0, 0, 0};
};

}  // namespace cc::parallel
