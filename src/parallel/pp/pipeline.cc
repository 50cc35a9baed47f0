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

// Per action: whether it is the last compute that accumulates its chunk's gradients (after
// it they are final for this step).
std::vector<bool> lastOfChunk(const std::vector<Action>& actions, int chunks) {
  std::vector<size_t> last(static_cast<size_t>(chunks), actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    if (accumulates(actions[i])) last[static_cast<size_t>(actions[i].chunk)] = i;
  }
  std::vector<bool> result(actions.size(), false);
  for (size_t index : last) {
    if (index < actions.size()) result[index] = true;
  }
  return result;
}

// The step's communicating compute: the first of the chunks' last ones. From it to the end
// of the step only backwards run (every forward precedes the last chunk's last backward),
// and the chunks finish from the last to the first, as their gradients lie in the buffer
// from its end towards its start.
size_t communicatingCompute(const std::vector<bool>& lastOfChunk) {
  for (size_t i = 0; i < lastOfChunk.size(); ++i) {
    if (lastOfChunk[i]) return i;
  }
  return lastOfChunk.size();
}

}  // namespace

Result<std::unique_ptr<PipelineStage>> PipelineStage::create(ccComm_t world, ccComm_t pp,
                                                             Gpt<float>& model, const Plan& plan,
                                                             int microBatchRows,
                                                             GptObserver* inner) {
  if (static_cast<int>(model.layout().chunks().size()) != plan.shape.chunks) {
    return invalidArgument("pipeline: the plan has " + std::to_string(plan.shape.chunks) +
                           " model chunks per stage, the stage's model part " +
                           std::to_string(model.layout().chunks().size()) +
                           " (the mesh cuts the layers into --pp x --virtual-stages)");
  }
  const bool split = plan.kind == ScheduleKind::kZeroBubbleH1;
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
  // Slots per chunk, as many as the plan holds of that chunk at once.
  const std::vector<int>& peaks =
      created->prediction_.peakInFlightPerChunk[static_cast<size_t>(stage)];
  for (int chunk = 0; chunk < plan.shape.chunks; ++chunk) {
    const int slots = peaks[static_cast<size_t>(chunk)];
    const int base = static_cast<int>(created->arenas_.size());
    created->firstSlot_.push_back(base);
    created->freeSlots_.emplace_back();
    for (int slot = 0; slot < slots; ++slot) {
      created->freeSlots_.back().push_back(base + slots - 1 - slot);  // the lowest taken first
      created->arenas_.push_back(model.makeArena(microBatchRows, chunk));
      created->gradients_.emplace_back(created->hiddenCount());
      if (split) created->stashes_.emplace_back(model.weightStashElements(microBatchRows));
    }
  }
  created->lastSend_.assign(created->arenas_.size(), 0);
  CC_TRY(ccCall(ccStreamCreate(&created->stream_), pp, "pp: ccStreamCreate"));
  CC_ASSIGN_OR_RETURN(created->linkSeconds_, created->measureLink());
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
      chunkLayers_(model.layout().chunks()),
      slotOf_(static_cast<size_t>(plan.shape.microBatches * plan.shape.chunks), -1) {
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

int PipelineStage::slotFor(int microBatch, int chunk) {
  int& slot = slotOf_[static_cast<size_t>(microBatch * plan_.shape.chunks + chunk)];
  if (slot < 0) {
    std::vector<int>& free = freeSlots_[static_cast<size_t>(chunk)];
    if (free.empty()) {
      // The simulator counted the most micro-batches in flight; more is a bug here.
      std::fprintf(stderr, "pp: stage %d needs more activation slots for chunk %d\n", stage_,
                   chunk);
      std::abort();
    }
    slot = free.back();
    free.pop_back();
  }
  return slot;
}

void PipelineStage::releaseSlot(int key) {
  int& slot = slotOf_[static_cast<size_t>(key)];
  freeSlots_[static_cast<size_t>(key % plan_.shape.chunks)].push_back(slot);
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
      const int slot = slotFor(t.microBatch, t.chunk);
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
  (void)ccTraceRangePush(pp_, "wait");
  const Status status =
      ccCall(ccStreamSynchronize(stream_), pp_,
             "pp: stage " + std::to_string(stage_) + " waiting for its neighbours");
  (void)ccTraceRangePop(pp_);
  waitSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  drained_ = queued_;
  return status;
}

Status PipelineStage::waitForSends(int slot) {
  return lastSend_[static_cast<size_t>(slot)] > drained_ ? waitForTransfers() : Status::ok();
}

Result<double> PipelineStage::measureLink() {
  const size_t count = hiddenCount();
  const int stages = plan_.shape.stages;
  std::vector<float> outgoing(count, 0.0f), incoming(count);
  std::vector<double> seconds;
  for (int round = 0; round < 7; ++round) {
    const auto start = std::chrono::steady_clock::now();
    CC_TRY(ccCall(ccGroupStart(), pp_, "pp: ccGroupStart"));
    Status posted =
        ccCall(ccSend(outgoing.data(), count, ccFloat32, (stage_ + 1) % stages, pp_, nullptr), pp_,
               "pp: send of the link measurement");
    if (posted.isOk()) {
      posted = ccCall(
          ccRecv(incoming.data(), count, ccFloat32, (stage_ + stages - 1) % stages, pp_, nullptr),
          pp_, "pp: receive of the link measurement");
    }
    const Status ended = ccCall(ccGroupEnd(), pp_, "pp: the link measurement");
    CC_TRY(posted);
    CC_TRY(ended);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  double median = seconds[seconds.size() / 2];
  CC_TRY(ccCall(ccAllReduce(&median, &median, 1, ccFloat64, ccMax, pp_, nullptr), pp_,
                "pp: all-reduce of the link measurement"));
  return median;
}

CostModel PipelineStage::lastCosts() const {
  auto mean = [&](Work work) {
    const int k = static_cast<int>(work);
    return computes_[k] > 0 ? computeSeconds_[k] / computes_[k] : 0.0;
  };
  const double whole = mean(Work::kBackward);
  return CostModel{mean(Work::kForward), whole > 0 ? whole / 2 : mean(Work::kBackwardInput),
                   whole > 0 ? whole / 2 : mean(Work::kBackwardWeight), linkSeconds_};
}

Result<double> PipelineStage::runStep(const StepHooks& hooks, float lossScale) {
  waitSeconds_ = 0;
  for (int k = 0; k < 4; ++k) {
    computeSeconds_[k] = 0;
    computes_[k] = 0;
  }
  const std::vector<Action>& actions = plan_.stages[static_cast<size_t>(stage_)];
  const std::vector<bool> final = lastOfChunk(actions, plan_.shape.chunks);
  const size_t communicating = communicatingCompute(final);
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
    const int slot = slotFor(action.microBatch, action.chunk);
    ActivationArena<float>& arena = arenas_[static_cast<size_t>(slot)];
    float* gradient = gradients_[static_cast<size_t>(slot)].data();
    const LayerRange layers = chunkLayers_[static_cast<size_t>(action.chunk)];
    const bool embeds = firstStage() && action.chunk == 0;
    const bool heads = lastStage() && action.chunk == plan_.shape.chunks - 1;
    // Data parallelism's communicating bracket opens at `communicating` and stays open to
    // the end of the step; before it, each accumulating compute is a bracket of its own.
    const bool opens = index <= communicating, closes = index < communicating;
    forwardFinal_ = final[index];
    // F3, B3, W3 or BW3 (".1" for chunk 1) in the CC_TRACE timeline, around the compute
    // and its wait for received data.
    (void)ccTraceRangePush(pp_, describe(action).c_str());
    const auto started = std::chrono::steady_clock::now();
    const double waitedBefore = waitSeconds_;
    if (action.work == Work::kForward) {
      // Its input arrived (or this stage embeds), and nothing still reads this slot.
      CC_TRY(embeds ? waitForSends(slot) : waitForTransfers());
      hooks.fill(action.microBatch, inputs, targets);
      arena.setBatch(inputs, targets, rows_);
      arena.setLossScale(lossScale);  // the MoE blocks' auxiliary losses, on every stage
      if (embeds) model_.embeddingForward(arena);
      for (int layer = layers.first; layer < layers.end; ++layer) model_.blockForward(layer, arena);
      if (heads) lossSum += model_.headForward(arena);
    } else if (action.work == Work::kBackwardWeight) {
      float* stash = stashes_[static_cast<size_t>(slot)].data();
      if (opens) CC_TRY(hooks.beginBackward(index == communicating));
      if (heads) model_.headBackwardWeight(arena, stash);
      for (int layer = layers.end - 1; layer >= layers.first; --layer)
        model_.blockBackwardWeight(layer, arena, stash);
      if (embeds) model_.embeddingBackwardWeight(arena, stash);
      if (closes) CC_TRY(hooks.endBackward());
    } else if (action.work == Work::kBackwardInput) {
      CC_TRY(heads ? waitForSends(slot) : waitForTransfers());
      float* stash = stashes_[static_cast<size_t>(slot)].data();
      if (heads) model_.headBackwardInput(arena, gradient, lossScale, stash);
      for (int layer = layers.end - 1; layer >= layers.first; --layer)
        model_.blockBackwardInput(layer, arena, gradient, stash);
      if (embeds) model_.embeddingBackwardInput(arena, gradient, stash);
    } else {
      CC_TRY(heads ? waitForSends(slot) : waitForTransfers());
      if (opens) CC_TRY(hooks.beginBackward(index == communicating));
      if (heads) model_.headBackward(arena, gradient, lossScale);
      for (int layer = layers.end - 1; layer >= layers.first; --layer)
        model_.blockBackward(layer, arena, gradient);
      if (embeds) model_.embeddingBackward(arena, gradient);
      if (closes) CC_TRY(hooks.endBackward());
    }
    forwardFinal_ = true;
    (void)ccTraceRangePop(pp_);
    CC_TRY(hooks.afterCompute());
    const int kind = static_cast<int>(action.work);
    computeSeconds_[kind] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() -
        (waitSeconds_ - waitedBefore);
    ++computes_[kind];
    if (accumulates(action)) {
      finished_.push_back(action.microBatch * plan_.shape.chunks + action.chunk);
    }
  }
  releaseFinishedSlots();
  CC_TRY(waitForTransfers());
  // The tied exchange waits for the other end of the pipeline to finish: bubble too.
  const auto tiedStart = std::chrono::steady_clock::now();
  (void)ccTraceRangePush(pp_, "tied embedding sum");
  const Status tied = sumTiedGradients();
  (void)ccTraceRangePop(pp_);
  CC_TRY(tied);
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
  const size_t count = hiddenCount();
  const int stages = plan_.shape.stages, chunks = plan_.shape.chunks;
  // The batch goes round the stages once per chunk, as the training plan's forwards do.
  for (int chunk = 0; chunk < chunks; ++chunk) {
    ActivationArena<float>& arena =
        arenas_[static_cast<size_t>(firstSlot_[static_cast<size_t>(chunk)])];
    arena.setBatch(inputs, targets, rows_);
    if (firstStage() && chunk == 0) {
      model_.embeddingForward(arena);
    } else {
      CC_TRY(ccCall(
          ccRecv(arena.input(), count, ccFloat32, (stage_ + stages - 1) % stages, pp_, nullptr),
          pp_, "pp: receive of an activation from the previous stage (evaluation)"));
    }
    const LayerRange layers = chunkLayers_[static_cast<size_t>(chunk)];
    for (int layer = layers.first; layer < layers.end; ++layer) model_.blockForward(layer, arena);
    if (lastStage() && chunk == chunks - 1) return model_.headForward(arena);
    CC_TRY(ccCall(ccSend(arena.output(), count, ccFloat32, (stage_ + 1) % stages, pp_, nullptr),
                  pp_, "pp: send of an activation to the next stage (evaluation)"));
  }
  return 0.0;
}

size_t PipelineStage::activationElements() const {
  const ParameterLayout& layout = model_.layout();
  const bool recompute = model_.recomputes();
  size_t total = Workspace<float>::elementCount(layout, rows_, recompute);
  for (int chunk = 0; chunk < plan_.shape.chunks; ++chunk) {
    const size_t slots = static_cast<size_t>(
        prediction_.peakInFlightPerChunk[static_cast<size_t>(stage_)][static_cast<size_t>(chunk)]);
    total += slots * ActivationArena<float>::elementCount(layout, rows_, recompute, chunk);
  }
  for (const std::vector<float>& stash : stashes_) total += stash.size();
  return total;
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
  // Only a chunk's last backward finishes its gradients. The tied tensor is final only
  // after sumTiedGradients; the communicating micro-batch's end then hands DP the rest.
  if (inner_ != nullptr && forwardFinal_) inner_->gradientsFinalFrom(std::max(offset, tiedEnd_));
}

}  // namespace cc::parallel
