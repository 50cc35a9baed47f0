#include "parallel/ep/expert_parallel_comm.h"

#include <algorithm>
#include <type_traits>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {

Result<std::unique_ptr<ExpertParallelComm>> ExpertParallelComm::create(ccComm_t comm) {
  std::unique_ptr<ExpertParallelComm> group(new ExpertParallelComm(comm));
  CC_TRY(ccCall(ccCommCount(comm, &group->size_), comm, "ep: ccCommCount"));
  CC_TRY(ccCall(ccCommUserRank(comm, &group->rank_), comm, "ep: ccCommUserRank"));
  return group;
}

void ExpertParallelComm::exchangeCounts(std::span<const int64_t> send, std::span<int64_t> receive) {
  const size_t count = send.size() / static_cast<size_t>(size_);
  if (error_.isOk() &&
      (send.size() != receive.size() || count * static_cast<size_t>(size_) != send.size())) {
    error_ = invalidArgument("ep: exchangeCounts of " + std::to_string(send.size()) + " into " +
                             std::to_string(receive.size()) + " values over " +
                             std::to_string(size_) + " ranks");
  }
  if (error_.isOk()) {
    error_ = ccCall(ccAllToAll(send.data(), receive.data(), count, ccInt64, comm_, nullptr), comm_,
                    "ep: all-to-all of the rows per expert");
  }
  if (!error_.isOk()) std::fill(receive.begin(), receive.end(), 0);
}

template <typename T>
void ExpertParallelComm::exchange(std::span<const T> send, std::span<const size_t> sendCounts,
                                  std::span<T> receive, std::span<const size_t> receiveCounts) {
  const size_t ranks = static_cast<size_t>(size_);
  sendOffsets_.assign(ranks, 0);
  receiveOffsets_.assign(ranks, 0);
  for (size_t j = 1; j < ranks; ++j) {
    sendOffsets_[j] = sendOffsets_[j - 1] + sendCounts[j - 1];
    receiveOffsets_[j] = receiveOffsets_[j - 1] + receiveCounts[j - 1];
  }
  if (error_.isOk()) {
    constexpr ccDataType_t type = std::is_same_v<T, float> ? ccFloat32 : ccFloat64;
    error_ = ccCall(ccAllToAllv(send.data(), sendCounts.data(), sendOffsets_.data(), receive.data(),
                                receiveCounts.data(), receiveOffsets_.data(), type, comm_, nullptr),
                    comm_, "ep: all-to-allv of token rows");
  }
  if (!error_.isOk()) std::fill(receive.begin(), receive.end(), T(0));
}

void ExpertParallelComm::exchangeRows(std::span<const float> send,
                                      std::span<const size_t> sendCounts, std::span<float> receive,
                                      std::span<const size_t> receiveCounts) {
  exchange(send, sendCounts, receive, receiveCounts);
}

void ExpertParallelComm::exchangeRows(std::span<const double> send,
                                      std::span<const size_t> sendCounts, std::span<double> receive,
                                      std::span<const size_t> receiveCounts) {
  exchange(send, sendCounts, receive, receiveCounts);
}

}  // namespace cc::parallel
