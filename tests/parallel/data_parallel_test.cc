// Data parallelism and ZeRO against the one-process reference (issue #6), with forked
// ranks (tests/support/multi_rank.h):
// - dp = N with B rows per rank gives the one-process run with N x B rows, step by step;
// - overlapped and non-overlapped reductions give the same bits;
// - a checkpoint written at dp=4, zero=3 resumes at dp=2, zero=1 and on one process;
// - a rank killed mid-run makes the others fail with a message naming it, and resuming
//   from the last checkpoint reproduces the uninterrupted run bit for bit.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/handles.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/dp/segments.h"
#include "parallel/mesh/mesh.h"
#include "parallel/model/blas_threads.h"
#include "parallel/train/trainer.h"
#include "support/multi_rank.h"
#include "training_setup.h"

namespace cc::parallel {
namespace {

using cc::testing::RankContext;
using cc::testing::runRanks;
using testing::fileBytes;
using testing::syntheticFor;

// Tolerance on the loss, relative. The DP run averages N per-rank gradients (each a sum
// over B rows) where one process sums N x B rows at once, and the collective adds in its
// own order: each gradient differs from the reference by fp32 rounding (~1e-7 relative),
// and so does the logged loss (a mean of N means instead of one mean). Adam divides by
// sqrt(v), so such differences reach the weights, and training can amplify them; over
// these 50 steps (10 under a sanitizer) the largest difference seen is 4.7e-7 (N=2), 3.6e-7
// (N=3), 1.6e-7 (N=4). 1e-5 leaves a margin of 20 and is still far below any real bug (a wrong
// shard, a missed bucket or a rank counted twice moves the loss by more than 1e-2 within a step or
// two).
constexpr double kLossTolerance = 1e-5;
constexpr int kSteps = testing::equivalenceSteps(50);
constexpr int kRowsPerRank = 2;

TrainOptions smallOptions(int batch, int64_t steps) {
  return testing::smallTrainOptions(batch, steps, /*heads=*/2);
}

// The data-parallel mesh over the fixture's communicator (dp = its size).
std::unique_ptr<Mesh> dataParallelMesh(ccComm_t comm, const GptConfig& model) {
  int world = 0;
  EXPECT_EQ(ccCommCount(comm, &world), ccSuccess);
  return testing::meshFor(comm, {world, 1, 1}, model);
}

std::vector<double> referenceLosses(int world, int steps, int gradAccum = 1) {
  TrainOptions options = smallOptions(kRowsPerRank * world, steps);
  options.gradAccum = gradAccum;
  return testing::oneProcessLosses(options, steps);
}

std::filesystem::path scratch(const std::string& name) {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("cc_dp_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  return directory;
}

struct Equivalence {
  int world;
  int zero;
  int gradAccum = 1;  // micro-batches per step (only the last one communicates)
};

class DataParallelEquivalence : public ::testing::TestWithParam<Equivalence> {};

// Every step's loss (the DP average) against the one-process run on N x B rows.
TEST_P(DataParallelEquivalence, MatchesOneProcessLossEveryStep) {
  const int world = GetParam().world;
  const int zero = GetParam().zero;
  const int gradAccum = GetParam().gradAccum;
  const std::vector<double> reference = referenceLosses(world, kSteps, gradAccum);
  runRanks(world, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    TrainOptions options = smallOptions(kRowsPerRank, kSteps);
    options.gradAccum = gradAccum;
    options.parallel.zeroStage = zero;
    options.parallel.bucketBytes = 64 << 10;  // several buckets on this small model
    {
      auto mesh = dataParallelMesh(comm, options.model);
      Trainer trainer(options, syntheticFor(options, context.rank, world), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      double worst = 0;
      for (int step = 0; step < kSteps; ++step) {
        auto result = trainer.tryStep();
        ASSERT_TRUE(result.isOk()) << result.status().message();
        const double relative = std::abs(result->loss - reference[static_cast<size_t>(step)]) /
                                reference[static_cast<size_t>(step)];
        worst = std::max(worst, relative);
        EXPECT_LT(relative, kLossTolerance)
            << "step " << step + 1 << ": dp " << result->loss << " one process "
            << reference[static_cast<size_t>(step)];
      }
      if (context.rank == 0) {
        std::printf(
            "dp %d zero %d accum %d: largest relative loss difference over %d steps %.3g (final "
            "loss %.4f)\n",
            world, zero, gradAccum, kSteps, worst, reference.back());
      }
    }
    ccCommDestroy(comm);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, DataParallelEquivalence,
    ::testing::Values(Equivalence{2, 0}, Equivalence{2, 1}, Equivalence{2, 2}, Equivalence{2, 3},
                      Equivalence{4, 0}, Equivalence{4, 1}, Equivalence{4, 2}, Equivalence{4, 3},
                      Equivalence{3, 0}, Equivalence{3, 3}, Equivalence{2, 0, 2},
                      Equivalence{2, 2, 2}, Equivalence{2, 3, 2}),
    [](const ::testing::TestParamInfo<Equivalence>& run) {
      return "dp" + std::to_string(run.param.world) + "_zero" + std::to_string(run.param.zero) +
             (run.param.gradAccum > 1 ? "_accum" + std::to_string(run.param.gradAccum) : "");
    });

class OverlapIsBitwise : public ::testing::TestWithParam<int> {};

// The same buckets and the same calls in the same order, whether they start during
// backward or after it: the same bits.
TEST_P(OverlapIsBitwise, SameWeightsWithAndWithoutOverlap) {
  const int zero = GetParam();
  runRanks(2, [zero](RankContext& context) {
    ccComm_t comm = context.initComm();
    std::vector<float> weights[2];
    for (int overlap = 0; overlap < 2; ++overlap) {
      TrainOptions options = smallOptions(kRowsPerRank, 8);
      options.gradAccum = 2;
      options.parallel.zeroStage = zero;
      options.parallel.bucketBytes = 32 << 10;
      options.parallel.overlap = overlap == 1;
      auto mesh = dataParallelMesh(comm, options.model);
      Trainer trainer(options, syntheticFor(options, context.rank, 2), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      for (int step = 0; step < 8; ++step) ASSERT_TRUE(trainer.tryStep().isOk());
      auto full = trainer.fullParameters();
      ASSERT_TRUE(full.isOk()) << full.status().message();
      weights[overlap] = std::move(full).value();
    }
    ASSERT_EQ(weights[0].size(), weights[1].size());
    EXPECT_EQ(std::memcmp(weights[0].data(), weights[1].data(), weights[0].size() * sizeof(float)),
              0);
    ccCommDestroy(comm);
  });
}

INSTANTIATE_TEST_SUITE_P(Stages, OverlapIsBitwise, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& run) {
                           return "zero" + std::to_string(run.param);
                         });

class RegisteredIsBitwise : public ::testing::TestWithParam<int> {};

// With a mesh, the model's buffers come from ccMemAlloc and are registered, so the peers
// read the gradient buckets (and ZeRO's parameters) in place; the same calls through
// cc's staging (--no-register) give the same bits. The peers' mappings show which path
// ran: none through staging, some when registered.
TEST_P(RegisteredIsBitwise, SameWeightsRegisteredOrStaged) {
  const int zero = GetParam();
  runRanks(2, [zero](RankContext& context) {
    ccComm_t comm = context.initComm();
    std::vector<float> weights[2];
    for (int registered = 0; registered < 2; ++registered) {
      TrainOptions options = smallOptions(kRowsPerRank, 6);
      options.parallel.zeroStage = zero;
      // Above the one-shot all-reduce's 64 KiB, which stages an in-place call whatever the
      // buffers are.
      options.parallel.bucketBytes = 128 << 10;
      options.parallel.registerBuffers = registered == 1;
      auto mesh = dataParallelMesh(comm, options.model);
      Trainer trainer(options, syntheticFor(options, context.rank, 2), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      EXPECT_EQ(trainer.model().shareable(), registered == 1);
      for (int step = 0; step < 6; ++step) ASSERT_TRUE(trainer.tryStep().isOk());
      auto full = trainer.fullParameters();
      ASSERT_TRUE(full.isOk()) << full.status().message();
      weights[registered] = std::move(full).value();
      const size_t mapped = comm::communicatorOf(mesh->dp())->peerMappings().count();
      if (registered == 1) {
        EXPECT_GT(mapped, 0u) << "no peer read this rank's registered buffers in place";
      } else {
        EXPECT_EQ(mapped, 0u);
      }
    }
    ASSERT_EQ(weights[0].size(), weights[1].size());
    EXPECT_EQ(std::memcmp(weights[0].data(), weights[1].data(), weights[0].size() * sizeof(float)),
              0);
    ccCommDestroy(comm);
  });
}

INSTANTIATE_TEST_SUITE_P(Stages, RegisteredIsBitwise, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& run) {
                           return "zero" + std::to_string(run.param);
                         });

struct TrafficCase {
  int world;
  int zero;
};

class DataParallelTraffic : public ::testing::TestWithParam<TrafficCase> {};

// One step moves what the schedule says, per rank and per direction (cc's traffic
// counters, ccCommGetTraffic). All-reduce, or reduce-scatter + all-gather, of the padded
// gradient G moves 2(N-1)/N x G. ZeRO-3 reduce-scatters the gradients and gathers every
// layer unit before forward, and again before backward those it released after forward
// (every block but the last; the embeddings and ln_f stay): (N-1)/N x (2G + the
// re-gathered blocks), which tends to ZeRO's 3(N-1)/N x G (1.5x) as blocks outnumber the
// rest; this 2-layer model gets about 1.2x. Besides those, a step averages two fp64
// scalars (the loss and the gradient norm), at most 2 x 8 bytes per peer each. The
// buckets are kept above the one-shot all-reduce's 64 KiB, which moves (N-1) x its
// bytes by design (docs/PERFORMANCE.md). Anything else is traffic nobody asked for.
TEST_P(DataParallelTraffic, OneStepMovesWhatTheScheduleSays) {
  const int world = GetParam().world;
  const int zero = GetParam().zero;
  runRanks(world, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      TrainOptions options = smallOptions(kRowsPerRank, 3);
      options.parallel.zeroStage = zero;
      options.parallel.bucketBytes = 256 << 10;
      auto mesh = dataParallelMesh(comm, options.model);
      Trainer trainer(options, syntheticFor(options, context.rank, world), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      const size_t padded = trainer.model().paddedParameters().size();
      for (const Segment& bucket :
           gradientBuckets(padded, options.parallel.bucketBytes / sizeof(float), world)) {
        ASSERT_GT(bucket.size() * sizeof(float), size_t{64} << 10)
            << "a bucket small enough for the one-shot all-reduce";
      }
      ASSERT_TRUE(trainer.tryStep().isOk());
      const DataParallel* dp = trainer.dataParallel();
      ASSERT_NE(dp, nullptr);
      auto before = dp->traffic();
      ASSERT_TRUE(before.isOk());
      ASSERT_TRUE(trainer.tryStep().isOk());
      auto after = dp->traffic();
      ASSERT_TRUE(after.isOk());
      const uint64_t n = static_cast<uint64_t>(world);
      uint64_t elements = 2 * padded;
      if (zero == 3) {
        const std::vector<Segment> units = layerUnits(trainer.model().layout(), padded, world);
        for (size_t unit = 1; unit + 2 < units.size(); ++unit) elements += units[unit].size();
      }
      const uint64_t expected = (n - 1) * elements * sizeof(float) / n;
      const uint64_t scalars = 2 * 2 * (n - 1) * sizeof(double);
      const uint64_t sent = after->sent - before->sent;
      const uint64_t received = after->received - before->received;
      EXPECT_GE(sent, expected) << "rank " << context.rank;
      EXPECT_LE(sent, expected + scalars) << "rank " << context.rank;
      EXPECT_GE(received, expected) << "rank " << context.rank;
      EXPECT_LE(received, expected + scalars) << "rank " << context.rank;
      if (context.rank == 0) {
        const double allReduce =
            2.0 * static_cast<double>((n - 1) * padded * sizeof(float)) / static_cast<double>(n);
        std::printf(
            "dp %d zero %d: one step sent %llu B, schedule %llu B + scalars (%.3f x an all-reduce "
            "of the "
            "gradients)\n",
            world, zero, static_cast<unsigned long long>(sent),
            static_cast<unsigned long long>(expected), static_cast<double>(sent) / allReduce);
      }
    }
    ccCommDestroy(comm);
  });
}

INSTANTIATE_TEST_SUITE_P(Stages, DataParallelTraffic,
                         ::testing::Values(TrafficCase{2, 0}, TrafficCase{4, 0}, TrafficCase{4, 1},
                                           TrafficCase{4, 2}, TrafficCase{4, 3}, TrafficCase{3, 3}),
                         [](const ::testing::TestParamInfo<TrafficCase>& run) {
                           return "dp" + std::to_string(run.param.world) + "_zero" +
                                  std::to_string(run.param.zero);
                         });

// Runs `world` ranks at `zero` from `load` (or fresh) to `steps`, writing rank 0's losses
// (one per line) to lossesPath and the final checkpoint to save, unless empty.
void runDp(int world, int zero, const std::string& load, int steps, const std::string& save,
           const std::string& lossesPath, int saveAfter = 0) {
  runRanks(world, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      TrainOptions options = smallOptions(kRowsPerRank * 4 / world, steps);
      options.parallel.zeroStage = zero;
      options.parallel.bucketBytes = 48 << 10;
      auto mesh = dataParallelMesh(comm, options.model);
      Trainer trainer(options, syntheticFor(options, context.rank, world), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      if (!load.empty()) {
        ASSERT_TRUE(trainer.load(load).isOk());
      }
      std::ofstream losses;
      if (context.rank == 0 && !lossesPath.empty()) losses.open(lossesPath);
      while (trainer.completedSteps() < steps) {
        auto result = trainer.tryStep();
        ASSERT_TRUE(result.isOk()) << result.status().message();
        if (losses) losses << result->loss << '\n';
        if (saveAfter > 0 && trainer.completedSteps() == saveAfter) {
          ASSERT_TRUE(trainer.save(save).isOk());
        }
      }
      if (!save.empty() && saveAfter == 0) {
        ASSERT_TRUE(trainer.save(save).isOk());
      }
    }
    ccCommDestroy(comm);
  });
}

std::vector<double> readLosses(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<double> losses;
  for (double loss; in >> loss;) losses.push_back(loss);
  return losses;
}

// Saved at dp=4, zero=3 after 6 steps: loading it at dp=2, zero=1 and on one process
// gives back the same state (a save right after the load writes the same bytes), and
// both continue as the dp=4 run did.
TEST(DataParallelCheckpoint, Zero3AtFourResumesAtTwoZero1AndOneProcess) {
  const auto directory = scratch("reshard");
  const std::string saved = (directory / "dp4.safetensors").string();
  runDp(4, 3, "", 12, saved, (directory / "dp4.losses").string(), 6);
  const std::vector<double> dp4 = readLosses(directory / "dp4.losses");
  ASSERT_EQ(dp4.size(), 12u);

  // One process with all 8 rows: load, save again, compare bytes; then continue.
  {
    const TrainOptions options = smallOptions(kRowsPerRank * 4, 12);
    Trainer trainer(options, syntheticFor(options, 0, 1));
    ASSERT_TRUE(trainer.load(saved).isOk());
    const std::string again = (directory / "one.safetensors").string();
    ASSERT_TRUE(trainer.save(again).isOk());
    EXPECT_EQ(fileBytes(saved), fileBytes(again));
    EXPECT_EQ(fileBytes(optimizerPath(saved)), fileBytes(optimizerPath(again)));
    for (size_t step = 6; step < 12; ++step) {
      const double loss = trainer.step().loss;
      EXPECT_NEAR(loss, dp4[step], kLossTolerance * dp4[step]) << "one process, step " << step + 1;
    }
  }
  // dp=2, zero=1: load and save straight back (steps = 6), then the continuation.
  runDp(2, 1, saved, 6, (directory / "dp2.safetensors").string(), "");
  EXPECT_EQ(fileBytes(saved), fileBytes(directory / "dp2.safetensors"));
  EXPECT_EQ(fileBytes(optimizerPath(saved)),
            fileBytes(optimizerPath((directory / "dp2.safetensors").string())));
  runDp(2, 1, saved, 12, "", (directory / "dp2.losses").string());
  const std::vector<double> dp2 = readLosses(directory / "dp2.losses");
  ASSERT_EQ(dp2.size(), 6u);
  for (size_t i = 0; i < dp2.size(); ++i)
    EXPECT_NEAR(dp2[i], dp4[6 + i], kLossTolerance * dp4[6 + i]) << i;
  std::filesystem::remove_all(directory);
}

// Rank 1 is killed at the start of step 5; rank 0, in the middle of that step's
// reductions, must fail within the fixture's deadline with a message naming rank 1.
// Resumed from the checkpoint of step 3, the run ends with the uninterrupted run's bits.
TEST(DataParallelRobustness, KilledRankIsNamedAndResumeReproducesTheRun) {
  const auto directory = scratch("killed");
  const std::string uninterrupted = (directory / "whole.safetensors").string();
  runDp(2, 2, "", 8, uninterrupted, "");

  const std::string checkpoint = (directory / "killed.safetensors").string();
  cc::testing::MultiRankOptions options;
  options.expectKilled = {1};
  options.timeoutSeconds = 60;
  options.env["CC_TIMEOUT_MS"] = "20000";
  runRanks(
      2,
      [&](RankContext& context) {
        ccComm_t comm = context.initComm();
        TrainOptions train = smallOptions(kRowsPerRank * 2, 8);
        train.parallel.zeroStage = 2;
        train.parallel.bucketBytes = 48 << 10;
        auto mesh = dataParallelMesh(comm, train.model);
        Trainer trainer(train, syntheticFor(train, context.rank, 2), mesh.get());
        ASSERT_TRUE(trainer.status().isOk());
        for (;;) {
          if (context.rank == 1 && trainer.completedSteps() == 4) ::raise(SIGKILL);
          auto result = trainer.tryStep();
          if (!result.isOk()) {
            EXPECT_EQ(context.rank, 0);
            EXPECT_EQ(trainer.completedSteps(), 4);
            EXPECT_NE(result.status().message().find("rank 1"), std::string::npos)
                << result.status().message();
            std::printf("rank 0 saw: %s\n", result.status().message().c_str());
            std::fflush(stdout);
            _exit(::testing::Test::HasFailure() ? 1 : 0);  // the communicator is dead: no teardown
          }
          if (trainer.completedSteps() == 3) {
            ASSERT_TRUE(trainer.save(checkpoint).isOk());
          }
          ASSERT_LT(trainer.completedSteps(), 8)
              << "rank " << context.rank << " never noticed the dead peer";
        }
      },
      options);

  const std::string resumed = (directory / "resumed.safetensors").string();
  runDp(2, 2, checkpoint, 8, resumed, "");
  EXPECT_EQ(fileBytes(uninterrupted), fileBytes(resumed));
  EXPECT_EQ(fileBytes(optimizerPath(uninterrupted)), fileBytes(optimizerPath(resumed)));
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace cc::parallel
