#include "parallel/dp/segments.h"

#include <algorithm>

namespace cc::parallel {

size_t paddedBufferSize(size_t layoutSize, int world) {
  const size_t n = static_cast<size_t>(world);
  return (layoutSize + n - 1) / n * n;
}

std::vector<Segment> gradientBuckets(size_t paddedSize, size_t bucketElements, int world) {
  const size_t n = static_cast<size_t>(world);
  const size_t step = std::max(n, bucketElements / n * n);
  std::vector<Segment> buckets;
  for (size_t end = paddedSize; end > 0;) {
    const size_t begin = end > step ? end - step : 0;
    buckets.push_back({begin, end});
    end = begin;
  }
  return buckets;
}

std::vector<Segment> tensorAlignedBuckets(const ParameterLayout& layout, size_t paddedSize,
                                          size_t bucketElements) {
  std::vector<Segment> buckets;
  const std::vector<TensorSlice>& tensors = layout.tensors();
  size_t end = paddedSize;
  for (auto tensor = tensors.rbegin(); tensor != tensors.rend(); ++tensor) {
    if (end - tensor->offset >= bucketElements || tensor->offset == 0) {
      buckets.push_back({tensor->offset, end});
      end = tensor->offset;
    }
  }
  return buckets;
}

std::vector<Segment> layerUnits(const ParameterLayout& layout, size_t paddedSize, int world) {
  const size_t n = static_cast<size_t>(world);
  auto roundDown = [n](size_t offset) { return offset / n * n; };
  std::vector<size_t> starts = {0};
  for (const BlockOffsets& block : layout.blocks()) starts.push_back(roundDown(block.begin));
  starts.push_back(roundDown(layout.lnfWeight()));
  starts.push_back(paddedSize);
  std::vector<Segment> units;
  for (size_t i = 0; i + 1 < starts.size(); ++i) units.push_back({starts[i], starts[i + 1]});
  return units;
}

std::vector<ShardPiece> shardPieces(const std::vector<Segment>& segments, int rank, int world) {
  std::vector<ShardPiece> pieces;
  size_t offset = 0;
  for (const Segment& segment : segments) {
    const size_t count = segment.size() / static_cast<size_t>(world);
    pieces.push_back({segment.begin + static_cast<size_t>(rank) * count, count, offset});
    offset += count;
  }
  return pieces;
}

}  // namespace cc::parallel
