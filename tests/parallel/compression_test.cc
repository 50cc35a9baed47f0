// cc-train's compressed gradient reductions (dp/compressing_reducer.h) at dp 2 against the
// uncompressed run on the same global batch:
// - fp16 and bf16 log the float32 run's losses to their rounding (1e-2 relative over 20
//   steps; the averages differ by the 16-bit rounding of each gradient element), bf16 also
//   under ZeRO-1 and 2 (a 16-bit reduce-scatter);
// - 1-bit and PowerSGD train (the loss falls) and send at most a tenth of float32's bytes
//   per step (the traffic counters, per step, after the warm-up), and with
//   --compress-start the warm-up steps are float32's exactly;
// - 1-bit Adam is AdamW until its freeze, then sends under a tenth of the bytes;
// - local SGD sends nothing but the loss and, every K-th step, the parameters' average, after which
// the
//   ranks agree bit for bit;
// - 1-bit and PowerSGD under ZeRO, and any kind without ranks, are refused saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "parallel/mesh/mesh.h"
#include "parallel/train/trainer.h"
#include "support/multi_rank.h"
#include "training_setup.h"

namespace cc::parallel {
namespace {

using cc::testing::RankContext;
using cc::testing::runRanks;
using testing::syntheticFor;

constexpr int kSteps = 20;

TrainOptions compressedOptions(Compression kind) {
  TrainOptions options = testing::smallTrainOptions(/*batch=*/2, kSteps, /*heads=*/4);
  options.compression.kind = kind;
  options.parallel.bucketBytes = 16 << 10;  // several buckets
  return options;
}

uint64_t bytesSent(ccComm_t comm) {
  uint64_t total = 0;
  for (int kind = 0; kind < ccNumTrafficKinds; ++kind) {
    ccTraffic_t traffic{};
    EXPECT_EQ(ccCommGetTraffic(comm, static_cast<ccTrafficKind_t>(kind), &traffic), ccSuccess);
    total += traffic.bytesSent;
  }
  return total;
}

// Losses and bytes sent per step (rank 0's, on the DP communicator) of a dp 2 run.
struct TrainingRun {
  std::vector<double> losses;
  std::vector<uint64_t> bytes;
};

TrainingRun runDp2(const TrainOptions& options) {
  TrainingRun run;
  const std::string file = ::testing::TempDir() + "cc_compression_" + std::to_string(::getpid()) +
                           compressionName(options.compression.kind);
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      auto mesh = testing::meshFor(comm, {2, 1, 1}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, 2), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      std::FILE* out = context.rank == 0 ? std::fopen(file.c_str(), "w") : nullptr;
      for (int step = 0; step < kSteps; ++step) {
        const uint64_t before = bytesSent(mesh->dp());
        auto result = trainer.tryStep();
        ASSERT_TRUE(result.isOk()) << result.status().message();
        if (out != nullptr)
          std::fprintf(out, "%a %llu\n", result->loss,
                       static_cast<unsigned long long>(bytesSent(mesh->dp()) - before));
      }
      if (out != nullptr) std::fclose(out);
    }
    ccCommDestroy(comm);
  });
  std::FILE* in = std::fopen(file.c_str(), "r");
  double loss = 0;
  unsigned long long bytes = 0;
  while (in != nullptr && std::fscanf(in, "%la %llu", &loss, &bytes) == 2) {
    run.losses.push_back(loss);
    run.bytes.push_back(bytes);
  }
  if (in != nullptr) std::fclose(in);
  std::remove(file.c_str());
  EXPECT_EQ(run.losses.size(), static_cast<size_t>(kSteps));
  return run;
}

TEST(Compression, SixteenBitsFollowFloat32AndOneBitAndPowerSgdSendATenth) {
  const TrainingRun plain = runDp2(compressedOptions(Compression::kNone));
  ASSERT_EQ(plain.losses.size(), static_cast<size_t>(kSteps));
  for (Compression kind : {Compression::kFp16, Compression::kBf16}) {
    const TrainingRun run = runDp2(compressedOptions(kind));
    ASSERT_EQ(run.losses.size(), plain.losses.size());
    for (size_t step = 0; step < run.losses.size(); ++step) {
      EXPECT_NEAR(run.losses[step], plain.losses[step], 1e-2 * plain.losses[step])
          << compressionName(kind) << " step " << step + 1;
      EXPECT_LE(run.bytes[step], plain.bytes[step] / 2 + 4096) << compressionName(kind);
    }
  }
  // Under ZeRO-1 and 2 the 16 bits reduce-scatter (on the gradient stream).
  for (int stage : {1, 2}) {
    TrainOptions options = compressedOptions(Compression::kBf16);
    options.parallel.zeroStage = stage;
    const TrainingRun run = runDp2(options);
    ASSERT_EQ(run.losses.size(), plain.losses.size());
    for (size_t step = 0; step < run.losses.size(); ++step) {
      EXPECT_NEAR(run.losses[step], plain.losses[step], 1e-2 * plain.losses[step])
          << "bf16 ZeRO-" << stage << " step " << step + 1;
    }
  }
  for (Compression kind : {Compression::kOneBit, Compression::kPowerSgd}) {
    TrainOptions options = compressedOptions(kind);
    options.compression.startStep = 3;
    const TrainingRun run = runDp2(options);
    ASSERT_EQ(run.losses.size(), plain.losses.size());
    for (size_t step = 0; step < 3; ++step) {
      EXPECT_EQ(run.losses[step], plain.losses[step]) << compressionName(kind) << ": warm-up";
    }
    for (size_t step = 3; step < run.losses.size(); ++step) {
      EXPECT_LE(run.bytes[step], plain.bytes[step] / 10)
          << compressionName(kind) << " step " << step + 1 << ": " << run.bytes[step] << " of "
          << plain.bytes[step];
    }
    EXPECT_LT(run.losses.back(), run.losses.front() - 0.5) << compressionName(kind) << " trains";
    std::printf("%s: final loss %.4f (float32 %.4f), %llu bytes a step (float32 %llu)\n",
                compressionName(kind), run.losses.back(), plain.losses.back(),
                static_cast<unsigned long long>(run.bytes.back()),
                static_cast<unsigned long long>(plain.bytes.back()));
  }
}

// Local SGD with K = 4: on three steps of four nothing but the step's mean loss (one
// double), on the fourth the parameters' average too, after which every rank
// holds the same parameters bit for bit; and it trains.
TEST(Compression, LocalSgdSendsOnlyEveryKthStepAndThenAgrees) {
  TrainOptions options = compressedOptions(Compression::kNone);
  options.localSgdSteps = 4;
  const TrainingRun run = runDp2(options);
  ASSERT_EQ(run.losses.size(), static_cast<size_t>(kSteps));
  for (size_t step = 0; step < run.bytes.size(); ++step) {
    if ((step + 1) % 4 != 0) {
      EXPECT_EQ(run.bytes[step], sizeof(double)) << "step " << step + 1 << ": only the loss";
    } else {
      // The parameters' float32 average: at two ranks the ring (or the direct algorithm)
      // sends each rank's whole vector once.
      const uint64_t parameters = ParameterLayout(options.model).totalSize() * sizeof(float);
      EXPECT_EQ(run.bytes[step], parameters + sizeof(double))
          << "step " << step + 1 << ": the loss and the parameters";
    }
  }
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.5) << "local SGD trains";
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      auto mesh = testing::meshFor(comm, {2, 1, 1}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, 2), mesh.get());
      for (int step = 1; step <= 8; ++step) {
        ASSERT_TRUE(trainer.tryStep().isOk());
        auto parameters = trainer.fullParameters();
        ASSERT_TRUE(parameters.isOk());
        std::vector<float> other(parameters->size());
        std::vector<float> mine = parameters.value();
        // Rank 1's parameters to rank 0.
        std::vector<float> both(2 * mine.size());
        ASSERT_EQ(
            ccAllGather(mine.data(), both.data(), mine.size(), ccFloat32, mesh->dp(), nullptr),
            ccSuccess);
        const bool same =
            std::equal(both.begin(), both.begin() + static_cast<std::ptrdiff_t>(mine.size()),
                       both.begin() + static_cast<std::ptrdiff_t>(mine.size()));
        EXPECT_EQ(same, step % 4 == 0) << "step " << step;
      }
    }
    ccCommDestroy(comm);
  });
}

// 1-bit Adam: AdamW's losses bit for bit until the freeze, then the momentum's 1-bit
// all-reduce instead of the gradients' float32 one (under a tenth of the bytes), and it
// trains.
TEST(Compression, OneBitAdamIsAdamWUntilTheFreezeThenSendsATenth) {
  const TrainingRun plain = runDp2(compressedOptions(Compression::kNone));
  TrainOptions options = compressedOptions(Compression::kNone);
  options.oneBitAdam = true;
  options.freezeStep = 10;
  const TrainingRun run = runDp2(options);
  ASSERT_EQ(run.losses.size(), plain.losses.size());
  // Step 11's loss is computed before its update, so 11 losses are AdamW's.
  for (size_t step = 0; step < 11; ++step)
    EXPECT_EQ(run.losses[step], plain.losses[step]) << "step " << step + 1;
  for (size_t step = 10; step < run.bytes.size(); ++step) {
    EXPECT_LE(run.bytes[step], plain.bytes[step] / 10)
        << "step " << step + 1 << ": " << run.bytes[step] << " of " << plain.bytes[step];
  }
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.5) << "1-bit Adam trains";
  std::printf("1-bit Adam: final loss %.4f (AdamW %.4f), %llu bytes a step after the freeze\n",
              run.losses.back(), plain.losses.back(),
              static_cast<unsigned long long>(run.bytes.back()));
}

TEST(Compression, RefusalsSayWhy) {
  TrainOptions options = compressedOptions(Compression::kOneBit);
  {
    Trainer alone(options, syntheticFor(options, 0, 1));
    EXPECT_NE(alone.status().message().find("need ranks"), std::string::npos)
        << alone.status().message();
  }
  options.parallel.zeroStage = 1;
  runRanks(2, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      auto mesh = testing::meshFor(comm, {2, 1, 1}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, 2), mesh.get());
      EXPECT_NE(trainer.status().message().find("--compress onebit with ZeRO-1"), std::string::npos)
          << trainer.status().message();
      TrainOptions adam = compressedOptions(Compression::kNone);
      adam.oneBitAdam = true;
      adam.parallel.zeroStage = 1;
      Trainer sharded(adam, syntheticFor(adam, mesh->coordinates().dp, 2), mesh.get());
      EXPECT_NE(sharded.status().message().find("onebit-adam"), std::string::npos)
          << sharded.status().message();
    }
    ccCommDestroy(comm);
  });
  EXPECT_FALSE(parseCompression("twobit").isOk());
  EXPECT_NE(
      parseCompression("twobit").status().message().find("none, fp16, bf16, onebit or powersgd"),
      std::string::npos);
}

}  // namespace
}  // namespace cc::parallel
