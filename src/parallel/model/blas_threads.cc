#include "parallel/model/blas_threads.h"

#include <cblas.h>

namespace cc::parallel {

void setBlasThreads(int threads) { openblas_set_num_threads(threads); }
int blasThreads() { return openblas_get_num_threads(); }
const char* blasDescription() { return openblas_get_config(); }

}  // namespace cc::parallel
