// What the mixture-of-experts blocks of a model ask of their expert-parallel group, as the
// model sees it (ep/expert_parallel_comm.h implements it over the EP communicator). Each
// rank routes its own micro-batch; the rows for experts held elsewhere travel by two
// all-to-alls: first the counts (each rank tells every other how many rows it sends to each
// of that rank's experts), then the rows themselves (all-to-allv). The combine, and both
// exchanges of backward, run the same row exchange with the counts turned around.
//
// The model's pieces return nothing, so an implementation records its first failure and the
// caller asks for it after the micro-batch (status()); after a failure the calls only fill
// what they would have received with zeros, so shapes stay consistent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace cc::parallel {

class ExpertParallelGroup {
 public:
  virtual ~ExpertParallelGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;

  // send and receive hold size() x n values each: send[j n, (j + 1) n) goes to rank j,
  // receive[j n, (j + 1) n) comes from rank j.
  virtual void exchangeCounts(std::span<const int64_t> send, std::span<int64_t> receive) = 0;
  // All-to-allv with contiguous blocks: sendCounts[j] elements (in rank order) go to rank j,
  // receiveCounts[j] arrive from it.
  virtual void exchangeRows(std::span<const float> send, std::span<const size_t> sendCounts,
                            std::span<float> receive, std::span<const size_t> receiveCounts) = 0;
  virtual void exchangeRows(std::span<const double> send, std::span<const size_t> sendCounts,
                            std::span<double> receive, std::span<const size_t> receiveCounts) = 0;

  // The first failure of any call so far.
  virtual Status status() const = 0;
};

}  // namespace cc::parallel
