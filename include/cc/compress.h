/* cc's gradient compression: an all-reduce (average) of a float32 buffer that sends far
 * fewer bytes than the buffer, for ranks joined by a slow network. A compressor belongs to
 * one communicator and one buffer shape (the buffer as a row of tensors, each rows x cols,
 * row-major, back to back) and owns its state across calls: the error-feedback residuals
 * (what a lossy kind did not send this call is added to the next one's input) and
 * PowerSGD's Q. Every rank creates its compressor with the same arguments and calls it in
 * the same order, as with any collective.
 *
 * Kinds:
 * - ccCompressFp16, ccCompressBf16: cast to 16 bits, all-reduce (cc's reductions accumulate
 *   in float32 at each step), cast back. 2x fewer bytes; no state.
 * - ccCompressOneBit: sign compression with error feedback on both sides, as DeepSpeed's
 *   compressed all-reduce: each rank adds its residual, splits the buffer into one part
 *   per rank and sends each part as packed signs (8 per byte) and one scale (the mean
 *   absolute value, the scale that minimises the squared error), all-to-all; each rank
 *   averages the parts it received, adds its own server residual, compresses that again
 *   and all-gathers it. About 32x fewer bytes.
 * - ccCompressPowerSgd: rank-r approximation (Vogels et al. 2019) of each matrix with error
 *   feedback: P = M Q, all-reduce P, orthonormalise P, Q = M^T P, all-reduce Q, M ~ P Q^T,
 *   Q kept for the next call (warm start; the first Q is seeded, the same on every rank).
 *   The P of every compressed matrix travel in one all-reduce, their Q and the
 *   uncompressed tensors in a second. A matrix is compressed when rows x cols >= 2 r (rows
 *   + cols) (torch's PowerSGD rule: at least half the bytes saved; the rate is
 *   configurable); the rest (vectors, small matrices) go uncompressed, as float32.
 *
 * Errors are ccInvalidArgument with a message naming the argument, as everywhere in cc. */
#ifndef CC_COMPRESS_H_
#define CC_COMPRESS_H_

#include <cc/cc.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ccCompressFp16 = 1,
  ccCompressBf16 = 2,
  ccCompressOneBit = 3,
  ccCompressPowerSgd = 4
} ccCompressKind_t;

typedef struct {
  ccCompressKind_t kind;
  int rank;      /* PowerSGD's rank r (>= 1); ignored by the other kinds */
  uint64_t seed; /* PowerSGD: the first Q's seed; the same on every rank */
  /* PowerSGD: a matrix is compressed when rows x cols >= rate x r x (rows + cols); 0 means
   * 2 (torch's default). A tiny rate compresses every matrix (a test at full rank). */
  double minCompressionRate;
} ccCompressConfig_t;

typedef struct ccCompressor* ccCompressor_t;

/* A compressor for buffers of `tensors` tensors, tensor i being rows[i] x cols[i] floats
 * (a vector is 1 x n). */
ccResult_t ccCompressorCreate(ccComm_t comm, const ccCompressConfig_t* config, size_t tensors,
                              const size_t* rows, const size_t* cols, ccCompressor_t* compressor);
/* buffer = the average over the ranks, compressed as the kind says (in place). On a stream
 * it is queued like a collective and runs there; with stream NULL it runs now. The buffer
 * must not be touched until the stream has run it. */
ccResult_t ccCompressedAllReduce(ccCompressor_t compressor, float* buffer, ccStream_t stream);
/* shard = this rank's part of the average of every rank's buffer: the buffer cut into as
 * many equal parts as there are ranks (their count must divide the buffer's elements),
 * part `rank` (ZeRO's gradient shard). fp16 and bf16 only, reduce-scattered in 16 bits; the
 * other kinds' error feedback needs the whole average on every rank and they refuse. Queued
 * on a stream like ccCompressedAllReduce. */
ccResult_t ccCompressedReduceScatter(ccCompressor_t compressor, const float* buffer, float* shard,
                                     ccStream_t stream);
/* Waits for nothing: destroy only once the calls queued on streams have run. */
ccResult_t ccCompressorDestroy(ccCompressor_t compressor);

#ifdef __cplusplus
}
#endif

#endif /* CC_COMPRESS_H_ */
