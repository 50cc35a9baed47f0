#include "parallel/pp/plan.h"

namespace cc::parallel {

namespace {

struct Named {
  ScheduleKind kind;
  const char* name;
};
constexpr Named kSchedules[] = {{ScheduleKind::kGPipe, "gpipe"},
                                {ScheduleKind::kOneFOneB, "1f1b"},
                                {ScheduleKind::kInterleaved, "interleaved"},
                                {ScheduleKind::kZeroBubbleH1, "zb-h1"}};

// FNV-1a, fed field by field.
class Fingerprint {
 public:
  void add(int64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash_ ^= static_cast<uint64_t>(value >> (8 * byte)) & 0xff;
      hash_ *= 0x100000001b3ull;
    }
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace

Result<ScheduleKind> parseSchedule(std::string_view name) {
  std::string known;
  for (const Named& schedule : kSchedules) {
    if (name == schedule.name) return schedule.kind;
    known += known.empty() ? "" : ", ";
    known += schedule.name;
  }
  return invalidArgument("schedule \"" + std::string(name) + "\" is not one of " + known);
}

const char* scheduleName(ScheduleKind kind) {
  for (const Named& schedule : kSchedules) {
    if (schedule.kind == kind) return schedule.name;
  }
  return "?";
}

Status validateShape(ScheduleKind kind, const PipelineShape& shape) {
  const std::string name = scheduleName(kind);
  if (shape.stages < 1)
    return invalidArgument(name + ": stages " + std::to_string(shape.stages) + " < 1");
  if (shape.microBatches < 1) {
    return invalidArgument(name + ": micro-batches " + std::to_string(shape.microBatches) + " < 1");
  }
  if (kind != ScheduleKind::kInterleaved && shape.chunks != 1) {
    return invalidArgument(name + ": " + std::to_string(shape.chunks) +
                           " virtual stages per stage; only interleaved holds more than one");
  }
  if (kind == ScheduleKind::kInterleaved) {
    if (shape.chunks < 2) {
      return invalidArgument("interleaved: needs at least 2 virtual stages per stage, not " +
                             std::to_string(shape.chunks));
    }
    if (shape.stages < 2) return invalidArgument("interleaved: needs at least 2 stages");
    if (shape.microBatches % shape.stages != 0) {
      return invalidArgument("interleaved: micro-batches " + std::to_string(shape.microBatches) +
                             " must be a multiple of the stages " + std::to_string(shape.stages));
    }
  }
  return Status::ok();
}

namespace {

// Where a compute's transfers go: the receive it needs and the send of what it made.
struct Needs {
  bool receives = false, sends = false;
  Transfer receive, send;
};

Needs needsOf(const PipelineShape& shape, int stage, const Action& action) {
  const int virtualStage = shape.virtualStage(stage, action.chunk);
  const int last = shape.virtualStages() - 1;
  auto transfer = [&](bool send, bool gradient, int otherVirtual) {
    return Transfer{send,
                    gradient,
                    action.microBatch,
                    action.chunk,
                    shape.stageOf(otherVirtual),
                    shape.chunkOf(otherVirtual)};
  };
  Needs needs;
  if (action.work == Work::kForward) {
    needs.receives = virtualStage > 0;
    if (needs.receives) needs.receive = transfer(false, false, virtualStage - 1);
    needs.sends = virtualStage < last;
    if (needs.sends) needs.send = transfer(true, false, virtualStage + 1);
  } else if (action.work != Work::kBackwardWeight) {
    needs.receives = virtualStage < last;
    if (needs.receives) needs.receive = transfer(false, true, virtualStage + 1);
    needs.sends = virtualStage > 0;
    if (needs.sends) needs.send = transfer(true, true, virtualStage - 1);
  }
  return needs;
}

// The order with its transfers (plan.h). groups[g] goes before compute g (g = size: after
// the last). By default each receive joins the group just before its compute and each send
// the group just after its compute. Interleaved groups as Megatron does: no group between
// the forward and the backward of a steady-state pair, each receive in the last group
// before its compute and each send in the first after it; so one group after each pair
// sends both results and receives both next inputs, and the two neighbours' queues never
// cross.
std::vector<Action> withTransfers(const PipelineShape& shape, int stage,
                                  const std::vector<Action>& order, bool pairedGroups) {
  const size_t n = order.size();
  std::vector<bool> groupBefore(n + 1, true);
  if (pairedGroups) {
    // The steady state's pairs start after the warm-up; no group inside a pair.
    const size_t warmup = static_cast<size_t>(interleavedWarmup(shape, stage));
    const size_t pairs = (n - 2 * warmup) / 2;
    for (size_t pair = 0; pair < pairs; ++pair) groupBefore[warmup + 2 * pair + 1] = false;
  }
  std::vector<std::vector<Transfer>> groups(n + 1);
  for (size_t i = 0; i < n; ++i) {
    const Needs needs = needsOf(shape, stage, order[i]);
    if (needs.receives) {
      size_t g = i;
      while (!groupBefore[g]) --g;
      groups[g].push_back(needs.receive);
    }
    if (needs.sends) {
      size_t g = i + 1;
      while (!groupBefore[g]) ++g;
      groups[g].push_back(needs.send);
    }
  }
  std::vector<Action> actions;
  for (size_t g = 0; g <= n; ++g) {
    if (!groups[g].empty()) {
      Action group;
      group.kind = Action::Kind::kCommunicate;
      group.transfers = std::move(groups[g]);
      actions.push_back(std::move(group));
    }
    if (g < n) actions.push_back(order[g]);
  }
  return actions;
}

}  // namespace

Result<Plan> makePlan(ScheduleKind kind, const PipelineShape& shape) {
  CC_TRY(validateShape(kind, shape));
  Plan plan{kind, shape, {}};
  for (int stage = 0; stage < shape.stages; ++stage) {
    std::vector<Action> order;
    switch (kind) {
      case ScheduleKind::kGPipe:
        order = gpipeOrder(shape, stage);
        break;
      case ScheduleKind::kOneFOneB:
        order = oneFOneBOrder(shape, stage);
        break;
      case ScheduleKind::kInterleaved:
        order = interleavedOrder(shape, stage);
        break;
      case ScheduleKind::kZeroBubbleH1:
        order = zeroBubbleH1Order(shape, stage);
        break;
    }
    plan.stages.push_back(withTransfers(shape, stage, order, kind == ScheduleKind::kInterleaved));
  }
  return plan;
}

uint64_t planHash(const Plan& plan) {
  Fingerprint fingerprint;
  fingerprint.add(static_cast<int64_t>(plan.kind));
  fingerprint.add(plan.shape.stages);
  fingerprint.add(plan.shape.microBatches);
  fingerprint.add(plan.shape.chunks);
  for (const std::vector<Action>& actions : plan.stages) {
    fingerprint.add(static_cast<int64_t>(actions.size()));
    for (const Action& action : actions) {
      fingerprint.add(static_cast<int64_t>(action.kind));
      fingerprint.add(static_cast<int64_t>(action.work));
      fingerprint.add(action.microBatch);
      fingerprint.add(action.chunk);
      for (const Transfer& t : action.transfers) {
        fingerprint.add((t.send ? 1 : 0) + (t.gradient ? 2 : 0));
        fingerprint.add(t.microBatch);
        fingerprint.add(t.chunk);
        fingerprint.add(t.peer);
        fingerprint.add(t.peerChunk);
      }
    }
  }
  return fingerprint.value();
}

std::string describe(const Action& action) {
  auto chunkSuffix = [](int chunk) { return chunk > 0 ? "." + std::to_string(chunk) : ""; };
  if (action.kind == Action::Kind::kCompute) {
    const char* letter = action.work == Work::kForward         ? "F"
                         : action.work == Work::kBackward      ? "BW"
                         : action.work == Work::kBackwardInput ? "B"
                                                               : "W";
    return letter + std::to_string(action.microBatch) + chunkSuffix(action.chunk);
  }
  std::string text = "{";
  for (const Transfer& t : action.transfers) {
    if (text.size() > 1) text += ", ";
    text += std::string(t.send ? "send " : "receive ") +
            (t.gradient ? "gradient " : "activation ") + std::to_string(t.microBatch) +
            chunkSuffix(t.chunk) + (t.send ? " to " : " from ") + "stage " + std::to_string(t.peer);
  }
  return text + "}";
}

}  // namespace cc::parallel
