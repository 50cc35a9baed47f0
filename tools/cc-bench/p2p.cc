// Ping-pong latency and windowed bandwidth over ccSend/ccRecv (see p2p.h).
#include "p2p.h"

#include <fmt/core.h>

#include <span>

#include "cc_call.h"
#include "pattern.h"

namespace cc::bench {
namespace {

// One side of the pair: its communicator, its peer and buffers of the largest size.
// The buffers are value-initialized, so their pages are touched before any timing.
struct Side {
  ccComm_t comm = nullptr;
  int rank = 0;
  int peer = 1;
  std::vector<std::byte> sendBuffer;
  std::vector<std::byte> recvBuffer;

  // The message is formatted only on failure, so the timed loops stay clean.
  void send(const std::byte* data, size_t bytes) const {
    ccResult_t result = ccSend(data, bytes, ccUint8, peer, comm, nullptr);
    if (result != ccSuccess)
      checkCc(result, comm, fmt::format("ccSend({} bytes to rank {})", bytes, peer));
  }
  void recv(std::byte* data, size_t bytes) const {
    ccResult_t result = ccRecv(data, bytes, ccUint8, peer, comm, nullptr);
    if (result != ccSuccess)
      checkCc(result, comm, fmt::format("ccRecv({} bytes from rank {})", bytes, peer));
  }
  std::span<std::byte> sendSpan(size_t bytes) { return {sendBuffer.data(), bytes}; }
  std::span<std::byte> recvSpan(size_t bytes) { return {recvBuffer.data(), bytes}; }
};

struct Measured {
  double value = 0;
  uint64_t wrongBytes = 0;
};

Measured measureLatency(Side& side, size_t bytes, const SweepOptions& options) {
  int iterations = iterationsFor(options, 2 * bytes);
  int warmup = warmupFor(options, iterations);
  int last = warmup + iterations - 1;
  uint64_t seed = patternSeed(bytes, last, 0);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i <= last; ++i) {
    if (i == last) {
      if (side.rank == 0) fillPattern(side.sendSpan(bytes), seed);
      fillPoison(side.recvSpan(bytes), seed);
    }
    Clock::time_point start = Clock::now();
    if (side.rank == 0) {
      side.send(side.sendBuffer.data(), bytes);
      side.recv(side.recvBuffer.data(), bytes);
    } else {
      side.recv(side.recvBuffer.data(), bytes);
      side.send(side.recvBuffer.data(), bytes);
    }
    Clock::time_point end = Clock::now();
    if (i >= warmup) samples.push_back(secondsBetween(start, end) * 1e6 / 2);
  }
  return {median(std::move(samples)), countMismatches(side.recvSpan(bytes), seed)};
}

Measured measureBandwidth(Side& side, size_t bytes, const SweepOptions& options) {
  int iterations = iterationsFor(options, kWindow * bytes);
  int warmup = warmupFor(options, iterations);
  int last = warmup + iterations - 1;
  uint64_t seed = patternSeed(bytes, last, 1);
  std::byte ack{0};
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i <= last; ++i) {
    if (i == last && side.rank == 0) fillPattern(side.sendSpan(bytes), seed);
    if (i == last && side.rank == 1) fillPoison(side.recvSpan(bytes), seed);
    Clock::time_point start = Clock::now();
    if (side.rank == 0) {
      for (int m = 0; m < kWindow; ++m) side.send(side.sendBuffer.data(), bytes);
      side.recv(&ack, 1);
    } else {
      for (int m = 0; m < kWindow; ++m) side.recv(side.recvBuffer.data(), bytes);
      side.send(&ack, 1);
    }
    Clock::time_point end = Clock::now();
    if (i >= warmup)
      samples.push_back(static_cast<double>(kWindow * bytes) / secondsBetween(start, end) / 1e9);
  }
  // Only the receiver can check a one-way stream.
  return {median(std::move(samples)),
          side.rank == 1 ? countMismatches(side.recvSpan(bytes), seed) : 0};
}

}  // namespace

std::vector<P2pPoint> measureP2p(ccComm_t comm, int rank, const SweepOptions& options) {
  Side side;
  side.comm = comm;
  side.rank = rank;
  side.peer = 1 - rank;
  side.sendBuffer.resize(rank == 0 ? options.maxBytes : 0);
  side.recvBuffer.resize(options.maxBytes);

  std::vector<P2pPoint> points;
  for (size_t bytes : sizeSeries(options)) {
    P2pPoint point;
    point.bytes = bytes;
    Measured latency = measureLatency(side, bytes, options);
    Measured bandwidth = measureBandwidth(side, bytes, options);
    uint64_t wrong = latency.wrongBytes + bandwidth.wrongBytes;
    // Rank 1's count travels to rank 0, which reports the sum.
    uint64_t peerWrong = 0;
    if (rank == 1) {
      side.send(reinterpret_cast<const std::byte*>(&wrong), sizeof(wrong));
    } else {
      side.recv(reinterpret_cast<std::byte*>(&peerWrong), sizeof(peerWrong));
    }
    point.latencyUs = latency.value;
    point.bandwidthGBps = bandwidth.value;
    point.wrongBytes = wrong + peerWrong;
    points.push_back(point);
  }
  return points;
}

}  // namespace cc::bench
