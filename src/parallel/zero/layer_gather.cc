#include "parallel/zero/layer_gather.h"

#include <algorithm>
#include <cstring>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {

LayerGather::LayerGather(Gpt<float>& model, std::vector<Segment> units,
                         std::vector<ShardPiece> pieces, ccComm_t comm, ccStream_t stream)
    : model_(model),
      units_(std::move(units)),
      pieces_(std::move(pieces)),
      states_(units_.size(), State::kReleased),
      comm_(comm),
      stream_(stream) {}

Status LayerGather::gather(size_t unit) {
  if (unit > lastUnit() || states_[unit] != State::kReleased) return Status::ok();
  const Segment& segment = units_[unit];
  const ShardPiece& piece = pieces_[unit];
  float* full = model_.paddedParameters().data();
  // In place: this rank's piece goes to its spot in the full buffer, then the gather
  // fills in everyone else's around it.
  std::memcpy(full + piece.begin, shard_.data() + piece.stateOffset, piece.count * sizeof(float));
  states_[unit] = State::kInFlight;
  return ccCall(
      ccAllGather(full + piece.begin, full + segment.begin, piece.count, ccFloat32, comm_, stream_),
      comm_, "zero-3: all-gather of layer unit " + std::to_string(unit));
}

Status LayerGather::waitInFlight() {
  if (std::none_of(states_.begin(), states_.end(), [](State s) { return s == State::kInFlight; })) {
    return Status::ok();
  }
  CC_TRY(ccCall(ccStreamSynchronize(stream_), comm_, "zero-3: waiting for parameter all-gathers"));
  for (State& state : states_) {
    if (state == State::kInFlight) state = State::kReady;
  }
  return Status::ok();
}

Status LayerGather::ensure(size_t unit) {
  if (unit > lastUnit()) return Status::ok();
  CC_TRY(gather(unit));
  if (states_[unit] == State::kInFlight) CC_TRY(waitInFlight());
  return Status::ok();
}

Status LayerGather::release(size_t unit) {
  if (unit > lastUnit() || states_[unit] == State::kReleased) return Status::ok();
  if (states_[unit] == State::kInFlight) CC_TRY(waitInFlight());
  model_.releaseParameters(units_[unit].begin, units_[unit].end);
  states_[unit] = State::kReleased;
  return Status::ok();
}

Status LayerGather::beginMicroBatch() {
  // Embeddings (unit 0, and unit 1 for wpe's last < N elements), ln_f, then block 0.
  for (size_t unit : {size_t{0}, size_t{1}, lastUnit(), size_t{2}}) CC_TRY(gather(unit));
  return waitInFlight();
}

Status LayerGather::beforeBlockForward(int layer) {
  const size_t own = static_cast<size_t>(layer) + 1;
  CC_TRY(ensure(own));
  CC_TRY(ensure(own + 1));
  return gather(own + 2);  // the next block's, while this one computes
}

Status LayerGather::afterBlockForward(int layer) {
  const size_t own = static_cast<size_t>(layer) + 1;
  // The last block is the first one backward needs: keep it.
  if (own + 1 >= lastUnit()) return Status::ok();
  return release(own);
}

Status LayerGather::beforeBlockBackward(int layer) {
  const size_t own = static_cast<size_t>(layer) + 1;
  CC_TRY(ensure(own));
  CC_TRY(ensure(own + 1));
  return own >= 2 ? gather(own - 1) : Status::ok();  // the block below, while this one computes
}

Status LayerGather::afterBlockBackward(int layer) {
  // Unit l+2 was only needed for block l's tail and block l+1; ln_f's unit stays.
  const size_t above = static_cast<size_t>(layer) + 2;
  if (above >= lastUnit()) return Status::ok();
  return release(above);
}

Status LayerGather::releaseAll() {
  CC_TRY(waitInFlight());
  for (size_t unit = 0; unit < units_.size(); ++unit) CC_TRY(release(unit));
  return Status::ok();
}

Status LayerGather::gatherAll() {
  for (size_t unit = 0; unit < units_.size(); ++unit) CC_TRY(gather(unit));
  return waitInFlight();
}

size_t LayerGather::peakResidentElements() const {
  // Embeddings, ln_f, and at most three blocks (this one, the one after, the prefetch).
  size_t largestBlock = 0;
  for (size_t unit = 1; unit < lastUnit(); ++unit)
    largestBlock = std::max(largestBlock, units_[unit].size());
  return units_[0].size() + units_[lastUnit()].size() + 3 * largestBlock;
}

}  // namespace cc::parallel
