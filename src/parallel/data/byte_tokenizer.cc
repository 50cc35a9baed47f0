#include "parallel/data/byte_tokenizer.h"

#include <fstream>
#include <sstream>

#include "parallel/data/token_file.h"

namespace cc::parallel {

std::vector<uint16_t> encodeBytes(std::string_view text) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

Result<std::string> decodeBytes(std::span<const uint16_t> tokens) {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= kByteVocabulary) {
      return invalidArgument("token " + std::to_string(tokens[i]) + " at " + std::to_string(i) +
                             " is not a byte");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return text;
}

Result<size_t> prepareTokenFile(const std::string& textPath, const std::string& binPath) {
  std::ifstream file(textPath, std::ios::binary);
  if (!file) return invalidArgument("prepare: cannot open " + textPath);
  std::ostringstream contents;
  contents << file.rdbuf();
  const std::vector<uint16_t> tokens = encodeBytes(contents.str());
  if (tokens.size() < 2) return invalidArgument("prepare: " + textPath + " has fewer than 2 bytes");
  CC_TRY(writeTokenFile(binPath, tokens));
  return tokens.size();
}

}  // namespace cc::parallel
