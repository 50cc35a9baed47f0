// The process mesh: world = dp x pp x tp with TP fastest-varying (rank = (d * pp + p) * tp
// + t), as picotron's grid. Each axis is a communicator made once with ccCommSplit: the
// ranks that differ only in that coordinate. A rank's coordinates say which part of the
// model it holds (modelPart: its pipeline stage's blocks, an even cut unless the shape
// gives one, and its TP shard). With chunks V > 1 (an interleaved schedule) the blocks are
// cut into pp x V virtual stages and stage s holds virtual stages s, s + pp, ..., s + (V -
// 1) pp (Megatron's placement, pp/plan.h).
#pragma once

#include <cc/cc.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "parallel/model/config.h"
#include "parallel/model/model_part.h"

namespace cc::parallel {

struct MeshShape {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  // Blocks per virtual stage (Megatron's uneven first and last stages), pp x chunks of
  // them; empty: equal virtual stages.
  std::vector<int> stageLayers;
  int chunks = 1;  // model chunks per pipeline stage (--virtual-stages)
  // Expert parallelism inside DP: consecutive groups of ep DP ranks split each MoE block's
  // experts (DP rank d holds the experts of EP rank d % ep); ep divides dp and the experts.
  int ep = 1;
  int size() const { return dp * pp * tp; }
};

struct MeshCoordinates {
  int dp = 0, pp = 0, tp = 0;
};

// Refuses a shape that cannot run: a dimension below 1, a product that is not the world
// size, pp x chunks not dividing the layers (or a cut that is not pp x chunks virtual
// stages of at least one block adding up to them), chunks above 1 without pp above 1, tp not
// dividing the heads or the padded vocabulary, ep not dividing dp or the
// experts (or above 1 for a dense model). The message says which.
Status validateMeshShape(const MeshShape& shape, int worldSize, const GptConfig& model);

class Mesh {
 public:
  // Collective over `world` (which the caller keeps owning). Validates first.
  static Result<std::unique_ptr<Mesh>> create(ccComm_t world, const MeshShape& shape,
                                              const GptConfig& model);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  int worldRank() const { return worldRank_; }
  const MeshCoordinates& coordinates() const { return coordinates_; }
  ccComm_t world() const { return world_; }
  ccComm_t dp() const { return dp_; }
  ccComm_t pp() const { return pp_; }
  ccComm_t tp() const { return tp_; }
  // ep > 1: the EP group (the ep consecutive DP ranks this rank's experts are split with) and
  // the expert-data-parallel group (the DP ranks holding the same experts, dp / ep of them,
  // over which those experts' gradients are reduced); null otherwise.
  ccComm_t ep() const { return ep_; }
  ccComm_t expertDp() const { return expertDp_; }
  // This rank's part of the model: its pipeline stage's chunks, and its TP shard.
  ModelPart modelPart(const GptConfig& model) const;
  // The part pipeline stage `stage` holds, unsharded (its chunks in ascending order).
  ModelPart stagePart(const GptConfig& model, int stage) const;

  // Collective: every rank's coordinates, host and pid, as a table (rank 0 prints it).
  Result<std::string> placementTable() const;

 private:
  Mesh() = default;
  MeshShape shape_;
  MeshCoordinates coordinates_;
  int worldRank_ = 0;
  ccComm_t world_ = nullptr;
  ccComm_t dp_ = nullptr, pp_ = nullptr, tp_ = nullptr, ep_ = nullptr, expertDp_ = nullptr;
};

}  // namespace cc::parallel
