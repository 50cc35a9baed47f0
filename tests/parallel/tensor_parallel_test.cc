// Tensor parallelism (tp/, Megatron's split) and sequence parallelism against the
// one-process run, with forked ranks:
// - after one forward/backward in fp64, every rank's loss is the one-process loss and
//   each of its gradients is the one-process gradient sliced as its layout says (only the
//   summation order differs: the row-parallel partial products, the loss's per-rank sums
//   and, under SP, the LayerNorm gradients' per-rank sums; so 1e-12 relative in fp64);
// - training at tp = 2 and 4, with and without SP, alone and with dp = 2 at zero 0, 1 and
//   3, logs the one-process loss at every step of 50 (1e-5 relative: the fp32 reordering,
//   ~1e-7 per step, grows through Adam as in data_parallel_test.cc; the largest
//   difference seen is printed);
// - a checkpoint written at tp = 2 x dp = 2 is the one-process checkpoint byte for byte
//   when loaded and saved back on one process, and continues the run there;
// - a step calls exactly the collectives the split schedules on the TP communicator and
//   sends exactly their bytes, with and without SP.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "gradient_check.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/mesh/mesh.h"
#include "parallel/model/tensor_split.h"
#include "parallel/tp/tensor_parallel_comm.h"
#include "parallel/train/trainer.h"
#include "support/multi_rank.h"
#include "training_setup.h"

namespace cc::parallel {
namespace {

using cc::testing::RankContext;
using cc::testing::runRanks;
using testing::fileBytes;
using testing::initializeModel;
using testing::randomTokens;
using testing::syntheticFor;

constexpr double kLossTolerance = 1e-5;

TrainOptions smallOptions(int batch, int64_t steps) {
  return testing::smallTrainOptions(batch, steps, /*heads=*/4);
}

TEST(TensorParallel, GradientsAreTheOneProcessGradientsSliced) {
  GptConfig config = smallOptions(1, 1).model;
  config.seq = 8;
  const int batch = 2;
  const auto inputs = randomTokens(config, batch, 1);
  const auto targets = randomTokens(config, batch, 2);
  Gpt<double> reference(config, batch);
  initializeModel(reference, 5);
  reference.zeroGradients();
  const double referenceLoss = reference.forward(inputs, targets, batch);
  reference.backward(1.0);
  const std::vector<double> referenceGradients(reference.gradients().begin(),
                                               reference.gradients().end());
  for (const auto& [tp, sp] : {std::pair{2, false}, {4, false}, {2, true}, {4, true}}) {
    runRanks(tp, [&](RankContext& context) {
      ccComm_t comm = context.initComm();
      {
        auto group = TensorParallelComm::create(comm);
        ASSERT_TRUE(group.isOk());
        const ModelPart part{0, config.layers, tp, context.rank, sp};
        ASSERT_TRUE(validatePart(config, part).isOk());
        Gpt<double> model(ParameterLayout(config, part), batch);
        model.setTensorParallel(group.value().get());
        initializeModel(model, 5);
        model.zeroGradients();
        const double loss = model.forward(inputs, targets, batch);
        model.backward(1.0);
        ASSERT_TRUE(group.value()->status().isOk()) << group.value()->status().message();
        EXPECT_NEAR(loss, referenceLoss, 1e-12 * referenceLoss);
        std::vector<double> expected(model.layout().totalSize());
        takePart<double>(model.layout(), ParameterLayout(config), referenceGradients, expected);
        double worst = 0;
        for (const TensorSlice& tensor : model.layout().tensors()) {
          for (size_t at = tensor.offset; at < tensor.offset + tensor.size; ++at) {
            const double error = std::abs(model.gradients()[at] - expected[at]);
            worst = std::max(worst, error / (1e-9 + std::abs(expected[at])));
            ASSERT_LE(error, 1e-15 + 1e-12 * std::abs(expected[at]))
                << tensor.name << "[" << at - tensor.offset << "] at tp " << tp << (sp ? " sp" : "")
                << " rank " << context.rank;
          }
        }
        if (context.rank == 0)
          std::printf("tp %d%s: largest relative gradient difference %.3g\n", tp, sp ? " sp" : "",
                      worst);
      }
      ccCommDestroy(comm);
    });
  }
}

struct Shape {
  int tp, dp, zero;
  bool sp = false;
};

void PrintTo(const Shape& shape, std::ostream* out) {
  *out << "tp " << shape.tp << (shape.sp ? " sp" : "") << " dp " << shape.dp << " zero "
       << shape.zero;
}

class TensorParallelEquivalence : public ::testing::TestWithParam<Shape> {};

std::vector<double> referenceLosses(int rows, int steps) {
  return testing::oneProcessLosses(smallOptions(rows, steps), steps);
}

TEST_P(TensorParallelEquivalence, MatchesOneProcessLossEveryStep) {
  const Shape shape = GetParam();
  constexpr int kSteps = testing::equivalenceSteps(50), kRows = 8;
  const std::vector<double> reference = referenceLosses(kRows, kSteps);
  runRanks(shape.tp * shape.dp, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      TrainOptions options = smallOptions(kRows / shape.dp, kSteps);
      options.parallel.zeroStage = shape.zero;
      options.parallel.bucketBytes = 64 << 10;
      options.sequenceParallel = shape.sp;
      auto mesh = testing::meshFor(comm, {shape.dp, 1, shape.tp}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, shape.dp), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      double worst = 0;
      for (int step = 0; step < kSteps; ++step) {
        auto result = trainer.tryStep();
        ASSERT_TRUE(result.isOk()) << result.status().message();
        const double expected = reference[static_cast<size_t>(step)];
        const double relative = std::abs(result->loss - expected) / expected;
        worst = std::max(worst, relative);
        EXPECT_LT(relative, kLossTolerance)
            << "step " << step + 1 << ": " << result->loss << " one process " << expected;
      }
      if (context.rank == 0) {
        std::printf("tp %d%s dp %d zero %d: largest relative loss difference over %d steps %.3g\n",
                    shape.tp, shape.sp ? " sp" : "", shape.dp, shape.zero, kSteps, worst);
      }
    }
    ccCommDestroy(comm);
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallelEquivalence,
                         ::testing::Values(Shape{2, 1, 0}, Shape{4, 1, 0}, Shape{2, 2, 0},
                                           Shape{2, 2, 1}, Shape{2, 2, 3}, Shape{2, 1, 0, true},
                                           Shape{4, 1, 0, true}, Shape{2, 2, 0, true},
                                           Shape{2, 2, 1, true}, Shape{2, 2, 3, true}),
                         [](const auto& shapeInfo) {
                           return "tp" + std::to_string(shapeInfo.param.tp) +
                                  (shapeInfo.param.sp ? "_sp" : "") + "_dp" +
                                  std::to_string(shapeInfo.param.dp) + "_zero" +
                                  std::to_string(shapeInfo.param.zero);
                         });

TEST(TensorParallelCheckpoint, Tp2Dp2ResumesOnOneProcess) {
  const auto directory =
      std::filesystem::temp_directory_path() / ("cc_tp_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string saved = (directory / "tp2dp2.safetensors").string();
  constexpr int kSteps = 10, kSaveAt = 5, kRows = 8;
  std::vector<double> straight = referenceLosses(kRows, kSteps);
  runRanks(4, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      TrainOptions options = smallOptions(kRows / 2, kSteps);
      options.parallel.zeroStage = 1;
      auto mesh = testing::meshFor(comm, {2, 1, 2}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, mesh->coordinates().dp, 2), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      for (int step = 0; step < kSaveAt; ++step) ASSERT_TRUE(trainer.tryStep().isOk());
      ASSERT_TRUE(trainer.save(saved).isOk());
    }
    ccCommDestroy(comm);
  });
  const TrainOptions options = smallOptions(kRows, kSteps);
  Trainer trainer(options, syntheticFor(options, 0, 1));
  ASSERT_TRUE(trainer.load(saved).isOk());
  EXPECT_EQ(trainer.completedSteps(), kSaveAt);
  // The file is the one-process layout: saved back on one process, the same bytes.
  const std::string again = (directory / "one.safetensors").string();
  ASSERT_TRUE(trainer.save(again).isOk());
  EXPECT_EQ(fileBytes(saved), fileBytes(again));
  EXPECT_EQ(fileBytes(optimizerPath(saved)), fileBytes(optimizerPath(again)));
  for (int step = kSaveAt; step < kSteps; ++step) {
    const double loss = trainer.step().loss;
    EXPECT_NEAR(loss, straight[static_cast<size_t>(step)],
                kLossTolerance * straight[static_cast<size_t>(step)])
        << "step " << step + 1;
  }
  std::filesystem::remove_all(directory);
}

// What one training step (the second; kGradAccum micro-batches of 4 rows) moves on the TP
// communicator of a tp = 2 run, per kind of collective, as every rank saw it.
constexpr int kTrafficTp = 2, kGradAccum = 2;
constexpr ccTrafficKind_t kTrafficKinds[] = {ccTrafficAllReduce, ccTrafficAllGather,
                                             ccTrafficReduceScatter};

struct StepTraffic {
  ccTraffic_t kinds[3];
};

TrainOptions trafficOptions(bool sequenceParallel) {
  TrainOptions options = smallOptions(4, 3);
  options.gradAccum = kGradAccum;
  options.sequenceParallel = sequenceParallel;
  return options;
}

// Runs the ranks and calls check(traffic) on each.
template <typename Check>
void checkStepTraffic(bool sequenceParallel, Check check) {
  runRanks(kTrafficTp, [&](RankContext& context) {
    ccComm_t comm = context.initComm();
    {
      const TrainOptions options = trafficOptions(sequenceParallel);
      auto mesh = testing::meshFor(comm, {1, 1, kTrafficTp}, options.model);
      ASSERT_NE(mesh, nullptr);
      Trainer trainer(options, syntheticFor(options, 0, 1), mesh.get());
      ASSERT_TRUE(trainer.status().isOk()) << trainer.status().message();
      ASSERT_TRUE(trainer.tryStep().isOk());
      StepTraffic before{}, after{};
      for (size_t k = 0; k < 3; ++k)
        ASSERT_EQ(ccCommGetTraffic(mesh->tp(), kTrafficKinds[k], &before.kinds[k]), ccSuccess);
      ASSERT_TRUE(trainer.tryStep().isOk());
      StepTraffic step{};
      for (size_t k = 0; k < 3; ++k) {
        ASSERT_EQ(ccCommGetTraffic(mesh->tp(), kTrafficKinds[k], &after.kinds[k]), ccSuccess);
        step.kinds[k].calls = after.kinds[k].calls - before.kinds[k].calls;
        step.kinds[k].bytesSent = after.kinds[k].bytesSent - before.kinds[k].bytesSent;
        step.kinds[k].bytesReceived = after.kinds[k].bytesReceived - before.kinds[k].bytesReceived;
      }
      check(step, context.rank);
    }
    ccCommDestroy(comm);
  });
}

void expectTraffic(const ccTraffic_t& traffic, uint64_t calls, uint64_t bytes, const char* kind,
                   int rank) {
  EXPECT_EQ(traffic.calls, calls) << kind;
  EXPECT_EQ(traffic.bytesSent, bytes) << kind;
  EXPECT_EQ(traffic.bytesReceived, bytes) << kind;
  if (rank == 0) {
    std::printf("  %s: %llu calls, %llu B sent (expected %llu B)\n", kind,
                static_cast<unsigned long long>(traffic.calls),
                static_cast<unsigned long long>(traffic.bytesSent),
                static_cast<unsigned long long>(bytes));
  }
}

TEST(TensorParallelTraffic, OneStepCallsTheScheduledAllReduces) {
  const TrainOptions options = trafficOptions(false);
  const uint64_t layers = static_cast<uint64_t>(options.model.layers);
  const uint64_t rows = static_cast<uint64_t>(options.batch * options.model.seq);
  const uint64_t hidden = rows * static_cast<uint64_t>(options.model.width) * sizeof(float);
  checkStepTraffic(false, [&](const StepTraffic& step, int rank) {
    if (rank == 0) std::printf("tp %d, one step:\n", kTrafficTp);
    // Per micro-batch: g after the embedding lookup, g after each block's two row-parallel
    // linears, the loss's row max and row sums, f before the head in backward, f before
    // each block's two column-parallel linears in backward. Per step: the norm's split
    // sum.
    const uint64_t perMicroBatch = 1 + 2 * layers + 2 + 1 + 2 * layers;
    // Bytes: at two ranks every algorithm cc may pick sends each all-reduced buffer once
    // (a ring: 2(N-1)/N of it; one-shot: (N-1) of it), so one step sends exactly the
    // payload and the norm's scalar.
    const uint64_t payload =
        kGradAccum * ((1 + 4 * layers + 1) * hidden + 3 * rows * sizeof(float)) + sizeof(double);
    expectTraffic(step.kinds[0], kGradAccum * perMicroBatch + 1, payload, "all-reduce", rank);
    expectTraffic(step.kinds[1], 0, 0, "all-gather", rank);
    expectTraffic(step.kinds[2], 0, 0, "reduce-scatter", rank);
  });
}

TEST(TensorParallelTraffic, SequenceParallelStepCallsTheScheduledGathersAndScatters) {
  const TrainOptions options = trafficOptions(true);
  const uint64_t layers = static_cast<uint64_t>(options.model.layers);
  const uint64_t rows = static_cast<uint64_t>(options.batch * options.model.seq);
  const uint64_t width = static_cast<uint64_t>(options.model.width);
  // At two ranks an all-gather or a reduce-scatter of the [N, C] rows sends one rank's
  // half of them.
  const uint64_t half = rows * width * sizeof(float) / kTrafficTp;
  checkStepTraffic(true, [&](const StepTraffic& step, int rank) {
    if (rank == 0) std::printf("tp %d sp, one step:\n", kTrafficTp);
    // All-gathers per micro-batch, forward: before each block's two column-parallel
    // linears and before the head; backward: the re-gathered input of the head and of each
    // block's two column-parallel linears, the output gradient of each block's two
    // row-parallel linears and of the embedding (the reduce-scatters' backward).
    const uint64_t gathers = (2 * layers + 1) + (1 + 4 * layers + 1);
    // Reduce-scatters: forward after the embedding lookup and each row-parallel linear,
    // backward after the head's and each column-parallel linear's input gradient.
    const uint64_t scatters = (1 + 2 * layers) + (1 + 2 * layers);
    // All-reduces: the loss's row max and row sums; the LayerNorm gradients of ln_f (2C)
    // and of each block (4C). Per step: the norm's split sum.
    const uint64_t reduces = 2 + 1 + layers;
    const uint64_t reduced = (3 * rows + 2 * width + 4 * width * layers) * sizeof(float);
    expectTraffic(step.kinds[0], kGradAccum * reduces + 1, kGradAccum * reduced + sizeof(double),
                  "all-reduce", rank);
    expectTraffic(step.kinds[1], kGradAccum * gathers, kGradAccum * gathers * half, "all-gather",
                  rank);
    expectTraffic(step.kinds[2], kGradAccum * scatters, kGradAccum * scatters * half,
                  "reduce-scatter", rank);
  });
}

}  // namespace
}  // namespace cc::parallel
