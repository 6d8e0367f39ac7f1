// Ports of mlx_lm/utils.py's load_config, save, save_model, make_shards, save_config and
// create_model_card (mlx-lm 0.32.2).
#include "mlxrt/convert/mlx_checkpoint_writer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <unordered_map>

#include <mlx/io.h>
#include <mlx/memory.h>
#include <mlx/transforms.h>

#include "mlxrt/convert/progress.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"
#include "mlxrt/util/python_json.h"

namespace mlxrt::convert {

namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

// The files of a tokenizer as the Hugging Face loaders find them; copied byte for byte.
bool is_tokenizer_file(const std::string& name) {
  static const char* const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                      "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt",
                                      "tokenizer.model", "spiece.model", "tiktoken.model",
                                      "chat_template.jinja", "chat_template.json"};
  for (const char* n : names)
    if (name == n) return true;
  return name.size() > 9 && name.compare(name.size() - 9, 9, ".tiktoken") == 0;
}

ordered_json read_ordered_json(const fs::path& path) {
  const std::string text = read_text_file(path);
  try {
    return ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

// load_config: config.json, with generation_config.json's eos_token_id when it has a true one.
ordered_json load_source_config(const fs::path& dir) {
  auto config = read_ordered_json(dir / "config.json");
  if (!config.is_object()) throw ConfigError((dir / "config.json").string() + ": expected a JSON object");
  const auto gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path)) {
    ordered_json gen;
    try {
      gen = ordered_json::parse(read_text_file(gen_path));
    } catch (const nlohmann::json::exception&) {
      // load_config ignores a generation_config.json that is not JSON.
    }
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const auto& eos = gen["eos_token_id"];
      const bool truthy = !(eos.is_null() || (eos.is_boolean() && !eos.get<bool>()) ||
                            (eos.is_number() && eos.get<double>() == 0) || (eos.is_array() && eos.empty()) ||
                            (eos.is_string() && eos.get<std::string>().empty()));
      if (truthy) config["eos_token_id"] = eos;
    }
  }
  // load_model: a quantization_config kept under text_config moves to the top level, and the
  // legacy mxfp4 / mxfp8 quant methods become an MLX quantization section.
  if (!config.contains("quantization_config") && config.contains("text_config") && config["text_config"].is_object() &&
      config["text_config"].contains("quantization_config"))
    config["quantization_config"] = config["text_config"]["quantization_config"];
  if (!config.contains("quantization") && config.contains("quantization_config") &&
      config["quantization_config"].is_object()) {
    const std::string method = config["quantization_config"].value("quant_method", "");
    if (method == "mxfp4" || method == "mxfp8") {
      ordered_json q{{"group_size", 32}, {"bits", method == "mxfp4" ? 4 : 8}, {"mode", method}};
      config["quantization"] = q;
      config["quantization_config"] = q;
    }
  }
  return config;
}

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f.flush()) throw Error(path.string() + ": cannot write");
}

// create_model_card: the "mlx" library card (a repo id becomes base_model).
std::string model_card(const std::optional<std::string>& repo) {
  std::string card = "---\nlanguage: en\n";
  if (repo) card += "base_model: " + *repo + "\n";
  return card + "library_name: mlx\npipeline_tag: text-generation\ntags:\n- mlx\n---\n";
}

std::string shard_file_name(size_t i, size_t count) {
  if (count == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, count);
  return buf;
}

}  // namespace

SavedCheckpoint save_mlx_checkpoint(const fs::path& dir, MlxParameters params, ordered_json config,
                                    const fs::path& source, const std::optional<std::string>& repo,
                                    uint64_t max_shard_bytes, bool progress) {
  // save_model: shards of at most max_shard_bytes in parameter order (a larger tensor alone).
  std::vector<std::vector<size_t>> shards;
  uint64_t shard_size = 0;
  const auto& list = params.parameters();
  for (size_t i = 0; i < list.size(); ++i) {
    const uint64_t n = list[i].value.nbytes();
    if (shards.empty() || shard_size + n > max_shard_bytes) {
      shards.emplace_back();
      shard_size = 0;
    }
    shards.back().push_back(i);
    shard_size += n;
  }
  SavedCheckpoint summary;
  summary.shards = static_cast<int>(shards.size());
  ordered_json index{{"metadata", {{"total_size", params.total_bytes()}, {"total_parameters", params.total_parameters()}}},
                     {"weight_map", ordered_json::object()}};
  std::map<std::string, std::string> weight_map;
  {
    Progress bar("writing", list.size(), progress);
    size_t done = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
      const auto name = shard_file_name(s, shards.size());
      // Inserted in parameter order, as mlx.core.save_safetensors receives the shard's dict: the
      // map's iteration order (and so the file's data order) follows from it.
      std::unordered_map<std::string, mx::array> arrays;
      for (size_t i : shards[s]) {
        mx::eval(list[i].value);
        bar.update(++done, list[i].name);
        arrays.insert({list[i].name, list[i].value});
        weight_map[list[i].name] = name;
        summary.bytes += list[i].value.nbytes();
        ++summary.tensors;
      }
      try {
        mx::save_safetensors((dir / name).string(), std::move(arrays), {{"format", "mlx"}});
      } catch (const std::exception& e) {
        throw Error(dir.string() + ": cannot write " + name + " (" + e.what() + ")");
      }
      for (size_t i : shards[s]) params.release(i);
      mx::clear_cache();  // the freed shard's buffers go back to the system, not to MLX's cache
    }
  }
  for (const auto& [k, v] : weight_map) index["weight_map"][k] = v;
  util::DumpOptions indent4;
  indent4.indent = 4;
  write_text(dir / "model.safetensors.index.json", util::python_dumps(index, indent4));

  // save_config: no _name_or_path, no vision_config (mlxrt's families are text models), the
  // quantization section mirrored, top-level keys sorted.
  config.erase("_name_or_path");
  config.erase("vision_config");
  if (config.contains("quantization")) config["quantization_config"] = config["quantization"];
  std::vector<std::string> keys;
  for (auto it = config.begin(); it != config.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  ordered_json sorted = ordered_json::object();
  for (const auto& k : keys) sorted[k] = config[k];
  write_text(dir / "config.json", util::python_dumps(sorted, indent4));

  // The tokenizer's files, the model's *.py files and generation_config.json, as they are.
  for (const auto& entry : fs::directory_iterator(source)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const bool py = name.size() > 3 && name.compare(name.size() - 3, 3, ".py") == 0;
    const bool tokenizer = is_tokenizer_file(name);
    if (!tokenizer && !py && name != "generation_config.json") continue;
    fs::copy_file(entry.path(), dir / name, fs::copy_options::overwrite_existing);
    if (tokenizer) ++summary.tokenizer_files;
  }
  write_text(dir / "README.md", model_card(repo));
  return summary;
}

}  // namespace mlxrt::convert
