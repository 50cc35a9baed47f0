// What the model's pieces (gpt.h) compute into. An ActivationArena is one micro-batch in
// flight: its tokens and every tensor forward keeps for backward, over the blocks of one
// model part (a pipeline stage, a TP shard), carved from one allocation whose size follows
// from the layout and the batch. A schedule that keeps several micro-batches in flight
// (1F1B holds up to P) holds several arenas (an interleaved stage, several per chunk); a block's
// activations are their own slice, so recomputation can drop and rebuild one block's. The Workspace
// is the scratch one piece uses while it runs (the projection output, one block's worth of
// gradients, the logits' gradient), shared by every arena of a model because pieces run one at a
// time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "parallel/model/layers/moe.h"
#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

// Sizes are N = B x T rows, C the model width, Cs and Hs the shard's attention width and
// heads, F the shard's MLP hidden width (4C / tp), Vs the shard's vocabulary (Vp / tp), and
// M the rows of the residual stream this rank holds: N, or N / tp under sequence
// parallelism (the LayerNorms and residuals shard; the regions between a column-parallel
// and a row-parallel linear see all N rows).
// What a mixture-of-experts block keeps for backward. Its sizes follow the routing, so it
// owns its storage. S is the rows this rank sends (its kept (token, choice) pairs), R the
// rows its experts receive from the EP group (S on one process), E the experts, K the
// choices, F the expert hidden width.
template <typename T>
struct MoeActivations {
  std::vector<T> probs;  // [N, E]: router probabilities (the logits first)
  std::vector<T> lse;    // [N]: each row's log-sum-exp
  std::vector<T> gates;  // [N, K]
  layers::Routing routing;
  // [EP size x held experts]: rows each source sends to each of this rank's experts.
  std::vector<int64_t> received;
  std::vector<T> expertInput;  // [R, C]: expert-major, then source
  std::vector<T> fch;          // [R, F]
  std::vector<T> fchGelu;      // [R, F]
  std::vector<T> returned;     // [S, C]: each send row's expert output, back at its origin
};

template <typename T>
struct BlockActivations {
  T* ln1;                            // [M, C]
  T* ln1Mean;                        // [M]
  T* ln1Rstd;                        // [M]
  T* qkv;                            // [N, 3Cs]: this shard's q, k, v heads
  T* atty;                           // [N, Cs]
  T* att;                            // [B, Hs, T, T]
  T* residual2;                      // [M, C]
  T* ln2;                            // [M, C]
  T* ln2Mean;                        // [M]
  T* ln2Rstd;                        // [M]
  T* fch;                            // [N, F]
  T* fchGelu;                        // [N, F]
  T* residual3;                      // [M, C]: the block's output
  MoeActivations<T>* moe = nullptr;  // MoE blocks; fch and fchGelu are then unused
};

template <typename T>
struct HeadActivations {
  T* lnf;      // [M, C]
  T* lnfMean;  // [M]
  T* lnfRstd;  // [M]
  T* probs;    // [N, Vs]: logits, turned into probabilities in place
  T* losses;   // [N]
};

template <typename T>
class ActivationArena {
 public:
  // recompute: keep only each block's output (the next block's input) and rebuild the rest
  // in backward (Gpt's activation recomputation); the block's other pointers are null.
  // chunk: which of the layout's chunks (its blocks, and the head where the chunk ends the
  // model) the arena is for; an interleaved stage keeps arenas per chunk.
  ActivationArena(const ParameterLayout& layout, int maxBatch, bool recompute = false,
                  int chunk = 0);
  ActivationArena(const ActivationArena&) = delete;
  ActivationArena& operator=(const ActivationArena&) = delete;
  ActivationArena(ActivationArena&&) = default;

  // Elements one arena holds for this part and batch (docs/TRAINING.md's formula).
  static size_t elementCount(const ParameterLayout& layout, int maxBatch, bool recompute = false,
                             int chunk = 0);

  int maxBatch() const { return maxBatch_; }
  // The micro-batch's tokens, [batch, seq] row-major: inputs where the part has the
  // embeddings, targets where it has the head (either may be empty elsewhere).
  void setBatch(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch);
  int batch() const { return batch_; }
  size_t rows() const;
  // The residual stream's rows this rank holds, [firstLocalRow, + localRows) of the N
  // (row-major [batch, seq]): all of them but under sequence parallelism, where TP rank r
  // holds the r-th of tp equal chunks (for batch 1, Megatron's split of the sequence).
  size_t localRows() const { return rows() / static_cast<size_t>(rowShards_); }
  size_t firstLocalRow() const { return static_cast<size_t>(rowShard_) * localRows(); }
  const int32_t* inputs() const { return inputs_.data(); }
  const int32_t* targets() const { return targets_.data(); }

  // [M, C]: the part's input hidden state (the embeddings' output on the first stage, the
  // previous stage's output elsewhere).
  T* input() { return input_; }
  const T* input() const { return input_; }
  // Block `layer` (counted in the whole model) reads blockInput and writes its residual3.
  BlockActivations<T>& block(int layer) {
    return blocks_[static_cast<size_t>(layer - firstLayer_)];
  }
  const BlockActivations<T>& block(int layer) const {
    return blocks_[static_cast<size_t>(layer - firstLayer_)];
  }
  const T* blockInput(int layer) const;
  // The last block's output: what the head (or the next stage) reads.
  const T* output() const { return blocks_.empty() ? input_ : blocks_.back().residual3; }
  HeadActivations<T>& head() { return head_; }
  const HeadActivations<T>& head() const { return head_; }
  // The mixture-of-experts blocks' load-balancing and z-losses of this micro-batch's forward
  // (zero after setBatch), and the scale backward applies to their gradients: the head's
  // lossScale, which headBackward records (a stage without the head is told by its schedule).
  double auxiliaryLoss() const { return auxiliaryLoss_; }
  void addAuxiliaryLoss(double value) { auxiliaryLoss_ += value; }
  T lossScale() const { return lossScale_; }
  void setLossScale(T scale) { lossScale_ = scale; }

 private:
  int maxBatch_;
  int seq_;
  int firstLayer_;
  int rowShards_;  // tp under sequence parallelism, else 1
  int rowShard_;
  std::vector<T> storage_;
  std::vector<int32_t> inputs_;
  std::vector<int32_t> targets_;
  int batch_ = 0;
  T* input_ = nullptr;
  std::vector<BlockActivations<T>> blocks_;
  std::vector<MoeActivations<T>> moe_;  // one per MoE block, never resized
  HeadActivations<T> head_{};
  double auxiliaryLoss_ = 0;
  T lossScale_ = T(1);
};

template <typename T>
class Workspace {
 public:
  // recompute: with one block's full activations, where forward runs every block and
  // backward rebuilds the block it differentiates.
  Workspace(const ParameterLayout& layout, int maxBatch, bool recompute = false);
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  static size_t elementCount(const ParameterLayout& layout, int maxBatch, bool recompute = false);

  // [N, C]: a c_proj's output (the residual add consumes it at once); under sequence
  // parallelism also the all-gathered rows a column-parallel linear reads, and in backward
  // the gathered output gradient and re-gathered input of a linear.
  T* projection = nullptr;
  T* dhidden = nullptr;            // [M, C]: the residual stream's gradient, down the blocks
  T* dln = nullptr;                // [N, C]
  T* dqkv = nullptr;               // [N, 3Cs]
  T* datty = nullptr;              // [N, Cs]
  T* dfch = nullptr;               // [N, F]
  T* dfchGelu = nullptr;           // [N, F]
  T* dscores = nullptr;            // [T, T]
  T* dlogits = nullptr;            // [N, Vs] (where the part has the head)
  T* layerNorm = nullptr;          // [2C]
  T* lossScratch = nullptr;        // [3N]: the vocabulary-parallel loss's reductions (tp > 1)
  T* sequenceGradients = nullptr;  // [4C]: a block's LayerNorm gradients over its M rows,
                                   // summed over the TP group (sequence parallelism)
  BlockActivations<T> block{};     // recomputation: one block's activations
  MoeActivations<T> moe;           // recomputation of an MoE block

 private:
  std::vector<T> storage_;
};

// Activation memory of a part in elements: `arenas` micro-batches in flight and the
// workspace.
size_t activationElementCount(const ParameterLayout& layout, int maxBatch, int arenas = 1,
                              bool recompute = false);

}  // namespace cc::parallel
