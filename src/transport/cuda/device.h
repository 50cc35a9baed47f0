// CUDA device discovery, built only with CUDA (CC_WITH_CUDA). The CUDA IPC transport of
// a later issue builds on this; for now cc only reports what it sees.
#pragma once

namespace cc::transport::cuda {

// Number of usable CUDA devices; 0 when there is no GPU or no driver (never an error).
int deviceCount();

}  // namespace cc::transport::cuda
