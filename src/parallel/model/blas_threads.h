// The model's compute threads. OpenBLAS itself always runs one thread per call; with
// setBlasThreads(n > 1) a large GEMM is cut into n parts, one on the calling thread and the
// rest on a pool whose idle threads sleep. OpenBLAS's own pool spins (sched_yield) while it
// waits, for work and for its workers: with more threads than cores, which is what ranks
// beside compute threads are, the spinning threads take the cores the working ones need
// (two ranks of 2 threads on 2 cores ran at 0.73–0.93 of two ranks of 1 thread, with no
// communication at all). One thread per rank by default, so that ranks on one host do not
// oversubscribe the cores; cc-train's --threads raises it.
#pragma once

#include <functional>

namespace cc::parallel {

void setBlasThreads(int threads);
int blasThreads();
// The BLAS library and its build as OpenBLAS reports it (for benchmark notes).
const char* blasDescription();

// Runs part(0) .. part(parts - 1) on the calling thread and the pool, each part once, in
// whatever order and on whichever thread claims it first, and returns when all have run.
// Several threads may call it at once: a caller that finds the pool busy runs every part
// itself, in order.
void runParts(int parts, const std::function<void(int)>& part);

}  // namespace cc::parallel
