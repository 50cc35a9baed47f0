#include "parallel/tp/tensor_parallel_comm.h"

#include <memory>
#include <string>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {

Result<std::unique_ptr<TensorParallelComm>> TensorParallelComm::create(ccComm_t comm) {
  std::unique_ptr<TensorParallelComm> group(new TensorParallelComm(comm));
  CC_TRY(ccCall(ccCommCount(comm, &group->size_), comm, "tp: ccCommCount"));
  CC_TRY(ccCall(ccCommUserRank(comm, &group->rank_), comm, "tp: ccCommUserRank"));
  return group;
}

void TensorParallelComm::allReduce(void* values, size_t count, ccDataType_t type, ccRedOp_t op,
                                   const char* what) {
  if (!error_.isOk()) return;
  error_ = ccCall(ccAllReduce(values, values, count, type, op, comm_, nullptr), comm_,
                  std::string("tp: ") + what);
}

void TensorParallelComm::copyToRegionBackward(std::span<float> gradient) {
  allReduce(gradient.data(), gradient.size(), ccFloat32, ccSum,
            "all-reduce of an input gradient (f backward)");
}

void TensorParallelComm::copyToRegionBackward(std::span<double> gradient) {
  allReduce(gradient.data(), gradient.size(), ccFloat64, ccSum,
            "all-reduce of an input gradient (f backward)");
}

void TensorParallelComm::reduceFromRegionForward(std::span<float> partial) {
  allReduce(partial.data(), partial.size(), ccFloat32, ccSum,
            "all-reduce of partial outputs (g forward)");
}

void TensorParallelComm::reduceFromRegionForward(std::span<double> partial) {
  allReduce(partial.data(), partial.size(), ccFloat64, ccSum,
            "all-reduce of partial outputs (g forward)");
}

void TensorParallelComm::allReduceMax(std::span<float> values) {
  allReduce(values.data(), values.size(), ccFloat32, ccMax, "all-reduce of the loss's row max");
}

void TensorParallelComm::allReduceMax(std::span<double> values) {
  allReduce(values.data(), values.size(), ccFloat64, ccMax, "all-reduce of the loss's row max");
}

void TensorParallelComm::allReduceSum(std::span<float> values) {
  allReduce(values.data(), values.size(), ccFloat32, ccSum, "all-reduce of the loss's row sums");
}

void TensorParallelComm::allReduceSum(std::span<double> values) {
  allReduce(values.data(), values.size(), ccFloat64, ccSum, "all-reduce of the loss's row sums");
}

}  // namespace cc::parallel
