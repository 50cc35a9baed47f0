/* The smallest real cc program, in C: every rank sends a buffer to its right neighbour
 * and receives one from its left, in one group, a few times over, and checks every
 * element. Run it under any launcher:
 *   mpirun -np 4 build/bin/cc-ring-exchange [COUNT]
 */
#include <cc/cc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    ccResult_t result_ = (call);                                                           \
    if (result_ != ccSuccess) {                                                            \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ccGetErrorString(result_), ccGetLastError(NULL)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 22; /* 16 MiB of floats */
  ccComm_t comm;
  CHECK(ccCommInitFromEnv(&comm));
  int rank, nranks;
  CHECK(ccCommUserRank(comm, &rank));
  CHECK(ccCommCount(comm, &nranks));
  int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;

  float* out = malloc(count * sizeof(float));
  float* in = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) out[i] = (float)(rank * 1000 + (int)(i % 1000));

  const int rounds = 10;
  CHECK(ccBarrier(comm, NULL));
  double start = seconds();
  for (int round = 0; round < rounds; ++round) {
    CHECK(ccGroupStart());
    CHECK(ccSend(out, count, ccFloat32, right, comm, NULL));
    CHECK(ccRecv(in, count, ccFloat32, left, comm, NULL));
    CHECK(ccGroupEnd());
  }
  double elapsed = seconds() - start;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += in[i] != (float)(left * 1000 + (int)(i % 1000));
  double gigabytes = (double)rounds * (double)count * sizeof(float) / 1e9;
  printf("rank %d of %d: received %zu floats from rank %d x %d rounds, %zu wrong, %.2f GB/s per rank\n", rank,
         nranks, count, left, rounds, wrong, gigabytes / elapsed);
  CHECK(ccBarrier(comm, NULL));
  CHECK(ccCommDestroy(comm));
  free(out);
  free(in);
  return wrong == 0 ? 0 : 1;
}
