// Built only with CUDA. Counts devices and skips where there is no GPU (CI has none).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "transport/cuda/device.h"

TEST(CudaDevice, CountMatchesTheRuntimeOrSkips) {
  int count = cc::transport::cuda::deviceCount();
  if (count == 0) GTEST_SKIP() << "no CUDA device on this machine";
  int runtimeCount = 0;
  ASSERT_EQ(cudaGetDeviceCount(&runtimeCount), cudaSuccess);
  EXPECT_EQ(count, runtimeCount);
}
