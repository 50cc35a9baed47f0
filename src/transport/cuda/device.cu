#include <cuda_runtime.h>

#include "transport/cuda/device.h"

namespace cc::transport::cuda {

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

}  // namespace cc::transport::cuda
