// cc-train --config FILE: a YAML (or JSON, which YAML reads too) file in the shape users bring
// from DeepSpeed- and Megatron-style configs, read with yaml-cpp:
//
//   parallel_config: {data_parallel: 2, tensor_parallel: 2, pipeline_parallel: 2,
//                     pipeline_layers: [1, 3], expert_parallel: 1, sequence_parallel: true,
//                     schedule: 1f1b, virtual_stages: 1}
//   zero_config: {stage: 1, bucket_mb: 25, overlap: true}
//   model: {layers: 4, heads: 4, width: 256, vocab: 256, seq: 128, experts: 0, top_k: 2,
//           moe_every: 1, expert_width: 1024, capacity_factor: 1.25, aux_loss_coef: 0.01,
//           z_loss_coef: 0}
//   batch: {micro_batch_size: 8, grad_accum: 8}
//   optimizer: {lr: 3e-3, warmup: 20, weight_decay: 0.1, clip: 1.0}
//   training: {steps: 200, seed: 1337, recompute: false, threads: 1, data: FILE.bin}
//
// Each key stands for one of cc-train's flags; the file becomes those flags, read before the
// command line's, so flags override the file and every range and rule is the flags' own.
// An unknown key, a section that is not a map, a list where a value belongs, or a value the
// flag refuses is an error naming the file and the key.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cc::parallel::train_tool {

struct ConfigFlag {
  std::string key;    // "parallel_config.data_parallel", for the messages
  std::string flag;   // "--dp"
  std::string value;  // empty for a flag that takes none ("--sp")
};

// The flags the file stands for, in the file's order.
Result<std::vector<ConfigFlag>> readConfigFile(const std::string& path);

}  // namespace cc::parallel::train_tool
