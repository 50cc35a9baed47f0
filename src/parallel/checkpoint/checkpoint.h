// cc's checkpoints: the model as a safetensors file with GPT-2's tensor names and layouts
// (wte.weight [V, C] without the padded rows, Conv1D weights [in, out]) plus the model
// shape in its metadata, and beside it (optimizerPath()) the AdamW moments over the whole
// parameter buffer and the step. Loading validates everything against the expected layout
// before it changes anything, so a bad file leaves the run as it was.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "parallel/model/config.h"
#include "parallel/model/gpt.h"
#include "parallel/optim/adamw.h"

namespace cc::parallel {

// "run.safetensors" -> "run.optim.safetensors"; any other name gets ".optim" appended.
std::string optimizerPath(const std::string& modelPath);

// Writes the model file and, when optimizer is given, the optimizer file (each atomic).
Status saveCheckpoint(const std::string& modelPath, const Gpt<float>& model,
                      const AdamW* optimizer);
// The same from the whole model's parameters in ParameterLayout(config)'s order (a
// sharded run assembles them first); the optimizer, if given, holds the whole moments.
Status saveCheckpoint(const std::string& modelPath, const GptConfig& config,
                      std::span<const float> parameters, const AdamW* optimizer);

// The model shape a checkpoint was written with (from its metadata).
Result<GptConfig> readCheckpointConfig(const std::string& modelPath);

// Loads the model's parameters, and the optimizer's state when `optimizer` is given and
// the optimizer file exists (`loadedOptimizer` says whether it did). All or nothing.
Status loadCheckpoint(const std::string& modelPath, Gpt<float>& model, AdamW* optimizer,
                      bool* loadedOptimizer = nullptr);
// The same into the whole model's parameters in ParameterLayout(config)'s order.
Status loadCheckpoint(const std::string& modelPath, const GptConfig& config,
                      std::span<float> parameters, AdamW* optimizer,
                      bool* loadedOptimizer = nullptr);

}  // namespace cc::parallel
