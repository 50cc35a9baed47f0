#include "parallel/dp/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "parallel/dp/cc_call.h"
#include "parallel/optim/grad_norm.h"

namespace cc::parallel {
namespace {

// Stages 2-3: full-size gradient buckets allowed to wait for their reduce-scatter.
constexpr size_t kMaxBucketsInFlight = 2;

}  // namespace

Result<std::unique_ptr<DataParallel>> DataParallel::create(ccComm_t dpComm, Gpt<float>& model,
                                                           const DataParallelOptions& options) {
  if (options.zeroStage < 0 || options.zeroStage > 3) {
    return invalidArgument("zero stage " + std::to_string(options.zeroStage) +
                           " is not 0, 1, 2 or 3");
  }
  std::unique_ptr<DataParallel> dp(new DataParallel(dpComm, model, options));
  CC_TRY(ccCall(ccCommCount(dpComm, &dp->world_), dpComm, "dp: ccCommCount"));
  CC_TRY(ccCall(ccCommUserRank(dpComm, &dp->rank_), dpComm, "dp: ccCommUserRank"));
  const ParameterLayout& layout = model.layout();
  dp->padded_ = model.paddedParameters().size();
  if (dp->padded_ != paddedBufferSize(layout.totalSize(), dp->world_)) {
    return invalidArgument("dp: the model's buffer holds " + std::to_string(dp->padded_) +
                           " elements, expected " +
                           std::to_string(paddedBufferSize(layout.totalSize(), dp->world_)) +
                           " (the layout padded to the DP world size)");
  }
  CC_TRY(ccCall(ccStreamCreate(&dp->gradStream_), dpComm, "dp: ccStreamCreate"));
  if (options.zeroStage == 3) {
    // Parameter gathers run during forward and backward, beside the gradient buckets: a
    // communicator and stream of their own. Stages 0-2 gather after the gradients have
    // arrived and share the gradients' (a communicator costs its shared buffers per rank).
    CC_TRY(ccCall(ccCommSplit(dpComm, 0, dp->rank_, &dp->paramComm_), dpComm,
                  "dp: split the parameter communicator"));
    CC_TRY(ccCall(ccStreamCreate(&dp->paramStream_), dpComm, "dp: ccStreamCreate"));
  } else {
    dp->paramComm_ = dpComm;
    dp->paramStream_ = dp->gradStream_;
  }
  if (options.zeroStage == 3) {
    std::vector<Segment> units = layerUnits(layout, model.config().layers, dp->padded_, dp->world_);
    dp->segments_.assign(units.rbegin(), units.rend());
  } else {
    dp->segments_ = gradientBuckets(
        dp->padded_, std::max<size_t>(1, options.bucketBytes / sizeof(float)), dp->world_);
  }
  dp->pieces_ = shardPieces(dp->segments_, dp->rank_, dp->world_);
  if (options.zeroStage >= 2) dp->gradientShard_.resize(dp->optimizerStateSize());
  if (options.zeroStage == 3) {
    std::vector<Segment> units(dp->segments_.rbegin(), dp->segments_.rend());
    std::vector<ShardPiece> unitPieces(dp->pieces_.rbegin(), dp->pieces_.rend());
    dp->parameterShard_.resize(dp->optimizerStateSize());
    dp->layers_ = std::make_unique<LayerGather>(model, std::move(units), std::move(unitPieces),
                                                dp->rank_, dp->paramComm_, dp->paramStream_);
    dp->layers_->setShard(dp->parameterShard_);
    dp->shardParameters();
  }
  model.setObserver(dp.get());
  return dp;
}

DataParallel::DataParallel(ccComm_t dpComm, Gpt<float>& model, const DataParallelOptions& options)
    : model_(model), options_(options), gradComm_(dpComm) {}

DataParallel::~DataParallel() {
  model_.setObserver(nullptr);
  const bool ownParameterChannel = paramComm_ != nullptr && paramComm_ != gradComm_;
  // After a failure a peer may be gone: abort rather than wait on anything.
  if (!error_.isOk() && ownParameterChannel) (void)ccCommAbort(paramComm_);
  if (gradStream_ != nullptr) (void)ccStreamDestroy(gradStream_);
  if (ownParameterChannel) {
    if (paramStream_ != nullptr) (void)ccStreamDestroy(paramStream_);
    if (error_.isOk()) (void)ccCommDestroy(paramComm_);
  }
}

Result<DataParallel::Traffic> DataParallel::traffic() const {
  Traffic total;
  std::vector<ccComm_t> comms{gradComm_};
  if (paramComm_ != gradComm_) comms.push_back(paramComm_);
  for (ccComm_t comm : comms) {
    for (int kind = 0; kind < ccNumTrafficKinds; ++kind) {
      if (kind == ccTrafficControl) continue;
      ccTraffic_t counter{};
      CC_TRY(ccCall(ccCommGetTraffic(comm, static_cast<ccTrafficKind_t>(kind), &counter), comm,
                    "dp: ccCommGetTraffic"));
      total.sent += counter.bytesSent;
      total.received += counter.bytesReceived;
    }
  }
  return total;
}

size_t DataParallel::optimizerStateSize() const {
  if (options_.zeroStage == 0) return model_.layout().totalSize();
  return padded_ / static_cast<size_t>(world_);
}

MemoryEstimate DataParallel::memoryEstimate() const {
  const double full = 4.0 * static_cast<double>(padded_);
  const double shard = 4.0 * static_cast<double>(padded_ / static_cast<size_t>(world_));
  size_t largestSegment = 0;
  for (const Segment& segment : segments_)
    largestSegment = std::max(largestSegment, segment.size());
  const double inFlight =
      2.0 * 4.0 * static_cast<double>(largestSegment);  // produced, not yet reduced
  MemoryEstimate estimate;
  switch (options_.zeroStage) {
    case 0:
      estimate = {full, full, 8.0 * static_cast<double>(model_.layout().totalSize())};
      break;
    case 1:
      estimate = {full, full, 2.0 * shard};
      break;
    case 2:
      estimate = {full, shard + std::min(full, inFlight), 2.0 * shard};
      break;
    default:
      estimate = {shard + 4.0 * static_cast<double>(layers_->peakResidentElements()),
                  shard + std::min(full, inFlight), 2.0 * shard};
  }
  return estimate;
}

std::string DataParallel::describe() const {
  char text[256];
  size_t largestSegment = 0;
  for (const Segment& segment : segments_)
    largestSegment = std::max(largestSegment, segment.size());
  const double largest = static_cast<double>(largestSegment) * 4.0 / (1 << 20);
  std::snprintf(
      text, sizeof(text),
      "dp %d, zero %d, %zu %s (largest %.2f MiB), overlap %s, %zu of %zu elements per shard",
      world_, options_.zeroStage, segments_.size(),
      options_.zeroStage == 3 ? "layer units" : "gradient buckets", largest,
      options_.overlap ? "on" : "off", optimizerStateSize(), padded_);
  return text;
}

void DataParallel::record(const Status& status) {
  if (error_.isOk() && !status.isOk()) error_ = status;
}

Status DataParallel::launch(size_t index) {
  const Segment& segment = segments_[index];
  const ShardPiece& piece = pieces_[index];
  float* g = model_.paddedGradients().data();
  const std::string what = "dp: gradient " +
                           std::string(options_.zeroStage == 0 ? "all-reduce" : "reduce-scatter") +
                           " of bucket " + std::to_string(index) + " [" +
                           std::to_string(segment.begin) + ", " + std::to_string(segment.end) + ")";
  switch (options_.zeroStage) {
    case 0:
      return ccCall(ccAllReduce(g + segment.begin, g + segment.begin, segment.size(), ccFloat32,
                                ccAvg, gradComm_, gradStream_),
                    gradComm_, what);
    case 1:
      return ccCall(ccReduceScatter(g + segment.begin, g + piece.begin, piece.count, ccFloat32,
                                    ccAvg, gradComm_, gradStream_),
                    gradComm_, what);
    default:
      return ccCall(ccReduceScatter(g + segment.begin, gradientShard_.data() + piece.stateOffset,
                                    piece.count, ccFloat32, ccAvg, gradComm_, gradStream_),
                    gradComm_, what);
  }
}

void DataParallel::releaseCompletedGradients(bool all) {
  if (options_.zeroStage < 2 || released_ == launched_) return;
  if (!all) {
    // Whatever has completed by now: the stream reports all-or-nothing, which is enough
    // on a stream that keeps up with backward.
    const ccResult_t query = ccStreamQuery(gradStream_);
    if (query == ccInProgress) return;
    if (query != ccSuccess) {
      record(ccCall(query, gradComm_, "dp: gradient stream"));
      return;
    }
  }
  for (; released_ < launched_; ++released_) {
    model_.releaseGradients(segments_[released_].begin, segments_[released_].end);
  }
}

Status DataParallel::beginStep() {
  CC_TRY(error_);
  launched_ = 0;
  released_ = 0;
  if (options_.zeroStage >= 2) {
    model_.releaseGradients(0, padded_);  // zero, and out of memory until backward writes
  } else {
    model_.zeroGradients();
  }
  return Status::ok();
}

Status DataParallel::beginMicroBatch(bool communicates) {
  CC_TRY(error_);
  communicates_ = communicates;
  inMicroBatch_ = true;
  if (layers_) record(layers_->beginMicroBatch());
  return error_;
}

Status DataParallel::endMicroBatch() {
  inMicroBatch_ = false;
  if (layers_) record(layers_->releaseAll());
  if (communicates_) {
    // Without overlap this is where every bucket starts; with it, all have (backward ends
    // at offset 0), and this only covers a backward that was cut short.
    for (; error_.isOk() && launched_ < segments_.size(); ++launched_) record(launch(launched_));
  }
  return error_;
}

Result<double> DataParallel::finishGradients() {
  CC_TRY(error_);
  const auto start = std::chrono::steady_clock::now();
  CC_TRY(ccCall(ccStreamSynchronize(gradStream_), gradComm_,
                "dp: waiting for the gradient reductions"));
  waitSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  releaseCompletedGradients(true);
  if (options_.zeroStage == 0) return globalNorm(model_.gradients());
  double sumOfSquares = 0;
  const float* full = model_.paddedGradients().data();
  for (const ShardPiece& piece : pieces_) {
    const float* g =
        options_.zeroStage == 1 ? full + piece.begin : gradientShard_.data() + piece.stateOffset;
    for (size_t i = 0; i < piece.count; ++i) sumOfSquares += static_cast<double>(g[i]) * g[i];
  }
  CC_TRY(ccCall(ccAllReduce(&sumOfSquares, &sumOfSquares, 1, ccFloat64, ccSum, gradComm_, nullptr),
                gradComm_, "dp: all-reduce of the gradient norm"));
  return std::sqrt(sumOfSquares);
}

std::vector<AdamWPiece> DataParallel::optimizerPieces() {
  float* parameters = model_.paddedParameters().data();
  const float* gradients = model_.paddedGradients().data();
  std::vector<AdamWPiece> pieces;
  for (const ShardPiece& piece : pieces_) {
    float* p = options_.zeroStage == 3 ? parameterShard_.data() + piece.stateOffset
                                       : parameters + piece.begin;
    const float* g = options_.zeroStage == 1 ? gradients + piece.begin
                                             : gradientShard_.data() + piece.stateOffset;
    pieces.push_back({p, g, piece.begin, piece.count, piece.stateOffset});
  }
  return pieces;
}

Status DataParallel::update(AdamW& optimizer, float lr, float gradientScale) {
  CC_TRY(error_);
  if (options_.zeroStage == 0) {
    optimizer.update(model_.parameters(), model_.gradients(), model_.layout(), lr, gradientScale);
    return Status::ok();
  }
  const std::vector<AdamWPiece> pieces = optimizerPieces();
  optimizer.updatePieces(pieces, model_.layout(), lr, gradientScale);
  if (options_.zeroStage == 3) return Status::ok();  // the next forward gathers
  float* p = model_.paddedParameters().data();
  for (size_t index = 0; index < segments_.size(); ++index) {
    const ShardPiece& piece = pieces_[index];
    CC_TRY(ccCall(ccAllGather(p + piece.begin, p + segments_[index].begin, piece.count, ccFloat32,
                              paramComm_, paramStream_),
                  paramComm_, "dp: parameter all-gather of bucket " + std::to_string(index)));
  }
  return ccCall(ccStreamSynchronize(paramStream_), paramComm_,
                "dp: waiting for the parameter all-gathers");
}

Result<double> DataParallel::average(double value) {
  CC_TRY(ccCall(ccAllReduce(&value, &value, 1, ccFloat64, ccAvg, gradComm_, nullptr), gradComm_,
                "dp: all-reduce of the loss"));
  return value;
}

Status DataParallel::gatherParameters() { return layers_ ? layers_->gatherAll() : Status::ok(); }

Status DataParallel::releaseParameters() { return layers_ ? layers_->releaseAll() : Status::ok(); }

Status DataParallel::gatherMoments(const AdamW& optimizer, std::vector<float>& m,
                                   std::vector<float>& v) {
  const size_t total = model_.layout().totalSize();
  if (options_.zeroStage == 0) {
    m.assign(optimizer.firstMoment().begin(), optimizer.firstMoment().end());
    v.assign(optimizer.secondMoment().begin(), optimizer.secondMoment().end());
    return Status::ok();
  }
  m.assign(padded_, 0.0f);
  v.assign(padded_, 0.0f);
  for (size_t index = 0; index < segments_.size(); ++index) {
    const ShardPiece& piece = pieces_[index];
    const size_t begin = segments_[index].begin;
    CC_TRY(ccCall(ccAllGather(optimizer.firstMoment().data() + piece.stateOffset, m.data() + begin,
                              piece.count, ccFloat32, paramComm_, nullptr),
                  paramComm_, "dp: all-gather of Adam's m"));
    CC_TRY(ccCall(ccAllGather(optimizer.secondMoment().data() + piece.stateOffset, v.data() + begin,
                              piece.count, ccFloat32, paramComm_, nullptr),
                  paramComm_, "dp: all-gather of Adam's v"));
  }
  m.resize(total);
  v.resize(total);
  return Status::ok();
}

void DataParallel::shardParameters() {
  if (options_.zeroStage != 3) return;
  const float* p = model_.paddedParameters().data();
  for (const ShardPiece& piece : pieces_) {
    std::memcpy(parameterShard_.data() + piece.stateOffset, p + piece.begin,
                piece.count * sizeof(float));
  }
  model_.releaseParameters(0, padded_);
}

std::vector<float> DataParallel::shardOf(std::span<const float> full) const {
  if (options_.zeroStage == 0) return {full.begin(), full.end()};
  std::vector<float> shard(optimizerStateSize(), 0.0f);
  for (const ShardPiece& piece : pieces_) {
    for (size_t i = 0; i < piece.count && piece.begin + i < full.size(); ++i) {
      shard[piece.stateOffset + i] = full[piece.begin + i];
    }
  }
  return shard;
}

Status DataParallel::barrier() {
  return ccCall(ccBarrier(gradComm_, nullptr), gradComm_, "dp: barrier");
}

void DataParallel::beforeBlockForward(int layer) {
  if (layers_ && inMicroBatch_ && error_.isOk()) record(layers_->beforeBlockForward(layer));
}

void DataParallel::afterBlockForward(int layer) {
  if (layers_ && inMicroBatch_ && error_.isOk()) record(layers_->afterBlockForward(layer));
}

void DataParallel::beforeBlockBackward(int layer) {
  if (layers_ && inMicroBatch_ && error_.isOk()) record(layers_->beforeBlockBackward(layer));
}

void DataParallel::afterBlockBackward(int layer) {
  if (layers_ && inMicroBatch_ && error_.isOk()) record(layers_->afterBlockBackward(layer));
}

void DataParallel::gradientsFinalFrom(size_t offset) {
  if (!inMicroBatch_ || !communicates_ || !options_.overlap || !error_.isOk()) return;
  while (launched_ < segments_.size() && segments_[launched_].begin >= offset) {
    record(launch(launched_));
    ++launched_;
    if (!error_.isOk()) return;
  }
  releaseCompletedGradients(false);
  // Stages 2-3 promise that only a few full-size buckets exist at once: when the stream
  // falls behind backward by more than kMaxBucketsInFlight, backward waits for it.
  if (options_.zeroStage >= 2 && launched_ - released_ > kMaxBucketsInFlight) {
    record(ccCall(ccStreamSynchronize(gradStream_), gradComm_,
                  "dp: waiting for the gradient reductions"));
    if (error_.isOk()) releaseCompletedGradients(true);
  }
}

}  // namespace cc::parallel
