// What the multi-rank training tests (data_parallel_test.cc, tensor_parallel_test.cc) set
// up alike: the small model they train, its batches for a rank, a mesh over the fixture's
// communicator, the one-process losses they compare against, a file's bytes.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "parallel/mesh/mesh.h"
#include "parallel/train/trainer.h"

namespace cc::parallel::testing {

// Two layers of width 64 over 32 tokens; vocab 200 padded to 256 (an odd layout size for
// the shards; at tp 4 the last vocabulary shard holds only padding).
inline TrainOptions smallTrainOptions(int batch, int64_t steps, int heads) {
  TrainOptions options;
  options.model.layers = 2;
  options.model.heads = heads;
  options.model.width = 64;
  options.model.seq = 32;
  options.model.vocab = 200;
  options.batch = batch;
  options.steps = steps;
  options.lr = 1e-2f;
  options.warmup = 5;
  options.seed = 7;
  return options;
}

// Steps of a test that compares a parallel run with the one-process run at every step. Under
// a sanitizer (each step 10-20x slower) a few steps run every path of a step (`sanitized`,
// 10 by default: past the warm-up); the release run keeps the long run, where small
// differences would compound.
constexpr int equivalenceSteps(int steps, int sanitized = 10) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return steps < sanitized ? steps : sanitized;
#else
  (void)sanitized;
  return steps;
#endif
}

// The synthetic batches that rank `rank` of `world` data-parallel ranks reads.
inline std::unique_ptr<BatchSource> syntheticFor(const TrainOptions& options, int rank, int world) {
  return std::make_unique<SyntheticBatches>(
      options.seed, options.model.vocab, BatchShape{options.batch, options.model.seq, rank, world});
}

// A mesh over the fixture's communicator (null, with a test failure, if refused); it must
// outlive the trainer that uses it.
inline std::unique_ptr<Mesh> meshFor(ccComm_t comm, const MeshShape& shape,
                                     const GptConfig& model) {
  auto mesh = Mesh::create(comm, shape, model);
  EXPECT_TRUE(mesh.isOk()) << mesh.status().message();
  return mesh.isOk() ? std::move(mesh).value() : nullptr;
}

// The losses of `steps` steps of the one-process trainer.
inline std::vector<double> oneProcessLosses(const TrainOptions& options, int steps) {
  Trainer trainer(options, syntheticFor(options, 0, 1));
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(trainer.step().loss);
  return losses;
}

inline std::string fileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace cc::parallel::testing
