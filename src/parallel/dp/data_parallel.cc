#include "parallel/dp/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {
namespace {

// Strategies that release gradients: full-size buckets allowed to wait for their reduction.
constexpr size_t kMaxBucketsInFlight = 2;

}  // namespace

Result<std::unique_ptr<DataParallel>> DataParallel::create(
    ccComm_t dpComm, Gpt<float>& model, const DataParallelOptions& options,
    std::unique_ptr<ShardingStrategy> strategy, std::unique_ptr<BucketReducer> reducer) {
  if (strategy == nullptr) return invalidArgument("dp: no sharding strategy");
  if (reducer == nullptr) reducer = std::make_unique<AveragingReducer>();
  std::unique_ptr<DataParallel> dp(
      new DataParallel(model, options, std::move(strategy), std::move(reducer)));
  ShardingContext& c = dp->context_;
  c.model = &model;
  c.gradComm = dpComm;
  c.reducer = dp->reducer_.get();
  CC_TRY(ccCall(ccCommCount(dpComm, &c.world), dpComm, "dp: ccCommCount"));
  CC_TRY(ccCall(ccCommUserRank(dpComm, &c.rank), dpComm, "dp: ccCommUserRank"));
  const ParameterLayout& layout = model.layout();
  c.padded = model.paddedParameters().size();
  if (c.padded != paddedBufferSize(layout.totalSize(), c.world)) {
    return invalidArgument("dp: the model's buffer holds " + std::to_string(c.padded) +
                           " elements, expected " +
                           std::to_string(paddedBufferSize(layout.totalSize(), c.world)) +
                           " (the layout padded to the DP world size)");
  }
  CC_TRY(ccCall(ccStreamCreate(&c.gradStream), dpComm, "dp: ccStreamCreate"));
  if (dp->strategy_->ownParameterChannel()) {
    // Parameter gathers run during forward and backward, beside the gradient buckets: a
    // communicator and stream of their own. Otherwise parameters move after the gradients
    // have arrived and share the gradients' (a communicator costs its shared buffers).
    CC_TRY(ccCall(ccCommSplit(dpComm, 0, c.rank, &c.paramComm), dpComm,
                  "dp: split the parameter communicator"));
    CC_TRY(ccCall(ccStreamCreate(&c.paramStream), dpComm, "dp: ccStreamCreate"));
  } else {
    c.paramComm = dpComm;
    c.paramStream = c.gradStream;
  }
  const size_t bucketElements = std::max<size_t>(1, options.bucketBytes / sizeof(float));
  c.segments = dp->strategy_->segments(model, c.padded, c.world, bucketElements);
  c.pieces = shardPieces(c.segments, c.rank, c.world);
  CC_TRY(dp->strategy_->attach(c));
  if (options.registerBuffers && model.shareable()) CC_TRY(dp->registerBuffers());
  model.setObserver(dp.get());
  return dp;
}

Status DataParallel::registerBuffers() {
  auto add = [this](ccComm_t comm, std::span<float> buffer) -> Status {
    void* handle = nullptr;
    CC_TRY(ccCall(ccCommRegister(comm, buffer.data(), buffer.size_bytes(), &handle), comm,
                  "dp: ccCommRegister"));
    registrations_.emplace_back(comm, handle);
    return Status::ok();
  };
  // Gradient buckets are reduced in place; parameters are gathered in place (ZeRO), and
  // averaged in place by local SGD, on the gradients' communicator or their own.
  CC_TRY(add(context_.gradComm, model_.paddedGradients()));
  CC_TRY(add(context_.gradComm, model_.paddedParameters()));
  if (ownParameterChannel()) CC_TRY(add(context_.paramComm, model_.paddedParameters()));
  return Status::ok();
}

DataParallel::DataParallel(Gpt<float>& model, const DataParallelOptions& options,
                           std::unique_ptr<ShardingStrategy> strategy,
                           std::unique_ptr<BucketReducer> reducer)
    : model_(model),
      options_(options),
      strategy_(std::move(strategy)),
      reducer_(std::move(reducer)) {}

DataParallel::~DataParallel() {
  model_.setObserver(nullptr);
  const bool ownChannel = context_.paramComm != nullptr && ownParameterChannel();
  // After a failure a peer may be gone: abort rather than wait on anything.
  if (!error_.isOk() && ownChannel) (void)ccCommAbort(context_.paramComm);
  if (context_.gradStream != nullptr) (void)ccStreamDestroy(context_.gradStream);
  // Before the model frees the memory (and before the parameter communicator goes).
  for (const auto& [comm, handle] : registrations_) (void)ccCommDeregister(comm, handle);
  if (ownChannel) {
    if (context_.paramStream != nullptr) (void)ccStreamDestroy(context_.paramStream);
    if (error_.isOk()) (void)ccCommDestroy(context_.paramComm);
  }
}

Result<DataParallel::Traffic> DataParallel::traffic() const {
  Traffic total;
  std::vector<ccComm_t> comms{context_.gradComm};
  if (ownParameterChannel()) comms.push_back(context_.paramComm);
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

std::string DataParallel::describe() const {
  char text[320];
  size_t largestSegment = 0;
  for (const Segment& segment : context_.segments) {
    largestSegment = std::max(largestSegment, segment.size());
  }
  const double largest = static_cast<double>(largestSegment) * 4.0 / (1 << 20);
  std::snprintf(text, sizeof(text),
                "dp %d, zero %d, %zu %s (largest %.2f MiB), overlap %s, %zu of %zu elements per "
                "shard, reducer %s",
                context_.world, strategy_->stage(), context_.segments.size(),
                strategy_->segmentKind(), largest, options_.overlap ? "on" : "off",
                optimizerStateSize(), context_.padded, reducer_->describe().c_str());
  return text;
}

void DataParallel::record(const Status& status) {
  if (error_.isOk() && !status.isOk()) error_ = status;
}

void DataParallel::releaseCompletedGradients(bool all) {
  if (!strategy_->releasesGradients() || released_ == launched_) return;
  if (!all) {
    // Whatever has completed by now: the stream reports all-or-nothing, which is enough
    // on a stream that keeps up with backward.
    const ccResult_t query = ccStreamQuery(context_.gradStream);
    if (query == ccInProgress) return;
    if (query != ccSuccess) {
      record(ccCall(query, context_.gradComm, "dp: gradient stream"));
      return;
    }
  }
  for (; released_ < launched_; ++released_) {
    model_.releaseGradients(context_.segments[released_].begin, context_.segments[released_].end);
  }
}

Status DataParallel::beginStep() {
  CC_TRY(error_);
  launched_ = 0;
  released_ = 0;
  strategy_->clearGradients();
  return Status::ok();
}

Status DataParallel::beginMicroBatch(bool communicates) {
  CC_TRY(error_);
  communicates_ = communicates;
  inMicroBatch_ = true;
  record(strategy_->beginMicroBatch());
  return error_;
}

Status DataParallel::endMicroBatch() {
  inMicroBatch_ = false;
  record(strategy_->endMicroBatch());
  if (communicates_) {
    // Without overlap this is where every segment starts; with it, all have (backward
    // ends at offset 0), and this only covers a backward that was cut short.
    for (; error_.isOk() && launched_ < context_.segments.size(); ++launched_) {
      record(strategy_->launchReduction(launched_));
    }
  }
  return error_;
}

Result<double> DataParallel::finishGradients() {
  CC_TRY(error_);
  const auto start = std::chrono::steady_clock::now();
  CC_TRY(ccCall(ccStreamSynchronize(context_.gradStream), context_.gradComm,
                "dp: waiting for the gradient reductions"));
  waitSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  releaseCompletedGradients(true);
  return strategy_->gradientNorm();
}

Status DataParallel::update(AdamW& optimizer, float lr, float gradientScale) {
  CC_TRY(error_);
  return strategy_->update(optimizer, lr, gradientScale);
}

Result<double> DataParallel::average(double value) {
  CC_TRY(ccCall(ccAllReduce(&value, &value, 1, ccFloat64, ccAvg, context_.gradComm, nullptr),
                context_.gradComm, "dp: all-reduce of the loss"));
  return value;
}

Status DataParallel::barrier() {
  return ccCall(ccBarrier(context_.gradComm, nullptr), context_.gradComm, "dp: barrier");
}

void DataParallel::beforeBlockForward(int layer) {
  if (inMicroBatch_ && error_.isOk()) record(strategy_->beforeBlockForward(layer));
}

void DataParallel::afterBlockForward(int layer) {
  if (inMicroBatch_ && error_.isOk()) record(strategy_->afterBlockForward(layer));
}

void DataParallel::beforeBlockBackward(int layer) {
  if (inMicroBatch_ && error_.isOk()) record(strategy_->beforeBlockBackward(layer));
}

void DataParallel::afterBlockBackward(int layer) {
  if (inMicroBatch_ && error_.isOk()) record(strategy_->afterBlockBackward(layer));
}

void DataParallel::gradientsFinalFrom(size_t offset) {
  if (!inMicroBatch_ || !communicates_ || !options_.overlap || !error_.isOk()) return;
  while (launched_ < context_.segments.size() && context_.segments[launched_].begin >= offset) {
    record(strategy_->launchReduction(launched_));
    ++launched_;
    if (!error_.isOk()) return;
  }
  releaseCompletedGradients(false);
  // A strategy that releases gradients promises that only a few full-size buckets exist at
  // once: when the stream falls behind backward by more than kMaxBucketsInFlight, backward
  // waits for it.
  if (strategy_->releasesGradients() && launched_ - released_ > kMaxBucketsInFlight) {
    record(ccCall(ccStreamSynchronize(context_.gradStream), context_.gradComm,
                  "dp: waiting for the gradient reductions"));
    if (error_.isOk()) releaseCompletedGradients(true);
  }
}

}  // namespace cc::parallel
