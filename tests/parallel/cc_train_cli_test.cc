// cc-train as a user runs it: bad flags are clear errors with a non-zero exit; --steps 0
// --save writes the fresh model; --eval --load ends with "eval_loss <value>"; a run
// stopped and resumed from its checkpoint logs the same losses as one that was not.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Outcome {
  int exitCode;
  std::string output;  // stdout and stderr together
};

Outcome runTrain(const std::string& arguments) {
  const std::string command = std::string(CC_TRAIN_PATH) + " " + arguments + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

class CcTrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("cc_train_cli_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::string file(const std::string& name) const { return (directory_ / name).string(); }

  std::filesystem::path directory_;
};

const char* kTiny = "--layers 1 --heads 2 --width 16 --seq 8 --batch 2";

TEST_F(CcTrainCli, BadFlagsAreClearErrors) {
  struct Case {
    std::string arguments, message;
  } cases[] = {
      {"--bogus 1", "unknown flag --bogus"},
      {"--layers", "--layers needs a value"},
      {"--layers zero", "--layers: \"zero\" is not an integer"},
      {"--layers 0", "--layers: 0 is not in [1, 1024]"},
      {"--lr -1", "--lr: -1 is not in"},
      {"--lr nan", "--lr: \"nan\" is not a number"},
      {"--width 10 --heads 4", "width 10 is not a multiple of heads 4"},
      {"--prepare only-one", "--prepare needs TEXT and OUT.bin"},
      {"--sp", "--sp shards the sequence over the TP group: it needs --tp above 1"},
      {"--tp 3 --heads 3 --width 96 --seq 32 --sp",
       "--sp: --tp 3 does not divide the sequence length --seq 32"},
      {"--schedule 2f2b", "--schedule: schedule \"2f2b\" is not one of gpipe, 1f1b"},
      {"--pp 3 --layers 4", "--pp 3 does not divide --layers 4"},
      {"--pp 2 --pp-layers 1,2 --layers 4",
       "--pp-layers: 2 stages of 3 blocks in all, for --pp 2 and --layers 4"},
      {"--pp 2 --pp-layers 1,,3", "--pp-layers: \"\" is not an integer"},
      {"--pp 2 --grad-accum 3 --schedule interleaved --virtual-stages 2 --pp-plan /dev/null",
       "interleaved: micro-batches 3 must be a multiple of the stages 2"},
  };
  for (const Case& c : cases) {
    const Outcome outcome = runTrain(c.arguments);
    EXPECT_NE(outcome.exitCode, 0) << c.arguments;
    EXPECT_NE(outcome.output.find(c.message), std::string::npos)
        << c.arguments << " -> " << outcome.output;
  }
  const Outcome missing = runTrain(std::string(kTiny) + " --data " + file("none.bin"));
  EXPECT_NE(missing.exitCode, 0);
  EXPECT_NE(missing.output.find("cannot open"), std::string::npos) << missing.output;
  const Outcome help = runTrain("--help");
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_NE(help.output.find("--save-every"), std::string::npos);
}

// --config: the file's settings are the flags'; the command line's flags override them; the
// same run from a YAML file and from its JSON twin logs the same losses as from the flags.
TEST_F(CcTrainCli, ConfigFileSetsWhatTheFlagsSetAndFlagsOverrideIt) {
  {
    std::ofstream yaml(file("run.yaml"));
    yaml << "# a DeepSpeed-style run description\n"
            "parallel_config: {data_parallel: 1, tensor_parallel: 1, pipeline_parallel: 1,\n"
            "                  expert_parallel: 1, sequence_parallel: false}\n"
            "zero_config: {stage: 0, overlap: true}\n"
            "model: {layers: 1, heads: 2, width: 16, seq: 8}\n"
            "batch: {micro_batch_size: 2, grad_accum: 2}\n"
            "optimizer: {lr: 0.01, warmup: 1, weight_decay: 0.05, clip: 0.5}\n"
            "training: {steps: 3, seed: 9, recompute: true}\n";
    std::ofstream json(file("run.json"));
    json << R"({"model": {"layers": 1, "heads": 2, "width": 16, "seq": 8},
               "batch": {"micro_batch_size": 2, "grad_accum": 2},
               "optimizer": {"lr": 0.01, "warmup": 1, "weight_decay": 0.05, "clip": 0.5},
               "training": {"steps": 3, "seed": 9, "recompute": true}})";
  }
  const std::string flags = std::string(kTiny) +
                            " --grad-accum 2 --lr 0.01 --warmup 1 --weight-decay 0.05 --clip 0.5 "
                            "--steps 3 --seed 9 --recompute --print-every 1";
  const Outcome fromFlags = runTrain(flags);
  const Outcome fromYaml = runTrain("--config " + file("run.yaml") + " --print-every 1");
  const Outcome fromJson = runTrain("--config " + file("run.json") + " --print-every 1");
  ASSERT_EQ(fromFlags.exitCode, 0) << fromFlags.output;
  ASSERT_EQ(fromYaml.exitCode, 0) << fromYaml.output;
  ASSERT_EQ(fromJson.exitCode, 0) << fromJson.output;
  auto losses = [](const std::string& output) {
    std::string lines;
    for (size_t at = output.find("step "); at != std::string::npos;
         at = output.find("step ", at + 1))
      lines += output.substr(at, output.find(" lr ", at) - at) + "\n";
    return lines;
  };
  EXPECT_NE(losses(fromFlags.output).find("step 3/3 loss"), std::string::npos) << fromFlags.output;
  EXPECT_EQ(losses(fromYaml.output), losses(fromFlags.output));
  EXPECT_EQ(losses(fromJson.output), losses(fromFlags.output));
  const Outcome overridden =
      runTrain("--config " + file("run.yaml") + " --layers 2 --steps 1 --print-every 1");
  ASSERT_EQ(overridden.exitCode, 0) << overridden.output;
  EXPECT_NE(overridden.output.find("L=2 H=2 C=16 T=8"), std::string::npos) << overridden.output;
  EXPECT_NE(overridden.output.find("step 1/1 loss"), std::string::npos) << overridden.output;
}

TEST_F(CcTrainCli, BadConfigFilesAreClearErrorsNamingTheKey) {
  struct Case {
    std::string text, message;
  } cases[] = {
      {"model: {layer: 2}\n",
       "unknown key model.layer (model takes aux_loss_coef, capacity_factor, expert_width"},
      {"modle: {layers: 2}\n", "unknown key modle (the sections are batch"},
      {"model: [1, 2]\n", "model is not a map"},
      {"model: {layers: [1]}\n", "model.layers is not a single value"},
      {"model: {layers: zero}\n", "model.layers: --layers: \"zero\" is not an integer"},
      {"training: {recompute: maybe}\n", "training.recompute: \"maybe\" is not true or false"},
      {"parallel_config: {expert_parallel: 2}\n", "--ep 2 needs --experts above 0"},
      {"model: {experts: 3}\nparallel_config: {data_parallel: 2, expert_parallel: 2}\n",
       "--ep 2 does not divide --experts 3"},
      {"zero_config: {stage: 4}\n", "zero_config.stage: --zero: 4 is not in [0, 3]"},
      {"a: b: c\n", "yaml-cpp: error at line 1"},
      {"compression_config: {kind: fp17}\n",
       "compression_config.kind: --compress: compression 'fp17' is not none, fp16"},
      {"compression_config: {kind: onebit}\n", "they need ranks (--dp above 1"},
      {"optimizer: {type: sgd}\n",
       "optimizer.type: --optimizer: 'sgd' is not adamw or onebit-adam"},
  };
  for (const Case& c : cases) {
    {
      std::ofstream out(file("bad.yaml"));
      out << c.text;
    }
    const Outcome outcome = runTrain("--config " + file("bad.yaml"));
    EXPECT_NE(outcome.exitCode, 0) << c.text;
    EXPECT_NE(outcome.output.find(c.message), std::string::npos)
        << c.text << " -> " << outcome.output;
  }
  const Outcome missing = runTrain("--config " + file("absent.yaml"));
  EXPECT_NE(missing.output.find("--config: cannot open"), std::string::npos) << missing.output;
}

TEST_F(CcTrainCli, FreshModelSaveThenEval) {
  {
    std::ofstream text(file("text.txt"));
    for (int i = 0; i < 20; ++i) text << "the quick brown fox jumps over the lazy dog\n";
  }
  const Outcome prepared = runTrain("--prepare " + file("text.txt") + " " + file("text.bin"));
  ASSERT_EQ(prepared.exitCode, 0) << prepared.output;
  const Outcome saved =
      runTrain(std::string(kTiny) + " --steps 0 --save " + file("fresh.safetensors"));
  ASSERT_EQ(saved.exitCode, 0) << saved.output;
  ASSERT_TRUE(std::filesystem::exists(file("fresh.safetensors")));
  const Outcome evaluated =
      runTrain("--batch 2 --eval " + file("text.bin") + " --load " + file("fresh.safetensors"));
  ASSERT_EQ(evaluated.exitCode, 0) << evaluated.output;
  const std::string lastLine = evaluated.output.substr(evaluated.output.rfind("eval_loss "));
  double value = 0;
  ASSERT_EQ(std::sscanf(lastLine.c_str(), "eval_loss %lf\n", &value), 1) << evaluated.output;
  EXPECT_NEAR(value, std::log(256.0), 0.1);
  EXPECT_EQ(lastLine.find('\n'), lastLine.size() - 1) << "eval_loss must be the last line";
}

TEST_F(CcTrainCli, StoppedAndResumedRunLogsTheSameLosses) {
  const std::string common = std::string(kTiny) + " --steps 6 --warmup 2 --lr 1e-2 --seed 3 ";
  const Outcome straight = runTrain(common + "--log " + file("straight.csv"));
  ASSERT_EQ(straight.exitCode, 0) << straight.output;
  const Outcome first = runTrain(common + "--stop-after 4 --save " + file("ckpt.safetensors") +
                                 " --log " + file("resumed.csv"));
  ASSERT_EQ(first.exitCode, 0) << first.output;
  const Outcome second =
      runTrain(common + "--load " + file("ckpt.safetensors") + " --log " + file("resumed.csv"));
  ASSERT_EQ(second.exitCode, 0) << second.output;
  // Columns step, loss, lr, grad_norm must match row for row (tokens/s naturally differs).
  auto firstColumns = [](const std::string& path) {
    std::ifstream in(path);
    std::string line, result;
    while (std::getline(in, line)) {
      size_t comma = 0;
      for (int i = 0; i < 4 && comma != std::string::npos; ++i) comma = line.find(',', comma + 1);
      result += line.substr(0, comma) + "\n";
    }
    return result;
  };
  const std::string expected = firstColumns(file("straight.csv"));
  EXPECT_EQ(std::count(expected.begin(), expected.end(), '\n'), 7);
  EXPECT_EQ(firstColumns(file("resumed.csv")), expected);
}

TEST_F(CcTrainCli, CorruptCheckpointIsAClearError) {
  {
    std::ofstream bad(file("bad.safetensors"), std::ios::binary);
    bad << "garbage";
  }
  const Outcome outcome =
      runTrain(std::string(kTiny) + " --steps 1 --load " + file("bad.safetensors"));
  EXPECT_NE(outcome.exitCode, 0);
  EXPECT_NE(outcome.output.find("too short"), std::string::npos) << outcome.output;
}

// Bound to one CPU (as mpirun binds each of two ranks to a core), cc-train runs one compute
// thread whatever --threads asks, and says so; the affinity is inherited from this process.
TEST_F(CcTrainCli, ThreadsBeyondTheCpusToRunOnAreNotStarted) {
  cpu_set_t saved;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  const Outcome bound = runTrain(std::string(kTiny) + " --steps 2 --threads 3");
  ASSERT_EQ(::sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(bound.exitCode, 0) << bound.output;
  EXPECT_NE(bound.output.find("1 thread(s) (--threads 3: this rank may run on 1 CPU(s))"),
            std::string::npos)
      << bound.output;
  EXPECT_NE(bound.output.find(" threads 1"), std::string::npos) << bound.output;

  const Outcome free = runTrain(std::string(kTiny) + " --steps 2 --threads 1");
  EXPECT_EQ(free.exitCode, 0) << free.output;
  EXPECT_EQ(free.output.find("--threads 1:"), std::string::npos) << free.output;
}

}  // namespace
