#include "compress/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "collectives/reduce_kernels.h"

namespace cc::compress {
namespace {

// cc's C result as a Status, with the call's last error for the message.
Status check(ccResult_t result, ccComm_t comm, const char* what) {
  if (result == ccSuccess) return Status::ok();
  return Status(result, std::string(what) + ": " + ccGetLastError(comm));
}

size_t roundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// --- fp16 and bf16 ---

class HalfCompressor final : public Compressor {
 public:
  HalfCompressor(ccComm_t comm, int rank, int ranks, std::vector<TensorShape> shapes, bool bf16)
      : Compressor(comm, rank, ranks, std::move(shapes)), bf16_(bf16), wire_(elements_) {}

  Status allReduce(float* buffer) override {
    collectives::floatsTo16Bits(buffer, wire_.data(), elements_, bf16_);
    CC_TRY(check(ccAllReduce(wire_.data(), wire_.data(), elements_, bf16_ ? ccBfloat16 : ccFloat16,
                             ccAvg, comm_, nullptr),
                 comm_, bf16_ ? "bf16 all-reduce" : "fp16 all-reduce"));
    collectives::floatsFrom16Bits(wire_.data(), buffer, elements_, bf16_);
    return Status::ok();
  }

  Status reduceScatter(const float* buffer, float* shard) override {
    const size_t part = elements_ / static_cast<size_t>(ranks_);
    wire_.resize(elements_ + part);
    collectives::floatsTo16Bits(buffer, wire_.data(), elements_, bf16_);
    uint16_t* mine = wire_.data() + elements_;
    CC_TRY(check(ccReduceScatter(wire_.data(), mine, part, bf16_ ? ccBfloat16 : ccFloat16, ccAvg,
                                 comm_, nullptr),
                 comm_, bf16_ ? "bf16 reduce-scatter" : "fp16 reduce-scatter"));
    collectives::floatsFrom16Bits(mine, shard, part, bf16_);
    return Status::ok();
  }

 private:
  bool bf16_;
  std::vector<uint16_t> wire_;
};

// --- 1-bit with error feedback ---

// A part's message: its scale (4 bytes, host order: every rank of a job runs one build),
// then its packed signs.
class OneBitCompressor final : public Compressor {
 public:
  OneBitCompressor(ccComm_t comm, int rank, int ranks, std::vector<TensorShape> shapes)
      : Compressor(comm, rank, ranks, std::move(shapes)),
        part_(
            roundUp((elements_ + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks), 8)),
        message_(sizeof(float) + part_ / 8),
        workerResidual_(part_ * static_cast<size_t>(ranks), 0.0f),
        serverResidual_(part_, 0.0f),
        sum_(part_),
        decoded_(part_),
        send_(message_ * static_cast<size_t>(ranks)),
        receive_(send_.size()),
        mine_(message_),
        gathered_(send_.size()) {}

  Status allReduce(float* buffer) override {
    const size_t n = static_cast<size_t>(ranks_);
    // Worker: each part compressed with its residual, one message per rank.
    for (size_t j = 0; j < n; ++j) {
      const size_t begin = j * part_, real = realIn(j);
      uint8_t* out = send_.data() + j * message_;
      const float scale = compressSigns(std::span<const float>(buffer + begin, real),
                                        std::span<float>(workerResidual_.data() + begin, real),
                                        std::span<uint8_t>(out + sizeof(float), part_ / 8));
      std::memcpy(out, &scale, sizeof(float));
    }
    CC_TRY(check(ccAllToAll(send_.data(), receive_.data(), message_, ccUint8, comm_, nullptr),
                 comm_, "1-bit all-to-all of the signs"));
    // Server: the average of every rank's part `rank_`, compressed again with its residual.
    const size_t real = realIn(static_cast<size_t>(rank_));
    const std::span<float> sum(sum_.data(), real), decoded(decoded_.data(), real);
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* in = receive_.data() + j * message_;
      float scale = 0;
      std::memcpy(&scale, in, sizeof(float));
      unpackSigns(std::span<const uint8_t>(in + sizeof(float), part_ / 8), scale, decoded);
      for (size_t i = 0; i < real; ++i) sum[i] += decoded[i];
    }
    const float inverse = 1.0f / static_cast<float>(n);
    for (float& value : sum) value *= inverse;
    std::fill(mine_.begin(), mine_.end(), uint8_t{0});
    const float scale = compressSigns(sum, std::span<float>(serverResidual_.data(), real),
                                      std::span<uint8_t>(mine_.data() + sizeof(float), part_ / 8));
    std::memcpy(mine_.data(), &scale, sizeof(float));
    CC_TRY(check(ccAllGather(mine_.data(), gathered_.data(), message_, ccUint8, comm_, nullptr),
                 comm_, "1-bit all-gather of the averaged signs"));
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* in = gathered_.data() + j * message_;
      float partScale = 0;
      std::memcpy(&partScale, in, sizeof(float));
      unpackSigns(std::span<const uint8_t>(in + sizeof(float), part_ / 8), partScale,
                  std::span<float>(buffer + j * part_, realIn(j)));
    }
    return Status::ok();
  }

 private:
  // The elements of part j that lie inside the buffer (the last parts may be short or empty).
  size_t realIn(size_t j) const {
    const size_t begin = j * part_;
    return begin >= elements_ ? 0 : std::min(part_, elements_ - begin);
  }

  size_t part_;     // elements per rank's part, a multiple of 8
  size_t message_;  // bytes of one part's message
  std::vector<float> workerResidual_, serverResidual_;
  std::vector<float> sum_, decoded_;  // the server's part, summed over the ranks
  std::vector<uint8_t> send_, receive_, mine_, gathered_;
};

// --- PowerSGD ---

class PowerSgdCompressor final : public Compressor {
 public:
  PowerSgdCompressor(ccComm_t comm, int rank, int ranks, std::vector<TensorShape> shapes,
                     const ccCompressConfig_t& config)
      : Compressor(comm, rank, ranks, std::move(shapes)), r_(static_cast<size_t>(config.rank)) {
    const double rate = config.minCompressionRate > 0 ? config.minCompressionRate : 2.0;
    size_t offset = 0, pOffset = 0, qOffset = 0, plain = 0;
    for (size_t t = 0; t < shapes_.size(); ++t) {
      const TensorShape& shape = shapes_[t];
      if (powerSgdCompresses(shape, config.rank, rate)) {
        Matrix m{offset, shape, pOffset, qOffset, std::vector<float>(shape.size(), 0.0f)};
        pOffset += shape.rows * r_;
        qOffset += shape.cols * r_;
        matrices_.push_back(std::move(m));
      } else {
        plain_.push_back({offset, shape.size()});
        plain += shape.size();
      }
      offset += shape.size();
    }
    p_.assign(pOffset, 0.0f);
    // The Qs, then the uncompressed tensors: one all-reduce. The Qs stay between calls
    // (each call reads them all for P before it writes the new ones).
    qElements_ = qOffset;
    qAndPlain_.assign(qOffset + plain, 0.0f);
    for (size_t i = 0; i < matrices_.size(); ++i) {
      initialQ(config.seed, i,
               std::span<float>(qAndPlain_.data() + matrices_[i].q, matrices_[i].shape.cols * r_));
    }
  }

  Status allReduce(float* buffer) override {
    // P = M Q for every matrix, M the gradient plus its residual.
    for (Matrix& m : matrices_) {
      float* gradient = buffer + m.offset;
      for (size_t i = 0; i < m.shape.size(); ++i) m.residual[i] += gradient[i];
      multiply(m.residual.data(), qAndPlain_.data() + m.q, p_.data() + m.p, m.shape.rows,
               m.shape.cols, r_);
    }
    if (!p_.empty()) {
      CC_TRY(check(ccAllReduce(p_.data(), p_.data(), p_.size(), ccFloat32, ccAvg, comm_, nullptr),
                   comm_, "PowerSGD all-reduce of P"));
    }
    // Q = M^T P with P orthonormal; then the Qs and the uncompressed tensors, averaged.
    for (Matrix& m : matrices_) {
      orthonormalizeColumns(p_.data() + m.p, m.shape.rows, r_);
      multiplyTransposed(m.residual.data(), p_.data() + m.p, qAndPlain_.data() + m.q, m.shape.rows,
                         m.shape.cols, r_);
    }
    size_t at = qElements_;
    for (const Plain& plain : plain_) {
      std::copy_n(buffer + plain.offset, plain.size,
                  qAndPlain_.begin() + static_cast<std::ptrdiff_t>(at));
      at += plain.size;
    }
    if (!qAndPlain_.empty()) {
      CC_TRY(check(ccAllReduce(qAndPlain_.data(), qAndPlain_.data(), qAndPlain_.size(), ccFloat32,
                               ccAvg, comm_, nullptr),
                   comm_, "PowerSGD all-reduce of Q and the uncompressed tensors"));
    }
    // M ~ P Q^T; what it missed stays as the residual; Q stays for the next call.
    for (Matrix& m : matrices_) {
      float* out = buffer + m.offset;
      multiplyByTranspose(p_.data() + m.p, qAndPlain_.data() + m.q, out, m.shape.rows, m.shape.cols,
                          r_);
      for (size_t i = 0; i < m.shape.size(); ++i) m.residual[i] -= out[i];
    }
    at = qElements_;
    for (const Plain& plain : plain_) {
      std::copy_n(qAndPlain_.begin() + static_cast<std::ptrdiff_t>(at), plain.size,
                  buffer + plain.offset);
      at += plain.size;
    }
    return Status::ok();
  }

 private:
  struct Matrix {
    size_t offset;  // in the buffer
    TensorShape shape;
    size_t p, q;                  // its P in p_, its Q in qAndPlain_
    std::vector<float> residual;  // error feedback; during a call, the gradient plus it
  };
  struct Plain {
    size_t offset, size;
  };
  size_t r_;
  std::vector<Matrix> matrices_;
  std::vector<Plain> plain_;
  size_t qElements_ = 0;  // the Qs' part of qAndPlain_
  std::vector<float> p_, qAndPlain_;
};

// A deterministic normal generator (splitmix64 and Box-Muller): the same numbers on every
// rank and every standard library.
class Normal {
 public:
  explicit Normal(uint64_t seed) : state_(seed) {}
  float next() {
    if (spare_) {
      spare_ = false;
      return second_;
    }
    const double u1 = (static_cast<double>(bits() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(bits() >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    second_ = static_cast<float>(radius * std::sin(2 * M_PI * u2));
    spare_ = true;
    return static_cast<float>(radius * std::cos(2 * M_PI * u2));
  }

 private:
  uint64_t bits() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
  bool spare_ = false;
  float second_ = 0;
};

}  // namespace

Status Compressor::reduceScatter(const float*, float*) {
  return invalidArgument(
      "ccCompressedReduceScatter: this kind needs the whole average on every rank (its error "
      "feedback keeps a residual for every element); only fp16 and bf16 reduce-scatter");
}

Compressor::Compressor(ccComm_t comm, int rank, int ranks, std::vector<TensorShape> shapes)
    : comm_(comm), rank_(rank), ranks_(ranks), shapes_(std::move(shapes)) {
  for (const TensorShape& shape : shapes_) elements_ += shape.size();
}

Result<std::unique_ptr<Compressor>> makeCompressor(ccComm_t comm, const ccCompressConfig_t& config,
                                                   std::vector<TensorShape> shapes) {
  int rank = 0, ranks = 0;
  CC_TRY(check(ccCommUserRank(comm, &rank), comm, "ccCompressorCreate: comm"));
  CC_TRY(check(ccCommCount(comm, &ranks), comm, "ccCompressorCreate: comm"));
  int kind = 0;
  static_assert(sizeof(config.kind) == sizeof(kind));
  std::memcpy(&kind, &config.kind, sizeof(kind));
  switch (kind) {
    case ccCompressFp16:
    case ccCompressBf16:
      return std::unique_ptr<Compressor>(
          new HalfCompressor(comm, rank, ranks, std::move(shapes), kind == ccCompressBf16));
    case ccCompressOneBit:
      return std::unique_ptr<Compressor>(
          new OneBitCompressor(comm, rank, ranks, std::move(shapes)));
    case ccCompressPowerSgd:
      if (config.rank < 1) {
        return invalidArgument("ccCompressorCreate: config->rank " + std::to_string(config.rank) +
                               " must be at least 1 for PowerSGD");
      }
      if (!(config.minCompressionRate >= 0) || !std::isfinite(config.minCompressionRate)) {
        return invalidArgument("ccCompressorCreate: config->minCompressionRate must be >= 0");
      }
      return std::unique_ptr<Compressor>(
          new PowerSgdCompressor(comm, rank, ranks, std::move(shapes), config));
    default:
      return invalidArgument("ccCompressorCreate: config->kind " + std::to_string(kind) +
                             " is not a ccCompressKind_t (fp16 1, bf16 2, onebit 3, powersgd 4)");
  }
}

void packSigns(std::span<const float> values, std::span<uint8_t> bits) {
  std::fill(bits.begin(), bits.end(), uint8_t{0});
  const size_t whole = values.size() / 8;
  for (size_t byte = 0; byte < whole; ++byte) {
    const float* v = values.data() + 8 * byte;
    unsigned packed = 0;
    for (unsigned k = 0; k < 8; ++k) packed |= static_cast<unsigned>(v[k] >= 0) << k;
    bits[byte] = static_cast<uint8_t>(packed);
  }
  for (size_t i = 8 * whole; i < values.size(); ++i) {
    if (values[i] >= 0) bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | (1u << (i % 8)));
  }
}

void unpackSigns(std::span<const uint8_t> bits, float scale, std::span<float> out) {
  const size_t whole = out.size() / 8;
  for (size_t byte = 0; byte < whole; ++byte) {
    const unsigned packed = bits[byte];
    float* o = out.data() + 8 * byte;
    for (unsigned k = 0; k < 8; ++k) o[k] = (packed >> k) & 1u ? scale : -scale;
  }
  for (size_t i = 8 * whole; i < out.size(); ++i)
    out[i] = (bits[i / 8] >> (i % 8)) & 1u ? scale : -scale;
}

float compressSigns(std::span<const float> input, std::span<float> residual,
                    std::span<uint8_t> bits) {
  const size_t count = input.size();
  double absolute = 0;
  for (size_t i = 0; i < count; ++i) {
    residual[i] += input[i];  // x
    absolute += std::fabs(residual[i]);
  }
  const float scale = count > 0 ? static_cast<float>(absolute / static_cast<double>(count)) : 0.0f;
  packSigns(residual.first(count), bits);
  for (size_t i = 0; i < count; ++i) residual[i] -= residual[i] >= 0 ? scale : -scale;
  return scale;
}

void orthonormalizeColumns(float* matrix, size_t rows, size_t cols) {
  for (size_t j = 0; j < cols; ++j) {
    for (size_t k = 0; k < j; ++k) {
      double dot = 0;
      for (size_t i = 0; i < rows; ++i)
        dot += static_cast<double>(matrix[i * cols + j]) * matrix[i * cols + k];
      for (size_t i = 0; i < rows; ++i)
        matrix[i * cols + j] -= static_cast<float>(dot) * matrix[i * cols + k];
    }
    double norm = 0;
    for (size_t i = 0; i < rows; ++i)
      norm += static_cast<double>(matrix[i * cols + j]) * matrix[i * cols + j];
    const float inverse = static_cast<float>(1.0 / (std::sqrt(norm) + 1e-8));
    for (size_t i = 0; i < rows; ++i) matrix[i * cols + j] *= inverse;
  }
}

void multiply(const float* m, const float* q, float* p, size_t rows, size_t cols, size_t r) {
  std::fill(p, p + rows * r, 0.0f);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < cols; ++k) {
      const float value = m[i * cols + k];
      for (size_t j = 0; j < r; ++j) p[i * r + j] += value * q[k * r + j];
    }
  }
}

void multiplyTransposed(const float* m, const float* p, float* q, size_t rows, size_t cols,
                        size_t r) {
  std::fill(q, q + cols * r, 0.0f);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < cols; ++k) {
      const float value = m[i * cols + k];
      for (size_t j = 0; j < r; ++j) q[k * r + j] += value * p[i * r + j];
    }
  }
}

void multiplyByTranspose(const float* p, const float* q, float* out, size_t rows, size_t cols,
                         size_t r) {
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < cols; ++k) {
      float sum = 0;
      for (size_t j = 0; j < r; ++j) sum += p[i * r + j] * q[k * r + j];
      out[i * cols + k] = sum;
    }
  }
}

bool powerSgdCompresses(const TensorShape& shape, int r, double minCompressionRate) {
  if (shape.rows < 2 || shape.cols < 2) return false;
  const double size = static_cast<double>(shape.size());
  return size >= minCompressionRate * r * static_cast<double>(shape.rows + shape.cols);
}

void initialQ(uint64_t seed, size_t index, std::span<float> q) {
  Normal normal(seed * 0x100000001b3ull + index);
  for (float& value : q) value = normal.next();
}

}  // namespace cc::compress
