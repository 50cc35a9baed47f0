// cc-train as a user runs it: bad flags are clear errors with a non-zero exit; --steps 0
// --save writes the fresh model; --eval --load ends with "eval_loss <value>"; a run
// stopped and resumed from its checkpoint logs the same losses as one that was not.
#include <gtest/gtest.h>
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

}  // namespace
