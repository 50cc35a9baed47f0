#include "parallel/pp/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {

namespace {

// Whether a compute accumulates weight gradients (a whole backward or a W).
bool accumulates(const Action& action) {
  return action.kind == Action::Kind::kCompute &&
         (action.work == Work::kBackward || action.work == Work::kBackwardWeight);
}

// The last compute on the stage that accumulates gradients: the step's communicating one.
size_t lastBackward(const std::vector<Action>& actions) {
  size_t last = actions.size();
  for (size_t i = 0; i < actions.size(); ++i) {
    if (accumulates(actions[i])) last = i;
  }
  return last;
}

}  // namespace

Result<std::unique_ptr<PipelineStage>> PipelineStage::create(ccComm_t world, ccComm_t pp,
                                                             Gpt<float>& model, const Plan& plan,
                                                             int microBatchRows,
                                                             GptObserver* inner) {
  if (plan.shape.chunks > 1) {
    return invalidArgument(std::string("pipeline: schedule ") + scheduleName(plan.kind) +
                           " is planned and simulated (cc-train --pp-plan draws it) but the "
                           "executor does not run it yet: it needs several model chunks per "
                           "stage; use gpipe, 1f1b or zb-h1");
  }
  const bool split = plan.kind == ScheduleKind::kZeroBubbleH1;
  if (split && (model.layout().part().tpSize > 1 || model.recomputes())) {
    return invalidArgument(
        "pipeline: zb-h1 splits the backward into B and W, which runs on unsharded stages "
        "without recomputation only so far: drop --tp or --recompute, or use 1f1b");
  }
  int stage = 0, stages = 0;
  CC_TRY(ccCall(ccCommUserRank(pp, &stage), pp, "pp: ccCommUserRank"));
  CC_TRY(ccCall(ccCommCount(pp, &stages), pp, "pp: ccCommCount"));
  if (stages != plan.shape.stages) {
    return invalidArgument("pipeline: the plan has " + std::to_string(plan.shape.stages) +
                           " stages, the pipeline communicator " + std::to_string(stages));
  }
  // Every rank must run the same plan: a different one would hang its neighbours.
  const uint64_t hash = planHash(plan);
  uint64_t lowest = hash, highest = hash;
  CC_TRY(ccCall(ccAllReduce(&lowest, &lowest, 1, ccUint64, ccMin, world, nullptr), world,
                "pp: comparing the ranks' plans"));
  CC_TRY(ccCall(ccAllReduce(&highest, &highest, 1, ccUint64, ccMax, world, nullptr), world,
                "pp: comparing the ranks' plans"));
  if (lowest != highest) {
    return invalidArgument(std::string("pipeline: the ranks made different plans (this rank: ") +
                           scheduleName(plan.kind) + ", " +
                           std::to_string(plan.shape.microBatches) +
                           " micro-batches): every rank needs the same --schedule, --pp and "
                           "--grad-accum");
  }
  std::unique_ptr<PipelineStage> created(
      new PipelineStage(pp, model, plan, stage, microBatchRows, inner));
  CC_ASSIGN_OR_RETURN(created->prediction_, simulate(plan));
  const int slots = created->prediction_.peakInFlight[static_cast<size_t>(stage)];
  for (int slot = 0; slot < slots; ++slot) {
    created->arenas_.push_back(model.makeArena(microBatchRows));
    created->gradients_.emplace_back(created->hiddenCount());
    if (split) created->stashes_.emplace_back(model.weightStashElements(microBatchRows));
    created->freeSlots_.push_back(slots - 1 - slot);
  }
  created->lastSend_.assign(static_cast<size_t>(slots), 0);
  CC_TRY(ccCall(ccStreamCreate(&created->stream_), pp, "pp: ccStreamCreate"));
  model.setObserver(created.get());
  return created;
}

PipelineStage::PipelineStage(ccComm_t pp, Gpt<float>& model, const Plan& plan, int stage, int rows,
                             GptObserver* inner)
    : pp_(pp),
      model_(model),
      plan_(plan),
      stage_(stage),
      rows_(rows),
      inner_(inner),
      slotOf_(static_cast<size_t>(plan.shape.microBatches), -1) {
  const ParameterLayout& layout = model.layout();
  if (plan.shape.stages > 1 && (layout.hasEmbeddings() || layout.hasTiedCopy())) {
    const TensorSlice& tied = layout.tensors().front();  // wte, or the last stage's copy
    tiedEnd_ = tied.offset + tied.size;
  }
}

PipelineStage::~PipelineStage() {
  if (stream_ != nullptr) ccStreamDestroy(stream_);
  model_.setObserver(inner_);
}

size_t PipelineStage::hiddenCount() const {
  const ModelPart& part = model_.layout().part();
  const size_t rows = static_cast<size_t>(rows_) * static_cast<size_t>(model_.config().seq);
  return rows / static_cast<size_t>(part.sequenceParallel ? part.tpSize : 1) *
         static_cast<size_t>(model_.config().width);
}

int PipelineStage::slotFor(int microBatch) {
  int& slot = slotOf_[static_cast<size_t>(microBatch)];
  if (slot < 0) {
    if (freeSlots_.empty()) {
      // The simulator counted the most micro-batches in flight; more is a bug here.
      std::fprintf(stderr, "pp: stage %d needs more than its %zu activation slots\n", stage_,
                   arenas_.size());
      std::abort();
    }
    slot = freeSlots_.back();
    freeSlots_.pop_back();
  }
  return slot;
}

void PipelineStage::releaseSlot(int microBatch) {
  int& slot = slotOf_[static_cast<size_t>(microBatch)];
  freeSlots_.push_back(slot);
  slot = -1;
}

Status PipelineStage::enqueue(const Action& group) {
  const size_t count = hiddenCount();
  ++queued_;
  CC_TRY(ccCall(ccGroupStart(), pp_, "pp: ccGroupStart"));
  Status posted = Status::ok();
  // Sends first: a slot whose backward just finished is free once its gradient's send is
  // posted, and a receive of this same group may take it (the receive writes the arena's
  // input, the send reads the gradient buffer).
  for (bool sends : {true, false}) {
    if (!sends) releaseFinishedSlots();
    for (const Transfer& t : group.transfers) {
      if (t.send != sends || !posted.isOk()) continue;
      const int slot = slotFor(t.microBatch);
      ActivationArena<float>& arena = arenas_[static_cast<size_t>(slot)];
      float* gradient = gradients_[static_cast<size_t>(slot)].data();
      if (t.send) {
        lastSend_[static_cast<size_t>(slot)] = queued_;
        posted = ccCall(
            ccSend(t.gradient ? gradient : arena.output(), count, ccFloat32, t.peer, pp_, stream_),
            pp_,
            t.gradient ? "pp: send of a gradient to the previous stage"
                       : "pp: send of an activation to the next stage");
      } else {
        posted = ccCall(
            ccRecv(t.gradient ? gradient : arena.input(), count, ccFloat32, t.peer, pp_, stream_),
            pp_,
            t.gradient ? "pp: receive of a gradient from the next stage"
                       : "pp: receive of an activation from the previous stage");
      }
    }
  }
  const Status ended = ccCall(ccGroupEnd(), pp_, "pp: the transfers of a pipeline step");
  return posted.isOk() ? ended : posted;
}

void PipelineStage::releaseFinishedSlots() {
  for (int done : finished_) releaseSlot(done);
  finished_.clear();
}

Status PipelineStage::waitForTransfers() {
  if (drained_ == queued_) return Status::ok();
  const auto start = std::chrono::steady_clock::now();
  const Status status =
      ccCall(ccStreamSynchronize(stream_), pp_,
             "pp: stage " + std::to_string(stage_) + " waiting for its neighbours");
  waitSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  drained_ = queued_;
  return status;
}

Status PipelineStage::waitForSends(int slot) {
  return lastSend_[static_cast<size_t>(slot)] > drained_ ? waitForTransfers() : Status::ok();
}

CostModel PipelineStage::lastCosts() const {
  auto mean = [&](Work work) {
    const int k = static_cast<int>(work);
    return computes_[k] > 0 ? computeSeconds_[k] / computes_[k] : 0.0;
  };
  const double whole = mean(Work::kBackward);
  return CostModel{mean(Work::kForward), whole > 0 ? whole / 2 : mean(Work::kBackwardInput),
                   whole > 0 ? whole / 2 : mean(Work::kBackwardWeight), 0};
}

Result<double> PipelineStage::runStep(const StepHooks& hooks, float lossScale) {
  waitSeconds_ = 0;
  for (int k = 0; k < 4; ++k) {
    computeSeconds_[k] = 0;
    computes_[k] = 0;
  }
  const std::vector<Action>& actions = plan_.stages[static_cast<size_t>(stage_)];
  const size_t communicating = lastBackward(actions);
  const int first = model_.layout().firstLayer(), end = model_.layout().endLayer();
  std::vector<int32_t> inputs, targets;
  double lossSum = 0;
  for (size_t index = 0; index < actions.size(); ++index) {
    const Action& action = actions[index];
    if (action.kind == Action::Kind::kCommunicate) {
      CC_TRY(enqueue(action));
      continue;
    }
    // A slot frees once the group after its backward (the gradient's send) is queued.
    releaseFinishedSlots();
    const int slot = slotFor(action.microBatch);
    ActivationArena<float>& arena = arenas_[static_cast<size_t>(slot)];
    float* gradient = gradients_[static_cast<size_t>(slot)].data();
    const auto started = std::chrono::steady_clock::now();
    const double waitedBefore = waitSeconds_;
    if (action.work == Work::kForward) {
      // Its input arrived (or this stage embeds), and nothing still reads this slot.
      CC_TRY(firstStage() ? waitForSends(slot) : waitForTransfers());
      hooks.fill(action.microBatch, inputs, targets);
      arena.setBatch(inputs, targets, rows_);
      if (firstStage()) model_.embeddingForward(arena);
      for (int layer = first; layer < end; ++layer) model_.blockForward(layer, arena);
      if (lastStage()) lossSum += model_.headForward(arena);
    } else if (action.work == Work::kBackwardWeight) {
      float* stash = stashes_[static_cast<size_t>(slot)].data();
      const bool communicates = index == communicating;
      CC_TRY(hooks.beginBackward(communicates));
      if (lastStage()) model_.headBackwardWeight(arena, stash);
      for (int layer = end - 1; layer >= first; --layer)
        model_.blockBackwardWeight(layer, arena, stash);
      if (firstStage()) model_.embeddingBackwardWeight(arena, stash);
      if (!communicates) CC_TRY(hooks.endBackward());
    } else if (action.work == Work::kBackwardInput) {
      CC_TRY(lastStage() ? waitForSends(slot) : waitForTransfers());
      float* stash = stashes_[static_cast<size_t>(slot)].data();
      if (lastStage()) model_.headBackwardInput(arena, gradient, lossScale, stash);
      for (int layer = end - 1; layer >= first; --layer)
        model_.blockBackwardInput(layer, arena, gradient, stash);
      if (firstStage()) model_.embeddingBackwardInput(arena, gradient, stash);
    } else {
      CC_TRY(lastStage() ? waitForSends(slot) : waitForTransfers());
      const bool communicates = index == communicating;
      CC_TRY(hooks.beginBackward(communicates));
      if (lastStage()) model_.headBackward(arena, gradient, lossScale);
      for (int layer = end - 1; layer >= first; --layer)
        model_.blockBackward(layer, arena, gradient);
      if (firstStage()) model_.embeddingBackward(arena, gradient);
      if (!communicates) CC_TRY(hooks.endBackward());
    }
    CC_TRY(hooks.afterCompute());
    const int kind = static_cast<int>(action.work);
    computeSeconds_[kind] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() -
        (waitSeconds_ - waitedBefore);
    ++computes_[kind];
    if (accumulates(action)) finished_.push_back(action.microBatch);
  }
  releaseFinishedSlots();
  CC_TRY(waitForTransfers());
  // The tied exchange waits for the other end of the pipeline to finish: bubble too.
  const auto tiedStart = std::chrono::steady_clock::now();
  CC_TRY(sumTiedGradients());
  waitSeconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - tiedStart).count();
  if (communicating < actions.size()) CC_TRY(hooks.endBackward());
  return lossSum;
}

Status PipelineStage::sumTiedGradients() {
  if (tiedEnd_ == 0) return Status::ok();
  const int partner = firstStage() ? plan_.shape.stages - 1 : 0;
  std::span<float> mine = model_.gradients().first(tiedEnd_);
  std::vector<float> theirs(tiedEnd_);
  CC_TRY(ccCall(ccGroupStart(), pp_, "pp: ccGroupStart"));
  Status posted = ccCall(ccSend(mine.data(), tiedEnd_, ccFloat32, partner, pp_, nullptr), pp_,
                         "pp: send of the tied embedding's gradient");
  if (posted.isOk()) {
    posted = ccCall(ccRecv(theirs.data(), tiedEnd_, ccFloat32, partner, pp_, nullptr), pp_,
                    "pp: receive of the tied embedding's gradient");
  }
  const Status ended = ccCall(ccGroupEnd(), pp_, "pp: exchange of the tied embedding's gradient");
  CC_TRY(posted);
  CC_TRY(ended);
  for (size_t i = 0; i < tiedEnd_; ++i) mine[i] += theirs[i];
  return Status::ok();
}

Result<double> PipelineStage::forwardOnly(std::span<const int32_t> inputs,
                                          std::span<const int32_t> targets) {
  CC_TRY(waitForTransfers());
  ActivationArena<float>& arena = arenas_.front();
  arena.setBatch(inputs, targets, rows_);
  const size_t count = hiddenCount();
  if (!firstStage()) {
    CC_TRY(ccCall(ccRecv(arena.input(), count, ccFloat32, stage_ - 1, pp_, nullptr), pp_,
                  "pp: receive of an activation from the previous stage (evaluation)"));
  } else {
    model_.embeddingForward(arena);
  }
  for (int layer = model_.layout().firstLayer(); layer < model_.layout().endLayer(); ++layer)
    model_.blockForward(layer, arena);
  if (!lastStage()) {
    CC_TRY(ccCall(ccSend(arena.output(), count, ccFloat32, stage_ + 1, pp_, nullptr), pp_,
                  "pp: send of an activation to the next stage (evaluation)"));
    return 0.0;
  }
  return model_.headForward(arena);
}

void PipelineStage::beforeBlockForward(int layer) {
  if (inner_ != nullptr) inner_->beforeBlockForward(layer);
}
void PipelineStage::afterBlockForward(int layer) {
  if (inner_ != nullptr) inner_->afterBlockForward(layer);
}
void PipelineStage::beforeBlockBackward(int layer) {
  if (inner_ != nullptr) inner_->beforeBlockBackward(layer);
}
void PipelineStage::afterBlockBackward(int layer) {
  if (inner_ != nullptr) inner_->afterBlockBackward(layer);
}
void PipelineStage::gradientsFinalFrom(size_t offset) {
  // The tied tensor is final only after sumTiedGradients; the communicating micro-batch's
  // end then hands DP the rest.
  if (inner_ != nullptr) inner_->gradientsFinalFrom(std::max(offset, tiedEnd_));
}

}  // namespace cc::parallel
