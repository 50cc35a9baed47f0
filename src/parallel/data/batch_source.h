// Where training batches come from. A batch is B rows of T inputs and the same rows
// shifted by one as targets. Batches are addressed by index, not drawn from a stream, so a
// resumed run (batch index = step x micro-batches + micro-batch) and every rank of a
// data-parallel job (global batch = index x world + rank) pick their rows without state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/data/synthetic.h"

namespace cc::parallel {

struct BatchShape {
  int batch = 8;  // B
  int seq = 128;  // T
  int rank = 0;   // which shard of every global batch this process reads
  int world = 1;
  size_t tokens() const { return static_cast<size_t>(batch) * static_cast<size_t>(seq); }
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // inputs and targets hold shape.tokens() each.
  virtual void fill(int64_t batchIndex, std::span<int32_t> inputs,
                    std::span<int32_t> targets) const = 0;
  virtual std::string describe() const = 0;
};

// llm.c's layout over a token file: batch g reads the B*T+1 tokens from g*B*T (wrapping to
// the start when the file runs out); row b is tokens [b*T, b*T+T), its targets one later.
class TokenFileBatches final : public BatchSource {
 public:
  // Fails when the file holds fewer than B*T+1 tokens or a token >= vocab.
  static Result<std::unique_ptr<TokenFileBatches>> open(const std::string& path, BatchShape shape,
                                                        int vocab);
  TokenFileBatches(std::vector<uint16_t> tokens, BatchShape shape, std::string path);

  void fill(int64_t batchIndex, std::span<int32_t> inputs,
            std::span<int32_t> targets) const override;
  std::string describe() const override;

 private:
  std::vector<uint16_t> tokens_;
  BatchShape shape_;
  std::string path_;
};

// Rows of the synthetic language; row r of global batch g is stream row g*B + r. The
// held-out split reads rows from a disjoint range.
class SyntheticBatches final : public BatchSource {
 public:
  SyntheticBatches(uint64_t seed, int vocab, BatchShape shape, bool heldOut = false);

  void fill(int64_t batchIndex, std::span<int32_t> inputs,
            std::span<int32_t> targets) const override;
  std::string describe() const override;

 private:
  SyntheticLanguage language_;
  BatchShape shape_;
  bool heldOut_;
};

}  // namespace cc::parallel
