#include "parallel/tp/tensor_parallel_comm.h"

#include <memory>
#include <string>
#include <type_traits>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {

Result<std::unique_ptr<TensorParallelComm>> TensorParallelComm::create(ccComm_t comm) {
  std::unique_ptr<TensorParallelComm> group(new TensorParallelComm(comm));
  CC_TRY(ccCall(ccCommCount(comm, &group->size_), comm, "tp: ccCommCount"));
  CC_TRY(ccCall(ccCommUserRank(comm, &group->rank_), comm, "tp: ccCommUserRank"));
  return group;
}

template <typename T>
void TensorParallelComm::reduce(std::span<T> values, ccRedOp_t op, const char* what) {
  if (!error_.isOk()) return;
  const ccDataType_t type = std::is_same_v<T, float> ? ccFloat32 : ccFloat64;
  error_ =
      ccCall(ccAllReduce(values.data(), values.data(), values.size(), type, op, comm_, nullptr),
             comm_, std::string("tp: ") + what);
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
