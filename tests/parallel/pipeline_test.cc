// Pipeline parallelism (pp/pipeline.h) against the one-process run with the same
// micro-batches (--grad-accum M), with forked ranks:
// - pp = 2 and 4, GPipe and 1F1B, M = 1, P and 2P + 1: every step's loss is the one-process
//   loss and the final weights the one-process weights, to the bounds below. Not bitwise:
//   the tied embedding's gradient is summed as (embedding part) + (head part) over the
//   step, where one process adds the two per micro-batch, and Adam carries that rounding
//   on; so the loss bound of the DP and TP tests, 1e-5 relative, and for the weights the
//   norm of the difference within 1e-5 of the weights' norm (expectWeightsClose);
// - interleaved (V = 2 chunks per stage) likewise at M = P and 2P (it needs M a multiple of
//   P), and composed with plain DP over an uneven cut, and with DP, TP and SP;
// - dp = 2 x pp = 2 x tp = 2 at ZeRO-1 with activation recomputation (8 ranks) matches the
//   one-process run (without it) as well (the
//   weights to 1e-4: DP's and TP's own reordering, kMeshWeightTolerance);
// - a checkpoint saved at pp = 2 is the one-process checkpoint's layout: loaded and saved
//   back on one process it is byte for byte the same file, and the run continues there;
// - a stage killed mid-run is named by its neighbours, which fail within the deadline;
// - zb-h1 gives 1F1B's losses and checkpoint bit for bit, also with TP, SP and recomputation;
// - ZeRO-2 and 3 with a pipeline, a shape the schedule cannot run and ranks that disagree
//   on the plan are refused on every rank with a message, not a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

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
constexpr double kWeightTolerance = 1e-5;
// With DP and TP as well, each reorders its sums too, and Adam carries that on where a
// gradient cancels to near zero (LayerNorm biases): dp 2 x tp 2 without a pipeline lands as
// far from the one-process weights as dp 2 x pp 2 x tp 2 does (1.1e-5 relative, both).
constexpr double kMeshWeightTolerance = 1e-4;

TrainOptions pipelineOptions(int batch, int microBatches, int64_t steps) {
  TrainOptions options = testing::smallTrainOptions(batch, steps, /*heads=*/4);
  options.model.layers = 4;
  options.gradAccum = microBatches;
  return options;
}

std::filesystem::path scratchDirectory(const std::string& name) {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("cc_pp_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  return directory;
}

// The one-process run's losses, and its checkpoint after the last step.
std::vector<double> oneProcessRun(const TrainOptions& options, int steps, const std::string& path) {
  Trainer trainer(options, syntheticFor(options, 0, 1));
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(trainer.step().loss);
  EXPECT_TRUE(trainer.save(path).isOk());
  return losses;
}

// How far apart two checkpoints' parameters are: the norm of the difference relative to
// the reference's norm, the tensor where that ratio is worst (for the log: a small tensor
// whose gradient cancels to near zero, a LayerNorm bias say, shows the reordering most), and
// the largest difference of one element. c_attn's key bias is left out of the norms: its
// true gradient is zero (adding b to every key adds q.b to a whole row of scores, which
// softmax ignores), so what backward computes for it is rounding, which Adam turns into
// steps of up to lr either way, in the one-process run as much as here.
struct WeightDifference {
  double relativeNorm = 0;
  double worstTensor = 0;
  std::string tensor;
  double largest = 0;
};

WeightDifference weightDifference(const GptConfig& config, const std::string& actual,
                                  const std::string& reference) {
  const ParameterLayout layout(config);
  std::vector<float> left(layout.totalSize()), right(layout.totalSize());
  EXPECT_TRUE(loadCheckpoint(actual, config, left, nullptr, nullptr).isOk());
  EXPECT_TRUE(loadCheckpoint(reference, config, right, nullptr, nullptr).isOk());
  WeightDifference result;
  double totalDifference = 0, totalNorm = 0;
  const size_t width = static_cast<size_t>(config.width);
  for (const TensorSlice& tensor : layout.tensors()) {
    const bool keyBias = tensor.name.find("attn.c_attn.bias") != std::string::npos;
    double difference = 0, norm = 0;
    for (size_t i = 0; i < tensor.size; ++i) {
      const size_t at = tensor.offset + i;
      const double d = static_cast<double>(left[at]) - right[at];
      result.largest = std::max(result.largest, std::abs(d));
      if (keyBias && i >= width && i < 2 * width) continue;
      difference += d * d;
      norm += static_cast<double>(right[at]) * right[at];
    }
    totalDifference += difference;
    totalNorm += norm;
    const double relative = norm > 0 ? std::sqrt(difference / norm) : std::sqrt(difference);
    if (relative > result.worstTensor) {
      result.worstTensor = relative;
      result.tensor = tensor.name;
    }
  }
  result.relativeNorm = std::sqrt(totalDifference / totalNorm);
  return result;
}

// The difference within kWeightTolerance of the weights' norm, and no element further than
// Adam can move one in a step (lr) times the steps.
void expectWeightsClose(const WeightDifference& difference, const TrainOptions& options, int steps,
                        const char* what, double tolerance = kWeightTolerance) {
  std::printf(
      "  %s weights: relative difference %.3g (worst tensor %s %.3g), largest element "
      "%.3g\n",
      what, difference.relativeNorm, difference.tensor.c_str(), difference.worstTensor,
      difference.largest);
  EXPECT_LE(difference.relativeNorm, tolerance) << what;
  EXPECT_LE(difference.largest, static_cast<double>(options.lr) * steps) << what;
}

// Trains `rankOptions` on a mesh of `shape` over the fixture's ranks (each DP rank reading its
// slice) and holds every step's loss within kLossTolerance of `expected`; saves the
// checkpoint to `path`. check(mesh, rank) runs on each rank before training.
void trainOnMeshAgainst(const TrainOptions& rankOptions, const MeshShape& shape,
                        const std::vector<double>& expected, const std::string& path,
                        const char* what,
                        const std::function<void(const Mesh&, int)>& check = nullptr) {
  runRanks(shape.size(), [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      auto mesh = testing::meshFor(comm, shape, rankOptions.model);
      ASSERT_NE(mesh, nullptr);
      if (check) check(*mesh, context.rank);
      Trainer trainer(rankOptions, syntheticFor(rankOptions, mesh->coordinates().dp, shape.dp),
                      mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      double worst = 0;
      for (size_t step = 0; step < expected.size(); ++step) {
        auto result = trainer.tryStep();
        ASSERT_TRUE(result.isOk()) << result.status().message();
        const double relative = std::abs(result->loss - expected[step]) / expected[step];
        worst = std::max(worst, relative);
        EXPECT_LT(relative, kLossTolerance) << "step " << step + 1;
      }
      ASSERT_TRUE(trainer.save(path).isOk());
      if (context.rank == 0)
        std::printf("%s: largest relative loss difference %.3g\n", what, worst);
    }
    ccCommDestroy(comm);
  });
}

struct Case {
  int pp;
  ScheduleKind schedule;
  int microBatches;
  int chunks = 1;  // interleaved's model chunks per stage
};

std::string describe(const Case& c) {
  return "pp " + std::to_string(c.pp) + " " + scheduleName(c.schedule) +
         (c.chunks > 1 ? " V " + std::to_string(c.chunks) : "") + " M " +
         std::to_string(c.microBatches);
}

void PrintTo(const Case& c, std::ostream* out) { *out << describe(c); }

class PipelineEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineEquivalence, MatchesTheOneProcessLossesAndWeights) {
  const Case c = GetParam();
  // Each step runs the whole schedule; under a sanitizer 4 steps of it.
  constexpr int kSteps = testing::equivalenceSteps(12, 4), kRows = 2;
  const auto directory =
      scratchDirectory(std::to_string(c.pp) + scheduleName(c.schedule) + std::to_string(c.chunks) +
                       std::to_string(c.microBatches));
  const std::string reference = (directory / "one.safetensors").string();
  const std::string piped = (directory / "pp.safetensors").string();
  TrainOptions options = pipelineOptions(kRows, c.microBatches, kSteps);
  options.model.layers = std::max(options.model.layers, c.pp * c.chunks);
  options.schedule = c.schedule;
  options.virtualStages = c.chunks;
  const std::vector<double> expected = oneProcessRun(options, kSteps, reference);
  const std::string what = describe(c);
  trainOnMeshAgainst(options, {1, c.pp, 1, {}, c.chunks}, expected, piped, what.c_str());
  expectWeightsClose(weightDifference(options.model, piped, reference), options, kSteps,
                     "pipeline");
  std::filesystem::remove_all(directory);
}

std::vector<Case> equivalenceCases() {
  std::vector<Case> cases;
  for (int pp : {2, 4}) {
    for (ScheduleKind schedule : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
      for (int m : {1, pp, 2 * pp + 1}) cases.push_back({pp, schedule, m});
    }
    // Interleaved needs M a multiple of P (Megatron's rule, plan.h).
    for (int m : {pp, 2 * pp}) cases.push_back({pp, ScheduleKind::kInterleaved, m, 2});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineEquivalence, ::testing::ValuesIn(equivalenceCases()),
                         [](const auto& caseInfo) {
                           std::string name = std::string("pp") +
                                              std::to_string(caseInfo.param.pp) + "_" +
                                              scheduleName(caseInfo.param.schedule) + "_m" +
                                              std::to_string(caseInfo.param.microBatches);
                           if (caseInfo.param.chunks > 1)
                             name += "_v" + std::to_string(caseInfo.param.chunks);
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// Megatron's uneven cut: 1 block on the first stage (which also embeds), 3 on the last.
TEST(PipelineMesh, AnUnevenCutMatchesTheOneProcessRun) {
  constexpr int kSteps = 8, kRows = 2, kMicroBatches = 3;
  const auto directory = scratchDirectory("uneven");
  const std::string reference = (directory / "one.safetensors").string();
  const std::string cut = (directory / "cut.safetensors").string();
  const TrainOptions options = pipelineOptions(kRows, kMicroBatches, kSteps);
  const std::vector<double> expected = oneProcessRun(options, kSteps, reference);
  trainOnMeshAgainst(options, MeshShape{1, 2, 1, {1, 3}}, expected, cut, "pp 2 cut 1 + 3",
                     [&](const Mesh& mesh, int rank) {
                       const ModelPart part = mesh.modelPart(options.model);
                       EXPECT_EQ(part.endLayer - part.firstLayer, rank == 0 ? 1 : 3);
                     });
  expectWeightsClose(weightDifference(options.model, cut, reference), options, kSteps,
                     "pp 2 cut 1 + 3");
  std::filesystem::remove_all(directory);
}

TEST(PipelineMesh, Dp2Pp2Tp2AtZero1WithRecomputationMatchesTheOneProcessRun) {
  constexpr int kSteps = 8, kRows = 4, kMicroBatches = 3;
  const auto directory = scratchDirectory("3d");
  const std::string reference = (directory / "one.safetensors").string();
  const std::string meshed = (directory / "3d.safetensors").string();
  const TrainOptions whole = pipelineOptions(kRows, kMicroBatches, kSteps);
  const std::vector<double> expected = oneProcessRun(whole, kSteps, reference);
  TrainOptions options = pipelineOptions(kRows / 2, kMicroBatches, kSteps);
  options.parallel.zeroStage = 1;
  options.recompute = true;
  trainOnMeshAgainst(options, {2, 2, 2}, expected, meshed, "dp 2 x pp 2 x tp 2");
  expectWeightsClose(weightDifference(whole.model, meshed, reference), whole, kSteps,
                     "dp 2 x pp 2 x tp 2", kMeshWeightTolerance);
  std::filesystem::remove_all(directory);
}

// Interleaved with the other axes. dp 2 runs plain DP, whose reductions start during
// backward, and must start each chunk's only after its last backward; the cut is uneven
// (1, 2, 2, 1 blocks in virtual-stage order). Then dp 2 x pp 2 x tp 2 with sequence
// parallelism, ZeRO-1 and recomputation.
TEST(PipelineMesh, InterleavedComposesWithDataAndTensorParallelism) {
  constexpr int kSteps = 8, kRows = 4, kMicroBatches = 4;
  const auto directory = scratchDirectory("interleaved_mesh");
  const std::string reference = (directory / "one.safetensors").string();
  const std::string meshed = (directory / "mesh.safetensors").string();
  TrainOptions whole = pipelineOptions(kRows, kMicroBatches, kSteps);
  whole.model.layers = 6;
  std::vector<double> expected = oneProcessRun(whole, kSteps, reference);
  TrainOptions options = pipelineOptions(kRows / 2, kMicroBatches, kSteps);
  options.model.layers = 6;
  options.schedule = ScheduleKind::kInterleaved;
  options.virtualStages = 2;
  options.parallel.bucketBytes = 4096;  // buckets of a tensor or two: each launched when final
  trainOnMeshAgainst(options, MeshShape{2, 2, 1, {1, 2, 2, 1}, 2}, expected, meshed,
                     "dp 2 x pp 2 interleaved, cut 1 2 2 1", [&](const Mesh& mesh, int) {
                       const ModelPart part = mesh.modelPart(options.model);
                       ASSERT_EQ(part.chunks.size(), 2u);
                       const bool first = mesh.coordinates().pp == 0;
                       EXPECT_EQ(part.chunks[0].first, first ? 0 : 1);
                       EXPECT_EQ(part.chunks[0].end, first ? 1 : 3);
                       EXPECT_EQ(part.chunks[1].first, first ? 3 : 5);
                       EXPECT_EQ(part.chunks[1].end, first ? 5 : 6);
                     });
  expectWeightsClose(weightDifference(whole.model, meshed, reference), whole, kSteps,
                     "dp 2 x pp 2 interleaved", kMeshWeightTolerance);

  whole.model.layers = 4;
  expected = oneProcessRun(whole, kSteps, reference);
  options.model.layers = 4;
  options.parallel.zeroStage = 1;
  options.recompute = true;
  options.sequenceParallel = true;
  trainOnMeshAgainst(options, MeshShape{2, 2, 2, {}, 2}, expected, meshed,
                     "dp 2 x pp 2 interleaved x tp 2 sp");
  expectWeightsClose(weightDifference(whole.model, meshed, reference), whole, kSteps,
                     "dp 2 x pp 2 interleaved x tp 2 sp", kMeshWeightTolerance);
  std::filesystem::remove_all(directory);
}

TEST(PipelineCheckpoint, SavedAtPp2ResumesOnOneProcess) {
  constexpr int kSteps = 8, kSaveAt = 4, kRows = 2, kMicroBatches = 2;
  const auto directory = scratchDirectory("resume");
  const std::string saved = (directory / "pp2.safetensors").string();
  const TrainOptions options = pipelineOptions(kRows, kMicroBatches, kSteps);
  std::vector<double> straight = testing::oneProcessLosses(options, kSteps);
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      auto mesh = testing::meshFor(comm, {1, 2, 1}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, 0, 1), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      for (int step = 0; step < kSaveAt; ++step) ASSERT_TRUE(trainer.tryStep().isOk());
      ASSERT_TRUE(trainer.save(saved).isOk());
    }
    ccCommDestroy(comm);
  });
  Trainer trainer(options, syntheticFor(options, 0, 1));
  ASSERT_TRUE(trainer.load(saved).isOk());
  EXPECT_EQ(trainer.completedSteps(), kSaveAt);
  const std::string again = (directory / "one.safetensors").string();
  ASSERT_TRUE(trainer.save(again).isOk());
  EXPECT_EQ(fileBytes(saved), fileBytes(again));
  EXPECT_EQ(fileBytes(optimizerPath(saved)), fileBytes(optimizerPath(again)));
  for (int step = kSaveAt; step < kSteps; ++step) {
    EXPECT_NEAR(trainer.step().loss, straight[static_cast<size_t>(step)],
                kLossTolerance * straight[static_cast<size_t>(step)])
        << "step " << step + 1;
  }
  std::filesystem::remove_all(directory);
}

// Stage 1 of 3 is killed at the start of step 3, while its neighbours are in that step's
// transfers: both fail within the fixture's deadline, naming the dead rank of the pipeline
// communicator (its stage) and their own stage.
TEST(PipelineRobustness, KilledStageIsNamedByItsNeighbours) {
  cc::testing::MultiRankOptions fixture;
  fixture.expectKilled = {1};
  fixture.timeoutSeconds = 60;
  fixture.env["CC_TIMEOUT_MS"] = "20000";
  runRanks(
      3,
      [&](RankContext& context) {
        ccComm_t comm = context.initComm();
        TrainOptions options = pipelineOptions(2, 4, 10);
        options.model.layers = 3;
        auto mesh = testing::meshFor(comm, {1, 3, 1}, options.model);
        ASSERT_NE(mesh, nullptr);
        Trainer trainer(options, syntheticFor(options, 0, 1), mesh.get());
        ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
        for (;;) {
          if (context.rank == 1 && trainer.completedSteps() == 2) ::raise(SIGKILL);
          auto result = trainer.tryStep();
          if (!result.isOk()) {
            EXPECT_NE(result.status().message().find("rank 1"), std::string::npos)
                << result.status().message();
            EXPECT_NE(result.status().message().find("pp: stage " + std::to_string(context.rank)),
                      std::string::npos)
                << result.status().message();
            std::printf("stage %d saw: %s\n", context.rank, result.status().message().c_str());
            std::fflush(stdout);
            _exit(::testing::Test::HasFailure() ? 1 : 0);  // the communicator is dead: no teardown
          }
          ASSERT_LT(trainer.completedSteps(), 10)
              << "stage " << context.rank << " never noticed the dead stage";
        }
      },
      fixture);
}

// zb-h1 runs 1F1B's micro-batches with each backward split into B and W, and W in micro-batch
// order, so every gradient sums the same terms in the same order: the same bits as 1F1B; with
// TP shards (their f and g in B, SP's gathers and LayerNorm sums in W) and with recomputation
// (B and W each rebuilding the block) too.
TEST(PipelineZeroBubble, GivesOneFOneBsLossesAndCheckpointBitForBit) {
  // Bit for bit holds from the first step; under a sanitizer 2 steps of the 6.
  constexpr int kSteps = testing::equivalenceSteps(6, 2), kRows = 2;
  struct Variant {
    int pp, m, tp;
    bool sp, recompute;
  };
  const Variant variants[] = {{2, 2, 1, false, false}, {2, 5, 1, false, false},
                              {4, 4, 1, false, false}, {4, 9, 1, false, false},
                              {2, 3, 2, false, false}, {2, 3, 2, true, false},
                              {2, 3, 1, false, true},  {2, 4, 2, true, true}};
  for (const Variant v : variants) {
    const int pp = v.pp, m = v.m;
    const std::string what = "pp " + std::to_string(pp) + " M " + std::to_string(m) + " tp " +
                             std::to_string(v.tp) + (v.sp ? " sp" : "") +
                             (v.recompute ? " recompute" : "");
    {
      const auto directory =
          scratchDirectory("zb" + std::to_string(pp) + std::to_string(m) + std::to_string(v.tp) +
                           std::to_string(v.sp) + std::to_string(v.recompute));
      std::vector<double> losses[2];
      for (ScheduleKind schedule : {ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1}) {
        TrainOptions options = pipelineOptions(kRows, m, kSteps);
        options.schedule = schedule;
        options.sequenceParallel = v.sp;
        options.recompute = v.recompute;
        const std::string path =
            (directory / (std::string(scheduleName(schedule)) + ".st")).string();
        const std::string lossFile = path + ".losses";
        runRanks(pp * v.tp, [&](RankContext& context) {
          ccComm_t comm = context.initComm();
          {
            auto mesh = testing::meshFor(comm, {1, pp, v.tp}, options.model);
            ASSERT_NE(mesh, nullptr);
            Trainer trainer(options, syntheticFor(options, 0, 1), mesh.get());
            ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
            std::FILE* out = context.rank == 0 ? std::fopen(lossFile.c_str(), "w") : nullptr;
            for (int step = 0; step < kSteps; ++step) {
              auto result = trainer.tryStep();
              ASSERT_TRUE(result.isOk()) << result.status().message();
              if (out != nullptr) std::fprintf(out, "%a\n", result->loss);
            }
            if (out != nullptr) std::fclose(out);
            ASSERT_TRUE(trainer.save(path).isOk());
          }
          ccCommDestroy(comm);
        });
        std::ifstream in(lossFile);
        for (std::string line; std::getline(in, line);)
          losses[schedule == ScheduleKind::kZeroBubbleH1].push_back(
              std::strtod(line.c_str(), nullptr));
      }
      EXPECT_EQ(losses[0].size(), static_cast<size_t>(kSteps)) << what;
      EXPECT_EQ(losses[0], losses[1]) << what;
      EXPECT_EQ(fileBytes(directory / "1f1b.st"), fileBytes(directory / "zb-h1.st")) << what;
      EXPECT_EQ(fileBytes(optimizerPath((directory / "1f1b.st").string())),
                fileBytes(optimizerPath((directory / "zb-h1.st").string())))
          << what;
      std::filesystem::remove_all(directory);
    }
  }
}

// Runs two ranks as pp = 2 with options(rank) and returns each rank's trainer status.
void expectRefusedOnEveryRank(const std::function<TrainOptions(int rank)>& optionsOf,
                              const std::string& message) {
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      const TrainOptions options = optionsOf(context.rank);
      auto mesh = testing::meshFor(comm, {1, 2, 1}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, 0, 1), mesh.get());
      ASSERT_FALSE(trainer.status().isOk()) << "rank " << context.rank;
      EXPECT_NE(trainer.status().message().find(message), std::string::npos)
          << trainer.status().message();
    }
    ccCommDestroy(comm);
  });
}

TEST(PipelineRefusals, UnsupportedCombinationsAndMismatchedPlansAreErrorsOnEveryRank) {
  expectRefusedOnEveryRank(
      [](int) {
        TrainOptions options = pipelineOptions(2, 2, 1);
        options.parallel.zeroStage = 2;
        return options;
      },
      "ZeRO-2 with pipeline parallelism");
  expectRefusedOnEveryRank(
      [](int) {
        TrainOptions options = pipelineOptions(2, 3, 1);
        options.schedule = ScheduleKind::kInterleaved;
        options.virtualStages = 2;
        return options;
      },
      "micro-batches 3 must be a multiple of the stages 2");
  expectRefusedOnEveryRank([](int rank) { return pipelineOptions(2, rank == 0 ? 2 : 3, 1); },
                           "the ranks made different plans");
}

}  // namespace
}  // namespace cc::parallel
