#include "parallel/model/gpt.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "parallel/model/layers/attention.h"
#include "parallel/model/layers/cross_entropy.h"
#include "parallel/model/layers/embedding.h"
#include "parallel/model/layers/gelu.h"
#include "parallel/model/layers/layernorm.h"
#include "parallel/model/layers/linear.h"
#include "parallel/model/layers/moe.h"
#include "parallel/model/layers/residual.h"
#include "parallel/model/layers/vocab_parallel.h"

namespace cc::parallel {

using namespace layers;

namespace {

template <typename T>
void zero(T* buffer, size_t count) {
  std::fill(buffer, buffer + count, T(0));
}

}  // namespace

template <typename T>
Gpt<T>::Gpt(const GptConfig& config, int maxBatch, size_t bufferElements, bool recompute,
            bool shareable)
    : Gpt(ParameterLayout(config), maxBatch, bufferElements, recompute, shareable) {}

template <typename T>
Gpt<T>::Gpt(const ParameterLayout& layout, int maxBatch, size_t bufferElements, bool recompute,
            bool shareable)
    : config_(layout.config()),
      layout_(layout),
      maxBatch_(maxBatch),
      recompute_(recompute),
      parameterPages_(std::max(layout_.totalSize(), bufferElements) * sizeof(T),
                      shareable ? PageBuffer::Sharing::kShared : PageBuffer::Sharing::kPrivate),
      gradientPages_(parameterPages_.bytes(),
                     shareable ? PageBuffer::Sharing::kShared : PageBuffer::Sharing::kPrivate),
      parameters_(static_cast<T*>(parameterPages_.data()),
                  std::max(layout_.totalSize(), bufferElements)),
      gradients_(static_cast<T*>(gradientPages_.data()), parameters_.size()),
      workspace_(layout_, maxBatch, recompute) {
  resetMoeStatistics();
}

template <typename T>
void Gpt<T>::resetMoeStatistics() {
  moeStatistics_.clear();
  for (const BlockOffsets& block : layout_.blocks()) {
    if (!block.moe) continue;
    MoeStatistics statistics;
    statistics.layer = block.layer;
    statistics.routed.assign(static_cast<size_t>(config_.experts), 0);
    statistics.dropped.assign(static_cast<size_t>(config_.experts), 0);
    moeStatistics_.push_back(std::move(statistics));
  }
}

template <typename T>
void Gpt<T>::recordMoeStatistics(int layer, const MoeActivations<T>& a, AuxiliaryLosses losses) {
  for (MoeStatistics& statistics : moeStatistics_) {
    if (statistics.layer != layer) continue;
    for (size_t e = 0; e < statistics.routed.size(); ++e) {
      statistics.routed[e] += a.routing.routed[e];
      statistics.dropped[e] += a.routing.routed[e] - a.routing.kept[e];
    }
    statistics.auxLoss += losses.balance;
    statistics.zLoss += losses.z;
    ++statistics.microBatches;
  }
}

template <typename T>
void Gpt<T>::requireDense(int layer, const char* what) const {
  if (!layout_.block(layer).moe) return;
  std::fprintf(stderr,
               "Gpt::%s: block %d is a mixture of experts; the split backward (zero-bubble "
               "schedules) is for dense blocks only\n",
               what, layer);
  std::abort();
}

template <typename T>
void Gpt<T>::requireExpertGroup() const {
  if (layout_.part().epSize == 1 || expertParallel_ != nullptr) return;
  std::fprintf(stderr,
               "Gpt: an expert-parallel part (EP rank %d of %d) runs only after "
               "setExpertParallel\n",
               layout_.part().epRank, layout_.part().epSize);
  std::abort();
}

template <typename T>
void Gpt<T>::exchangeMoeRows(const T* send, std::span<const size_t> sendCounts, T* receive,
                             std::span<const size_t> receiveCounts) {
  size_t sent = 0, received = 0;
  for (size_t count : sendCounts) sent += count;
  for (size_t count : receiveCounts) received += count;
  if (expertParallel_ == nullptr) {
    std::copy(send, send + sent, receive);
    return;
  }
  expertParallel_->exchangeRows(std::span<const T>(send, sent), sendCounts,
                                std::span<T>(receive, received), receiveCounts);
}

namespace {

// Rows received from the EP group arrive source-major (each source's rows for this rank's
// experts, expert-major inside); the experts read them expert-major (each expert's rows from
// every source, in source order). counts[j x held + l]: rows from source j for expert l.
// Copies rows of `width` from one order into the other.
template <typename T>
void reorderRows(T* to, const T* from, std::span<const int64_t> counts, size_t sources, size_t held,
                 size_t width, bool toExpertMajor) {
  std::vector<size_t> sourceMajor(sources * held), expertMajor(sources * held);
  size_t offset = 0;
  for (size_t j = 0; j < sources; ++j) {
    for (size_t l = 0; l < held; ++l) {
      sourceMajor[j * held + l] = offset;
      offset += static_cast<size_t>(counts[j * held + l]);
    }
  }
  offset = 0;
  for (size_t l = 0; l < held; ++l) {
    for (size_t j = 0; j < sources; ++j) {
      expertMajor[j * held + l] = offset;
      offset += static_cast<size_t>(counts[j * held + l]);
    }
  }
  for (size_t i = 0; i < sources * held; ++i) {
    const size_t rows = static_cast<size_t>(counts[i]);
    const size_t src = toExpertMajor ? sourceMajor[i] : expertMajor[i];
    const size_t dst = toExpertMajor ? expertMajor[i] : sourceMajor[i];
    std::copy(from + src * width, from + (src + rows) * width, to + dst * width);
  }
}

// The rows expert l (of the held ones) got from every source.
size_t expertRows(std::span<const int64_t> counts, size_t l, size_t sources, size_t held) {
  size_t rows = 0;
  for (size_t j = 0; j < sources; ++j) rows += static_cast<size_t>(counts[j * held + l]);
  return rows;
}

}  // namespace

template <typename T>
void Gpt<T>::setMoeExchangeCounts(const MoeActivations<T>& a, size_t sources, size_t held) {
  const size_t c = static_cast<size_t>(config_.width);
  MoeScratch& scratch = moeScratch_;
  scratch.sendCounts.assign(sources, 0);
  scratch.receiveCounts.assign(sources, 0);
  for (size_t j = 0; j < sources; ++j) {
    for (size_t l = 0; l < held; ++l) {
      scratch.sendCounts[j] += static_cast<size_t>(a.routing.kept[j * held + l]) * c;
      scratch.receiveCounts[j] += static_cast<size_t>(a.received[j * held + l]) * c;
    }
  }
}

template <typename T>
typename Gpt<T>::AuxiliaryLosses Gpt<T>::moeForward(const MoeOffsets& w, const T* x, size_t rows,
                                                    MoeActivations<T>& a, T* out) {
  requireExpertGroup();
  const int n = static_cast<int>(rows);
  const size_t c = static_cast<size_t>(config_.width);
  const int experts = config_.experts;
  const size_t e = static_cast<size_t>(experts);
  const int k = config_.topK;
  const int hidden = config_.expertHidden();
  const size_t f = static_cast<size_t>(hidden);
  const size_t held = static_cast<size_t>(layout_.shard().experts);
  const size_t sources =
      expertParallel_ != nullptr ? static_cast<size_t>(expertParallel_->size()) : 1;
  const T* p = parameters_.data();
  MoeScratch& scratch = moeScratch_;
  // The router: logits, probabilities, each token's top K and the capacity assignment.
  a.probs.resize(rows * e);
  a.lse.resize(rows);
  a.gates.resize(rows * static_cast<size_t>(k));
  matmulForward(a.probs.data(), x, p + w.router, n, config_.width, experts);
  routerSoftmax(a.probs.data(), a.lse.data(), a.probs.data(), rows, e);
  route(a.routing, a.gates.data(), a.probs.data(), n, experts, k,
        expertCapacity(n, k, experts, config_.capacityFactor));
  // Dispatch: the kept rows, expert-major, to the experts' ranks; first how many.
  const size_t sent = static_cast<size_t>(a.routing.sent());
  scratch.send.resize(sent * c);
  for (size_t r = 0; r < sent; ++r) {
    const T* row = x + static_cast<size_t>(a.routing.rowToken[r]) * c;
    std::copy(row, row + c, scratch.send.data() + r * c);
  }
  a.received.resize(sources * held);
  if (expertParallel_ == nullptr) {
    a.received = a.routing.kept;
  } else {
    expertParallel_->exchangeCounts(a.routing.kept, a.received);
  }
  setMoeExchangeCounts(a, sources, held);
  size_t received = 0;
  for (size_t count : scratch.receiveCounts) received += count / c;
  scratch.receive.resize(received * c);
  exchangeMoeRows(scratch.send.data(), scratch.sendCounts, scratch.receive.data(),
                  scratch.receiveCounts);
  a.expertInput.resize(received * c);
  reorderRows(a.expertInput.data(), scratch.receive.data(), std::span<const int64_t>(a.received),
              sources, held, c, /*toExpertMajor=*/true);
  // The experts, each on its rows.
  a.fch.resize(received * f);
  a.fchGelu.resize(received * f);
  scratch.expertOutput.resize(received * c);
  size_t first = 0;
  for (size_t l = 0; l < held; ++l) {
    const size_t count = expertRows(a.received, l, sources, held);
    if (count == 0) continue;
    const MlpOffsets& expert = w.experts[l];
    const int m = static_cast<int>(count);
    linearForward(a.fch.data() + first * f, a.expertInput.data() + first * c, p + expert.fc.weight,
                  p + expert.fc.bias, m, config_.width, hidden);
    geluForward(a.fchGelu.data() + first * f, a.fch.data() + first * f, count * f);
    linearForward(scratch.expertOutput.data() + first * c, a.fchGelu.data() + first * f,
                  p + expert.projection.weight, p + expert.projection.bias, m, hidden,
                  config_.width);
    first += count;
  }
  // Combine: the outputs back to the rows' origins, then each token's gated sum.
  reorderRows(scratch.receive.data(), scratch.expertOutput.data(),
              std::span<const int64_t>(a.received), sources, held, c, /*toExpertMajor=*/false);
  a.returned.resize(sent * c);
  exchangeMoeRows(scratch.receive.data(), scratch.receiveCounts, a.returned.data(),
                  scratch.sendCounts);
  zero(out, rows * c);
  for (size_t r = 0; r < sent; ++r) {
    const size_t t = static_cast<size_t>(a.routing.rowToken[r]);
    const T gate =
        a.gates[t * static_cast<size_t>(k) + static_cast<size_t>(a.routing.rowChoice[r])];
    const T* y = a.returned.data() + r * c;
    T* o = out + t * c;
    for (size_t i = 0; i < c; ++i) o[i] += gate * y[i];
  }
  return {loadBalancingLoss(a.routing, a.probs.data(), config_.auxLossCoef),
          routerZLoss(a.lse.data(), rows, config_.zLossCoef)};
}

template <typename T>
void Gpt<T>::moeBackward(const MoeOffsets& w, const T* x, size_t rows, const MoeActivations<T>& a,
                         const T* dout, T* dx, T lossScale) {
  requireExpertGroup();
  const int n = static_cast<int>(rows);
  const size_t c = static_cast<size_t>(config_.width);
  const int experts = config_.experts;
  const size_t e = static_cast<size_t>(experts);
  const size_t k = static_cast<size_t>(config_.topK);
  const int hidden = config_.expertHidden();
  const size_t f = static_cast<size_t>(hidden);
  const size_t held = static_cast<size_t>(layout_.shard().experts);
  const size_t sources =
      expertParallel_ != nullptr ? static_cast<size_t>(expertParallel_->size()) : 1;
  const T* p = parameters_.data();
  T* g = gradients_.data();
  MoeScratch& scratch = moeScratch_;
  setMoeExchangeCounts(a, sources, held);  // forward's, for the same two trips
  const size_t sent = static_cast<size_t>(a.routing.sent());
  const size_t received = a.expertInput.size() / c;
  // d(each sent row's expert output) = gate x dout of its token; d(gate) = dout . output.
  std::vector<T>& dgates = scratch.router;
  dgates.assign(rows * k + 2 * e, T(0));
  scratch.send.resize(sent * c);
  for (size_t r = 0; r < sent; ++r) {
    const size_t t = static_cast<size_t>(a.routing.rowToken[r]);
    const size_t choice = t * k + static_cast<size_t>(a.routing.rowChoice[r]);
    const T gate = a.gates[choice];
    const T* dy = dout + t * c;
    const T* y = a.returned.data() + r * c;
    T* d = scratch.send.data() + r * c;
    T dot = 0;
    for (size_t i = 0; i < c; ++i) {
      d[i] = gate * dy[i];
      dot += dy[i] * y[i];
    }
    dgates[choice] = dot;
  }
  scratch.receive.resize(received * c);
  exchangeMoeRows(scratch.send.data(), scratch.sendCounts, scratch.receive.data(),
                  scratch.receiveCounts);
  scratch.gradient.resize(received * c);  // d(expert output), expert-major
  reorderRows(scratch.gradient.data(), scratch.receive.data(), std::span<const int64_t>(a.received),
              sources, held, c, /*toExpertMajor=*/true);
  scratch.expertOutput.assign(received * c, T(0));  // d(expert input), expert-major
  scratch.hidden.resize(received * f);
  scratch.hiddenGelu.resize(received * f);
  size_t first = 0;
  for (size_t l = 0; l < held; ++l) {
    const size_t count = expertRows(a.received, l, sources, held);
    if (count == 0) continue;
    const MlpOffsets& expert = w.experts[l];
    const int m = static_cast<int>(count);
    T* dh = scratch.hiddenGelu.data() + first * f;
    T* dfch = scratch.hidden.data() + first * f;
    zero(dh, count * f);
    linearBackward(dh, g + expert.projection.weight, g + expert.projection.bias,
                   scratch.gradient.data() + first * c, a.fchGelu.data() + first * f,
                   p + expert.projection.weight, m, hidden, config_.width);
    zero(dfch, count * f);
    geluBackward(dfch, a.fch.data() + first * f, dh, count * f);
    linearBackward(scratch.expertOutput.data() + first * c, g + expert.fc.weight,
                   g + expert.fc.bias, dfch, a.expertInput.data() + first * c, p + expert.fc.weight,
                   m, config_.width, hidden);
    first += count;
  }
  // d(expert input) back to the rows' origins, added to their tokens.
  reorderRows(scratch.receive.data(), scratch.expertOutput.data(),
              std::span<const int64_t>(a.received), sources, held, c, /*toExpertMajor=*/false);
  exchangeMoeRows(scratch.receive.data(), scratch.receiveCounts, scratch.send.data(),
                  scratch.sendCounts);
  zero(dx, rows * c);
  for (size_t r = 0; r < sent; ++r) {
    const T* d = scratch.send.data() + r * c;
    T* to = dx + static_cast<size_t>(a.routing.rowToken[r]) * c;
    for (size_t i = 0; i < c; ++i) to[i] += d[i];
  }
  // The router: through the gates and the softmax (with the auxiliary losses), then the linear.
  scratch.logits.resize(rows * e);
  routerBackward(scratch.logits.data(), dgates.data(), a.gates.data(), a.probs.data(), a.lse.data(),
                 a.routing, config_.auxLossCoef, config_.zLossCoef, lossScale,
                 dgates.data() + rows * k);
  matmulBackward(dx, g + w.router, scratch.logits.data(), x, p + w.router, n, config_.width,
                 experts);
}

template <typename T>
bool Gpt<T>::split() const {
  if (layout_.part().tpSize == 1) return false;
  if (tensorParallel_ == nullptr) {
    std::fprintf(stderr,
                 "Gpt: a tensor-parallel shard (%d of %d) runs only after setTensorParallel\n",
                 layout_.part().tpRank, layout_.part().tpSize);
    std::abort();
  }
  return true;
}

template <typename T>
bool Gpt<T>::sequenceParallel() const {
  return layout_.part().sequenceParallel && split();
}

template <typename T>
const T* Gpt<T>::gatherRows(const T* local, const ActivationArena<T>& arena) {
  if (!sequenceParallel()) return local;
  const size_t c = static_cast<size_t>(config_.width);
  tensorParallel_->gatherSequence(std::span<const T>(local, arena.localRows() * c),
                                  std::span<T>(workspace_.projection, arena.rows() * c));
  return workspace_.projection;
}

template <typename T>
T* Gpt<T>::sumPartials(T* partial, const ActivationArena<T>& arena, bool forward) {
  const size_t c = static_cast<size_t>(config_.width);
  if (!split()) return partial;
  const std::span<T> whole(partial, arena.rows() * c);
  if (sequenceParallel()) {
    tensorParallel_->reduceScatterSequence(whole);
    return partial + arena.firstLocalRow() * c;
  }
  if (forward) {
    tensorParallel_->reduceFromRegionForward(whole);
  } else {
    tensorParallel_->copyToRegionBackward(whole);
  }
  return partial;
}

template <typename T>
typename Gpt<T>::LayerNormGradient Gpt<T>::layerNormGradient(const LayerNormOffsets& offsets,
                                                             int slot) {
  if (!sequenceParallel())
    return {gradients_.data() + offsets.weight, gradients_.data() + offsets.bias};
  T* scratch = workspace_.sequenceGradients + 2 * static_cast<size_t>(slot * config_.width);
  return {scratch, scratch + config_.width};
}

template <typename T>
void Gpt<T>::sumLayerNormGradients(std::span<const LayerNormOffsets> norms) {
  if (!sequenceParallel()) return;
  const size_t c = static_cast<size_t>(config_.width);
  T* scratch = workspace_.sequenceGradients;
  tensorParallel_->allReduceSum(std::span<T>(scratch, 2 * c * norms.size()));
  T* g = gradients_.data();
  for (size_t k = 0; k < norms.size(); ++k) {
    const T* weight = scratch + 2 * k * c;
    const T* bias = weight + c;
    for (size_t i = 0; i < c; ++i) g[norms[k].weight + i] += weight[i];
    for (size_t i = 0; i < c; ++i) g[norms[k].bias + i] += bias[i];
  }
  zero(scratch, 2 * c * norms.size());  // the next backward accumulates from zero
}

template <typename T>
void Gpt<T>::embeddingForward(ActivationArena<T>& arena) {
  const T* p = parameters_.data();
  const size_t c = static_cast<size_t>(config_.width);
  if (!split()) {
    layers::embeddingForward(arena.input(), arena.inputs(), p + layout_.wte(), p + layout_.wpe(),
                             arena.batch(), config_.seq, config_.width);
    return;
  }
  // Each rank looks up the tokens it owns; g sums the lookups (one rank's row and zeros:
  // exact; under SP each rank keeps its rows of the sum), then the positions are added as
  // on one process.
  const ShardDimensions& shard = layout_.shard();
  T* lookups = workspace_.projection;
  vocabParallelEmbeddingForward(lookups, arena.inputs(), p + layout_.wte(),
                                static_cast<size_t>(shard.firstToken),
                                static_cast<size_t>(shard.vocab), arena.rows(), c);
  const T* local = sumPartials(lookups, arena, /*forward=*/true);
  std::copy(local, local + arena.localRows() * c, arena.input());
  addPositions(arena.input(), p + layout_.wpe(), arena.firstLocalRow(), arena.localRows(),
               config_.seq, c);
}

template <typename T>
void Gpt<T>::requireEveryLayer(const char* what) const {
  if (layout_.hasEmbeddings() && layout_.hasHead() && layout_.chunks().size() == 1) return;
  // A pipeline stage runs its pieces from a schedule; the whole-model loop is a caller's bug.
  std::fprintf(stderr, "Gpt::%s: the model part holds layers [%d, %d) of %d; run its pieces\n",
               what, layout_.firstLayer(), layout_.endLayer(), config_.layers);
  std::abort();
}

template <typename T>
const T* Gpt<T>::rowParallelForward(const T* inp, const T* weight, const T* bias, int inWidth,
                                    const ActivationArena<T>& arena) {
  const int rows = static_cast<int>(arena.rows());
  const int width = config_.width;
  T* out = workspace_.projection;
  if (!split()) {
    linearForward(out, inp, weight, bias, rows, inWidth, width);  // the bias seeds the GEMM
    return out;
  }
  matmulForward(out, inp, weight, rows, inWidth, width);
  T* local = sumPartials(out, arena, /*forward=*/true);
  addBias(local, bias, static_cast<int>(arena.localRows()), width);
  return local;
}

template <typename T>
void Gpt<T>::blockForward(int layer, ActivationArena<T>& arena) {
  if (observer_ != nullptr) observer_->beforeBlockForward(layer);
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    // Everything but the output in the workspace's block, for backward to rebuild.
    T* output = a.residual3;
    a = workspace_.block;
    a.residual3 = output;
  }
  computeBlock(layer, arena, a);
  if (layout_.block(layer).moe) {
    recordMoeStatistics(layer, *a.moe, moeLosses_);
    arena.addAuxiliaryLoss(moeLosses_.balance + moeLosses_.z);
  }
  if (observer_ != nullptr) observer_->afterBlockForward(layer);
}

template <typename T>
void Gpt<T>::computeBlock(int layer, const ActivationArena<T>& arena, BlockActivations<T>& a) {
  const int rows = static_cast<int>(arena.rows());
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  const BlockOffsets& w = layout_.block(layer);
  const T* residual = arena.blockInput(layer);
  // The LayerNorms and residual adds run on the rank's M rows, the linears and the
  // attention between them on all N.
  layerNormForward(a.ln1, a.ln1Mean, a.ln1Rstd, residual, p + w.ln1.weight, p + w.ln1.bias, m, c);
  linearForward(a.qkv, gatherRows(a.ln1, arena), p + w.attention.qkv.weight,
                p + w.attention.qkv.bias, rows, width, 3 * shard.width);
  attentionForward(a.atty, a.att, a.qkv, shape);
  const T* attention = rowParallelForward(a.atty, p + w.attention.projection.weight,
                                          p + w.attention.projection.bias, shard.width, arena);
  residualForward(a.residual2, residual, attention, m * c);
  layerNormForward(a.ln2, a.ln2Mean, a.ln2Rstd, a.residual2, p + w.ln2.weight, p + w.ln2.bias, m,
                   c);
  if (w.moe) {
    // MoE blocks are never TP shards (validatePart): M = N.
    moeLosses_ = moeForward(w.moeMlp, a.ln2, arena.rows(), *a.moe, workspace_.projection);
    residualForward(a.residual3, a.residual2, workspace_.projection, m * c);
    return;
  }
  linearForward(a.fch, gatherRows(a.ln2, arena), p + w.mlp.fc.weight, p + w.mlp.fc.bias, rows,
                width, shard.hidden);
  geluForward(a.fchGelu, a.fch, arena.rows() * static_cast<size_t>(shard.hidden));
  const T* mlp = rowParallelForward(a.fchGelu, p + w.mlp.projection.weight,
                                    p + w.mlp.projection.bias, shard.hidden, arena);
  residualForward(a.residual3, a.residual2, mlp, m * c);
}

template <typename T>
double Gpt<T>::headForward(ActivationArena<T>& arena) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t c = static_cast<size_t>(config_.width);
  const T* p = parameters_.data();
  HeadActivations<T>& h = arena.head();
  layerNormForward(h.lnf, h.lnfMean, h.lnfRstd, arena.output(), p + layout_.lnfWeight(),
                   p + layout_.lnfBias(), arena.localRows(), c);
  const ShardDimensions& shard = layout_.shard();
  tiedHeadForward(h.probs, gatherRows(h.lnf, arena), p + layout_.headWeight(), rows, config_.width,
                  shard.vocab);
  if (!split()) {
    return crossEntropyForward(h.probs, h.losses, arena.targets(), n,
                               static_cast<size_t>(config_.vocab),
                               static_cast<size_t>(shard.vocab));
  }
  // The vocabulary-parallel loss: the group's row max, then its row sums of exponentials
  // and target logits (one reduction of 2N), never the logits themselves.
  const size_t columns = static_cast<size_t>(shard.vocab);
  const size_t first = static_cast<size_t>(shard.firstToken);
  const size_t real = realColumns(first, columns, static_cast<size_t>(config_.vocab));
  T* rowMax = workspace_.lossScratch;
  T* sums = rowMax + n;
  T* targetLogits = sums + n;
  shardRowMax(rowMax, h.probs, n, columns, real);
  tensorParallel_->allReduceMax(std::span<T>(rowMax, n));
  shardExponentials(h.probs, sums, targetLogits, rowMax, arena.targets(), n, columns, first, real);
  tensorParallel_->allReduceSum(std::span<T>(sums, 2 * n));
  return shardProbabilities(h.probs, h.losses, sums, targetLogits, rowMax, n, columns, real);
}

template <typename T>
void Gpt<T>::headBackward(ActivationArena<T>& arena, T* dhidden, T lossScale) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const size_t c = static_cast<size_t>(config_.width);
  const ShardDimensions& shard = layout_.shard();
  const size_t columns = static_cast<size_t>(shard.vocab);
  const T* p = parameters_.data();
  T* g = gradients_.data();
  const HeadActivations<T>& h = arena.head();
  Workspace<T>& d = workspace_;
  arena.setLossScale(lossScale);
  zero(d.dlogits, n * columns);
  const T scale = lossScale / static_cast<T>(n);
  if (!split()) {
    crossEntropyBackward(d.dlogits, h.probs, arena.targets(), n, static_cast<size_t>(config_.vocab),
                         columns, scale);
  } else {
    const size_t first = static_cast<size_t>(shard.firstToken);
    vocabParallelCrossEntropyBackward(
        d.dlogits, h.probs, arena.targets(), n, columns, first,
        realColumns(first, columns, static_cast<size_t>(config_.vocab)), scale);
  }
  zero(d.dln, n * c);
  tiedHeadBackward(d.dln, g + layout_.headWeight(), d.dlogits, gatherRows(h.lnf, arena),
                   p + layout_.headWeight(), rows, config_.width, shard.vocab);
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);  // f before the head
  zero(dhidden, m * c);
  const LayerNormOffsets lnf{layout_.lnfWeight(), layout_.lnfBias()};
  const LayerNormGradient dlnf = layerNormGradient(lnf, 0);
  layerNormBackward(dhidden, dlnf.weight, dlnf.bias, dln, arena.output(), p + layout_.lnfWeight(),
                    h.lnfMean, h.lnfRstd, m, c, d.layerNorm);
  sumLayerNormGradients(std::span<const LayerNormOffsets>(&lnf, 1));
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.lnfWeight());
}

template <typename T>
void Gpt<T>::blockBackward(int layer, ActivationArena<T>& arena, T* dhidden) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const size_t hidden = static_cast<size_t>(shard.hidden);
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  T* g = gradients_.data();
  Workspace<T>& d = workspace_;
  const BlockOffsets& w = layout_.block(layer);
  const T* residual = arena.blockInput(layer);
  const LayerNormOffsets norms[] = {w.ln2, w.ln1};
  const LayerNormGradient dln2 = layerNormGradient(w.ln2, 0);
  const LayerNormGradient dln1 = layerNormGradient(w.ln1, 1);
  if (observer_ != nullptr) observer_->beforeBlockBackward(layer);
  // Under recomputation the block's forward runs again (its parameters are back: ZeRO-3
  // gathered them above) into the workspace's block, output included, the arena's left as is.
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    a = workspace_.block;
    computeBlock(layer, arena, a);
  }
  // dhidden is d(residual3); the residual add passes it unchanged to the MLP branch and to
  // residual2, so it is used in place for both. Under SP the linears read it gathered to
  // all N rows, and the input each column-parallel linear saved sharded, re-gathered.
  if (w.moe) {
    moeBackward(w.moeMlp, a.ln2, n, *a.moe, dhidden, d.dln, arena.lossScale());
  } else {
    zero(d.dfchGelu, n * hidden);
    linearBackward(d.dfchGelu, g + w.mlp.projection.weight, g + w.mlp.projection.bias,
                   gatherRows(dhidden, arena), a.fchGelu, p + w.mlp.projection.weight, rows,
                   shard.hidden, width);
    zero(d.dfch, n * hidden);
    geluBackward(d.dfch, a.fch, d.dfchGelu, n * hidden);
    zero(d.dln, n * c);
    linearBackward(d.dln, g + w.mlp.fc.weight, g + w.mlp.fc.bias, d.dfch, gatherRows(a.ln2, arena),
                   p + w.mlp.fc.weight, rows, width, shard.hidden);
  }
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);
  layerNormBackward(dhidden, dln2.weight, dln2.bias, dln, a.residual2, p + w.ln2.weight, a.ln2Mean,
                    a.ln2Rstd, m, c, d.layerNorm);
  // Now dhidden is d(residual2), which again feeds both the attention branch and the
  // block's input.
  zero(d.datty, n * static_cast<size_t>(shard.width));
  linearBackward(d.datty, g + w.attention.projection.weight, g + w.attention.projection.bias,
                 gatherRows(dhidden, arena), a.atty, p + w.attention.projection.weight, rows,
                 shard.width, width);
  zero(d.dqkv, n * 3 * static_cast<size_t>(shard.width));
  attentionBackward(d.dqkv, d.datty, a.qkv, a.att, shape, d.dscores);
  zero(d.dln, n * c);
  linearBackward(d.dln, g + w.attention.qkv.weight, g + w.attention.qkv.bias, d.dqkv,
                 gatherRows(a.ln1, arena), p + w.attention.qkv.weight, rows, width,
                 3 * shard.width);
  dln = sumPartials(d.dln, arena, /*forward=*/false);
  layerNormBackward(dhidden, dln1.weight, dln1.bias, dln, residual, p + w.ln1.weight, a.ln1Mean,
                    a.ln1Rstd, m, c, d.layerNorm);
  sumLayerNormGradients(norms);
  if (observer_ != nullptr) {
    observer_->afterBlockBackward(layer);
    observer_->gradientsFinalFrom(layout_.blockBegin(layer));
  }
}

// The split backward's stash, per micro-batch, for N rows of which this rank's residual
// stream holds M (N but under sequence parallelism): the head's dlogits [N, Vs] and d(ln_f
// output) [M, C]; per block d(output) [N, C] (gathered under SP), d(fch) [N, F], d(ln2
// output) [M, C], d(residual2) [N, C] (gathered), d(qkv) [N, 3Cs], d(ln1 output) [M, C];
// the embeddings' gradient [M, C].
template <typename T>
typename Gpt<T>::StashOffsets Gpt<T>::stashOffsets(size_t rows) const {
  const size_t c = static_cast<size_t>(config_.width);
  const ModelPart& part = layout_.part();
  const size_t local = rows / static_cast<size_t>(part.sequenceParallel ? part.tpSize : 1);
  const ShardDimensions& shard = layout_.shard();
  StashOffsets o{};
  const size_t head = layout_.hasHead() ? rows * static_cast<size_t>(shard.vocab) : 0;
  o.logits = 0;
  o.lnf = head;
  o.blocks = head + (layout_.hasHead() ? local * c : 0);
  o.perBlock =
      rows * (2 * c + static_cast<size_t>(shard.hidden) + 3 * static_cast<size_t>(shard.width)) +
      local * 2 * c;
  o.embedding = o.blocks + o.perBlock * layout_.blocks().size();
  o.total = o.embedding + (layout_.hasEmbeddings() ? local * c : 0);
  return o;
}

template <typename T>
size_t Gpt<T>::weightStashElements(int maxBatch) const {
  return stashOffsets(static_cast<size_t>(maxBatch) * static_cast<size_t>(config_.seq)).total;
}

template <typename T>
void Gpt<T>::headBackwardInput(ActivationArena<T>& arena, T* dhidden, T lossScale, T* stash) {
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const size_t c = static_cast<size_t>(config_.width);
  const ShardDimensions& shard = layout_.shard();
  const size_t columns = static_cast<size_t>(shard.vocab);
  const StashOffsets o = stashOffsets(n);
  T* dlogits = stash + o.logits;
  const T* p = parameters_.data();
  const HeadActivations<T>& h = arena.head();
  Workspace<T>& d = workspace_;
  arena.setLossScale(lossScale);
  zero(dlogits, n * columns);
  const T scale = lossScale / static_cast<T>(n);
  if (!split()) {
    crossEntropyBackward(dlogits, h.probs, arena.targets(), n, static_cast<size_t>(config_.vocab),
                         columns, scale);
  } else {
    const size_t first = static_cast<size_t>(shard.firstToken);
    vocabParallelCrossEntropyBackward(
        dlogits, h.probs, arena.targets(), n, columns, first,
        realColumns(first, columns, static_cast<size_t>(config_.vocab)), scale);
  }
  zero(d.dln, n * c);
  tiedHeadBackwardInput(d.dln, dlogits, p + layout_.headWeight(), static_cast<int>(n),
                        config_.width, shard.vocab);
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);  // f before the head
  T* savedDln = stash + o.lnf;
  std::copy(dln, dln + m * c, savedDln);
  zero(dhidden, m * c);
  layerNormBackwardInput(dhidden, savedDln, arena.output(), p + layout_.lnfWeight(), h.lnfMean,
                         h.lnfRstd, m, c, d.layerNorm);
}

template <typename T>
void Gpt<T>::headBackwardWeight(const ActivationArena<T>& arena, const T* stash) {
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const size_t c = static_cast<size_t>(config_.width);
  const StashOffsets o = stashOffsets(n);
  T* g = gradients_.data();
  const HeadActivations<T>& h = arena.head();
  tiedHeadBackwardWeight(g + layout_.headWeight(), stash + o.logits, gatherRows(h.lnf, arena),
                         static_cast<int>(n), config_.width, layout_.shard().vocab);
  const LayerNormOffsets lnf{layout_.lnfWeight(), layout_.lnfBias()};
  const LayerNormGradient dlnf = layerNormGradient(lnf, 0);
  layerNormBackwardParameters(dlnf.weight, dlnf.bias, stash + o.lnf, arena.output(), h.lnfMean,
                              h.lnfRstd, m, c);
  sumLayerNormGradients(std::span<const LayerNormOffsets>(&lnf, 1));
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.lnfWeight());
}

namespace {

// The stash of one block: d(output), d(fch), d(ln2 output), d(residual2), d(qkv), d(ln1
// output), in that order (stashOffsets' sizes).
template <typename T>
struct BlockStash {
  T* output;
  T* fch;
  T* ln2;
  T* residual2;
  T* qkv;
  T* ln1;
};

template <typename T>
BlockStash<T> blockStash(T* base, size_t rows, size_t localRows, size_t width,
                         const ShardDimensions& shard) {
  BlockStash<T> s{};
  s.output = base;
  s.fch = s.output + rows * width;
  s.ln2 = s.fch + rows * static_cast<size_t>(shard.hidden);
  s.residual2 = s.ln2 + localRows * width;
  s.qkv = s.residual2 + rows * width;
  s.ln1 = s.qkv + rows * 3 * static_cast<size_t>(shard.width);
  return s;
}

}  // namespace

template <typename T>
T* Gpt<T>::blockStashBase(int layer, T* stash, size_t rows) const {
  const StashOffsets o = stashOffsets(rows);
  const size_t position = static_cast<size_t>(&layout_.block(layer) - layout_.blocks().data());
  return stash + o.blocks + o.perBlock * position;
}

template <typename T>
void Gpt<T>::blockBackwardInput(int layer, ActivationArena<T>& arena, T* dhidden, T* stash) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  const size_t hidden = static_cast<size_t>(shard.hidden);
  const AttentionShape shape{arena.batch(), config_.seq, shard.width, shard.heads};
  const T* p = parameters_.data();
  Workspace<T>& d = workspace_;
  const BlockOffsets& w = layout_.block(layer);
  requireDense(layer, "blockBackwardInput");
  const BlockStash<T> s = blockStash(blockStashBase(layer, stash, n), n, m, c, shard);
  if (observer_ != nullptr) observer_->beforeBlockBackward(layer);
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    a = workspace_.block;
    computeBlock(layer, arena, a);
  }
  // As blockBackward, each linear's input gradient only; what W needs is saved: the output
  // gradients the linears saw (gathered to N rows under SP) and the LayerNorms' (summed
  // over the TP group, this rank's M rows).
  const T* dout = gatherRows(dhidden, arena);
  std::copy(dout, dout + n * c, s.output);
  zero(d.dfchGelu, n * hidden);
  matmulBackwardInput(d.dfchGelu, s.output, p + w.mlp.projection.weight, rows, shard.hidden, width);
  zero(s.fch, n * hidden);
  geluBackward(s.fch, a.fch, d.dfchGelu, n * hidden);
  zero(d.dln, n * c);
  matmulBackwardInput(d.dln, s.fch, p + w.mlp.fc.weight, rows, width, shard.hidden);
  const T* dln = sumPartials(d.dln, arena, /*forward=*/false);
  std::copy(dln, dln + m * c, s.ln2);
  layerNormBackwardInput(dhidden, s.ln2, a.residual2, p + w.ln2.weight, a.ln2Mean, a.ln2Rstd, m, c,
                         d.layerNorm);
  const T* dresidual2 = gatherRows(dhidden, arena);
  std::copy(dresidual2, dresidual2 + n * c, s.residual2);
  zero(d.datty, n * static_cast<size_t>(shard.width));
  matmulBackwardInput(d.datty, s.residual2, p + w.attention.projection.weight, rows, shard.width,
                      width);
  zero(s.qkv, n * 3 * static_cast<size_t>(shard.width));
  attentionBackward(s.qkv, d.datty, a.qkv, a.att, shape, d.dscores);
  zero(d.dln, n * c);
  matmulBackwardInput(d.dln, s.qkv, p + w.attention.qkv.weight, rows, width, 3 * shard.width);
  dln = sumPartials(d.dln, arena, /*forward=*/false);
  std::copy(dln, dln + m * c, s.ln1);
  layerNormBackwardInput(dhidden, s.ln1, arena.blockInput(layer), p + w.ln1.weight, a.ln1Mean,
                         a.ln1Rstd, m, c, d.layerNorm);
  if (observer_ != nullptr) observer_->afterBlockBackward(layer);
}

template <typename T>
void Gpt<T>::blockBackwardWeight(int layer, const ActivationArena<T>& arena, const T* stash) {
  const int rows = static_cast<int>(arena.rows());
  const size_t n = arena.rows();
  const size_t m = arena.localRows();
  const int width = config_.width;
  const size_t c = static_cast<size_t>(width);
  const ShardDimensions& shard = layout_.shard();
  T* g = gradients_.data();
  requireDense(layer, "blockBackwardWeight");
  const BlockOffsets& w = layout_.block(layer);
  // Under recomputation the block's forward runs once more: B's rebuild is gone by now.
  BlockActivations<T> a = arena.block(layer);
  if (recompute_) {
    a = workspace_.block;
    computeBlock(layer, arena, a);
  }
  const BlockStash<const T> s =
      blockStash<const T>(blockStashBase(layer, const_cast<T*>(stash), n), n, m, c, shard);
  const LayerNormOffsets norms[] = {w.ln2, w.ln1};
  const LayerNormGradient dln2 = layerNormGradient(w.ln2, 0);
  const LayerNormGradient dln1 = layerNormGradient(w.ln1, 1);
  // Each tensor's gradient gets this micro-batch's one contribution, as in blockBackward.
  matmulBackwardWeight(g + w.mlp.projection.weight, s.output, a.fchGelu, rows, shard.hidden, width);
  biasBackward(g + w.mlp.projection.bias, s.output, rows, width);
  matmulBackwardWeight(g + w.mlp.fc.weight, s.fch, gatherRows(a.ln2, arena), rows, width,
                       shard.hidden);
  biasBackward(g + w.mlp.fc.bias, s.fch, rows, shard.hidden);
  layerNormBackwardParameters(dln2.weight, dln2.bias, s.ln2, a.residual2, a.ln2Mean, a.ln2Rstd, m,
                              c);
  matmulBackwardWeight(g + w.attention.projection.weight, s.residual2, a.atty, rows, shard.width,
                       width);
  biasBackward(g + w.attention.projection.bias, s.residual2, rows, width);
  matmulBackwardWeight(g + w.attention.qkv.weight, s.qkv, gatherRows(a.ln1, arena), rows, width,
                       3 * shard.width);
  biasBackward(g + w.attention.qkv.bias, s.qkv, rows, 3 * shard.width);
  layerNormBackwardParameters(dln1.weight, dln1.bias, s.ln1, arena.blockInput(layer), a.ln1Mean,
                              a.ln1Rstd, m, c);
  sumLayerNormGradients(norms);
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.blockBegin(layer));
}

template <typename T>
void Gpt<T>::embeddingBackwardInput(const ActivationArena<T>& arena, const T* dhidden, T* stash) {
  std::copy(dhidden, dhidden + arena.localRows() * static_cast<size_t>(config_.width),
            stash + stashOffsets(arena.rows()).embedding);
}

template <typename T>
void Gpt<T>::embeddingBackwardWeight(const ActivationArena<T>& arena, const T* stash) {
  embeddingBackward(arena, stash + stashOffsets(arena.rows()).embedding);
}

template <typename T>
void Gpt<T>::embeddingBackward(const ActivationArena<T>& arena, const T* dhidden) {
  T* g = gradients_.data();
  if (!split()) {
    layers::embeddingBackward(g + layout_.wte(), g + layout_.wpe(), dhidden, arena.inputs(),
                              arena.batch(), config_.seq, config_.width);
  } else {
    const ShardDimensions& shard = layout_.shard();
    // Under SP the gradient is gathered to all N rows first (the reduce-scatter's backward).
    vocabParallelEmbeddingBackward(g + layout_.wte(), g + layout_.wpe(), gatherRows(dhidden, arena),
                                   arena.inputs(), static_cast<size_t>(shard.firstToken),
                                   static_cast<size_t>(shard.vocab), arena.batch(), config_.seq,
                                   static_cast<size_t>(config_.width));
  }
  if (observer_ != nullptr) observer_->gradientsFinalFrom(0);
}

template <typename T>
double Gpt<T>::forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                       int batch) {
  requireEveryLayer("forward");
  if (!arena_) arena_ = std::make_unique<ActivationArena<T>>(layout_, maxBatch_, recompute_);
  arena_->setBatch(inputs, targets, batch);
  embeddingForward(*arena_);
  for (int layer = 0; layer < config_.layers; ++layer) blockForward(layer, *arena_);
  return headForward(*arena_);
}

template <typename T>
void Gpt<T>::backward(T lossScale) {
  requireEveryLayer("backward");
  if (!arena_) {
    std::fprintf(stderr, "Gpt::backward: called before any forward\n");
    std::abort();
  }
  T* dhidden = workspace_.dhidden;
  headBackward(*arena_, dhidden, lossScale);
  for (int layer = config_.layers - 1; layer >= 0; --layer) blockBackward(layer, *arena_, dhidden);
  embeddingBackward(*arena_, dhidden);
}

template <typename T>
void Gpt<T>::zeroGradients() {
  std::fill(gradients_.begin(), gradients_.end(), T(0));
}

template <typename T>
std::span<const T> Gpt<T>::probabilities() const {
  if (!arena_) return {};
  return {arena_->head().probs, arena_->rows() * static_cast<size_t>(layout_.shard().vocab)};
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace cc::parallel
