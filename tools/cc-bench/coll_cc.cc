// Timing and checking cc's collectives (see coll_cc.h).
#include "coll_cc.h"

#include <fmt/core.h>

#include <vector>

#include "cc_call.h"
#include "coll_peer.h"
#include "sweep.h"

namespace cc::bench {
namespace {

// coll_rules.h mirrors cc's enums so that a value casts straight across.
static_assert(static_cast<int>(coll::DataType::Int8) == ccInt8 &&
              static_cast<int>(coll::DataType::Uint64) == ccUint64 &&
              static_cast<int>(coll::DataType::Half) == ccFloat16 &&
              static_cast<int>(coll::DataType::Float) == ccFloat32 &&
              static_cast<int>(coll::DataType::Double) == ccFloat64 &&
              static_cast<int>(coll::DataType::Bfloat16) == ccBfloat16);
static_assert(static_cast<int>(coll::Op::Sum) == ccSum &&
              static_cast<int>(coll::Op::Prod) == ccProd &&
              static_cast<int>(coll::Op::Max) == ccMax &&
              static_cast<int>(coll::Op::Min) == ccMin && static_cast<int>(coll::Op::Avg) == ccAvg);

ccResult_t callCollective(const CollOptions& o, const coll::Shape& s, const void* send, void* recv,
                          int rank, int nranks, ccComm_t comm, ccStream_t stream) {
  auto type = static_cast<ccDataType_t>(o.type);
  auto op = static_cast<ccRedOp_t>(o.op);
  switch (o.collective) {
    case coll::Collective::AllReduce:
      return ccAllReduce(send, recv, s.count, type, op, comm, stream);
    case coll::Collective::AllGather:
      return ccAllGather(send, recv, s.count, type, comm, stream);
    case coll::Collective::ReduceScatter:
      return ccReduceScatter(send, recv, s.count, type, op, comm, stream);
    case coll::Collective::Broadcast:
      return ccBroadcast(send, recv, s.count, type, o.root, comm, stream);
    case coll::Collective::Reduce:
      return ccReduce(send, recv, s.count, type, op, o.root, comm, stream);
    case coll::Collective::AllToAll:
      return ccAllToAll(send, recv, s.count, type, comm, stream);
    case coll::Collective::SendRecv: {
      // Everyone sends right and receives from the left, as one group.
      ccResult_t result = ccGroupStart();
      if (result != ccSuccess) return result;
      ccResult_t sent = ccSend(send, s.count, type, (rank + 1) % nranks, comm, stream);
      ccResult_t received = ccRecv(recv, s.count, type, (rank + nranks - 1) % nranks, comm, stream);
      result = ccGroupEnd();
      if (sent != ccSuccess) return sent;
      if (received != ccSuccess) return received;
      return result;
    }
  }
  return ccInvalidArgument;
}

// One call, finished when this returns (on a stream: queued, then synchronized).
void callAndWait(const CollOptions& o, const coll::Shape& s, coll::Placement at, int rank,
                 int nranks, ccComm_t comm, ccStream_t stream) {
  checkCc(callCollective(o, s, at.send, at.recv, rank, nranks, comm, stream), comm,
          coll::collectiveName(o.collective));
  if (stream != nullptr) checkCc(ccStreamSynchronize(stream), comm, "ccStreamSynchronize");
}

// This rank's time for each timed iteration, in seconds.
std::vector<double> timeIterations(const CollOptions& o, const coll::Shape& s, coll::Placement at,
                                   int rank, int nranks, ccComm_t comm, ccStream_t stream) {
  int iterations = coll::iterationsFor(o.iterations, s.rowBytes);
  int warmup = coll::warmupFor(o.warmup, iterations);
  checkCc(ccBarrier(comm, nullptr), comm, "ccBarrier before a row");
  for (int i = 0; i < warmup; ++i) callAndWait(o, s, at, rank, nranks, comm, stream);
  std::vector<double> seconds(static_cast<size_t>(iterations));
  if (stream != nullptr && !o.blocking) {
    // -z 0: queue the whole loop, wait once; each iteration gets the mean.
    Clock::time_point start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      checkCc(callCollective(o, s, at.send, at.recv, rank, nranks, comm, stream), comm,
              coll::collectiveName(o.collective));
    }
    checkCc(ccStreamSynchronize(stream), comm, "ccStreamSynchronize");
    double each = secondsBetween(start, Clock::now()) / iterations;
    for (double& t : seconds) t = each;
    return seconds;
  }
  for (int i = 0; i < iterations; ++i) {
    Clock::time_point start = Clock::now();
    callAndWait(o, s, at, rank, nranks, comm, stream);
    seconds[static_cast<size_t>(i)] = secondsBetween(start, Clock::now());
  }
  return seconds;
}

int64_t checkOnce(const CollOptions& o, const coll::Shape& s, coll::Placement at, bool inPlace,
                  int rank, int nranks, ccComm_t comm, ccStream_t stream) {
  if (!o.check) return -1;
  coll::fillInputs(o.collective, o.op, o.type, s, rank, nranks, o.root, inPlace, at.send, at.recv);
  checkCc(ccBarrier(comm, nullptr), comm, "ccBarrier before a check");
  callAndWait(o, s, at, rank, nranks, comm, stream);
  return static_cast<int64_t>(
      coll::countWrong(o.collective, o.op, o.type, s, rank, nranks, o.root, at.recv));
}

// Rank 0 gets every rank's samples and wrong count; returns the row's Timing there: the
// time from each rank's own mean as -a says, the tail from the slowest rank per iteration.
Timing gatherTiming(std::vector<double> samples, int64_t wrong, int rank, int nranks, int average,
                    ccComm_t comm) {
  samples.push_back(static_cast<double>(wrong));
  size_t count = samples.size();
  if (rank != 0) {
    checkCc(ccSend(samples.data(), count, ccFloat64, 0, comm, nullptr), comm,
            "ccSend of the timings to rank 0");
    return {};
  }
  std::vector<double> slowest(samples.begin(), samples.end() - 1);
  std::vector<double> perRank{coll::meanSeconds(slowest.data(), slowest.size())};
  int64_t totalWrong = wrong;
  std::vector<double> theirs(count);
  for (int peer = 1; peer < nranks; ++peer) {
    checkCc(ccRecv(theirs.data(), count, ccFloat64, peer, comm, nullptr), comm,
            fmt::format("ccRecv of rank {}'s timings", peer));
    for (size_t i = 0; i + 1 < count; ++i) slowest[i] = std::max(slowest[i], theirs[i]);
    perRank.push_back(coll::meanSeconds(theirs.data(), count - 1));  // not the wrong count
    if (totalWrong >= 0) totalWrong += static_cast<int64_t>(theirs[count - 1]);
  }
  return timingOf(coll::summarizeRow(std::move(slowest), perRank, average), totalWrong);
}

}  // namespace

CollRow measureCcRow(ccComm_t comm, ccStream_t stream, const CollOptions& options,
                     const coll::Shape& shape, int rank, int nranks, CcBuffers buffers) {
  CollRow row;
  row.shape = shape;
  for (bool inPlace : {false, true}) {
    if (inPlace && !coll::hasInPlace(options.collective)) continue;
    coll::Placement at = coll::placementFor(options.collective, inPlace, shape, options.type, rank,
                                            buffers.send, buffers.recv);
    std::vector<double> seconds = timeIterations(options, shape, at, rank, nranks, comm, stream);
    int64_t wrong = checkOnce(options, shape, at, inPlace, rank, nranks, comm, stream);
    (inPlace ? row.inPlace : row.outOfPlace) =
        gatherTiming(std::move(seconds), wrong, rank, nranks, options.average, comm);
  }
  return row;
}

}  // namespace cc::bench
