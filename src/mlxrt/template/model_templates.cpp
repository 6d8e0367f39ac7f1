// Reading a model directory's chat templates and special tokens the way transformers 5 loads
// them, without the tokenizer library.
#include <algorithm>
#include <fstream>

#include "mlxrt/template/chat_template.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::tmpl {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

const char* const kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                         "pad_token", "cls_token", "mask_token"};

ordered_json read_ordered(const fs::path& path) {
  std::string text = read_text_file(path);
  try {
    return ordered_json::parse(text);
  } catch (const ordered_json::exception& e) {
    throw ConfigError(path.string() + ": invalid JSON: " + e.what());
  }
}

/** A special token as a string: a plain string, or an AddedToken object's "content". */
std::optional<std::string> token_text(const ordered_json& v, const fs::path& file, const char* key) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw ConfigError(file.string() + ": key '" + key + "' must be a string or an AddedToken object with 'content'");
}

}  // namespace

ordered_json read_special_tokens(const fs::path& model_dir) {
  ordered_json out = ordered_json::object();
  fs::path config_path = model_dir / "tokenizer_config.json";
  ordered_json config = fs::exists(config_path) ? read_ordered(config_path) : ordered_json::object();
  if (!config.is_object()) throw ConfigError(config_path.string() + ": expected a JSON object");
  fs::path map_path = model_dir / "special_tokens_map.json";
  ordered_json map = ordered_json::object();
  // transformers reads special_tokens_map.json only for configs without added_tokens_decoder.
  if (!config.contains("added_tokens_decoder") && fs::exists(map_path)) {
    map = read_ordered(map_path);
    if (!map.is_object()) throw ConfigError(map_path.string() + ": expected a JSON object");
  }
  for (const char* key : kSpecialTokenKeys) {
    std::optional<std::string> value;
    if (config.contains(key)) value = token_text(config[key], config_path, key);
    if (map.contains(key) && !map[key].is_null()) value = token_text(map[key], map_path, key);
    if (value) out[key] = *value;
  }
  return out;
}

ModelChatTemplates read_model_chat_templates(const fs::path& model_dir) {
  ModelChatTemplates result;
  result.special_tokens = read_special_tokens(model_dir);
  // Template files take priority over the templates inside tokenizer_config.json.
  fs::path jinja = model_dir / "chat_template.jinja";
  if (fs::exists(jinja)) {
    result.templates["default"] = read_text_file(jinja);
    result.source = jinja;
  }
  fs::path extra_dir = model_dir / "additional_chat_templates";
  if (fs::is_directory(extra_dir)) {
    for (const auto& entry : fs::directory_iterator(extra_dir)) {
      if (entry.path().extension() != ".jinja") continue;
      result.templates[entry.path().stem().string()] = read_text_file(entry.path());
    }
  }
  if (!result.templates.empty()) return result;
  fs::path config_path = model_dir / "tokenizer_config.json";
  if (!fs::exists(config_path)) return result;
  ordered_json config = read_ordered(config_path);
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) return result;
  const ordered_json& ct = config["chat_template"];
  result.source = config_path;
  if (ct.is_string()) {
    result.templates["default"] = ct.get<std::string>();
  } else if (ct.is_array()) {
    for (std::size_t i = 0; i < ct.size(); ++i) {
      const auto& t = ct[i];
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("template") ||
          !t["template"].is_string())
        throw ConfigError(config_path.string() + ": chat_template[" + std::to_string(i) +
                          "] must be an object with string 'name' and 'template'");
      result.templates[t["name"].get<std::string>()] = t["template"].get<std::string>();
    }
  } else if (ct.is_object()) {
    for (auto it = ct.begin(); it != ct.end(); ++it) {
      if (!it.value().is_string())
        throw ConfigError(config_path.string() + ": chat_template." + it.key() + " must be a string");
      result.templates[it.key()] = it.value().get<std::string>();
    }
  } else {
    throw ConfigError(config_path.string() + ": key 'chat_template' must be a string or a list of {name, template}");
  }
  return result;
}

std::optional<std::string> select_chat_template(const ModelChatTemplates& templates,
                                                const std::optional<std::string>& name, bool have_tools) {
  const auto& t = templates.templates;
  if (name) {
    auto it = t.find(*name);
    if (it != t.end()) return it->second;
    std::string names;
    for (const auto& kv : t) names += (names.empty() ? "" : ", ") + kv.first;
    throw UsageError("no chat template named '" + *name + "'" +
                     (names.empty() ? std::string(" (the model has none)") : " (available: " + names + ")"));
  }
  if (t.empty()) return std::nullopt;
  if (have_tools && t.count("tool_use")) return t.at("tool_use");
  if (t.count("default")) return t.at("default");
  std::string names;
  for (const auto& kv : t) names += (names.empty() ? "" : ", ") + kv.first;
  throw UsageError("the model has several chat templates and none is named 'default'; pick one of: " + names);
}

std::optional<ChatTemplate> load_chat_template(const fs::path& model_dir, std::optional<std::string> name,
                                               bool have_tools) {
  ModelChatTemplates templates = read_model_chat_templates(model_dir);
  std::optional<std::string> source = select_chat_template(templates, name, have_tools);
  if (!source) return std::nullopt;
  std::string label = templates.source.empty() ? (model_dir / "chat_template").string() : templates.source.string();
  if (name) label += " (" + *name + ")";
  return ChatTemplate::parse(*source, label);
}

}  // namespace mlxrt::tmpl
