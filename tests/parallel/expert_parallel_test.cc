// Expert parallelism (ep/, EP inside DP) against the one-process MoE run, with forked ranks:
// - ep 2 and 4, each at dp = ep and dp = 2 ep, with capacity 1.25 and dropless (and ep 2 x
//   dp 2 with 2 micro-batches a rank against 4 on one process): every rank
//   with --batch B logs the loss of the one-process run with --batch B --grad-accum dp at
//   every step of 50 (1e-5 relative, as the other equivalence tests: fp32 reordering grown
//   through Adam), and the same tokens per expert and the same tokens dropped per expert
//   at every step, exactly (each rank routes its own micro-batch, as the one process routes
//   each of its micro-batches);
// - one step's all-to-all and all-to-allv bytes on the EP communicator are exactly what the
//   routing decided: per MoE block the counts (int64 per held expert to each other rank),
//   then the rows this rank sent to experts on other ranks and the rows its experts got from
//   other ranks, each C x 4 bytes, once each way in forward and again in backward;
// - a checkpoint written at ep 2 x dp 2 is the one-process checkpoint byte for byte when
//   loaded and saved back on one process, and continues the run there (the continued
//   losses are what catch a misplaced expert); a one-process checkpoint loads into ep 2 and
//   the run continues as on one process;
// - what cannot run is refused with a message (EP with ZeRO or PP, MoE with TP or zb-h1, EP
//   not dividing the experts or dp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "parallel/checkpoint/checkpoint.h"
#include "parallel/mesh/mesh.h"
#include "parallel/train/trainer.h"
#include "support/multi_rank.h"
#include "training_setup.h"

namespace cc::parallel {
namespace {

using cc::testing::RankContext;
using cc::testing::runRanks;
using testing::fileBytes;
using testing::syntheticFor;

constexpr double kLossTolerance = 1e-5;

// A small MoE model: two blocks, both MoE, four experts, top-2.
TrainOptions moeOptions(int batch, int64_t steps, double capacityFactor) {
  TrainOptions options = testing::smallTrainOptions(batch, steps, /*heads=*/2);
  options.model.width = 32;
  options.model.seq = 16;
  options.model.vocab = 64;
  options.model.experts = 4;
  options.model.topK = 2;
  options.model.expertWidth = 48;
  options.model.capacityFactor = capacityFactor;
  options.model.auxLossCoef = 0.01;
  options.model.zLossCoef = 0.001;
  return options;
}

// A dp x 1 x 1 mesh with experts split over ep of the DP ranks (null, with a failure, if
// refused).
std::unique_ptr<Mesh> epMesh(ccComm_t comm, int dp, int ep, const GptConfig& model) {
  MeshShape shape{dp, 1, 1};
  shape.ep = ep;
  return testing::meshFor(comm, shape, model);
}

struct StepRecord {
  double loss = 0;
  std::vector<MoeStepStatistics> moe;
};

std::vector<StepRecord> oneProcessRun(TrainOptions options, int gradAccum, int steps) {
  options.gradAccum = gradAccum;
  Trainer trainer(options, syntheticFor(options, 0, 1));
  std::vector<StepRecord> records;
  for (int i = 0; i < steps; ++i) {
    const StepResult result = trainer.step();
    records.push_back({result.loss, result.moe});
  }
  return records;
}

struct Shape {
  int ep, dp;
  double capacity;
  int gradAccum = 1;  // per rank; the one-process run takes dp x this many
};

void PrintTo(const Shape& shape, std::ostream* out) {
  *out << "ep " << shape.ep << " dp " << shape.dp << " capacity " << shape.capacity
       << " grad-accum " << shape.gradAccum;
}

class ExpertParallelEquivalence : public ::testing::TestWithParam<Shape> {};

TEST_P(ExpertParallelEquivalence, MatchesOneProcessLossAndRoutingEveryStep) {
  const Shape shape = GetParam();
  constexpr int kSteps = 50, kRows = 2;
  const std::vector<StepRecord> reference =
      oneProcessRun(moeOptions(kRows, kSteps, shape.capacity), shape.dp * shape.gradAccum, kSteps);
  int64_t droppedInReference = 0;
  for (const StepRecord& record : reference)
    for (const MoeStepStatistics& moe : record.moe) droppedInReference += moe.totalDropped();
  // The capacity case must exercise dropping, the dropless one must not drop.
  if (shape.capacity > 0) {
    EXPECT_GT(droppedInReference, 0);
  } else {
    EXPECT_EQ(droppedInReference, 0);
  }
  runRanks(shape.dp, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      TrainOptions options = moeOptions(kRows, kSteps, shape.capacity);
      options.gradAccum = shape.gradAccum;
      auto created = epMesh(comm, shape.dp, shape.ep, options.model);
      ASSERT_NE(created, nullptr);
      Trainer trainer(options, syntheticFor(options, created->coordinates().dp, shape.dp),
                      created.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      // This rank holds E / ep experts of each MoE block.
      const BlockOffsets& block = trainer.model().layout().block(0);
      EXPECT_EQ(static_cast<int>(block.moeMlp.experts.size()), options.model.experts / shape.ep);
      double worst = 0;
      for (int step = 0; step < kSteps; ++step) {
        auto result = trainer.tryStep();
        ASSERT_TRUE(result.isOk()) << result.status().message();
        const StepRecord& expected = reference[static_cast<size_t>(step)];
        const double relative = std::abs(result->loss - expected.loss) / expected.loss;
        worst = std::max(worst, relative);
        EXPECT_LT(relative, kLossTolerance)
            << "step " << step + 1 << ": " << result->loss << " one process " << expected.loss;
        ASSERT_EQ(result->moe.size(), expected.moe.size());
        for (size_t i = 0; i < expected.moe.size(); ++i) {
          EXPECT_EQ(result->moe[i].tokens, expected.moe[i].tokens) << "step " << step + 1;
          EXPECT_EQ(result->moe[i].dropped, expected.moe[i].dropped) << "step " << step + 1;
          EXPECT_NEAR(result->moe[i].auxLoss, expected.moe[i].auxLoss, 1e-5);
        }
      }
      if (context.rank == 0) {
        std::printf(
            "ep %d dp %d capacity %g: largest relative loss difference over %d steps %.3g, "
            "%lld pairs dropped in all\n",
            shape.ep, shape.dp, shape.capacity, kSteps, worst,
            static_cast<long long>(droppedInReference));
      }
    }
    ccCommDestroy(comm);
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, ExpertParallelEquivalence,
                         ::testing::Values(Shape{2, 2, 1.25}, Shape{2, 2, 0}, Shape{2, 4, 1.25},
                                           Shape{2, 4, 0}, Shape{4, 4, 1.25}, Shape{4, 4, 0},
                                           Shape{4, 8, 1.25}, Shape{4, 8, 0}, Shape{2, 2, 1.25, 2}),
                         [](const auto& shapeInfo) {
                           return "ep" + std::to_string(shapeInfo.param.ep) + "_dp" +
                                  std::to_string(shapeInfo.param.dp) +
                                  (shapeInfo.param.capacity > 0 ? "_capacity" : "_dropless") +
                                  (shapeInfo.param.gradAccum > 1
                                       ? "_accum" + std::to_string(shapeInfo.param.gradAccum)
                                       : "");
                         });

// The second step's traffic on the EP communicator against the routing the model recorded
// for this rank's micro-batch (kept per expert = routed - dropped), which the ranks share.
TEST(ExpertParallelTraffic, OneStepMovesExactlyTheRoutedRows) {
  constexpr int kEp = 2;
  runRanks(kEp, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      const TrainOptions options = moeOptions(4, 3, 1.25);
      auto mesh = epMesh(comm, kEp, kEp, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, kEp), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      ASSERT_TRUE(trainer.tryStep().isOk());
      ccTraffic_t before[2]{}, after[2]{};
      const ccTrafficKind_t kinds[2] = {ccTrafficAllToAll, ccTrafficAllToAllv};
      for (int k = 0; k < 2; ++k)
        ASSERT_EQ(ccCommGetTraffic(mesh->ep(), kinds[k], &before[k]), ccSuccess);
      ASSERT_TRUE(trainer.tryStep().isOk());
      for (int k = 0; k < 2; ++k)
        ASSERT_EQ(ccCommGetTraffic(mesh->ep(), kinds[k], &after[k]), ccSuccess);
      // Every rank's kept rows per expert, per MoE block, from its model's statistics.
      const auto& statistics = trainer.model().moeStatistics();
      const size_t experts = static_cast<size_t>(options.model.experts);
      std::vector<int64_t> kept;
      for (const MoeStatistics& block : statistics)
        for (size_t e = 0; e < experts; ++e) kept.push_back(block.routed[e] - block.dropped[e]);
      std::vector<int64_t> everyone(kept.size() * kEp);
      ASSERT_EQ(
          ccAllGather(kept.data(), everyone.data(), kept.size(), ccInt64, mesh->ep(), nullptr),
          ccSuccess);
      const int rank = context.rank;
      const size_t held = experts / kEp;
      const uint64_t row = static_cast<uint64_t>(options.model.width) * sizeof(float);
      uint64_t rows = 0;
      for (size_t block = 0; block < statistics.size(); ++block) {
        for (int source = 0; source < kEp; ++source) {
          for (size_t e = 0; e < experts; ++e) {
            const int owner = static_cast<int>(e / held);
            const int64_t count =
                everyone[(static_cast<size_t>(source) * statistics.size() + block) * experts + e];
            // Sent by this rank to another's expert, or sent to this rank's expert by another.
            if ((source == rank) != (owner == rank)) rows += static_cast<uint64_t>(count);
          }
        }
      }
      const uint64_t blocks = statistics.size();
      const uint64_t countBytes = blocks * (kEp - 1) * held * sizeof(int64_t);
      EXPECT_EQ(after[0].calls - before[0].calls, blocks);
      EXPECT_EQ(after[0].bytesSent - before[0].bytesSent, countBytes);
      EXPECT_EQ(after[0].bytesReceived - before[0].bytesReceived, countBytes);
      // Forward: dispatch and combine; backward: the same two.
      EXPECT_EQ(after[1].calls - before[1].calls, 4 * blocks);
      EXPECT_EQ(after[1].bytesSent - before[1].bytesSent, 2 * rows * row);
      EXPECT_EQ(after[1].bytesReceived - before[1].bytesReceived, 2 * rows * row);
      if (rank == 0) {
        std::printf("ep %d: %llu rows crossed ranks, %llu B of all-to-allv sent (expected %llu)\n",
                    kEp, static_cast<unsigned long long>(rows),
                    static_cast<unsigned long long>(after[1].bytesSent - before[1].bytesSent),
                    static_cast<unsigned long long>(2 * rows * row));
      }
    }
    ccCommDestroy(comm);
  });
}

TEST(ExpertParallelCheckpoint, Ep2Dp2ResumesOnOneProcess) {
  const auto directory =
      std::filesystem::temp_directory_path() / ("cc_ep_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string saved = (directory / "ep2dp2.safetensors").string();
  constexpr int kSteps = 10, kSaveAt = 5, kRows = 2;
  const std::vector<StepRecord> straight =
      oneProcessRun(moeOptions(kRows, kSteps, 1.25), 2, kSteps);
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      const TrainOptions options = moeOptions(kRows, kSteps, 1.25);
      auto mesh = epMesh(comm, 2, 2, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, 2), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      for (int step = 0; step < kSaveAt; ++step) ASSERT_TRUE(trainer.tryStep().isOk());
      ASSERT_TRUE(trainer.save(saved).isOk());
    }
    ccCommDestroy(comm);
  });
  TrainOptions options = moeOptions(kRows, kSteps, 1.25);
  options.gradAccum = 2;
  Trainer trainer(options, syntheticFor(options, 0, 1));
  ASSERT_TRUE(trainer.load(saved).isOk());
  EXPECT_EQ(trainer.completedSteps(), kSaveAt);
  const std::string again = (directory / "one.safetensors").string();
  ASSERT_TRUE(trainer.save(again).isOk());
  EXPECT_EQ(fileBytes(saved), fileBytes(again));
  EXPECT_EQ(fileBytes(optimizerPath(saved)), fileBytes(optimizerPath(again)));
  for (int step = kSaveAt; step < kSteps; ++step) {
    const double loss = trainer.step().loss;
    const double expected = straight[static_cast<size_t>(step)].loss;
    EXPECT_NEAR(loss, expected, kLossTolerance * expected) << "step " << step + 1;
  }
  std::filesystem::remove_all(directory);
}

// A one-process checkpoint loaded by an ep 2 x dp 2 run: each rank cuts its experts out
// of the file and the run continues as the one-process run does.
TEST(ExpertParallelCheckpoint, OneProcessFileLoadsIntoEp2) {
  const auto directory =
      std::filesystem::temp_directory_path() / ("cc_ep_load_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string saved = (directory / "one.safetensors").string();
  constexpr int kSteps = 10, kSaveAt = 5, kRows = 2;
  TrainOptions one = moeOptions(kRows, kSteps, 1.25);
  one.gradAccum = 2;
  std::vector<double> straight;
  {
    Trainer trainer(one, syntheticFor(one, 0, 1));
    for (int step = 0; step < kSteps; ++step) {
      straight.push_back(trainer.step().loss);
      if (step + 1 == kSaveAt) {
        ASSERT_TRUE(trainer.save(saved).isOk());
      }
    }
  }
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      const TrainOptions options = moeOptions(kRows, kSteps, 1.25);
      auto mesh = epMesh(comm, 2, 2, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, 2), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      ASSERT_TRUE(trainer.load(saved).isOk());
      EXPECT_EQ(trainer.completedSteps(), kSaveAt);
      for (int step = kSaveAt; step < kSteps; ++step) {
        auto result = trainer.tryStep();
        ASSERT_TRUE(result.isOk()) << result.status().message();
        const double expected = straight[static_cast<size_t>(step)];
        EXPECT_NEAR(result->loss, expected, kLossTolerance * expected) << "step " << step + 1;
      }
    }
    ccCommDestroy(comm);
  });
  std::filesystem::remove_all(directory);
}

// Each refusal names what to use instead.
TEST(ExpertParallelRefusals, SaysWhatCannotRun) {
  runRanks(4, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      struct Case {
        MeshShape shape;
        int zero;
        ScheduleKind schedule;
        const char* message;
      } cases[] = {
          {{4, 1, 1, {}, 1, 2}, 1, ScheduleKind::kOneFOneB, "use --zero 0"},
          {{2, 2, 1, {}, 1, 2}, 0, ScheduleKind::kOneFOneB, "--ep with --pp is not built"},
          {{2, 1, 2, {}, 1, 1}, 0, ScheduleKind::kOneFOneB, "tensor parallelism are not built"},
          {{2, 2, 1, {}, 1, 1}, 0, ScheduleKind::kZeroBubbleH1, "zero-bubble schedule splits"},
      };
      for (const Case& c : cases) {
        TrainOptions options = moeOptions(2, 2, 1.25);
        options.parallel.zeroStage = c.zero;
        options.schedule = c.schedule;
        options.gradAccum = 2;
        auto mesh = testing::meshFor(comm, c.shape, options.model);
        ASSERT_NE(mesh, nullptr);
        Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, c.shape.dp),
                        mesh.get());
        EXPECT_FALSE(trainer.status().isOk()) << c.message;
        EXPECT_NE(trainer.status().message().find(c.message), std::string::npos)
            << trainer.status().message();
      }
      TrainOptions options = moeOptions(2, 2, 1.25);
      MeshShape shape{4, 1, 1};
      shape.ep = 2;
      options.model.experts = 3;
      EXPECT_NE(validateMeshShape(shape, 4, options.model)
                    .message()
                    .find("ep 2 does not divide the 3 experts"),
                std::string::npos);
      GptConfig dense = options.model;
      dense.experts = 0;
      EXPECT_NE(validateMeshShape(shape, 4, dense).message().find("needs a mixture-of-experts"),
                std::string::npos);
      shape.ep = 3;
      options.model.experts = 3;
      EXPECT_NE(validateMeshShape(shape, 4, options.model).message().find("divide dp"),
                std::string::npos);
    }
    ccCommDestroy(comm);
  });
}

}  // namespace
}  // namespace cc::parallel
