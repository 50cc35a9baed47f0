#include "parallel/model/gpt.h"

#include <algorithm>
#include <cstring>

#include "parallel/model/layers/attention.h"
#include "parallel/model/layers/cross_entropy.h"
#include "parallel/model/layers/embedding.h"
#include "parallel/model/layers/gelu.h"
#include "parallel/model/layers/layernorm.h"
#include "parallel/model/layers/linear.h"
#include "parallel/model/layers/residual.h"

namespace cc::parallel {

using namespace layers;

template <typename T>
Gpt<T>::Gpt(const GptConfig& config, int maxBatch, size_t bufferElements)
    : config_(config),
      layout_(config),
      maxBatch_(maxBatch),
      parameterPages_(std::max(layout_.totalSize(), bufferElements) * sizeof(T)),
      gradientPages_(parameterPages_.bytes()),
      parameters_(static_cast<T*>(parameterPages_.data()),
                  std::max(layout_.totalSize(), bufferElements)),
      gradients_(static_cast<T*>(gradientPages_.data()), parameters_.size()),
      arena_(config, maxBatch) {}

template <typename T>
double Gpt<T>::forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                       int batch) {
  const int seq = config_.seq;
  const int width = config_.width;
  const int rows = batch * seq;
  const size_t n = static_cast<size_t>(rows);
  const size_t c = static_cast<size_t>(width);
  const T* p = parameters_.data();
  inputs_.assign(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(n));
  targets_.assign(targets.begin(), targets.begin() + static_cast<std::ptrdiff_t>(n));
  batch_ = batch;

  embeddingForward(arena_.encoded, inputs_.data(), p + layout_.wte(), p + layout_.wpe(), batch, seq,
                   width);
  const T* residual = arena_.encoded;
  const AttentionShape shape{batch, seq, width, config_.heads};
  for (int layer = 0; layer < config_.layers; ++layer) {
    const BlockOffsets& w = layout_.block(layer);
    BlockActivations<T>& a = arena_.blocks[static_cast<size_t>(layer)];
    if (observer_ != nullptr) observer_->beforeBlockForward(layer);
    layerNormForward(a.ln1, a.ln1Mean, a.ln1Rstd, residual, p + w.ln1Weight, p + w.ln1Bias, n, c);
    linearForward(a.qkv, a.ln1, p + w.attnWeight, p + w.attnBias, rows, width, 3 * width);
    attentionForward(a.atty, a.att, a.qkv, shape);
    linearForward(arena_.projection, a.atty, p + w.attnProjWeight, p + w.attnProjBias, rows, width,
                  width);
    residualForward(a.residual2, residual, arena_.projection, n * c);
    layerNormForward(a.ln2, a.ln2Mean, a.ln2Rstd, a.residual2, p + w.ln2Weight, p + w.ln2Bias, n,
                     c);
    linearForward(a.fch, a.ln2, p + w.fcWeight, p + w.fcBias, rows, width, 4 * width);
    geluForward(a.fchGelu, a.fch, n * 4 * c);
    linearForward(arena_.projection, a.fchGelu, p + w.fcProjWeight, p + w.fcProjBias, rows,
                  4 * width, width);
    residualForward(a.residual3, a.residual2, arena_.projection, n * c);
    residual = a.residual3;
    if (observer_ != nullptr) observer_->afterBlockForward(layer);
  }
  layerNormForward(arena_.lnf, arena_.lnfMean, arena_.lnfRstd, residual, p + layout_.lnfWeight(),
                   p + layout_.lnfBias(), n, c);
  const int paddedVocab = config_.paddedVocab();
  tiedHeadForward(arena_.probs, arena_.lnf, p + layout_.wte(), rows, width, paddedVocab);
  return crossEntropyForward(arena_.probs, arena_.losses, targets_.data(), n,
                             static_cast<size_t>(config_.vocab), static_cast<size_t>(paddedVocab));
}

template <typename T>
void Gpt<T>::backward(T lossScale) {
  const int seq = config_.seq;
  const int width = config_.width;
  const int batch = batch_;
  const int rows = batch * seq;
  const size_t n = static_cast<size_t>(rows);
  const size_t c = static_cast<size_t>(width);
  const int paddedVocab = config_.paddedVocab();
  const T* p = parameters_.data();
  T* g = gradients_.data();
  GradientScratch<T>& d = arena_.grads;
  auto zero = [](T* buffer, size_t count) { std::fill(buffer, buffer + count, T(0)); };

  zero(d.dlogits, n * static_cast<size_t>(paddedVocab));
  crossEntropyBackward(d.dlogits, arena_.probs, targets_.data(), n,
                       static_cast<size_t>(config_.vocab), static_cast<size_t>(paddedVocab),
                       lossScale / static_cast<T>(n));
  zero(d.dln, n * c);
  tiedHeadBackward(d.dln, g + layout_.wte(), d.dlogits, arena_.lnf, p + layout_.wte(), rows, width,
                   paddedVocab);
  const T* lastResidual = config_.layers > 0 ? arena_.blocks.back().residual3 : arena_.encoded;
  zero(d.dresidual, n * c);
  layerNormBackward(d.dresidual, g + layout_.lnfWeight(), g + layout_.lnfBias(), d.dln,
                    lastResidual, p + layout_.lnfWeight(), arena_.lnfMean, arena_.lnfRstd, n, c,
                    d.layerNorm);
  if (observer_ != nullptr) observer_->gradientsFinalFrom(layout_.lnfWeight());

  const AttentionShape shape{batch, seq, width, config_.heads};
  for (int layer = config_.layers - 1; layer >= 0; --layer) {
    const BlockOffsets& w = layout_.block(layer);
    BlockActivations<T>& a = arena_.blocks[static_cast<size_t>(layer)];
    const T* residual =
        layer == 0 ? arena_.encoded : arena_.blocks[static_cast<size_t>(layer) - 1].residual3;
    if (observer_ != nullptr) observer_->beforeBlockBackward(layer);
    // d.dresidual is d(residual3); the residual add passes it unchanged to the MLP branch
    // and to residual2, so it is used in place for both.
    zero(d.dfchGelu, n * 4 * c);
    linearBackward(d.dfchGelu, g + w.fcProjWeight, g + w.fcProjBias, d.dresidual, a.fchGelu,
                   p + w.fcProjWeight, rows, 4 * width, width);
    zero(d.dfch, n * 4 * c);
    geluBackward(d.dfch, a.fch, d.dfchGelu, n * 4 * c);
    zero(d.dln, n * c);
    linearBackward(d.dln, g + w.fcWeight, g + w.fcBias, d.dfch, a.ln2, p + w.fcWeight, rows, width,
                   4 * width);
    layerNormBackward(d.dresidual, g + w.ln2Weight, g + w.ln2Bias, d.dln, a.residual2,
                      p + w.ln2Weight, a.ln2Mean, a.ln2Rstd, n, c, d.layerNorm);
    // Now d.dresidual is d(residual2), which again feeds both the attention branch and
    // the block's input.
    zero(d.datty, n * c);
    linearBackward(d.datty, g + w.attnProjWeight, g + w.attnProjBias, d.dresidual, a.atty,
                   p + w.attnProjWeight, rows, width, width);
    zero(d.dqkv, n * 3 * c);
    attentionBackward(d.dqkv, d.datty, a.qkv, a.att, shape, d.dscores);
    zero(d.dln, n * c);
    linearBackward(d.dln, g + w.attnWeight, g + w.attnBias, d.dqkv, a.ln1, p + w.attnWeight, rows,
                   width, 3 * width);
    layerNormBackward(d.dresidual, g + w.ln1Weight, g + w.ln1Bias, d.dln, residual, p + w.ln1Weight,
                      a.ln1Mean, a.ln1Rstd, n, c, d.layerNorm);
    if (observer_ != nullptr) {
      observer_->afterBlockBackward(layer);
      observer_->gradientsFinalFrom(layout_.blockBegin(layer));
    }
  }
  embeddingBackward(g + layout_.wte(), g + layout_.wpe(), d.dresidual, inputs_.data(), batch, seq,
                    width);
  if (observer_ != nullptr) observer_->gradientsFinalFrom(0);
}

template <typename T>
void Gpt<T>::zeroGradients() {
  std::fill(gradients_.begin(), gradients_.end(), T(0));
}

template <typename T>
std::span<const T> Gpt<T>::probabilities() const {
  return {arena_.probs, static_cast<size_t>(batch_) * static_cast<size_t>(config_.seq) *
                            static_cast<size_t>(config_.paddedVocab())};
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace cc::parallel
