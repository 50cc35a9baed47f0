// OpenBLAS's thread count. One per rank by default, so that ranks on one host do not
// oversubscribe the cores; cc-train's --threads raises it.
#pragma once

namespace cc::parallel {

void setBlasThreads(int threads);
int blasThreads();
// The BLAS library and its build as OpenBLAS reports it (for benchmark notes).
const char* blasDescription();

}  // namespace cc::parallel
