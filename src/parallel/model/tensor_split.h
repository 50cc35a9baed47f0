// Moving a tensor-parallel shard between its place in a rank's buffer and the
// one-process tensor (parameter_layout.h says how each tensor is split). Checkpoints hold
// the one-process layout, so saving puts every TP rank's shard into the full tensor and
// loading takes a rank's shard back out of it; initialisation makes the full tensor from
// the seed and keeps the shard, so a split model starts from the one-process values.
//
// The full tensor is viewed as [rows, columns] (columns its last dimension, rows the
// product of the others). kRows gives rank r rows [r rows/tp, (r+1) rows/tp); kColumns
// cuts each of the fusedParts column blocks into tp pieces and gives rank r the r-th piece
// of each, side by side.
#pragma once

#include <cstring>
#include <span>

#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

namespace split_detail {

// Calls copy(shardElement, fullElement, count) for every run of consecutive elements that
// tensor's shard `tpRank` of `tpSize` shares with the full tensor.
template <typename Copy>
void forEachRun(const TensorSlice& tensor, int tpRank, int tpSize, Copy copy) {
  const size_t columns = tensor.fullShape.back();
  size_t rows = 1;
  for (size_t dim = 0; dim + 1 < tensor.fullShape.size(); ++dim) rows *= tensor.fullShape[dim];
  const size_t rank = static_cast<size_t>(tpRank);
  const size_t parts = static_cast<size_t>(tpSize);
  switch (tensor.split) {
    case SplitAxis::kNone:
      copy(0, 0, tensor.size);
      return;
    case SplitAxis::kRows: {
      const size_t shardRows = rows / parts;
      copy(0, rank * shardRows * columns, shardRows * columns);
      return;
    }
    case SplitAxis::kColumns: {
      const size_t fused = static_cast<size_t>(tensor.fusedParts);
      const size_t partColumns = columns / fused;  // q's (k's, v's) columns in the full tensor
      const size_t pieceColumns = partColumns / parts;
      const size_t shardColumns = pieceColumns * fused;
      for (size_t row = 0; row < rows; ++row) {
        for (size_t part = 0; part < fused; ++part) {
          copy(row * shardColumns + part * pieceColumns,
               row * columns + part * partColumns + rank * pieceColumns, pieceColumns);
        }
      }
      return;
    }
  }
}

}  // namespace split_detail

// full: the one-process tensor (fullShape); shard: tensor.size elements.
template <typename T>
void takeShard(const TensorSlice& tensor, int tpRank, int tpSize, std::span<const T> full,
               std::span<T> shard) {
  split_detail::forEachRun(
      tensor, tpRank, tpSize, [&](size_t shardAt, size_t fullAt, size_t count) {
        std::memcpy(shard.data() + shardAt, full.data() + fullAt, count * sizeof(T));
      });
}

template <typename T>
void placeShard(const TensorSlice& tensor, int tpRank, int tpSize, std::span<const T> shard,
                std::span<T> full) {
  split_detail::forEachRun(
      tensor, tpRank, tpSize, [&](size_t shardAt, size_t fullAt, size_t count) {
        std::memcpy(full.data() + fullAt, shard.data() + shardAt, count * sizeof(T));
      });
}

// The same for every tensor of a part at once. whole: a buffer in the one-process layout
// (ParameterLayout(config)); local: a buffer in the part's layout. takePart fills local
// with this part's slices of whole; placePart writes the slices that the part's TP rank
// tpRank holds (all TP ranks of a part share its offsets) into whole.
template <typename T>
void takePart(const ParameterLayout& part, const ParameterLayout& wholeLayout,
              std::span<const T> whole, std::span<T> local) {
  const ModelPart& at = part.part();
  for (const TensorSlice& tensor : part.tensors()) {
    const TensorSlice& source = wholeLayout.tensors()[tensor.fullIndex];
    takeShard<T>(tensor, at.tpRank, at.tpSize, whole.subspan(source.offset, source.size),
                 local.subspan(tensor.offset, tensor.size));
  }
}

template <typename T>
void placePart(const ParameterLayout& part, const ParameterLayout& wholeLayout, int tpRank,
               std::span<const T> local, std::span<T> whole) {
  for (const TensorSlice& tensor : part.tensors()) {
    const TensorSlice& target = wholeLayout.tensors()[tensor.fullIndex];
    placeShard<T>(tensor, tpRank, part.part().tpSize, local.subspan(tensor.offset, tensor.size),
                  whole.subspan(target.offset, target.size));
  }
}

}  // namespace cc::parallel
