#include "parallel/mesh/mesh.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "parallel/mesh/cc_call.h"

namespace cc::parallel {

Status validateMeshShape(const MeshShape& shape, int worldSize, const GptConfig& model) {
  const std::string text = "mesh dp " + std::to_string(shape.dp) + " x pp " +
                           std::to_string(shape.pp) + " x tp " + std::to_string(shape.tp);
  if (shape.dp < 1 || shape.pp < 1 || shape.tp < 1)
    return invalidArgument(text + ": every dimension must be >= 1");
  if (shape.size() != worldSize) {
    return invalidArgument(text + " = " + std::to_string(shape.size()) +
                           " ranks, but the job has " + std::to_string(worldSize) +
                           " (the product must equal the world size)");
  }
  if (shape.chunks < 1 || (shape.chunks > 1 && shape.pp == 1)) {
    return invalidArgument(text + ": " + std::to_string(shape.chunks) +
                           " model chunks per stage (virtual stages): at least 1, and above 1 "
                           "only with pp above 1");
  }
  const int virtualStages = shape.pp * shape.chunks;
  const std::string stages =
      shape.chunks > 1 ? "pp x virtual stages " + std::to_string(virtualStages) : "pp";
  if (!shape.stageLayers.empty()) {
    int total = 0;
    for (int layers : shape.stageLayers) {
      if (layers < 1) return invalidArgument(text + ": a pipeline stage of no blocks");
      total += layers;
    }
    if (static_cast<int>(shape.stageLayers.size()) != virtualStages || total != model.layers) {
      return invalidArgument(text + ": a cut into " + std::to_string(shape.stageLayers.size()) +
                             " stages of " + std::to_string(total) + " blocks for " + stages + " " +
                             std::to_string(virtualStages) + " and " +
                             std::to_string(model.layers) + " layers");
    }
  } else if (model.layers % virtualStages != 0) {
    return invalidArgument(text + ": " + stages + " " + std::to_string(virtualStages) +
                           " does not divide the " + std::to_string(model.layers) + " layers");
  }
  if (model.heads % shape.tp != 0) {
    return invalidArgument(text + ": tp " + std::to_string(shape.tp) + " does not divide the " +
                           std::to_string(model.heads) + " heads");
  }
  if (model.paddedVocab() % shape.tp != 0) {
    return invalidArgument(
        text + ": tp " + std::to_string(shape.tp) + " does not divide the padded vocabulary " +
        std::to_string(model.paddedVocab()) + " (vocab " + std::to_string(model.vocab) +
        " padded to a multiple of " + std::to_string(model.vocabMultiple) + ")");
  }
  if (shape.ep < 1 || shape.dp % shape.ep != 0) {
    return invalidArgument(text + ": ep " + std::to_string(shape.ep) +
                           " must be >= 1 and divide dp (expert parallelism lives inside data "
                           "parallelism)");
  }
  if (shape.ep > 1 && model.experts == 0) {
    return invalidArgument(text + ": ep " + std::to_string(shape.ep) +
                           " needs a mixture-of-experts model (--experts)");
  }
  if (model.experts > 0 && model.experts % shape.ep != 0) {
    return invalidArgument(text + ": ep " + std::to_string(shape.ep) + " does not divide the " +
                           std::to_string(model.experts) + " experts");
  }
  return Status::ok();
}

Result<std::unique_ptr<Mesh>> Mesh::create(ccComm_t world, const MeshShape& shape,
                                           const GptConfig& model) {
  int worldSize = 0, worldRank = 0;
  CC_TRY(ccCall(ccCommCount(world, &worldSize), world, "mesh: ccCommCount"));
  CC_TRY(ccCall(ccCommUserRank(world, &worldRank), world, "mesh: ccCommUserRank"));
  CC_TRY(validateMeshShape(shape, worldSize, model));
  std::unique_ptr<Mesh> mesh(new Mesh());
  mesh->shape_ = shape;
  mesh->world_ = world;
  mesh->worldRank_ = worldRank;
  MeshCoordinates& at = mesh->coordinates_;
  at.tp = worldRank % shape.tp;
  at.pp = worldRank / shape.tp % shape.pp;
  at.dp = worldRank / (shape.tp * shape.pp);
  // Same colour = same coordinates on the other two axes; the key orders by this axis.
  CC_TRY(ccCall(ccCommSplit(world, at.pp * shape.tp + at.tp, at.dp, &mesh->dp_), world,
                "mesh: split dp"));
  CC_TRY(ccCall(ccCommSplit(world, at.dp * shape.tp + at.tp, at.pp, &mesh->pp_), world,
                "mesh: split pp"));
  CC_TRY(ccCall(ccCommSplit(world, at.dp * shape.pp + at.pp, at.tp, &mesh->tp_), world,
                "mesh: split tp"));
  if (shape.ep > 1) {
    CC_TRY(ccCall(ccCommSplit(mesh->dp_, at.dp / shape.ep, at.dp % shape.ep, &mesh->ep_), world,
                  "mesh: split ep"));
    CC_TRY(ccCall(ccCommSplit(mesh->dp_, at.dp % shape.ep, at.dp / shape.ep, &mesh->expertDp_),
                  world, "mesh: split expert dp"));
  }
  return mesh;
}

ModelPart Mesh::stagePart(const GptConfig& model, int stage) const {
  const int virtualStages = shape_.pp * shape_.chunks;
  std::vector<int> sizes = shape_.stageLayers;
  if (sizes.empty()) sizes.assign(static_cast<size_t>(virtualStages), model.layers / virtualStages);
  std::vector<LayerRange> chunks;
  int first = 0;
  for (int v = 0; v < virtualStages; ++v) {
    const int size = sizes[static_cast<size_t>(v)];
    if (v % shape_.pp == stage) chunks.push_back({first, first + size});
    first += size;
  }
  return ModelPart::ofChunks(std::move(chunks));
}

ModelPart Mesh::modelPart(const GptConfig& model) const {
  ModelPart part = stagePart(model, coordinates_.pp);
  part.tpSize = shape_.tp;
  part.tpRank = coordinates_.tp;
  part.epSize = shape_.ep;
  part.epRank = coordinates_.dp % shape_.ep;
  return part;
}

Mesh::~Mesh() {
  for (ccComm_t comm : {expertDp_, ep_, tp_, pp_, dp_}) {
    if (comm != nullptr) (void)ccCommDestroy(comm);
  }
}

Result<std::string> Mesh::placementTable() const {
  struct Entry {
    int coordinates[3];
    int pid;
    char host[48];
  };
  Entry mine{{coordinates_.dp, coordinates_.pp, coordinates_.tp}, static_cast<int>(::getpid()), {}};
  ::gethostname(mine.host, sizeof(mine.host) - 1);
  std::vector<Entry> all(static_cast<size_t>(shape_.size()));
  CC_TRY(ccCall(ccAllGather(&mine, all.data(), sizeof(Entry), ccUint8, world_, nullptr), world_,
                "mesh: all-gather of the placement"));
  std::string table = "mesh: dp " + std::to_string(shape_.dp) + " x pp " +
                      std::to_string(shape_.pp) + " x tp " + std::to_string(shape_.tp) +
                      " (tp fastest)\n";
  for (size_t rank = 0; rank < all.size(); ++rank) {
    char line[160];
    std::snprintf(line, sizeof(line), "  rank %zu: dp %d pp %d tp %d  host %s pid %d\n", rank,
                  all[rank].coordinates[0], all[rank].coordinates[1], all[rank].coordinates[2],
                  all[rank].host, all[rank].pid);
    table += line;
  }
  return table;
}

}  // namespace cc::parallel
