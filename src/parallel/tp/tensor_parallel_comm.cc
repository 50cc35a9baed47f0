#include "parallel/tp/tensor_parallel_comm.h"

#include <memory>
#include <string>
#include <type_traits>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {
namespace {

template <typename T>
constexpr ccDataType_t typeOf() {
  return std::is_same_v<T, float> ? ccFloat32 : ccFloat64;
}

}  // namespace

Result<std::unique_ptr<TensorParallelComm>> TensorParallelComm::create(ccComm_t comm) {
  std::unique_ptr<TensorParallelComm> group(new TensorParallelComm(comm));
  CC_TRY(ccCall(ccCommCount(comm, &group->size_), comm, "tp: ccCommCount"));
  CC_TRY(ccCall(ccCommUserRank(comm, &group->rank_), comm, "tp: ccCommUserRank"));
  return group;
}

template <typename T>
void TensorParallelComm::reduce(std::span<T> values, ccRedOp_t op, const char* what) {
  if (!error_.isOk()) return;
  error_ = ccCall(
      ccAllReduce(values.data(), values.data(), values.size(), typeOf<T>(), op, comm_, nullptr),
      comm_, std::string("tp: ") + what);
}

template <typename T>
void TensorParallelComm::gather(std::span<const T> local, std::span<T> whole) {
  if (!error_.isOk()) return;
  error_ =
      ccCall(ccAllGather(local.data(), whole.data(), local.size(), typeOf<T>(), comm_, nullptr),
             comm_, "tp: all-gather along the sequence");
}

template <typename T>
void TensorParallelComm::reduceScatter(std::span<T> partial) {
  if (!error_.isOk()) return;
  const size_t chunk = partial.size() / static_cast<size_t>(size_);
  error_ =
      ccCall(ccReduceScatter(partial.data(), partial.data() + static_cast<size_t>(rank_) * chunk,
                             chunk, typeOf<T>(), ccSum, comm_, nullptr),
             comm_, "tp: reduce-scatter along the sequence");
}

namespace {
constexpr const char* kCopyBackward = "all-reduce of an input gradient (f backward)";
constexpr const char* kReduceForward = "all-reduce of partial outputs (g forward)";
}  // namespace

void TensorParallelComm::copyToRegionBackward(std::span<float> g) {
  reduce(g, ccSum, kCopyBackward);
}
void TensorParallelComm::copyToRegionBackward(std::span<double> g) {
  reduce(g, ccSum, kCopyBackward);
}
void TensorParallelComm::reduceFromRegionForward(std::span<float> p) {
  reduce(p, ccSum, kReduceForward);
}
void TensorParallelComm::reduceFromRegionForward(std::span<double> p) {
  reduce(p, ccSum, kReduceForward);
}
void TensorParallelComm::gatherSequence(std::span<const float> l, std::span<float> w) {
  gather(l, w);
}
void TensorParallelComm::gatherSequence(std::span<const double> l, std::span<double> w) {
  gather(l, w);
}
void TensorParallelComm::reduceScatterSequence(std::span<float> p) { reduceScatter(p); }
void TensorParallelComm::reduceScatterSequence(std::span<double> p) { reduceScatter(p); }
void TensorParallelComm::allReduceMax(std::span<float> v) {
  reduce(v, ccMax, "all-reduce of row maxima");
}
void TensorParallelComm::allReduceMax(std::span<double> v) {
  reduce(v, ccMax, "all-reduce of row maxima");
}
void TensorParallelComm::allReduceSum(std::span<float> v) {
  reduce(v, ccSum, "all-reduce of row sums");
}
void TensorParallelComm::allReduceSum(std::span<double> v) {
  reduce(v, ccSum, "all-reduce of row sums");
}

}  // namespace cc::parallel
