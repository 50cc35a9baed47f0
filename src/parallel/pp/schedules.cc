// The schedules: each the compute order of one stage, a straight loop (plan.h adds the
// transfers). P stages, M micro-batches, V chunks per stage, s this stage.
#include <algorithm>
#include <deque>

#include "parallel/pp/plan.h"

namespace cc::parallel {

namespace {

Action forward(int microBatch, int chunk = 0) {
  return Action::compute(Work::kForward, microBatch, chunk);
}
Action backward(int microBatch, int chunk = 0) {
  return Action::compute(Work::kBackward, microBatch, chunk);
}

}  // namespace

// GPipe: every forward, then every backward. M micro-batches in flight on every stage.
std::vector<Action> gpipeOrder(const PipelineShape& shape, int /*stage*/) {
  std::vector<Action> order;
  for (int i = 0; i < shape.microBatches; ++i) order.push_back(forward(i));
  for (int i = 0; i < shape.microBatches; ++i) order.push_back(backward(i));
  return order;
}

// 1F1B (PipeDream-Flush, Megatron's default): P - s - 1 forwards to fill the pipeline, then
// one forward and one backward in turn, then the backwards left. At most P - s micro-batches
// in flight on stage s.
std::vector<Action> oneFOneBOrder(const PipelineShape& shape, int stage) {
  const int warmup = std::min(shape.stages - stage - 1, shape.microBatches);
  const int steady = shape.microBatches - warmup;
  std::vector<Action> order;
  for (int i = 0; i < warmup; ++i) order.push_back(forward(i));
  for (int i = 0; i < steady; ++i) {
    order.push_back(forward(warmup + i));
    order.push_back(backward(i));
  }
  for (int i = 0; i < warmup; ++i) order.push_back(backward(steady + i));
  return order;
}

// Interleaved 1F1B (Narayanan et al. 2021, Megatron's placement): the M·V forwards of a stage
// taken P micro-batches at a time through chunk 0, then the same P through chunk 1, ...;
// backwards in the same groups with the chunks reversed. A longer warm-up fills the V
// rounds; the bubble shrinks V-fold.
int interleavedWarmup(const PipelineShape& shape, int stage) {
  const int p = shape.stages, v = shape.chunks, total = shape.microBatches * v;
  return shape.microBatches == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
}

std::vector<Action> interleavedOrder(const PipelineShape& shape, int stage) {
  const int p = shape.stages, v = shape.chunks, total = shape.microBatches * v;
  const int warmup = interleavedWarmup(shape, stage);
  const int steady = total - warmup;
  auto microBatch = [&](int k) { return k / (p * v) * p + k % p; };
  auto forwardChunk = [&](int k) { return k % (p * v) / p; };
  auto backwardChunk = [&](int k) { return v - 1 - forwardChunk(k); };
  std::vector<Action> order;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(microBatch(k), forwardChunk(k)));
  for (int i = 0; i < steady; ++i) {
    const int k = warmup + i;
    order.push_back(forward(microBatch(k), forwardChunk(k)));
    order.push_back(backward(microBatch(i), backwardChunk(i)));
  }
  for (int k = steady; k < total; ++k) order.push_back(backward(microBatch(k), backwardChunk(k)));
  return order;
}

// ZB-H1 (Qi et al. 2024): 1F1B with every backward split into B, which the previous stage
// waits for, and W, which nobody waits for. Stage s holds back its first s Ws, so its Bs
// run early and the gradients reach the earlier stages sooner; the held-back Ws fill what
// would have been the bubble at the end. P micro-batches at most in flight on every stage
// (1F1B's peak, the first stage's).
std::vector<Action> zeroBubbleH1Order(const PipelineShape& shape, int stage) {
  const int m = shape.microBatches;
  const int warmup = std::min(shape.stages - stage - 1, m);
  std::vector<Action> order;
  std::deque<int> weightsDue;
  int forwards = 0, backwards = 0;
  auto step = [&](bool withForward, bool withWeight) {
    if (withForward) order.push_back(forward(forwards++));
    order.push_back(Action::compute(Work::kBackwardInput, backwards));
    weightsDue.push_back(backwards++);
    if (withWeight) {
      order.push_back(Action::compute(Work::kBackwardWeight, weightsDue.front()));
      weightsDue.pop_front();
    }
  };
  while (forwards < warmup) order.push_back(forward(forwards++));
  for (int held = 0; held < stage && forwards < m; ++held) step(true, false);
  while (forwards < m) step(true, true);
  while (backwards < m) step(false, true);
  for (int weight : weightsDue) order.push_back(Action::compute(Work::kBackwardWeight, weight));
  return order;
}

}  // namespace cc::parallel
