// How DP and ZeRO cut the flat parameter/gradient buffer. A Segment is a contiguous slice
// whose start and length are multiples of the DP world size, so that it reduce-scatters
// and all-gathers in place and rank r owns its r-th 1/N (a ShardPiece). The buffer is
// padded with zeros to a multiple of N, which is all "shards pad to the world size" needs.
//
// - Gradient buckets (DP, ZeRO-1/2): cut from the end of the buffer backwards, because
//   backward finishes the gradients from the end (ln_f, last block, ...) towards wte.
// - Layer units (ZeRO-3): the embeddings, each block, the final LayerNorm, each with its
//   start rounded down to a multiple of N (so a block's last < N elements lie in the
//   next unit, which is why a block needs its own unit and the one after it).
#pragma once

#include <cstddef>
#include <vector>

#include "parallel/model/parameter_layout.h"

namespace cc::parallel {

struct Segment {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

// This rank's part of a segment: elements [begin, begin + count) of the buffer, stored
// at stateOffset in the rank's compact shard buffers (gradient shard, Adam moments, and
// under ZeRO-3 the parameter shard).
struct ShardPiece {
  size_t begin = 0;
  size_t count = 0;
  size_t stateOffset = 0;
};

size_t paddedBufferSize(size_t layoutSize, int world);

// Buckets of about bucketElements (rounded to a multiple of world, at least world),
// highest offsets first: the order backward completes them.
std::vector<Segment> gradientBuckets(size_t paddedSize, size_t bucketElements, int world);

// Buckets of whole tensors (at least bucketElements each, but for the last), highest
// offsets first, the first also holding the padding after the layout. Their ends are not
// multiples of the world size, so they suit all-reduce only (no sharding): the buckets a
// compressing reducer that needs whole matrices (PowerSGD) asks for.
std::vector<Segment> tensorAlignedBuckets(const ParameterLayout& layout, size_t paddedSize,
                                          size_t bucketElements);

// Units ascending, for a part holding every layer (the whole model or a TP shard): [0] embeddings,
// [1 + l] block l, [layers + 1] ln_f up to paddedSize.
std::vector<Segment> layerUnits(const ParameterLayout& layout, size_t paddedSize, int world);

// Rank's piece of each segment, in the segments' order, packed from state offset 0.
std::vector<ShardPiece> shardPieces(const std::vector<Segment>& segments, int rank, int world);

}  // namespace cc::parallel
