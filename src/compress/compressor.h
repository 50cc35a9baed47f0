// The compressed all-reduces behind include/cc/compress.h, and their building blocks (sign
// packing, 1-bit compression with error feedback, PowerSGD's products and
// orthonormalisation), which the tests check against sequential references.
//
// A Compressor runs one call on the calling thread (the C API queues it on a stream as a
// task): its local work, and cc's collectives on its communicator with no stream.
#pragma once

#include <cc/cc.h>
#include <cc/compress.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"

namespace cc::compress {

struct TensorShape {
  size_t rows = 1, cols = 1;
  size_t size() const { return rows * cols; }
};

class Compressor {
 public:
  virtual ~Compressor() = default;
  // buffer = the average over the communicator's ranks (elements() floats), compressed as
  // the kind says; the state moves on.
  virtual Status allReduce(float* buffer) = 0;
  // shard (elements() / ranks floats) = this rank's part of the average; the kinds without a
  // reduce-scatter refuse, saying why.
  virtual Status reduceScatter(const float* buffer, float* shard);
  size_t elements() const { return elements_; }
  int ranks() const { return ranks_; }

 protected:
  Compressor(ccComm_t comm, int rank, int ranks, std::vector<TensorShape> shapes);
  ccComm_t comm_;
  int rank_, ranks_;
  std::vector<TensorShape> shapes_;
  size_t elements_ = 0;
};

// Checks the arguments (the message names what is wrong) and makes the kind's compressor.
Result<std::unique_ptr<Compressor>> makeCompressor(ccComm_t comm, const ccCompressConfig_t& config,
                                                   std::vector<TensorShape> shapes);

// --- Building blocks ---

// bits[i / 8] bit i % 8 = values[i] >= 0 (zero counts as positive), for count values; the
// last byte's unused bits are 0.
void packSigns(std::span<const float> values, std::span<uint8_t> bits);
// out[i] = +scale or -scale by bit i.
void unpackSigns(std::span<const uint8_t> bits, float scale, std::span<float> out);
// 1-bit compression with error feedback: x = input + residual; scale = the mean of |x| (the
// scale s minimising |x - s sign(x)|^2); bits = sign(x); residual = x - s sign(x), so that
// what is sent (s sign(x)) plus the new residual is the input plus the old residual. Returns
// the scale.
float compressSigns(std::span<const float> input, std::span<float> residual,
                    std::span<uint8_t> bits);
// The columns of a row-major rows x cols matrix made orthonormal, in order (modified
// Gram-Schmidt; a column that vanishes is divided by its norm plus 1e-8, as torch's
// PowerSGD does, instead of by zero).
void orthonormalizeColumns(float* matrix, size_t rows, size_t cols);
// Row-major products: P = M Q (M rows x cols, Q cols x r), Q = M^T P, out = P Q^T.
void multiply(const float* m, const float* q, float* p, size_t rows, size_t cols, size_t r);
void multiplyTransposed(const float* m, const float* p, float* q, size_t rows, size_t cols,
                        size_t r);
void multiplyByTranspose(const float* p, const float* q, float* out, size_t rows, size_t cols,
                         size_t r);
// PowerSGD's rule: whether a rows x cols tensor is compressed at rank r.
bool powerSgdCompresses(const TensorShape& shape, int r, double minCompressionRate);
// The first Q of tensor `index` (cols x r), from the seed: the same on every rank.
void initialQ(uint64_t seed, size_t index, std::span<float> q);

}  // namespace cc::compress
