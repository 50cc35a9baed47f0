// Checkpoints: a round trip restores every bit, the file is what GPT-2 readers expect
// (names, [in, out] Conv1D shapes, unpadded wte), and every kind of bad file is a clear
// error that leaves the model and optimizer exactly as they were.
#include "parallel/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "parallel/checkpoint/safetensors.h"
#include "parallel/model/initialize.h"

namespace cc::parallel {
namespace {

GptConfig smallConfig() {
  GptConfig config;
  config.vocab = 50;
  config.vocabMultiple = 16;  // padded to 64
  config.seq = 8;
  config.layers = 2;
  config.heads = 2;
  config.width = 16;
  return config;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("cc_checkpoint_test_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(directory_);
    path_ = (directory_ / "model.safetensors").string();
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string readBytes(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  }
  void writeBytes(const std::string& path, const std::string& bytes) {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << bytes;
  }
  // A file with the given JSON header and `dataBytes` zero bytes of data.
  void writeRaw(const std::string& header, size_t dataBytes) {
    std::string bytes(8, '\0');
    const uint64_t length = header.size();
    std::memcpy(bytes.data(), &length, 8);
    bytes += header;
    bytes.append(dataBytes, '\0');
    writeBytes(path_, bytes);
  }

  std::filesystem::path directory_;
  std::string path_;
};

// Loads `path_` into a model that holds known values and checks the error and that the
// model and optimizer did not change.
void expectRejectedUntouched(const std::string& path, const std::string& expectedInMessage) {
  const GptConfig config = smallConfig();
  Gpt<float> model(config, 1);
  initializeParameters(model.parameters(), config, model.layout(), 99);
  AdamW optimizer(model.layout().totalSize(), {});
  std::vector<float> before(model.parameters().begin(), model.parameters().end());
  const Status status = loadCheckpoint(path, model, &optimizer);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find(expectedInMessage), std::string::npos) << status.message();
  EXPECT_EQ(std::memcmp(before.data(), model.parameters().data(), before.size() * 4), 0);
  EXPECT_EQ(optimizer.step(), 0);
}

TEST_F(CheckpointTest, RoundTripRestoresEveryBit) {
  const GptConfig config = smallConfig();
  Gpt<float> model(config, 1);
  initializeParameters(model.parameters(), config, model.layout(), 5);
  AdamW optimizer(model.layout().totalSize(), {});
  model.zeroGradients();
  for (float& g : model.gradients()) g = 0.01f;
  // Real gradients of the padded vocabulary rows are zero (they are masked); keep that.
  const size_t width = static_cast<size_t>(config.width);
  std::fill(model.gradients().begin() + static_cast<std::ptrdiff_t>(config.vocab * width),
            model.gradients().begin() + static_cast<std::ptrdiff_t>(config.paddedVocab() * width),
            0.0f);
  optimizer.update(model.parameters(), model.gradients(), model.layout(), 1e-3f, 1.0f);
  ASSERT_TRUE(saveCheckpoint(path_, model, &optimizer).isOk());

  auto config2 = readCheckpointConfig(path_);
  ASSERT_TRUE(config2.isOk()) << config2.status().message();
  EXPECT_TRUE(config2.value() == config);
  Gpt<float> loaded(config, 1);
  AdamW loadedOptimizer(loaded.layout().totalSize(), {});
  bool haveOptimizer = false;
  const Status status = loadCheckpoint(path_, loaded, &loadedOptimizer, &haveOptimizer);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_TRUE(haveOptimizer);
  EXPECT_EQ(std::memcmp(model.parameters().data(), loaded.parameters().data(),
                        model.parameters().size() * 4),
            0);
  EXPECT_EQ(loadedOptimizer.step(), 1);
  EXPECT_EQ(std::memcmp(optimizer.firstMoment().data(), loadedOptimizer.firstMoment().data(),
                        optimizer.firstMoment().size() * 4),
            0);
  EXPECT_EQ(std::memcmp(optimizer.secondMoment().data(), loadedOptimizer.secondMoment().data(),
                        optimizer.secondMoment().size() * 4),
            0);
}

TEST_F(CheckpointTest, UsesGpt2NamesAndLayouts) {
  const GptConfig config = smallConfig();
  Gpt<float> model(config, 1);
  initializeParameters(model.parameters(), config, model.layout(), 5);
  ASSERT_TRUE(saveCheckpoint(path_, model, nullptr).isOk());
  auto contents = readSafetensors(path_);
  ASSERT_TRUE(contents.isOk()) << contents.status().message();
  const auto& tensors = contents->tensors;
  auto shapeOf = [&](const std::string& name) { return tensors.at(name).shape; };
  EXPECT_EQ(shapeOf("wte.weight"), (std::vector<size_t>{50, 16}));  // unpadded
  EXPECT_EQ(shapeOf("wpe.weight"), (std::vector<size_t>{8, 16}));
  EXPECT_EQ(shapeOf("h.1.ln_1.weight"), (std::vector<size_t>{16}));
  EXPECT_EQ(shapeOf("h.0.attn.c_attn.weight"), (std::vector<size_t>{16, 48}));  // [in, out]
  EXPECT_EQ(shapeOf("h.0.attn.c_attn.bias"), (std::vector<size_t>{48}));
  EXPECT_EQ(shapeOf("h.0.attn.c_proj.weight"), (std::vector<size_t>{16, 16}));
  EXPECT_EQ(shapeOf("h.1.mlp.c_fc.weight"), (std::vector<size_t>{16, 64}));
  EXPECT_EQ(shapeOf("h.1.mlp.c_proj.weight"), (std::vector<size_t>{64, 16}));
  EXPECT_EQ(shapeOf("ln_f.bias"), (std::vector<size_t>{16}));
  EXPECT_EQ(tensors.size(), 2u + 12u * 2u + 2u);
  EXPECT_EQ(contents->metadata.at("format"), "pt");
  // The header is 8-byte aligned and no temporary file is left behind.
  const std::string bytes = readBytes(path_);
  uint64_t headerLength = 0;
  std::memcpy(&headerLength, bytes.data(), 8);
  EXPECT_EQ(headerLength % 8, 0u);
  for (const auto& entry : std::filesystem::directory_iterator(directory_)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST_F(CheckpointTest, TruncatedFileIsRejected) {
  const GptConfig config = smallConfig();
  Gpt<float> model(config, 1);
  AdamW optimizer(model.layout().totalSize(), {});
  ASSERT_TRUE(saveCheckpoint(path_, model, &optimizer).isOk());
  const std::string bytes = readBytes(path_);
  writeBytes(path_, bytes.substr(0, bytes.size() - 100));
  expectRejectedUntouched(path_, "truncated");
  writeBytes(path_, bytes.substr(0, 5));
  expectRejectedUntouched(path_, "too short");
}

TEST_F(CheckpointTest, HeaderLengthThatLiesIsRejected) {
  writeRaw("{}", 0);
  std::string bytes = readBytes(path_);
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(bytes.data(), &huge, 8);
  writeBytes(path_, bytes);
  expectRejectedUntouched(path_, "header length");
}

TEST_F(CheckpointTest, OffsetsThatLieAreRejected) {
  // Offsets that do not match the shape, offsets past the end, gaps and overlaps.
  writeRaw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12);
  expectRejectedUntouched(path_, "do not hold");
  writeRaw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  expectRejectedUntouched(path_, "truncated");
  writeRaw(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      12);
  expectRejectedUntouched(path_, "gap or an overlap");
  writeRaw(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8);
  expectRejectedUntouched(path_, "gap or an overlap");
  writeRaw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8);
  expectRejectedUntouched(path_, "cover 4 bytes");
}

TEST_F(CheckpointTest, MalformedJsonIsRejected) {
  writeRaw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4);
  expectRejectedUntouched(path_, "not valid JSON");
  writeRaw(R"([1,2])", 0);
  expectRejectedUntouched(path_, "not a JSON object");
  writeRaw(R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", 2);
  expectRejectedUntouched(path_, "only F32");
  writeRaw(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  expectRejectedUntouched(path_, "non-negative");
}

TEST_F(CheckpointTest, WrongNamesAreRejected) {
  const GptConfig config = smallConfig();
  Gpt<float> model(config, 1);
  ASSERT_TRUE(saveCheckpoint(path_, model, nullptr).isOk());
  auto contents = readSafetensors(path_);
  ASSERT_TRUE(contents.isOk());
  // Rename one tensor: it is both unexpected and its original is missing.
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, tensor] : contents->tensors) {
    tensors.push_back({name == "h.1.ln_2.bias" ? "h.1.ln_2.b" : name, tensor.shape, tensor.data});
  }
  ASSERT_TRUE(writeSafetensors(path_, tensors, contents->metadata).isOk());
  expectRejectedUntouched(path_, "unexpected tensor h.1.ln_2.b");
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](const TensorToWrite& t) { return t.name == "h.1.ln_2.b"; }),
                tensors.end());
  ASSERT_TRUE(writeSafetensors(path_, tensors, contents->metadata).isOk());
  expectRejectedUntouched(path_, "missing tensor h.1.ln_2.bias");
}

TEST_F(CheckpointTest, WrongShapesAreRejected) {
  const GptConfig config = smallConfig();
  Gpt<float> model(config, 1);
  ASSERT_TRUE(saveCheckpoint(path_, model, nullptr).isOk());
  auto contents = readSafetensors(path_);
  ASSERT_TRUE(contents.isOk());
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, tensor] : contents->tensors) {
    // The [out, in] layout a converter might write by mistake.
    std::vector<size_t> shape = tensor.shape;
    if (name == "h.0.attn.c_attn.weight") std::swap(shape[0], shape[1]);
    tensors.push_back({name, shape, tensor.data});
  }
  ASSERT_TRUE(writeSafetensors(path_, tensors, contents->metadata).isOk());
  expectRejectedUntouched(path_, "h.0.attn.c_attn.weight has shape [48, 16], expected [16, 48]");
}

TEST_F(CheckpointTest, OtherModelShapeIsRejected) {
  GptConfig other = smallConfig();
  other.layers = 3;
  Gpt<float> model(other, 1);
  ASSERT_TRUE(saveCheckpoint(path_, model, nullptr).isOk());
  expectRejectedUntouched(path_, "written for L=3");
}

TEST_F(CheckpointTest, BadOptimizerFileLeavesModelUntouched) {
  const GptConfig config = smallConfig();
  Gpt<float> model(config, 1);
  initializeParameters(model.parameters(), config, model.layout(), 1);
  AdamW optimizer(model.layout().totalSize(), {});
  ASSERT_TRUE(saveCheckpoint(path_, model, &optimizer).isOk());
  const std::string optim = readBytes(optimizerPath(path_));
  writeBytes(optimizerPath(path_), optim.substr(0, optim.size() / 2));
  expectRejectedUntouched(path_, "optim");
}

TEST_F(CheckpointTest, MissingFileIsAnError) {
  expectRejectedUntouched(path_ + ".nope", "cannot open");
}

}  // namespace
}  // namespace cc::parallel
