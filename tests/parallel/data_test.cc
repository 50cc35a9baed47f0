// Token files, the byte tokenizer and the batch sources.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "parallel/data/batch_source.h"
#include "parallel/data/byte_tokenizer.h"
#include "parallel/data/token_file.h"

namespace cc::parallel {
namespace {

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("cc_data_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(TokenFile, TextRoundTripsThroughPrepare) {
  const std::string text = "Hello, cc!\nbytes \xff\x01 and all 256 values";
  const std::string textPath = scratch("in.txt");
  const std::string binPath = scratch("out.bin");
  {
    std::ofstream file(textPath, std::ios::binary);
    file << text;
  }
  auto count = prepareTokenFile(textPath, binPath);
  ASSERT_TRUE(count.isOk()) << count.status().message();
  EXPECT_EQ(count.value(), text.size());
  auto tokens = readTokenFile(binPath);
  ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
  EXPECT_EQ(std::filesystem::file_size(binPath), 1024 + 2 * text.size());
  auto decoded = decodeBytes(tokens.value());
  ASSERT_TRUE(decoded.isOk());
  EXPECT_EQ(decoded.value(), text);
  std::filesystem::remove(textPath);
  std::filesystem::remove(binPath);
}

TEST(TokenFile, HeaderIsLlmCs) {
  const std::string path = scratch("header.bin");
  const std::vector<uint16_t> tokens = {1, 2, 65535};
  ASSERT_TRUE(writeTokenFile(path, tokens).isOk());
  std::ifstream file(path, std::ios::binary);
  int32_t header[256];
  file.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0);
  std::filesystem::remove(path);
}

TEST(TokenFile, BadFilesAreErrors) {
  const std::string path = scratch("bad.bin");
  ASSERT_TRUE(writeTokenFile(path, std::vector<uint16_t>{1, 2, 3, 4}).isOk());
  std::filesystem::resize_file(path, 1024 + 6);
  auto truncated = readTokenFile(path);
  ASSERT_FALSE(truncated.isOk());
  EXPECT_NE(truncated.status().message().find("header says 4 tokens"), std::string::npos);
  {
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    const int32_t wrongMagic = 7;
    file.write(reinterpret_cast<const char*>(&wrongMagic), 4);
  }
  auto magic = readTokenFile(path);
  ASSERT_FALSE(magic.isOk());
  EXPECT_NE(magic.status().message().find("magic 7"), std::string::npos);
  std::filesystem::resize_file(path, 10);
  EXPECT_FALSE(readTokenFile(path).isOk());
  std::filesystem::remove(path);
}

TEST(BatchSource, TokenFileLayoutIsLlmCs) {
  const std::string path = scratch("layout.bin");
  std::vector<uint16_t> tokens(2 * 3 * 2 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  ASSERT_TRUE(writeTokenFile(path, tokens).isOk());
  auto source = TokenFileBatches::open(path, BatchShape{2, 3, 0, 1}, 256);
  ASSERT_TRUE(source.isOk()) << source.status().message();
  std::vector<int32_t> inputs(6), targets(6);
  source.value()->fill(0, inputs, targets);
  EXPECT_EQ(inputs, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(targets, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  source.value()->fill(1, inputs, targets);
  EXPECT_EQ(inputs, (std::vector<int32_t>{6, 7, 8, 9, 10, 11}));
  source.value()->fill(2, inputs, targets);  // wraps
  EXPECT_EQ(inputs[0], 0);
  // Two ranks read the two halves of each global batch.
  auto rank1 = TokenFileBatches::open(path, BatchShape{2, 3, 1, 2}, 256);
  ASSERT_TRUE(rank1.isOk());
  rank1.value()->fill(0, inputs, targets);
  EXPECT_EQ(inputs[0], 6);
  auto tooLarge = TokenFileBatches::open(path, BatchShape{2, 3, 0, 1}, 8);
  ASSERT_FALSE(tooLarge.isOk());
  EXPECT_NE(tooLarge.status().message().find("outside the model's vocabulary"), std::string::npos);
  auto tooShort = TokenFileBatches::open(path, BatchShape{4, 4, 0, 1}, 256);
  EXPECT_FALSE(tooShort.isOk());
  std::filesystem::remove(path);
}

TEST(BatchSource, SyntheticIsDeterministicAndShardable) {
  const BatchShape shape{4, 16, 0, 1};
  SyntheticBatches a(7, 256, shape), b(7, 256, shape), other(8, 256, shape);
  std::vector<int32_t> ia(64), ta(64), ib(64), tb(64);
  a.fill(3, ia, ta);
  b.fill(3, ib, tb);
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(ta, tb);
  for (size_t i = 0; i + 1 < 16; ++i) EXPECT_EQ(ta[i], ia[i + 1]);
  other.fill(3, ib, tb);
  EXPECT_NE(ia, ib);
  // Rank 1 of 2 at batch 1 reads what a single rank reads at global batch 3.
  SyntheticBatches rank1(7, 256, BatchShape{4, 16, 1, 2});
  rank1.fill(1, ib, tb);
  EXPECT_EQ(ia, ib);
  for (int32_t token : ia) EXPECT_LT(token, 256);
}

}  // namespace
}  // namespace cc::parallel
