/*
 * ompi-pingpong: the Open MPI side of cc-bench's point-to-point comparison.
 *
 * cc-bench p2p measures cc's ccSend/ccRecv; quoting those numbers alone says little on
 * a shared machine whose speed moves from run to run, so cc-bench --peer mpi runs this
 * program in the same window and prints both side by side. It measures exactly what
 * cc-bench measures, with the same rules, so the columns compare like with like:
 *   - latency: half a ping-pong round trip (MPI_Send/MPI_Recv), each round trip timed
 *     on its own, median over the iterations;
 *   - bandwidth: rank 0 sends a window of 16 blocking MPI_Send back to back, rank 1
 *     answers with a 1-byte ack; window bytes / window time, median over the windows.
 * Big sizes run fewer iterations (at least 3) so a sweep stays short.
 *
 *   mpirun -np 2 ompi-pingpong -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP
 *
 * Rank 0 prints "# ompi-pingpong", then one "size,lat_us,bw_GBps" line per size
 * (GB = 1e9 bytes). Sizes take the suffixes K, M, G (powers of 1024).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kWindow = 16, kTag = 7 };
static const size_t kBytesPerMeasurement = (size_t)1 << 28;

typedef struct {
  size_t minBytes;
  size_t maxBytes;
  size_t factor;
  int iterations;
  int warmup;
} Options;

static int parseSize(const char* text, size_t* out) {
  char* end = NULL;
  unsigned long long value = strtoull(text, &end, 10);
  if (end == text) return 0;
  switch (*end) {
    case 'k':
    case 'K':
      value <<= 10;
      ++end;
      break;
    case 'm':
    case 'M':
      value <<= 20;
      ++end;
      break;
    case 'g':
    case 'G':
      value <<= 30;
      ++end;
      break;
    default:
      break;
  }
  if (*end != '\0') return 0;
  *out = (size_t)value;
  return 1;
}

static int parseOptions(int argc, char** argv, Options* options) {
  options->minBytes = 8;
  options->maxBytes = (size_t)256 << 20;
  options->factor = 4;
  options->iterations = 50;
  options->warmup = 5;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (i + 1 >= argc) return 0;
    const char* value = argv[++i];
    size_t number = 0;
    if (!parseSize(value, &number)) return 0;
    if (strcmp(flag, "-b") == 0)
      options->minBytes = number;
    else if (strcmp(flag, "-e") == 0)
      options->maxBytes = number;
    else if (strcmp(flag, "-f") == 0)
      options->factor = number;
    else if (strcmp(flag, "-n") == 0)
      options->iterations = (int)number;
    else if (strcmp(flag, "-w") == 0)
      options->warmup = (int)number;
    else
      return 0;
  }
  return options->minBytes >= 1 && options->maxBytes >= options->minBytes && options->factor >= 2 &&
         options->iterations >= 1;
}

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a;
  double y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* samples, int count) {
  qsort(samples, (size_t)count, sizeof(double), compareDoubles);
  return count % 2 ? samples[count / 2] : 0.5 * (samples[count / 2 - 1] + samples[count / 2]);
}

/* At most ITERS, at least 3, and about kBytesPerMeasurement bytes in all. */
static int iterationsFor(const Options* options, size_t bytesPerIteration) {
  size_t budget = kBytesPerMeasurement / bytesPerIteration;
  int iterations = budget < (size_t)options->iterations ? (int)budget : options->iterations;
  return iterations < 3 ? 3 : iterations;
}

/* min(WARMUP, iterations / 4), as in cc-bench's sweep.cc. */
static int warmupFor(const Options* options, int iterations) {
  int cap = iterations / 4;
  return options->warmup < cap ? options->warmup : cap;
}

/* Median one-way latency in microseconds (rank 0's value; rank 1 returns 0). */
static double measureLatency(int rank, char* sendBuffer, char* recvBuffer, size_t bytes,
                             const Options* options, double* samples) {
  int iterations = iterationsFor(options, 2 * bytes);
  int warmup = warmupFor(options, iterations);
  int count = (int)bytes;
  for (int i = 0; i < warmup + iterations; ++i) {
    double start = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(sendBuffer, count, MPI_BYTE, 1, kTag, MPI_COMM_WORLD);
      MPI_Recv(recvBuffer, count, MPI_BYTE, 1, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(recvBuffer, count, MPI_BYTE, 0, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(recvBuffer, count, MPI_BYTE, 0, kTag, MPI_COMM_WORLD);
    }
    if (i >= warmup) samples[i - warmup] = (MPI_Wtime() - start) * 1e6 / 2;
  }
  return rank == 0 ? median(samples, iterations) : 0;
}

/* Median streaming bandwidth in GB/s (rank 0's value; rank 1 returns 0). */
static double measureBandwidth(int rank, char* sendBuffer, char* recvBuffer, size_t bytes,
                               const Options* options, double* samples) {
  int iterations = iterationsFor(options, kWindow * bytes);
  int warmup = warmupFor(options, iterations);
  int count = (int)bytes;
  char ack = 0;
  for (int i = 0; i < warmup + iterations; ++i) {
    double start = MPI_Wtime();
    if (rank == 0) {
      for (int m = 0; m < kWindow; ++m)
        MPI_Send(sendBuffer, count, MPI_BYTE, 1, kTag, MPI_COMM_WORLD);
      MPI_Recv(&ack, 1, MPI_BYTE, 1, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      for (int m = 0; m < kWindow; ++m) {
        MPI_Recv(recvBuffer, count, MPI_BYTE, 0, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      MPI_Send(&ack, 1, MPI_BYTE, 0, kTag, MPI_COMM_WORLD);
    }
    if (i >= warmup) samples[i - warmup] = (double)(kWindow * bytes) / (MPI_Wtime() - start) / 1e9;
  }
  return rank == 0 ? median(samples, iterations) : 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  Options options;
  if (!parseOptions(argc, argv, &options) || options.maxBytes > (size_t)INT32_MAX) {
    if (rank == 0) {
      fprintf(
          stderr,
          "usage: mpirun -np 2 ompi-pingpong [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
          "       (sizes take K, M, G; MAX below 2 GiB)\n");
    }
    MPI_Finalize();
    return 2;
  }
  if (nranks < 2) {
    if (rank == 0) fprintf(stderr, "ompi-pingpong: needs 2 ranks (mpirun -np 2)\n");
    MPI_Finalize();
    return 2;
  }

  char* sendBuffer = malloc(options.maxBytes);
  char* recvBuffer = malloc(options.maxBytes);
  double* samples =
      malloc(sizeof(double) * (size_t)(options.iterations > 3 ? options.iterations : 3));
  if (sendBuffer == NULL || recvBuffer == NULL || samples == NULL) {
    fprintf(stderr, "ompi-pingpong: rank %d: out of memory for %zu-byte buffers\n", rank,
            options.maxBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Touch every page now so that no page fault lands inside a timed region. */
  memset(sendBuffer, 1, options.maxBytes);
  memset(recvBuffer, 0, options.maxBytes);

  if (rank == 0) printf("# ompi-pingpong\n");
  /* MIN, MIN*FACTOR, ... and MAX itself when the series steps over it (as cc-bench does). */
  for (size_t bytes = options.minBytes;;) {
    double latency = 0;
    double bandwidth = 0;
    if (rank <= 1) {
      latency = measureLatency(rank, sendBuffer, recvBuffer, bytes, &options, samples);
      bandwidth = measureBandwidth(rank, sendBuffer, recvBuffer, bytes, &options, samples);
    }
    if (rank == 0) {
      printf("%zu,%.3f,%.4f\n", bytes, latency, bandwidth);
      fflush(stdout);
    }
    if (bytes == options.maxBytes) break;
    bytes = bytes > options.maxBytes / options.factor ? options.maxBytes : bytes * options.factor;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(samples);
  free(sendBuffer);
  free(recvBuffer);
  MPI_Finalize();
  return 0;
}
