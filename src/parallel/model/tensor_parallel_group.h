// What a tensor-parallel shard of the model asks of its TP group, as the model sees it
// (tp/tensor_parallel_comm.h implements it over the TP communicator). Megatron's two
// conjugate operators, by the half of each that communicates:
//
// - f, "copy to the tensor-parallel region", sits before a column-parallel layer: the
//   identity forward (every rank already holds the whole input), and backward the sum over
//   the group of each rank's partial input gradient.
// - g, "reduce from the tensor-parallel region", sits after a row-parallel layer: forward
//   the sum over the group of the partial outputs, the identity backward.
//
// Under sequence parallelism (Korthikanti et al. 2022) the two become an all-gather and a
// reduce-scatter of rows, each the other's backward:
//
// - gatherSequence: every rank's chunk of rows, concatenated in rank order. Forward before
//   a column-parallel layer (the identity's place in f), backward where a reduce-scatter
//   stood in forward (after a row-parallel layer; and to re-gather the input a column-
//   parallel layer's weight gradient reads).
// - reduceScatterSequence: the sum over the group, of which each rank keeps its chunk.
//   Forward after a row-parallel layer (g's all-reduce), backward where forward gathered.
//
// and the element-wise max and sum the vocabulary-parallel loss reduces per row. The
// model's pieces return nothing, so an implementation records its first failure and the
// caller asks for it after the micro-batch (status()); after a failure the calls do
// nothing.
#pragma once

#include <span>

#include "core/status.h"

namespace cc::parallel {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;

  // f's backward half: gradient = the sum over the group of every rank's gradient.
  virtual void copyToRegionBackward(std::span<float> gradient) = 0;
  virtual void copyToRegionBackward(std::span<double> gradient) = 0;
  // g's forward half: partial = the sum over the group of every rank's partial output.
  virtual void reduceFromRegionForward(std::span<float> partial) = 0;
  virtual void reduceFromRegionForward(std::span<double> partial) = 0;
  // whole (size() x local.size() elements) = every rank's local, in rank order.
  virtual void gatherSequence(std::span<const float> local, std::span<float> whole) = 0;
  virtual void gatherSequence(std::span<const double> local, std::span<double> whole) = 0;
  // The sum over the group of every rank's partial (size() equal chunks); this rank's
  // chunk of partial receives its chunk of the sum (the other chunks are left undefined).
  virtual void reduceScatterSequence(std::span<float> partial) = 0;
  virtual void reduceScatterSequence(std::span<double> partial) = 0;
  // Element-wise over the group, in place.
  virtual void allReduceMax(std::span<float> values) = 0;
  virtual void allReduceMax(std::span<double> values) = 0;
  virtual void allReduceSum(std::span<float> values) = 0;
  virtual void allReduceSum(std::span<double> values) = 0;

  // The first failure of any call so far.
  virtual Status status() const = 0;
};

}  // namespace cc::parallel
