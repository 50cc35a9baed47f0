#include "parallel/ep/expert_gradients.h"

#include <algorithm>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {

ExpertGradientReducer::ExpertGradientReducer(std::vector<std::pair<size_t, size_t>> experts,
                                             ccComm_t expertDp, int ep)
    : experts_(std::move(experts)), expertDp_(expertDp), ep_(ep) {
  if (expertDp_ != nullptr) (void)ccCommCount(expertDp_, &expertDpSize_);
}

Status ExpertGradientReducer::allReduce(const Bucket& bucket, ccComm_t comm, ccStream_t stream) {
  const size_t begin = bucket.begin;
  const size_t end = bucket.begin + bucket.gradients.size();
  size_t at = begin;
  // One run [from, to) of the bucket, dense or expert.
  auto reduceRun = [&](size_t from, size_t to, bool expert) -> Status {
    if (from >= to) return Status::ok();
    std::span<float> run = bucket.gradients.subspan(from - begin, to - from);
    if (!expert) {
      Bucket dense;
      dense.index = bucket.index;
      dense.begin = from;
      dense.gradients = run;
      return dense_.allReduce(dense, comm, stream);
    }
    const float scale = 1.0f / static_cast<float>(ep_);
    for (float& value : run) value *= scale;
    if (expertDpSize_ == 1) return Status::ok();
    return ccCall(
        ccAllReduce(run.data(), run.data(), run.size(), ccFloat32, ccAvg, expertDp_, stream),
        expertDp_, "ep: average of expert gradients over the expert-data-parallel group");
  };
  for (const auto& [expertBegin, expertEnd] : experts_) {
    if (expertEnd <= at || expertBegin >= end) continue;
    const size_t from = std::max(expertBegin, at);
    const size_t to = std::min(expertEnd, end);
    CC_TRY(reduceRun(at, from, false));
    CC_TRY(reduceRun(from, to, true));
    at = to;
  }
  return reduceRun(at, end, false);
}

Status ExpertGradientReducer::reduceScatter(const Bucket&, std::span<float>, ccComm_t, ccStream_t) {
  return invalidArgument(
      "ep: expert parallelism with ZeRO is not built (a shard would cut across experts held "
      "by different ranks); use --zero 0 with --ep");
}

std::string ExpertGradientReducer::describe() const {
  return "float32 average; experts over their expert-data-parallel group of " +
         std::to_string(expertDpSize_);
}

}  // namespace cc::parallel
