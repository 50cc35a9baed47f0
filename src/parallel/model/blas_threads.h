// The model's compute threads. OpenBLAS itself always runs one thread per call; with
// setBlasThreads(n > 1) a large GEMM is cut into n parts, one on the calling thread and the
// rest on a pool whose idle threads sleep. OpenBLAS's own pool spins (sched_yield) while it
// waits, for work and for its workers: with more threads than cores, which is what ranks
// beside compute threads are, the spinning threads take the cores the working ones need
// (two independent cc-train processes of 2 OpenBLAS threads each on 2 cores, no
// communication at all, ran at 0.73–0.93 of one thread each). One thread per rank by default, so
// that ranks on one host do not oversubscribe the cores; cc-train's --threads raises it.
#pragma once

#include <functional>

namespace cc::parallel {

void setBlasThreads(int threads);
int blasThreads();
// The CPUs this process may run on (its affinity mask; at least 1). More compute threads
// than these only take turns on them (a launcher that binds each rank to one core leaves
// it one), and cc-train asks for no more.
int cpusToRunOn();
// The BLAS library and its build as OpenBLAS reports it (for benchmark notes).
const char* blasDescription();

// Runs part(0) .. part(parts - 1) on the calling thread and the pool, each part once, in
// whatever order and on whichever thread claims it first, and returns true when all have
// run. Returns false at once, having run nothing, where the pool cannot take the job: at
// one thread, while another caller holds the pool, or when called from inside a part; the
// caller then does the work its own way (gemm makes one uncut call rather than run the
// parts one after the other). A part must not throw: a throw ends the process (it would
// leave the other threads on a job whose caller is gone).
bool runPartsAtOnce(int parts, const std::function<void(int)>& part);

}  // namespace cc::parallel
