#include "parallel/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "parallel/checkpoint/checkpoint.h"
#include "parallel/ep/expert_gradients.h"
#include "parallel/mesh/cc_call.h"
#include "parallel/model/initialize.h"
#include "parallel/model/tensor_split.h"
#include "parallel/optim/grad_norm.h"
#include "parallel/zero/stages.h"

namespace cc::parallel {
namespace {

// The mesh's part of the model for this rank, with the options' sequence parallelism.
ModelPart partOf(const TrainOptions& options, const Mesh& mesh) {
  ModelPart part = mesh.modelPart(options.model);
  part.sequenceParallel = options.sequenceParallel;
  return part;
}

// This rank's part of the model (the whole of it but for a mesh's pipeline stage or TP
// shard; a part the mesh cannot give is refused by the constructor, which then builds the
// whole model in its place), its buffers padded to the DP world size.
Gpt<float> makeModel(const TrainOptions& options, const Mesh* mesh) {
  if (mesh == nullptr) return Gpt<float>(options.model, options.batch, 0, options.recompute);
  const ModelPart part = partOf(options, *mesh);
  const ParameterLayout layout = validatePart(options.model, part).isOk()
                                     ? ParameterLayout(options.model, part)
                                     : ParameterLayout(options.model);
  // With data parallelism the buffers come from ccMemAlloc, to be registered (data_parallel.h).
  const bool shareable = mesh->shape().dp > 1 && options.parallel.registerBuffers;
  return Gpt<float>(layout, options.batch, paddedBufferSize(layout.totalSize(), mesh->shape().dp),
                    options.recompute, shareable);
}

}  // namespace

Trainer::Trainer(const TrainOptions& options, std::unique_ptr<BatchSource> source, const Mesh* mesh)
    : options_(options),
      source_(std::move(source)),
      world_(mesh != nullptr ? mesh->shape().dp : 1),
      model_(makeModel(options, mesh)),
      dataParallel_([&]() -> std::unique_ptr<DataParallel> {
        // Every rank initialises the whole model from the seed (the same bits), then
        // ZeRO-3 keeps only its shard.
        initializeParameters(model_.parameters(), options.model, model_.layout(), options.seed);
        if (mesh == nullptr) {
          if (options.sequenceParallel) {
            status_ = invalidArgument(
                "trainer: sequence parallelism needs a mesh with a tensor-parallel size above 1");
          }
          if (options.compression.kind != Compression::kNone || options.oneBitAdam ||
              options.localSgdSteps > 0) {
            status_ = invalidArgument(
                "trainer: --compress, --local-sgd and --optimizer onebit-adam change data "
                "parallelism's reductions: they need ranks (--dp above 1 under a launcher)");
          }
          return nullptr;
        }
        status_ = compressionRefusal(options.compression, options.parallel.zeroStage);
        if (!status_.isOk()) return nullptr;
        if (options.oneBitAdam &&
            (options.parallel.zeroStage != 0 || options.compression.kind != Compression::kNone ||
             options.localSgdSteps > 0)) {
          status_ = invalidArgument(
              "trainer: --optimizer onebit-adam compresses the momentum of the whole model on "
              "every rank: it needs --zero 0, and no --compress or --local-sgd beside it");
          return nullptr;
        }
        if (options.localSgdSteps > 0 &&
            (options.parallel.zeroStage != 0 || options.compression.kind != Compression::kNone)) {
          status_ = invalidArgument(
              "trainer: --local-sgd averages whole parameters every K steps: it needs --zero 0 "
              "and no --compress (it sends no gradients at all)");
          return nullptr;
        }
        if (mesh->shape().pp > 1 && options.parallel.zeroStage > 1) {
          status_ = invalidArgument(
              "trainer: ZeRO-" + std::to_string(options.parallel.zeroStage) +
              " with pipeline parallelism: it shards gradients (and parameters) as each "
              "micro-batch's backward ends, which a pipeline interleaves with other "
              "micro-batches' forwards (Megatron and DeepSpeed refuse it too); use --zero 0 "
              "or 1 with --pp");
          return nullptr;
        }
        if (options.model.experts > 0 && mesh->shape().pp > 1 &&
            options.schedule == ScheduleKind::kZeroBubbleH1) {
          status_ = invalidArgument(
              "trainer: the zero-bubble schedule splits each block's backward in two, which "
              "mixture-of-experts blocks do not (their backward is one exchange with the "
              "experts); use --schedule 1f1b, gpipe or interleaved with --experts");
          return nullptr;
        }
        const int ep = mesh->shape().ep;
        if (ep > 1 &&
            (options.parallel.zeroStage != 0 || options.compression.kind != Compression::kNone ||
             options.oneBitAdam || options.localSgdSteps > 0)) {
          status_ = invalidArgument(
              "trainer: --ep " + std::to_string(ep) +
              " reduces each expert's gradients over the ranks that hold it, beside the dense "
              "average: not built with ZeRO, --compress, --local-sgd or onebit-adam; use --zero 0 "
              "and plain gradients with --ep");
          return nullptr;
        }
        if (ep > 1 && mesh->shape().pp > 1) {
          status_ = invalidArgument(
              "trainer: --ep with --pp is not built (each stage would need its own EP group per "
              "MoE block); use --pp 1 with --ep, or --ep 1 with --pp");
          return nullptr;
        }
        if (mesh->shape().tp > 1 || options.sequenceParallel) {
          status_ = validatePart(options.model, partOf(options, *mesh));
          if (!status_.isOk()) return nullptr;
          auto group = TensorParallelComm::create(mesh->tp());
          if (!group.isOk()) {
            status_ = group.status();
            return nullptr;
          }
          tensorParallel_ = std::move(group).value();
          model_.setTensorParallel(tensorParallel_.get());
        }
        if (ep > 1) {
          status_ = validatePart(options.model, partOf(options, *mesh));
          if (!status_.isOk()) return nullptr;
          auto group = ExpertParallelComm::create(mesh->ep());
          if (!group.isOk()) {
            status_ = group.status();
            return nullptr;
          }
          expertParallel_ = std::move(group).value();
          model_.setExpertParallel(expertParallel_.get());
        }
        // PowerSGD compresses whole matrices: its buckets are runs of whole tensors.
        DataParallelOptions parallel = options.parallel;
        parallel.alignBucketsToTensors =
            parallel.alignBucketsToTensors || options.compression.kind == Compression::kPowerSgd;
        auto strategy = makeShardingStrategy(parallel);
        if (!strategy.isOk()) {
          status_ = strategy.status();
          return nullptr;
        }
        std::unique_ptr<BucketReducer> reducer;
        if (options.compression.kind != Compression::kNone)
          reducer = std::make_unique<CompressingReducer>(options.compression);
        if (options.localSgdSteps > 0) {
          reducer = std::make_unique<LocalReducer>(0, "local SGD: parameters averaged every " +
                                                          std::to_string(options.localSgdSteps) +
                                                          " steps");
        }
        if (ep > 1) {
          std::vector<std::pair<size_t, size_t>> experts;
          for (const BlockOffsets& block : model_.layout().blocks()) {
            if (block.moe) experts.emplace_back(block.moeMlp.expertsBegin, block.moeMlp.expertsEnd);
          }
          reducer =
              std::make_unique<ExpertGradientReducer>(std::move(experts), mesh->expertDp(), ep);
        }
        if (options.oneBitAdam) {
          reducer = std::make_unique<LocalReducer>(
              options.freezeStep, "1-bit Adam: gradients averaged for " +
                                      std::to_string(options.freezeStep) +
                                      " steps, then the momentum 1-bit compressed");
        }
        auto created = DataParallel::create(mesh->dp(), model_, parallel,
                                            std::move(strategy).value(), std::move(reducer));
        if (!created.isOk()) {
          status_ = created.status();
          return nullptr;
        }
        return std::move(created).value();
      }()),
      optimizer_(dataParallel_ ? dataParallel_->optimizerStateSize() : model_.layout().totalSize(),
                 options.adamw),
      schedule_{options.lr, options.warmup, options.steps},
      inputs_(static_cast<size_t>(options.batch) * static_cast<size_t>(options.model.seq)),
      targets_(inputs_.size()) {
  mesh_ = mesh;
  if (mesh == nullptr || mesh->shape().pp == 1 || !status_.isOk()) return;
  auto plan = makePlan(options.schedule,
                       PipelineShape{mesh->shape().pp, options.gradAccum, options.virtualStages});
  if (!plan.isOk()) {
    status_ = plan.status();
    return;
  }
  auto stage = PipelineStage::create(mesh->world(), mesh->pp(), model_, plan.value(), options.batch,
                                     dataParallel_.get());
  if (!stage.isOk()) {
    status_ = stage.status();
    return;
  }
  pipeline_ = std::move(stage).value();
}

Trainer::~Trainer() {
  if (momentumCompressor_ != nullptr) (void)ccCompressorDestroy(momentumCompressor_);
}

size_t Trainer::tokensPerStep() const {
  return inputs_.size() * static_cast<size_t>(options_.gradAccum) * static_cast<size_t>(world_);
}

StepResult Trainer::step() {
  Result<StepResult> result = tryStep();
  if (!result.isOk()) {
    std::fprintf(stderr, "Trainer::step: %s\n", result.status().message().c_str());
    std::abort();
  }
  return result.value();
}

Result<StepResult> Trainer::tryStep() {
  CC_TRY(status_);
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  const Status stepped = runStep(result);
  if (!stepped.isOk()) {
    status_ = stepped;
    return stepped;
  }
  result.step = optimizer_.step();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

// The one step loop. Each parallel kind plugs in at its hooks: data parallelism starts
// the gradient reductions from the model's observer during the last micro-batch's
// backward, waits for them in finishGradients and owns the optimizer step's sharding.
Status Trainer::runStep(StepResult& result) {
  DataParallel* dp = dataParallel_.get();
  const int64_t stepIndex = optimizer_.step();
  if (dp != nullptr) {
    CC_TRY(dp->beginStep());
  } else {
    model_.zeroGradients();
  }
  model_.resetMoeStatistics();
  double lossSum = 0;
  const float microScale = 1.0f / static_cast<float>(options_.gradAccum);
  if (pipeline_) {
    PipelineStage::StepHooks hooks;
    hooks.fill = [&](int micro, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
      inputs.resize(inputs_.size());
      targets.resize(targets_.size());
      source_->fill(stepIndex * options_.gradAccum + micro, inputs, targets);
    };
    hooks.beginBackward = [&](bool communicates) { return dp->beginMicroBatch(communicates); };
    hooks.endBackward = [&] { return dp->endMicroBatch(); };
    hooks.afterCompute = [&] { return groupStatus(); };
    CC_ASSIGN_OR_RETURN(lossSum, pipeline_->runStep(hooks, microScale));
    // The loss is the last stage's; every stage learns it.
    CC_TRY(ccCall(ccAllReduce(&lossSum, &lossSum, 1, ccFloat64, ccSum, mesh_->pp(), nullptr),
                  mesh_->pp(), "pp: all-reduce of the loss"));
  }
  for (int micro = 0; micro < options_.gradAccum && !pipeline_; ++micro) {
    // The source was made with this rank's (rank, world): global batch index x world + rank.
    source_->fill(stepIndex * options_.gradAccum + micro, inputs_, targets_);
    if (dp != nullptr) CC_TRY(dp->beginMicroBatch(micro + 1 == options_.gradAccum));
    // F0, BW0, ... in the CC_TRACE timeline, as the pipeline's.
    ccComm_t traced = mesh_ != nullptr ? mesh_->world() : nullptr;
    if (traced != nullptr) (void)ccTraceRangePush(traced, ("F" + std::to_string(micro)).c_str());
    lossSum += model_.forward(inputs_, targets_, options_.batch);
    if (traced != nullptr) {
      (void)ccTraceRangePop(traced);
      (void)ccTraceRangePush(traced, ("BW" + std::to_string(micro)).c_str());
    }
    model_.backward(microScale);
    if (traced != nullptr) (void)ccTraceRangePop(traced);
    CC_TRY(groupStatus());
    if (dp != nullptr) CC_TRY(dp->endMicroBatch());
  }
  CC_ASSIGN_OR_RETURN(result.gradNorm, finishGradients());
  result.loss = lossSum / options_.gradAccum;
  if (dp != nullptr) {
    result.gradientWaitSeconds = dp->gradientWaitSeconds();
    if (pipeline_) result.pipelineWaitSeconds = pipeline_->lastWaitSeconds();
    CC_ASSIGN_OR_RETURN(result.loss, dp->average(result.loss));
  }
  if (options_.model.experts > 0) {
    CC_ASSIGN_OR_RETURN(result.moe, moeStatistics());
  }
  result.lr = schedule_.at(stepIndex);
  CC_TRY(update(result.lr, clipScale(result.gradNorm, options_.clip)));
  if (options_.localSgdSteps > 0 && dp != nullptr &&
      (stepIndex + 1) % options_.localSgdSteps == 0) {
    std::span<float> parameters = model_.parameters();
    CC_TRY(ccCall(ccAllReduce(parameters.data(), parameters.data(), parameters.size(), ccFloat32,
                              ccAvg, mesh_->dp(), nullptr),
                  mesh_->dp(), "local SGD: averaging the parameters"));
  }
  return Status::ok();
}

Status Trainer::tensorParallelStatus() const {
  return tensorParallel_ ? tensorParallel_->status() : Status::ok();
}

Status Trainer::groupStatus() const {
  CC_TRY(tensorParallelStatus());
  return expertParallel_ ? expertParallel_->status() : Status::ok();
}

int64_t MoeStepStatistics::minTokens() const {
  return tokens.empty() ? 0 : *std::min_element(tokens.begin(), tokens.end());
}

int64_t MoeStepStatistics::maxTokens() const {
  return tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
}

double MoeStepStatistics::imbalance() const {
  int64_t total = 0;
  for (int64_t count : tokens) total += count;
  if (total == 0) return 0;
  return static_cast<double>(maxTokens()) * static_cast<double>(tokens.size()) /
         static_cast<double>(total);
}

int64_t MoeStepStatistics::totalDropped() const {
  int64_t total = 0;
  for (int64_t count : dropped) total += count;
  return total;
}

Result<std::vector<MoeStepStatistics>> Trainer::moeStatistics() {
  const GptConfig& config = options_.model;
  const size_t experts = static_cast<size_t>(config.experts);
  // Per MoE block of the whole model: tokens [E], dropped [E], aux, z, micro-batches; a
  // pipeline stage fills its own blocks, and the sum over the world adds the DP ranks (and
  // the stages' disjoint blocks). Counts stay exact in doubles far beyond any run's.
  const size_t stride = 2 * experts + 3;
  std::vector<int> layers;
  for (int layer = 0; layer < config.layers; ++layer) {
    if (config.isMoe(layer)) layers.push_back(layer);
  }
  std::vector<double> sums(layers.size() * stride, 0.0);
  for (const MoeStatistics& block : model_.moeStatistics()) {
    const size_t index =
        static_cast<size_t>(std::find(layers.begin(), layers.end(), block.layer) - layers.begin());
    double* at = sums.data() + index * stride;
    for (size_t e = 0; e < experts; ++e) {
      at[e] = static_cast<double>(block.routed[e]);
      at[experts + e] = static_cast<double>(block.dropped[e]);
    }
    at[2 * experts] = block.auxLoss;
    at[2 * experts + 1] = block.zLoss;
    at[2 * experts + 2] = block.microBatches;
  }
  if (mesh_ != nullptr) {
    CC_TRY(ccCall(ccAllReduce(sums.data(), sums.data(), sums.size(), ccFloat64, ccSum,
                              mesh_->world(), nullptr),
                  mesh_->world(), "moe: all-reduce of the routing statistics"));
  }
  std::vector<MoeStepStatistics> result(layers.size());
  for (size_t index = 0; index < layers.size(); ++index) {
    const double* at = sums.data() + index * stride;
    MoeStepStatistics& out = result[index];
    out.layer = layers[index];
    for (size_t e = 0; e < experts; ++e) {
      out.tokens.push_back(static_cast<int64_t>(at[e]));
      out.dropped.push_back(static_cast<int64_t>(at[experts + e]));
    }
    const double microBatches = std::max(1.0, at[2 * experts + 2]);
    out.auxLoss = at[2 * experts] / microBatches;
    out.zLoss = at[2 * experts + 1] / microBatches;
  }
  return result;
}

Result<double> Trainer::finishGradients() {
  if (!dataParallel_) return globalNorm(model_.gradients());
  CC_ASSIGN_OR_RETURN(double norm, dataParallel_->finishGradients());
  if (expertParallel_) {
    // Each EP rank holds its experts' averaged gradients: their squares add over the EP
    // group, the dense squares count once.
    const std::span<const float> g = model_.gradients();
    double dense = 0, experts = 0;
    for (const TensorSlice& tensor : model_.layout().tensors()) {
      double squares = 0;
      for (float value : g.subspan(tensor.offset, tensor.size))
        squares += static_cast<double>(value) * value;
      (tensor.expert >= 0 ? experts : dense) += squares;
    }
    CC_TRY(ccCall(
        ccAllReduce(&experts, &experts, 1, ccFloat64, ccSum, expertParallel_->comm(), nullptr),
        expertParallel_->comm(), "ep: all-reduce of the expert gradients' norm"));
    norm = std::sqrt(dense + experts);
  }
  if (!pipeline_) return norm;
  // Each stage's norm leaves out its tied copy; the squares add over the stages.
  double squares = norm * norm;
  CC_TRY(ccCall(ccAllReduce(&squares, &squares, 1, ccFloat64, ccSum, mesh_->pp(), nullptr),
                mesh_->pp(), "pp: all-reduce of the gradient norm"));
  return std::sqrt(squares);
}

Status Trainer::update(float lr, float gradientScale) {
  if (dataParallel_ && options_.oneBitAdam && optimizer_.step() >= options_.freezeStep) {
    ccComm_t dp = mesh_->dp();
    if (momentumCompressor_ == nullptr) {
      const size_t rows = 1, cols = model_.layout().totalSize();
      const ccCompressConfig_t config{ccCompressOneBit, 0, 0, 0};
      CC_TRY(ccCall(ccCompressorCreate(dp, &config, 1, &rows, &cols, &momentumCompressor_), dp,
                    "1-bit Adam: the momentum's compressor"));
    }
    return optimizer_.updateFrozenVariance(
        model_.parameters(), model_.gradients(), model_.layout(), lr, gradientScale,
        [&](std::span<float> momentum) {
          return ccCall(ccCompressedAllReduce(momentumCompressor_, momentum.data(), nullptr), dp,
                        "1-bit Adam: compressed all-reduce of the momentum");
        });
  }
  if (dataParallel_) return dataParallel_->update(optimizer_, lr, gradientScale);
  optimizer_.update(model_.parameters(), model_.gradients(), model_.layout(), lr, gradientScale);
  return Status::ok();
}

double Trainer::evaluate(const BatchSource& source, int batches) {
  if (!status_.isOk()) return std::nan("");  // a refused set-up or a failed collective
  // ZeRO-3 evaluates with every layer gathered (the observer is idle outside a step).
  if (dataParallel_ && status_.isOk()) status_ = dataParallel_->gatherParameters();
  double total = 0;
  for (int index = 0; index < batches && status_.isOk(); ++index) {
    source.fill(index, inputs_, targets_);
    if (!pipeline_) {
      total += model_.forward(inputs_, targets_, options_.batch);
      continue;
    }
    Result<double> loss = pipeline_->forwardOnly(inputs_, targets_);  // the last stage's
    if (loss.isOk()) total += loss.value();
    status_ = loss.status();
  }
  if (pipeline_ && status_.isOk()) {
    status_ = ccCall(ccAllReduce(&total, &total, 1, ccFloat64, ccSum, mesh_->pp(), nullptr),
                     mesh_->pp(), "pp: all-reduce of the evaluation loss");
  }
  if (status_.isOk()) status_ = groupStatus();
  if (dataParallel_ && status_.isOk()) status_ = dataParallel_->releaseParameters();
  return total / batches;
}

Result<std::vector<float>> Trainer::fullParameters() {
  if (dataParallel_) CC_TRY(dataParallel_->gatherParameters());
  std::vector<float> parameters(model_.parameters().begin(), model_.parameters().end());
  if (dataParallel_) CC_TRY(dataParallel_->releaseParameters());
  return parameters;
}

Result<std::vector<float>> Trainer::assembleWhole(std::span<const float> local) {
  const ParameterLayout& layout = model_.layout();
  if (layout.part().isWhole(options_.model)) return std::vector<float>(local.begin(), local.end());
  const ParameterLayout whole(options_.model);
  const size_t size = layout.totalSize();
  const int shards = tensorParallel_ ? tensorParallel_->size() : 1;
  std::vector<float> gathered(local.begin(), local.end());
  if (shards > 1) {
    gathered.resize(size * static_cast<size_t>(shards));
    CC_TRY(ccCall(ccAllGather(local.data(), gathered.data(), size, ccFloat32,
                              tensorParallel_->comm(), nullptr),
                  tensorParallel_->comm(), "tp: all-gather of the shards for a checkpoint"));
  }
  std::vector<float> values(whole.totalSize(), 0.0f);
  for (int rank = 0; rank < shards; ++rank) {
    placePart<float>(
        layout, whole, rank,
        std::span<const float>(gathered).subspan(static_cast<size_t>(rank) * size, size), values);
  }
  CC_TRY(gatherExperts(local, values));
  CC_TRY(gatherStages(values));
  return values;
}

Status Trainer::gatherExperts(std::span<const float> local, std::vector<float>& whole) {
  if (!expertParallel_) return Status::ok();
  const ParameterLayout& layout = model_.layout();
  const ParameterLayout wholeLayout(options_.model);
  const size_t size = layout.totalSize();
  const int ranks = expertParallel_->size();
  std::vector<float> gathered(size * static_cast<size_t>(ranks));
  CC_TRY(ccCall(
      ccAllGather(local.data(), gathered.data(), size, ccFloat32, expertParallel_->comm(), nullptr),
      expertParallel_->comm(), "ep: all-gather of the experts for a checkpoint"));
  for (int rank = 0; rank < ranks; ++rank) {
    ModelPart part = layout.part();
    part.epRank = rank;
    const ParameterLayout rankLayout(options_.model, part);
    for (const TensorSlice& tensor : rankLayout.tensors()) {
      if (tensor.expert < 0) continue;
      const TensorSlice& target = wholeLayout.tensors()[tensor.fullIndex];
      std::copy_n(gathered.begin() +
                      static_cast<std::ptrdiff_t>(static_cast<size_t>(rank) * size + tensor.offset),
                  tensor.size, whole.begin() + static_cast<std::ptrdiff_t>(target.offset));
    }
  }
  return Status::ok();
}

Status Trainer::gatherStages(std::vector<float>& whole) {
  if (!pipeline_) return Status::ok();
  ccComm_t pp = mesh_->pp();
  if (pipeline_->stage() != 0) {
    return ccCall(ccSend(whole.data(), whole.size(), ccFloat32, 0, pp, nullptr), pp,
                  "pp: send of a stage's tensors for a checkpoint");
  }
  const ParameterLayout wholeLayout(options_.model);
  std::vector<float> received(whole.size());
  for (int stage = 1; stage < pipeline_->stages(); ++stage) {
    CC_TRY(ccCall(ccRecv(received.data(), received.size(), ccFloat32, stage, pp, nullptr), pp,
                  "pp: receive of stage " + std::to_string(stage) + "'s tensors for a checkpoint"));
    const ParameterLayout stageLayout(options_.model, mesh_->stagePart(options_.model, stage));
    for (const TensorSlice& tensor : stageLayout.tensors()) {
      if (tensor.tiedCopy) continue;  // stage 0 holds the same wte
      const TensorSlice& target = wholeLayout.tensors()[tensor.fullIndex];
      std::copy_n(received.begin() + static_cast<std::ptrdiff_t>(target.offset), target.size,
                  whole.begin() + static_cast<std::ptrdiff_t>(target.offset));
    }
  }
  return Status::ok();
}

std::vector<float> Trainer::cutLocal(std::span<const float> whole) const {
  std::vector<float> local(model_.layout().totalSize());
  takePart<float>(model_.layout(), ParameterLayout(options_.model), whole, local);
  return local;
}

Status Trainer::save(const std::string& path) {
  if (!dataParallel_) return saveCheckpoint(path, model_, &optimizer_);
  CC_TRY(status_);
  DataParallel& dp = *dataParallel_;
  std::vector<float> m, v;
  CC_TRY(dp.gatherMoments(optimizer_, m, v));
  CC_TRY(dp.gatherParameters());
  // Every TP group assembles (each is its own communicator); DP rank 0's TP rank 0 writes.
  CC_ASSIGN_OR_RETURN(std::vector<float> parameters, assembleWhole(model_.parameters()));
  CC_ASSIGN_OR_RETURN(m, assembleWhole(m));
  CC_ASSIGN_OR_RETURN(v, assembleWhole(v));
  Status saved = Status::ok();
  const bool writer = dp.rank() == 0 && (!tensorParallel_ || tensorParallel_->rank() == 0) &&
                      (!pipeline_ || pipeline_->stage() == 0);
  if (writer) {
    AdamW full(0, options_.adamw);
    full.restore(std::move(m), std::move(v), optimizer_.step());
    saved = saveCheckpoint(path, options_.model, parameters, &full);
  }
  CC_TRY(dp.releaseParameters());
  // Nobody goes on before the files exist (a rank that dies next can be resumed from them).
  CC_TRY(dp.barrier());
  if (tensorParallel_) {
    CC_TRY(ccCall(ccBarrier(tensorParallel_->comm(), nullptr), tensorParallel_->comm(),
                  "tp: barrier after a checkpoint"));
  }
  if (pipeline_) {
    CC_TRY(ccCall(ccBarrier(mesh_->pp(), nullptr), mesh_->pp(), "pp: barrier after a checkpoint"));
  }
  return saved;
}

Status Trainer::load(const std::string& path) {
  if (!dataParallel_) return loadCheckpoint(path, model_, &optimizer_);
  CC_TRY(status_);
  DataParallel& dp = *dataParallel_;
  const size_t total = ParameterLayout(options_.model).totalSize();
  std::vector<float> parameters(total);
  AdamW full(total, options_.adamw);
  bool loadedOptimizer = false;
  CC_TRY(loadCheckpoint(path, options_.model, parameters, &full, &loadedOptimizer));
  const std::vector<float> local = cutLocal(parameters);
  std::copy(local.begin(), local.end(), model_.parameters().begin());
  dp.shardParameters();
  if (loadedOptimizer) {
    optimizer_.restore(dp.shardOf(cutLocal(full.firstMoment())),
                       dp.shardOf(cutLocal(full.secondMoment())), full.step());
  }
  return Status::ok();
}

}  // namespace cc::parallel
