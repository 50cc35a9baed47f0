// The pipeline schedules as data (pp/plan.h) and their simulator (pp/simulate.h):
// - every schedule passes the simulator's checks (each chunk of each micro-batch forwarded
//   and backwarded once, inputs received before use, no deadlock under rendezvous
//   semantics) for every P <= 8, M <= 16 and V <= 4 it accepts, and every (schedule, shape)
//   has its own plan hash;
// - the predicted bubble of GPipe and 1F1B is the closed form (P-1)/(M+P-1) on every stage;
//   interleaved's is below 1F1B's and zb-h1's idle time at most half of it;
// - 1F1B holds at most P - s micro-batches on stage s where GPipe holds M, and zb-h1 no more
//   than 1F1B's peak;
// - plans that deadlock, lose a backward, send what was never computed or receive a pair's
//   messages in another order than they were sent are refused with a message that says so.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "parallel/pp/plan.h"
#include "parallel/pp/simulate.h"

namespace cc::parallel {
namespace {

constexpr ScheduleKind kKinds[] = {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB,
                                   ScheduleKind::kInterleaved, ScheduleKind::kZeroBubbleH1};

Plan planOf(ScheduleKind kind, PipelineShape shape) {
  auto plan = makePlan(kind, shape);
  EXPECT_TRUE(plan.isOk()) << plan.status().message();
  return plan.isOk() ? std::move(plan).value() : Plan{};
}

TEST(PipelinePlan, EveryValidShapeOfEveryScheduleChecksOutWithItsOwnHash) {
  std::set<uint64_t> hashes;
  int plans = 0;
  for (ScheduleKind kind : kKinds) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = 1; v <= 4; ++v) {
          const PipelineShape shape{p, m, v};
          if (!validateShape(kind, shape).isOk()) continue;
          const Plan plan = planOf(kind, shape);
          const auto simulation = simulate(plan);
          ASSERT_TRUE(simulation.isOk()) << scheduleName(kind) << " P " << p << " M " << m << " V "
                                         << v << ": " << simulation.status().message();
          EXPECT_TRUE(hashes.insert(planHash(plan)).second)
              << scheduleName(kind) << " P " << p << " M " << m << " V " << v;
          ++plans;
        }
      }
    }
  }
  std::printf("%d plans checked\n", plans);
  EXPECT_GT(plans, 3 * 8 * 16);
}

// (makespan - busy) summed over stages: the idle time the bubble fraction is made of.
double idleTime(const Simulation& simulation) {
  double idle = 0;
  for (double busy : simulation.busy) idle += simulation.makespan - busy;
  return idle;
}

TEST(PipelinePlan, PredictedBubbleIsTheClosedFormAndTheNewerSchedulesShrinkIt) {
  // A backward twice a forward, B and W equal halves of it; chunks of an interleaved stage
  // each do 1/V of its work.
  const CostModel cost{1, 1, 1, 0};
  for (int p = 2; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      const double closedForm = static_cast<double>(p - 1) / (m + p - 1);
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
        const auto simulation = simulate(planOf(kind, {p, m, 1}), cost);
        ASSERT_TRUE(simulation.isOk());
        for (double bubble : simulation->bubble) {
          EXPECT_NEAR(bubble, closedForm, 1e-12) << scheduleName(kind) << " P " << p << " M " << m;
        }
      }
      const auto oneFOneB = simulate(planOf(ScheduleKind::kOneFOneB, {p, m, 1}), cost);
      if (m >= p) {
        const auto zeroBubble = simulate(planOf(ScheduleKind::kZeroBubbleH1, {p, m, 1}), cost);
        ASSERT_TRUE(zeroBubble.isOk());
        EXPECT_LE(idleTime(*zeroBubble), 0.5 * idleTime(*oneFOneB)) << "P " << p << " M " << m;
      }
      if (m % p == 0) {
        const double v = 2;
        const CostModel chunkCost{1 / v, 1 / v, 1 / v, 0};
        const auto interleaved = simulate(planOf(ScheduleKind::kInterleaved, {p, m, 2}), chunkCost);
        ASSERT_TRUE(interleaved.isOk());
        EXPECT_LT(interleaved->meanBubble, oneFOneB->meanBubble) << "P " << p << " M " << m;
      }
    }
  }
}

TEST(PipelinePlan, OneFOneBHoldsAtMostTheStagesLeftWhereGPipeHoldsEveryMicroBatch) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      const auto gpipe = simulate(planOf(ScheduleKind::kGPipe, {p, m, 1}));
      const auto oneFOneB = simulate(planOf(ScheduleKind::kOneFOneB, {p, m, 1}));
      const auto zeroBubble = simulate(planOf(ScheduleKind::kZeroBubbleH1, {p, m, 1}));
      ASSERT_TRUE(gpipe.isOk() && oneFOneB.isOk() && zeroBubble.isOk());
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(gpipe->peakInFlight[static_cast<size_t>(s)], m);
        EXPECT_EQ(oneFOneB->peakInFlight[static_cast<size_t>(s)], std::min(p - s, m));
        EXPECT_LE(zeroBubble->peakInFlight[static_cast<size_t>(s)], oneFOneB->peakInFlight[0]);
      }
    }
  }
}

// Splits every group of more than one transfer into one group per transfer, sends first:
// two neighbours that each send before they receive.
Plan sendsBeforeReceives(Plan plan) {
  for (std::vector<Action>& actions : plan.stages) {
    std::vector<Action> split;
    for (const Action& action : actions) {
      if (action.kind != Action::Kind::kCommunicate || action.transfers.size() < 2) {
        split.push_back(action);
        continue;
      }
      for (bool sends : {true, false}) {
        for (const Transfer& transfer : action.transfers) {
          if (transfer.send != sends) continue;
          Action single;
          single.kind = Action::Kind::kCommunicate;
          single.transfers = {transfer};
          split.push_back(single);
        }
      }
    }
    actions = split;
  }
  return plan;
}

TEST(PipelinePlan, BrokenPlansAreRefusedSayingWhy) {
  const Plan good = planOf(ScheduleKind::kOneFOneB, {2, 2, 1});
  ASSERT_TRUE(simulate(good).isOk());

  const auto deadlock = simulate(sendsBeforeReceives(good));
  ASSERT_FALSE(deadlock.isOk());
  EXPECT_NE(deadlock.status().message().find("deadlock"), std::string::npos)
      << deadlock.status().message();
  EXPECT_NE(deadlock.status().message().find("stage 0 waits in {send activation 1"),
            std::string::npos)
      << deadlock.status().message();

  Plan lost = good;
  lost.stages[0].pop_back();  // stage 0's last backward
  const auto unfinished = simulate(lost);
  ASSERT_FALSE(unfinished.isOk());
  EXPECT_NE(unfinished.status().message().find("never finishes micro-batch 1"), std::string::npos)
      << unfinished.status().message();

  // Stage 1 takes both activations in one group, the second first: cc would hand it
  // micro-batch 0's data as micro-batch 1's.
  Plan swapped = planOf(ScheduleKind::kGPipe, {2, 2, 1});
  std::vector<Action>& last = swapped.stages[1];
  ASSERT_EQ(describe(last[0]), "{receive activation 0 from stage 0}");
  ASSERT_EQ(describe(last[2]), "{receive activation 1 from stage 0}");
  last[0].transfers.insert(last[0].transfers.begin(), last[2].transfers.front());
  last.erase(last.begin() + 2);
  const auto reordered = simulate(swapped);
  ASSERT_FALSE(reordered.isOk());
  EXPECT_NE(reordered.status().message().find("in another order"), std::string::npos)
      << reordered.status().message();

  Plan early = good;
  // Stage 0 sends micro-batch 0's activation before computing it.
  std::swap(early.stages[0][0], early.stages[0][1]);
  const auto uncomputed = simulate(early);
  ASSERT_FALSE(uncomputed.isOk());
  EXPECT_NE(uncomputed.status().message().find("sends data it has not computed"), std::string::npos)
      << uncomputed.status().message();
}

TEST(PipelinePlan, BadScheduleNamesAndShapesAreClearErrors) {
  const auto unknown = parseSchedule("2f2b");
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("gpipe, 1f1b, interleaved, zb-h1"), std::string::npos);
  EXPECT_EQ(parseSchedule("zb-h1").value(), ScheduleKind::kZeroBubbleH1);
  EXPECT_NE(validateShape(ScheduleKind::kInterleaved, {2, 3, 2}).message().find("multiple of"),
            std::string::npos);
  EXPECT_NE(validateShape(ScheduleKind::kInterleaved, {2, 4, 1}).message().find("at least 2"),
            std::string::npos);
  EXPECT_NE(validateShape(ScheduleKind::kOneFOneB, {2, 4, 2}).message().find("only interleaved"),
            std::string::npos);
  EXPECT_NE(validateShape(ScheduleKind::kGPipe, {2, 0, 1}).message().find("micro-batches 0"),
            std::string::npos);
}

TEST(PipelinePlan, TheSvgDrawsEveryComputeAndThePredictedBubble) {
  const Plan plan = planOf(ScheduleKind::kZeroBubbleH1, {4, 8, 1});
  const auto simulation = simulate(plan);
  ASSERT_TRUE(simulation.isOk());
  const std::string svg = planSvg(plan, *simulation);
  size_t boxes = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1))
    ++boxes;
  EXPECT_EQ(boxes, simulation->spans.size());
  EXPECT_EQ(boxes, static_cast<size_t>(4 * 8 * 3));  // F, B and W of every micro-batch
  char bubble[64];
  std::snprintf(bubble, sizeof(bubble), "predicted bubble %.1f%%", 100 * simulation->meanBubble);
  EXPECT_NE(svg.find(bubble), std::string::npos);
}

}  // namespace
}  // namespace cc::parallel
