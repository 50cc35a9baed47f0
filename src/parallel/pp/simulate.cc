#include "parallel/pp/simulate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace cc::parallel {

namespace {

// What one stage has done to one chunk of one micro-batch so far.
struct ChunkState {
  bool forwarded = false, inputGradient = false, weightGradient = false;
  bool activationIn = false, gradientIn = false;    // received
  bool activationOut = false, gradientOut = false;  // sent
};

Status planError(int stage, size_t index, const Action& action, const std::string& what) {
  return invalidArgument("pipeline plan: stage " + std::to_string(stage) + " action " +
                         std::to_string(index) + " (" + describe(action) + "): " + what);
}

// The static checks (simulate.h), and the most chunks in flight per stage.
// The most micro-batches in flight per stage, in all and per chunk.
struct Peaks {
  std::vector<int> total;
  std::vector<std::vector<int>> perChunk;
};

Result<Peaks> check(const Plan& plan) {
  const PipelineShape& shape = plan.shape;
  const int last = shape.virtualStages() - 1;
  Peaks peaks;
  // (sender, receiver, gradient, micro-batch, sender's chunk) -> sends minus receives
  std::map<std::tuple<int, int, bool, int, int>, int> unmatched;
  // Per (sender, receiver): the transfers in the sender's order and in the receiver's. cc
  // matches a pair's messages first in, first out, without tags, so the two must agree.
  using Message = std::tuple<bool, int, int>;  // gradient, micro-batch, sender's chunk
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
  for (int stage = 0; stage < shape.stages; ++stage) {
    std::vector<ChunkState> states(static_cast<size_t>(shape.microBatches * shape.chunks));
    int inFlight = 0, peak = 0;
    std::vector<int> chunkInFlight(static_cast<size_t>(shape.chunks), 0);
    std::vector<int> chunkPeak(chunkInFlight);
    const std::vector<Action>& actions = plan.stages[static_cast<size_t>(stage)];
    for (size_t index = 0; index < actions.size(); ++index) {
      const Action& action = actions[index];
      auto stateOf = [&](int microBatch, int chunk) -> ChunkState* {
        if (microBatch < 0 || microBatch >= shape.microBatches || chunk < 0 ||
            chunk >= shape.chunks)
          return nullptr;
        return &states[static_cast<size_t>(microBatch * shape.chunks + chunk)];
      };
      auto fail = [&](const std::string& what) { return planError(stage, index, action, what); };
      if (action.kind == Action::Kind::kCompute) {
        ChunkState* state = stateOf(action.microBatch, action.chunk);
        if (state == nullptr) return fail("micro-batch or chunk out of range");
        const int virtualStage = shape.virtualStage(stage, action.chunk);
        switch (action.work) {
          case Work::kForward:
            if (state->forwarded) return fail("forwarded twice");
            if (virtualStage > 0 && !state->activationIn) return fail("its input was not received");
            state->forwarded = true;
            peak = std::max(peak, ++inFlight);
            chunkPeak[static_cast<size_t>(action.chunk)] =
                std::max(chunkPeak[static_cast<size_t>(action.chunk)],
                         ++chunkInFlight[static_cast<size_t>(action.chunk)]);
            break;
          case Work::kBackward:
          case Work::kBackwardInput:
            if (!state->forwarded) return fail("backward before forward");
            if (state->inputGradient) return fail("backwarded twice");
            if (virtualStage < last && !state->gradientIn)
              return fail("its output's gradient was not received");
            state->inputGradient = true;
            if (action.work == Work::kBackward) {
              state->weightGradient = true;
              --inFlight;
              --chunkInFlight[static_cast<size_t>(action.chunk)];
            }
            break;
          case Work::kBackwardWeight:
            if (!state->inputGradient) return fail("W before B");
            if (state->weightGradient) return fail("W twice");
            state->weightGradient = true;
            --inFlight;
            --chunkInFlight[static_cast<size_t>(action.chunk)];
            break;
        }
        continue;
      }
      if (action.transfers.empty()) return fail("an empty group");
      for (const Transfer& t : action.transfers) {
        ChunkState* state = stateOf(t.microBatch, t.chunk);
        if (state == nullptr || t.peer < 0 || t.peer >= shape.stages || t.peerChunk < 0 ||
            t.peerChunk >= shape.chunks)
          return fail("a transfer out of range");
        const int mine = shape.virtualStage(stage, t.chunk);
        const int theirs = shape.virtualStage(t.peer, t.peerChunk);
        // Activations go up the virtual stages, gradients down.
        const bool up = t.send != t.gradient;
        if (theirs != mine + (up ? 1 : -1)) return fail("a transfer to the wrong virtual stage");
        bool& done = t.send ? (t.gradient ? state->gradientOut : state->activationOut)
                            : (t.gradient ? state->gradientIn : state->activationIn);
        if (done) return fail("a transfer made twice");
        if (t.send && !(t.gradient ? state->inputGradient : state->forwarded))
          return fail("sends data it has not computed");
        done = true;
        const int sender = t.send ? stage : t.peer;
        const int receiver = t.send ? t.peer : stage;
        const int senderChunk = t.send ? t.chunk : t.peerChunk;
        unmatched[{sender, receiver, t.gradient, t.microBatch, senderChunk}] += t.send ? 1 : -1;
        (t.send ? sent : received)[{sender, receiver}].push_back(
            {t.gradient, t.microBatch, senderChunk});
      }
    }
    for (int microBatch = 0; microBatch < shape.microBatches; ++microBatch) {
      for (int chunk = 0; chunk < shape.chunks; ++chunk) {
        const ChunkState& state = states[static_cast<size_t>(microBatch * shape.chunks + chunk)];
        if (!state.forwarded || !state.inputGradient || !state.weightGradient) {
          return invalidArgument("pipeline plan: stage " + std::to_string(stage) +
                                 " never finishes micro-batch " + std::to_string(microBatch) +
                                 " chunk " + std::to_string(chunk));
        }
      }
    }
    peaks.total.push_back(peak);
    peaks.perChunk.push_back(chunkPeak);
  }
  for (const auto& [key, count] : unmatched) {
    if (count != 0) {
      return invalidArgument("pipeline plan: " + std::string(count > 0 ? "a send" : "a receive") +
                             " of micro-batch " + std::to_string(std::get<3>(key)) +
                             " from stage " + std::to_string(std::get<0>(key)) + " to stage " +
                             std::to_string(std::get<1>(key)) + " has no counterpart");
    }
  }
  for (const auto& [pair, messages] : sent) {
    if (received[pair] != messages) {
      return invalidArgument("pipeline plan: stage " + std::to_string(pair.second) +
                             " receives what stage " + std::to_string(pair.first) +
                             " sends it in another order (cc matches a pair's messages in "
                             "order, without tags)");
    }
  }
  return peaks;
}

double costOf(Work work, const CostModel& cost) {
  switch (work) {
    case Work::kForward:
      return cost.forward;
    case Work::kBackward:
      return cost.backwardInput + cost.backwardWeight;
    case Work::kBackwardInput:
      return cost.backwardInput;
    case Work::kBackwardWeight:
      return cost.backwardWeight;
  }
  return 0;
}

bool matches(const Transfer& mine, int me, const Transfer& theirs) {
  return theirs.send != mine.send && theirs.gradient == mine.gradient &&
         theirs.microBatch == mine.microBatch && theirs.peer == me &&
         theirs.chunk == mine.peerChunk && theirs.peerChunk == mine.chunk;
}

// Whether a compute reads data a receive brought: it then waits for the stage's queue.
bool readsReceivedData(const PipelineShape& shape, int stage, const Action& action) {
  const int virtualStage = shape.virtualStage(stage, action.chunk);
  if (action.work == Work::kForward) return virtualStage > 0;
  if (action.work == Work::kBackwardWeight) return false;
  return virtualStage < shape.virtualStages() - 1;
}

// A stage's queue of transfer groups (the executor's stream): groups run one at a time in
// plan order, in the background of the stage's computes.
struct Queue {
  struct Entry {
    size_t action;    // index of the group in the stage's actions
    double queuedAt;  // when the stage reached it
  };
  std::vector<Entry> entries;
  size_t head = 0;
  bool started = false;
  double startedAt = 0;
  double free = 0;  // when the last completed group completed
  std::vector<bool> done;
  double groupEnd = 0;
};

}  // namespace

Result<Simulation> simulate(const Plan& plan, const CostModel& cost) {
  return simulate(plan, std::vector<CostModel>(plan.stages.size(), cost));
}

Result<Simulation> simulate(const Plan& plan, const std::vector<CostModel>& stageCosts) {
  if (stageCosts.size() != plan.stages.size())
    return invalidArgument("pipeline plan: " + std::to_string(stageCosts.size()) +
                           " stage costs for " + std::to_string(plan.stages.size()) + " stages");
  if (static_cast<int>(plan.stages.size()) != plan.shape.stages)
    return invalidArgument("pipeline plan: " + std::to_string(plan.stages.size()) +
                           " stage lists for " + std::to_string(plan.shape.stages) + " stages");
  Simulation result;
  CC_ASSIGN_OR_RETURN(Peaks peaks, check(plan));
  result.peakInFlight = std::move(peaks.total);
  result.peakInFlightPerChunk = std::move(peaks.perChunk);
  const size_t stages = plan.stages.size();
  std::vector<size_t> next(stages, 0);
  std::vector<double> clock(stages, 0.0);
  std::vector<Queue> queues(stages);
  result.busy.assign(stages, 0.0);
  auto startHead = [&](size_t stage) {
    Queue& queue = queues[stage];
    if (queue.started || queue.head >= queue.entries.size()) return;
    const Queue::Entry& entry = queue.entries[queue.head];
    queue.started = true;
    queue.startedAt = std::max(queue.free, entry.queuedAt);
    queue.done.assign(plan.stages[stage][entry.action].transfers.size(), false);
    queue.groupEnd = queue.startedAt;
  };
  auto headGroup = [&](size_t stage) -> const Action* {
    const Queue& queue = queues[stage];
    return queue.started ? &plan.stages[stage][queue.entries[queue.head].action] : nullptr;
  };
  for (;;) {
    bool progressed = false;
    // Computes run until one needs a receive that its queue has not finished.
    for (size_t stage = 0; stage < stages; ++stage) {
      const std::vector<Action>& actions = plan.stages[stage];
      Queue& queue = queues[stage];
      while (next[stage] < actions.size()) {
        const Action& action = actions[next[stage]];
        if (action.kind == Action::Kind::kCommunicate) {
          queue.entries.push_back({next[stage], clock[stage]});
          ++next[stage];
          progressed = true;
          continue;
        }
        double start = clock[stage];
        if (readsReceivedData(plan.shape, static_cast<int>(stage), action)) {
          if (queue.head < queue.entries.size()) break;  // waits for the queue to drain
          start = std::max(start, queue.free);
        }
        const double duration = costOf(action.work, stageCosts[stage]);
        result.spans.push_back({static_cast<int>(stage), action, start, start + duration});
        clock[stage] = start + duration;
        result.busy[stage] += duration;
        ++next[stage];
        progressed = true;
      }
    }
    // Queue heads meet: a transfer completes once both sides' groups run.
    for (size_t stage = 0; stage < stages; ++stage) {
      startHead(stage);
      const Action* group = headGroup(stage);
      if (group == nullptr) continue;
      Queue& queue = queues[stage];
      for (size_t i = 0; i < group->transfers.size(); ++i) {
        if (queue.done[i]) continue;
        const size_t peer = static_cast<size_t>(group->transfers[i].peer);
        startHead(peer);
        const Action* theirs = headGroup(peer);
        if (theirs == nullptr) continue;
        Queue& peerQueue = queues[peer];
        for (size_t j = 0; j < theirs->transfers.size(); ++j) {
          if (peerQueue.done[j] ||
              !matches(group->transfers[i], static_cast<int>(stage), theirs->transfers[j]))
            continue;
          const double at = std::max(queue.startedAt, peerQueue.startedAt) +
                            std::max(stageCosts[stage].transfer, stageCosts[peer].transfer);
          queue.done[i] = peerQueue.done[j] = true;
          queue.groupEnd = std::max(queue.groupEnd, at);
          peerQueue.groupEnd = std::max(peerQueue.groupEnd, at);
          progressed = true;
          break;
        }
      }
    }
    for (Queue& queue : queues) {
      if (!queue.started ||
          !std::all_of(queue.done.begin(), queue.done.end(), [](bool b) { return b; }))
        continue;
      queue.free = queue.groupEnd;
      queue.started = false;
      ++queue.head;
      progressed = true;
    }
    bool finished = true;
    for (size_t stage = 0; stage < stages; ++stage) {
      finished = finished && next[stage] == plan.stages[stage].size() &&
                 queues[stage].head == queues[stage].entries.size();
    }
    if (finished) break;
    if (!progressed) {
      std::string waits;
      for (size_t stage = 0; stage < stages; ++stage) {
        const Queue& queue = queues[stage];
        if (queue.head < queue.entries.size()) {
          waits += "; stage " + std::to_string(stage) + " waits in " +
                   describe(plan.stages[stage][queue.entries[queue.head].action]);
        }
      }
      return invalidArgument(std::string("pipeline plan (") + scheduleName(plan.kind) +
                             "): deadlock" + waits);
    }
  }
  result.makespan = 0;
  for (size_t stage = 0; stage < stages; ++stage)
    result.makespan = std::max({result.makespan, clock[stage], queues[stage].free});
  for (size_t stage = 0; stage < stages; ++stage) {
    const double idle = result.makespan > 0 ? 1.0 - result.busy[stage] / result.makespan : 0.0;
    result.bubble.push_back(idle);
    result.meanBubble += idle / static_cast<double>(stages);
  }
  return result;
}

std::string planSvg(const Plan& plan, const Simulation& simulation) {
  constexpr double kWidth = 1200, kRow = 28, kLeft = 70, kTop = 40;
  const double scale = simulation.makespan > 0 ? kWidth / simulation.makespan : 1;
  const double height = kTop + kRow * plan.shape.stages + 30;
  std::string svg;
  char line[512];
  std::snprintf(line, sizeof(line),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"11\">\n",
                kLeft + kWidth + 20, height);
  svg += line;
  std::snprintf(line, sizeof(line),
                "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s: %d stages, %d micro-batches%s; "
                "predicted bubble %.1f%% (mean over stages)</text>\n",
                kLeft, scheduleName(plan.kind), plan.shape.stages, plan.shape.microBatches,
                plan.shape.chunks > 1
                    ? (", " + std::to_string(plan.shape.chunks) + " chunks per stage").c_str()
                    : "",
                100.0 * simulation.meanBubble);
  svg += line;
  for (int stage = 0; stage < plan.shape.stages; ++stage) {
    std::snprintf(line, sizeof(line), "<text x=\"6\" y=\"%.1f\">stage %d</text>\n",
                  kTop + kRow * stage + kRow * 0.6, stage);
    svg += line;
  }
  for (const ComputeSpan& span : simulation.spans) {
    const char* colour = span.action.work == Work::kForward         ? "#4e79a7"
                         : span.action.work == Work::kBackward      ? "#e15759"
                         : span.action.work == Work::kBackwardInput ? "#f28e2b"
                                                                    : "#59a14f";
    const double x = kLeft + span.start * scale, w = (span.end - span.start) * scale;
    const double y = kTop + kRow * span.stage;
    std::snprintf(line, sizeof(line),
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                  "stroke=\"white\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"white\" "
                  "text-anchor=\"middle\">%s</text>\n",
                  x, y + 2, w, kRow - 4, colour, x + w / 2, y + kRow * 0.6,
                  describe(span.action).c_str());
    svg += line;
  }
  std::snprintf(line, sizeof(line),
                "<text x=\"%.0f\" y=\"%.0f\">F forward, B input gradient, W weight gradient, "
                "BW both</text>\n</svg>\n",
                kLeft, height - 8);
  svg += line;
  return svg;
}

}  // namespace cc::parallel
