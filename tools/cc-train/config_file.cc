#include "config_file.h"

#include <yaml-cpp/yaml.h>

#include <map>

namespace cc::parallel::train_tool {

namespace {

// What a key means: the flag it sets, and for a yes/no key the flags true and false stand
// for (empty: nothing).
struct KeyMeaning {
  std::string flag;
  bool boolean = false;
  std::string whenFalse;  // a yes/no key's flag when false ("--no-overlap")
};

const std::map<std::string, std::map<std::string, KeyMeaning>>& sections() {
  static const std::map<std::string, std::map<std::string, KeyMeaning>> known = {
      {"parallel_config",
       {{"data_parallel", {"--dp"}},
        {"tensor_parallel", {"--tp"}},
        {"pipeline_parallel", {"--pp"}},
        {"pipeline_layers", {"--pp-layers"}},
        {"expert_parallel", {"--ep"}},
        {"sequence_parallel", {"--sp", true}},
        {"schedule", {"--schedule"}},
        {"virtual_stages", {"--virtual-stages"}}}},
      {"zero_config",
       {{"stage", {"--zero"}},
        {"bucket_mb", {"--bucket-mb"}},
        {"overlap", {"", true, "--no-overlap"}}}},
      {"model",
       {{"layers", {"--layers"}},
        {"heads", {"--heads"}},
        {"width", {"--width"}},
        {"vocab", {"--vocab"}},
        {"seq", {"--seq"}},
        {"experts", {"--experts"}},
        {"top_k", {"--top-k"}},
        {"moe_every", {"--moe-every"}},
        {"expert_width", {"--expert-width"}},
        {"capacity_factor", {"--capacity-factor"}},
        {"aux_loss_coef", {"--aux-loss-coef"}},
        {"z_loss_coef", {"--z-loss-coef"}}}},
      {"batch", {{"micro_batch_size", {"--batch"}}, {"grad_accum", {"--grad-accum"}}}},
      {"optimizer",
       {{"lr", {"--lr"}},
        {"warmup", {"--warmup"}},
        {"weight_decay", {"--weight-decay"}},
        {"clip", {"--clip"}},
        {"type", {"--optimizer"}},
        {"freeze_step", {"--freeze-step"}}}},
      {"compression_config",
       {{"kind", {"--compress"}},
        {"rank", {"--compress-rank"}},
        {"start_step", {"--compress-start"}},
        {"local_sgd", {"--local-sgd"}}}},
      {"training",
       {{"steps", {"--steps"}},
        {"seed", {"--seed"}},
        {"recompute", {"--recompute", true}},
        {"threads", {"--threads"}},
        {"data", {"--data"}}}},
  };
  return known;
}

std::string namesOf(const std::map<std::string, KeyMeaning>& keys) {
  std::string names;
  for (const auto& [name, meaning] : keys) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

Result<std::vector<ConfigFlag>> readConfigFile(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return invalidArgument("--config: cannot open " + path);
  } catch (const YAML::Exception& error) {
    return invalidArgument("--config " + path + ": " + error.what());
  }
  const std::string where = "--config " + path + ": ";
  if (root.IsNull()) return std::vector<ConfigFlag>{};
  if (!root.IsMap()) return invalidArgument(where + "the file is not a map of sections");
  std::string sectionNames;
  for (const auto& [name, keys] : sections())
    sectionNames += (sectionNames.empty() ? "" : ", ") + name;
  std::vector<ConfigFlag> flags;
  for (const auto& section : root) {
    const std::string sectionName = section.first.as<std::string>();
    const auto known = sections().find(sectionName);
    if (known == sections().end()) {
      return invalidArgument(where + "unknown key " + sectionName + " (the sections are " +
                             sectionNames + ")");
    }
    if (!section.second.IsMap()) return invalidArgument(where + sectionName + " is not a map");
    for (const auto& entry : section.second) {
      const std::string name = entry.first.as<std::string>();
      const std::string key = sectionName + "." + name;
      const auto meaning = known->second.find(name);
      if (meaning == known->second.end()) {
        return invalidArgument(where + "unknown key " + key + " (" + sectionName + " takes " +
                               namesOf(known->second) + ")");
      }
      const KeyMeaning& m = meaning->second;
      std::string value;
      if (m.flag == "--pp-layers" && entry.second.IsSequence()) {
        // A list of blocks per stage, as the flag's commas.
        for (const auto& item : entry.second) {
          if (!item.IsScalar()) return invalidArgument(where + key + " is not a list of numbers");
          value += (value.empty() ? "" : ",") + item.as<std::string>();
        }
      } else if (!entry.second.IsScalar()) {
        return invalidArgument(where + key + " is not a single value");
      } else {
        value = entry.second.as<std::string>();
      }
      if (m.boolean) {
        bool on = false;
        if (!YAML::convert<bool>::decode(entry.second, on)) {
          return invalidArgument(where + key + ": \"" + value + "\" is not true or false");
        }
        const std::string& flag = on ? m.flag : m.whenFalse;
        if (!flag.empty()) flags.push_back({key, flag, ""});
        continue;
      }
      flags.push_back({key, m.flag, value});
    }
  }
  return flags;
}

}  // namespace cc::parallel::train_tool
