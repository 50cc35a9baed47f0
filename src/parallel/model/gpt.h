// The reference GPT-2-style decoder: token and position embeddings, L blocks of
// (LayerNorm, causal self-attention, residual, LayerNorm, GELU MLP, residual), final
// LayerNorm and a head tied to the token embedding. The model is a row of pieces
// (embedding, block, head with its loss), each a forward/backward pair from and to a
// hidden-state buffer; the one-process forward and backward are loops over them. A Gpt
// holds one part of the model (a pipeline stage's blocks, parameter_layout.h); its
// parameters and gradients are each one contiguous buffer in the layout's order, and
// backward accumulates into the gradients, so micro-batches sum by running the pieces
// repeatedly. A template on the scalar: float for training, double for the
// finite-difference tests.
//
// A parallel wrapper (DP, ZeRO) watches forward and backward through a GptObserver: it
// is told before and after each block runs, and how far from the end of the buffer the
// gradients are final, so it can gather a block's parameters just in time and start a
// gradient bucket's reduction while backward goes on.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "parallel/model/activations.h"
#include "parallel/model/config.h"
#include "parallel/model/expert_parallel_group.h"
#include "parallel/model/page_buffer.h"
#include "parallel/model/parameter_layout.h"
#include "parallel/model/tensor_parallel_group.h"

namespace cc::parallel {

// Called on the thread running forward/backward. Backward finishes the gradients from the
// end of the buffer towards its start (ln_f, the last block, ..., the first block, then
// the embeddings, whose wte rows the tied head also touched first), so "final from
// offset" is one number that only decreases.
class GptObserver {
 public:
  virtual ~GptObserver() = default;
  virtual void beforeBlockForward(int /*layer*/) {}
  virtual void afterBlockForward(int /*layer*/) {}
  virtual void beforeBlockBackward(int /*layer*/) {}
  virtual void afterBlockBackward(int /*layer*/) {}
  // Gradients in [offset, end of the padded buffer) get nothing more from this backward.
  virtual void gradientsFinalFrom(size_t /*offset*/) {}
};

// One mixture-of-experts block's routing, summed over the micro-batches since
// resetMoeStatistics(): what users watch for load balance and dead experts.
struct MoeStatistics {
  int layer = 0;
  std::vector<int64_t> routed;   // [E]: (token, choice) pairs that chose each expert
  std::vector<int64_t> dropped;  // [E]: of them, beyond the expert's capacity
  double auxLoss = 0;            // the load-balancing losses' sum
  double zLoss = 0;              // the z-losses' sum
  int microBatches = 0;
};

template <typename T>
class Gpt {
 public:
  // The whole model. The parameter and gradient buffers hold max(layout size,
  // bufferElements) elements: data parallelism pads them (with zeros that stay zero) so
  // that shards divide evenly. The model's own arena takes batches of up to maxBatch
  // sequences of config.seq tokens.
  // shareable: the parameter and gradient buffers come from ccMemAlloc, so that data
  // parallelism can register them (the ranks of a host then read them in place).
  Gpt(const GptConfig& config, int maxBatch, size_t bufferElements = 0, bool recompute = false,
      bool shareable = false);
  // One part of it (a pipeline stage's blocks, a tensor-parallel shard; validatePart()
  // first). A TP shard (tpSize > 1) runs its pieces only once setTensorParallel has given
  // it its group.
  // recompute: activation recomputation (checkpointing): forward keeps only each block's
  // output and backward runs the block's forward again before differentiating it, for
  // about a third more compute and, per micro-batch in flight, one [M, C] per block
  // instead of all of a block's activations (activations.h).
  Gpt(const ParameterLayout& layout, int maxBatch, size_t bufferElements = 0,
      bool recompute = false, bool shareable = false);

  const GptConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  int maxBatch() const { return maxBatch_; }
  // The layout's elements (what the optimizer and checkpoints see).
  std::span<T> parameters() { return parameters_.first(layout_.totalSize()); }
  std::span<const T> parameters() const { return parameters_.first(layout_.totalSize()); }
  std::span<T> gradients() { return gradients_.first(layout_.totalSize()); }
  std::span<const T> gradients() const { return gradients_.first(layout_.totalSize()); }
  // The whole buffers, padding included.
  std::span<T> paddedParameters() { return parameters_; }
  std::span<T> paddedGradients() { return gradients_; }
  // Whether the buffers above come from ccMemAlloc (the constructor's `shareable`).
  bool shareable() const { return gradientPages_.shared(); }
  // Elements [begin, end) read as zero afterwards and their whole pages leave memory.
  void releaseParameters(size_t begin, size_t end) {
    parameterPages_.release(begin * sizeof(T), end * sizeof(T));
  }
  void releaseGradients(size_t begin, size_t end) {
    gradientPages_.release(begin * sizeof(T), end * sizeof(T));
  }

  // nullptr (the default) for none; the observer must outlive its use.
  void setObserver(GptObserver* observer) { observer_ = observer; }
  // The TP group of a sharded part (its size is the layout's tpSize); it must outlive its
  // use. Megatron's split: attention by heads and the MLP's hidden columns, c_attn and
  // c_fc column-parallel (f before them), both c_proj row-parallel (g after them, then
  // the bias), the vocabulary split for the embedding (g after the lookup) and the tied
  // head (f before it, the loss reduced per row, layers/vocab_parallel.h).
  void setTensorParallel(TensorParallelGroup* group) { tensorParallel_ = group; }
  TensorParallelGroup* tensorParallel() const { return tensorParallel_; }
  // The EP group of a part that holds some of the experts (epSize > 1; it must outlive its
  // use). Without it (one process, or EP size 1) every expert is local.
  void setExpertParallel(ExpertParallelGroup* group) { expertParallel_ = group; }

  // Per MoE block, in layer order: the routing since the last reset (the blocks this part
  // holds).
  const std::vector<MoeStatistics>& moeStatistics() const { return moeStatistics_; }
  void resetMoeStatistics();

  // The pieces: forward/backward pairs over one micro-batch's arena (activations.h), which
  // a schedule can run one micro-batch and one stage at a time. Forward reads the arena's
  // input (embeddingForward writes it from the tokens; a later pipeline stage receives
  // it) and leaves each block's output in the arena; the head reads arena.output().
  // Backward carries one hidden-state gradient [M, C] down the pieces in place:
  // headBackward writes d(loss)/d(the head's input) into it, blockBackward turns
  // d/d(the block's output) into d/d(its input), embeddingBackward consumes it. Every
  // backward accumulates into the gradients.
  // chunk: which of the layout's chunks the arena runs (an interleaved pipeline stage's).
  ActivationArena<T> makeArena(int maxBatch, int chunk = 0) const {
    return ActivationArena<T>(layout_, maxBatch, recompute_, chunk);
  }
  bool recomputes() const { return recompute_; }
  void embeddingForward(ActivationArena<T>& arena);
  void blockForward(int layer, ActivationArena<T>& arena);
  // The mean cross-entropy over the arena's targets (the MoE blocks' auxiliary losses, also
  // part of the objective backward differentiates, are the arena's auxiliaryLoss()).
  double headForward(ActivationArena<T>& arena);
  // lossScale: the gradient is lossScale * d(mean loss)/d(...).
  void headBackward(ActivationArena<T>& arena, T* dhidden, T lossScale);
  void blockBackward(int layer, ActivationArena<T>& arena, T* dhidden);
  void embeddingBackward(const ActivationArena<T>& arena, const T* dhidden);
  // The backward split in two (a zero-bubble pipeline's B and W; dense blocks only): B produces
  // d(the piece's input) and saves in `stash` the gradients each linear and LayerNorm saw at its
  // output; W turns them into the weights' gradients, accumulating them in the same order as the
  // whole backward (bit for bit the same) and telling the observer when they are final.
  // stash holds weightStashElements(rows) per micro-batch, written by B and read by W of
  // the same micro-batch; the first stage's B also saves the embeddings' gradient there for
  // its W. A TP shard's B runs the backward's f and g (so every TP rank of a stage runs
  // its Bs and Ws in the same order, as a schedule does), and its W the gathers of SP's
  // sharded inputs and the LayerNorm gradients' sum; under recomputation B and W each
  // rebuild the block's activations (one more forward per block than blockBackward).
  size_t weightStashElements(int maxBatch) const;
  void headBackwardInput(ActivationArena<T>& arena, T* dhidden, T lossScale, T* stash);
  void headBackwardWeight(const ActivationArena<T>& arena, const T* stash);
  void blockBackwardInput(int layer, ActivationArena<T>& arena, T* dhidden, T* stash);
  void blockBackwardWeight(int layer, const ActivationArena<T>& arena, const T* stash);
  // Saves d(embeddings' output) for the W.
  void embeddingBackwardInput(const ActivationArena<T>& arena, const T* dhidden, T* stash);
  void embeddingBackwardWeight(const ActivationArena<T>& arena, const T* stash);

  // A [M, C] buffer for the hidden-state gradient (the workspace's), for callers that
  // have no buffer of their own.
  T* hiddenGradient() { return workspace_.dhidden; }

  // The run of a part that holds every layer (the whole model, a TP shard; a pipeline
  // stage aborts: it runs its pieces) over the model's own arena, a loop over the pieces:
  // batch x seq
  // tokens (inputs and targets row-major [batch, seq], ids < vocab, which the caller
  // guarantees); returns the mean cross-entropy and keeps what backward needs.
  double forward(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch);
  // The MoE blocks' load-balancing and z-losses of the last forward (0 for a dense model):
  // the objective is forward() + auxiliaryLoss().
  double auxiliaryLoss() const { return arena_ ? arena_->auxiliaryLoss() : 0.0; }
  // Adds lossScale * d(mean loss)/d(parameters) of the last forward to the gradients.
  void backward(T lossScale = T(1));

  void zeroGradients();

  // Probabilities of the last forward, [batch, seq, Vp / tp] (padding columns zero).
  std::span<const T> probabilities() const;

 private:
  // Aborts naming the part unless it holds the embeddings, every block and the head.
  void requireEveryLayer(const char* what) const;
  // Whether this part is a TP shard (which then has its group).
  bool split() const;
  // Where B leaves what W reads (weightStashElements' layout): the head's, each block's, the
  // embeddings'.
  struct StashOffsets {
    size_t logits, lnf, blocks, perBlock, embedding, total;
  };
  StashOffsets stashOffsets(size_t rows) const;
  // Where block `layer`'s part of a stash starts.
  T* blockStashBase(int layer, T* stash, size_t rows) const;
  // One block's forward from arena.blockInput(layer) into a (blockForward's work, and
  // backward's rebuild under recomputation); no observer calls.
  void computeBlock(int layer, const ActivationArena<T>& arena, BlockActivations<T>& a);
  // Whether this part is a TP shard under sequence parallelism.
  bool sequenceParallel() const;
  // The N rows a linear reads, from this rank's M: `local` itself but under sequence
  // parallelism, where every rank's rows are gathered into the workspace's projection
  // buffer (valid until the next use of it).
  const T* gatherRows(const T* local, const ActivationArena<T>& arena);
  // Sums an [N, C] partial over the TP group (g forward after a row-parallel linear, f
  // backward before a column-parallel one): in place, or under sequence parallelism this
  // rank's M rows of the sum; returns the rows this rank then holds. Nothing on one process.
  T* sumPartials(T* partial, const ActivationArena<T>& arena, bool forward);
  // A c_proj from the workspace's projection buffer: the bias seeds the GEMM on one process;
  // a shard multiplies its rows, the partial products are summed, then the bias is added
  // once. Returns the M output rows.
  const T* rowParallelForward(const T* inp, const T* weight, const T* bias, int inWidth,
                              const ActivationArena<T>& arena);
  // Where a LayerNorm's weight and bias gradients accumulate: the gradients themselves, or
  // under sequence parallelism, whose LayerNorms see M of the N rows, slot `slot` of the
  // workspace's scratch, which sumLayerNormGradients (given the norms in slot order) sums
  // over the group, adds to the gradients and zeroes.
  struct LayerNormGradient {
    T* weight;
    T* bias;
  };
  LayerNormGradient layerNormGradient(const LayerNormOffsets& offsets, int slot);
  void sumLayerNormGradients(std::span<const LayerNormOffsets> norms);
  // An MoE block's MLP: routes the rows of x [N, C], runs the experts (this rank's, on the
  // rows every EP rank sends them) and writes the gated sum into out [N, C]; returns the
  // load-balancing and z-losses.
  struct AuxiliaryLosses {
    double balance = 0, z = 0;
  };
  AuxiliaryLosses moeForward(const MoeOffsets& w, const T* x, size_t rows, MoeActivations<T>& a,
                             T* out);
  // Its backward: dx [N, C] (overwritten) from dout [N, C], accumulating the router's and the
  // experts' gradients; the auxiliary losses' gradients scaled by lossScale.
  void moeBackward(const MoeOffsets& w, const T* x, size_t rows, const MoeActivations<T>& a,
                   const T* dout, T* dx, T lossScale);
  // The exchanges of moeForward/moeBackward: rows to the experts' ranks and back (a copy on
  // one process).
  void exchangeMoeRows(const T* send, std::span<const size_t> sendRows, T* receive,
                       std::span<const size_t> receiveRows);
  void recordMoeStatistics(int layer, const MoeActivations<T>& a, AuxiliaryLosses losses);
  // The scratch's element counts per EP rank of the dispatch (sendCounts: the kept rows to
  // each rank's experts) and of what arrives (receiveCounts); the combine swaps them.
  void setMoeExchangeCounts(const MoeActivations<T>& a, size_t sources, size_t held);
  // Aborts for a part that holds some of the experts but has no EP group.
  void requireExpertGroup() const;
  // Aborts for an MoE block: the split backward is for dense blocks.
  void requireDense(int layer, const char* what) const;

  GptConfig config_;
  ParameterLayout layout_;
  int maxBatch_;
  bool recompute_;
  PageBuffer parameterPages_;
  PageBuffer gradientPages_;
  std::span<T> parameters_;
  std::span<T> gradients_;
  GptObserver* observer_ = nullptr;
  TensorParallelGroup* tensorParallel_ = nullptr;
  ExpertParallelGroup* expertParallel_ = nullptr;
  std::vector<MoeStatistics> moeStatistics_;
  AuxiliaryLosses moeLosses_;  // the last MoE block computeBlock ran
  // moeForward/moeBackward's scratch (sizes follow the routing).
  struct MoeScratch {
    std::vector<T> send, receive, expertOutput, gradient, hidden, hiddenGelu, logits, router;
    std::vector<size_t> sendCounts, receiveCounts;
  } moeScratch_;
  Workspace<T> workspace_;
  // forward()'s own arena, made on its first call (a pipeline stage never calls it).
  std::unique_ptr<ActivationArena<T>> arena_;
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace cc::parallel
