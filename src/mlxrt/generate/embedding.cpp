// Sentence-transformers' Pooling and Normalize modules (last-token and mean pooling) over the
// hidden states of mlx-lm's model.model(...).
#include "mlxrt/generate/embedding.h"

#include <cstdint>
#include <cstring>

#include <mlx/linalg.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::generate {

namespace {

namespace fs = std::filesystem;

// The pooling modes of sentence_transformers.models.Pooling's config.json.
constexpr const char* kModes[] = {"pooling_mode_cls_token",         "pooling_mode_mean_tokens",
                                  "pooling_mode_max_tokens",        "pooling_mode_mean_sqrt_len_tokens",
                                  "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"};

std::string module_type(const json& m, const std::string& source, size_t i) {
  if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
    throw ConfigError(source + ": entry " + std::to_string(i) + " must be an object with a string 'type'");
  return m["type"].get<std::string>();
}

void read_pooling(const fs::path& file, EmbeddingConfig& out) {
  const json raw = read_json_file(file);
  if (!raw.is_object()) throw ConfigError(file.string() + ": expected a JSON object");
  JsonFields f(raw, file.string());
  std::vector<std::string> on;
  for (const char* mode : kModes)
    if (f.value_or<bool>(mode, false)) on.push_back(mode);
  if (on.size() != 1 || (on[0] != "pooling_mode_lasttoken" && on[0] != "pooling_mode_mean_tokens")) {
    std::string list;
    for (const auto& m : on) list += (list.empty() ? "" : ", ") + m;
    throw UnsupportedError(file.string() + ": pooling " + (on.empty() ? std::string("(no mode set)") : list) +
                           " is not supported; supported: exactly one of pooling_mode_lasttoken, "
                           "pooling_mode_mean_tokens");
  }
  out.pooling = on[0] == "pooling_mode_lasttoken" ? Pooling::last_token : Pooling::mean;
  if (auto w = f.optional<int>("word_embedding_dimension")) out.width = *w;
}

std::optional<int> config_hidden_size(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  if (!fs::exists(file)) return std::nullopt;
  const json raw = read_json_file(file);
  const json* fields = &raw;
  if (raw.is_object() && !raw.contains("hidden_size") && raw.contains("text_config") && raw["text_config"].is_object())
    fields = &raw["text_config"];
  if (fields->is_object() && fields->contains("hidden_size") && (*fields)["hidden_size"].is_number_integer())
    return (*fields)["hidden_size"].get<int>();
  return std::nullopt;
}

}  // namespace

const char* pooling_name(Pooling p) { return p == Pooling::last_token ? "last" : "mean"; }

Pooling parse_pooling(const std::string& name, const std::string& what) {
  if (name == "last" || name == "lasttoken" || name == "last_token") return Pooling::last_token;
  if (name == "mean") return Pooling::mean;
  throw UsageError(what + ": pooling '" + name + "' is not one of: last, mean");
}

EmbeddingConfig read_embedding_config(const fs::path& model_dir) {
  EmbeddingConfig out;
  out.width = config_hidden_size(model_dir);
  const fs::path modules_file = model_dir / "modules.json";
  if (!fs::exists(modules_file)) return out;
  const json modules = read_json_file(modules_file);
  const std::string source = modules_file.string();
  if (!modules.is_array()) throw ConfigError(source + ": expected a list of modules");
  out.source = source;
  out.normalize = false;
  bool pooled = false;
  for (size_t i = 0; i < modules.size(); ++i) {
    const std::string type = module_type(modules[i], source, i);
    const std::string path = modules[i].contains("path") && modules[i]["path"].is_string()
                                 ? modules[i]["path"].get<std::string>() : std::string();
    if (type == "sentence_transformers.models.Transformer") {
      if (i != 0) throw UnsupportedError(source + ": the Transformer module must come first");
    } else if (type == "sentence_transformers.models.Pooling") {
      if (pooled || out.normalize) throw UnsupportedError(source + ": one Pooling module before Normalize is supported");
      read_pooling(model_dir / path / "config.json", out);
      pooled = true;
    } else if (type == "sentence_transformers.models.Normalize") {
      out.normalize = true;
    } else {
      throw UnsupportedError(source + ": module " + std::to_string(i) + " of type '" + type +
                             "' is not supported (supported: Transformer, Pooling, Normalize)");
    }
  }
  if (!pooled) throw UnsupportedError(source + ": no Pooling module (a decoder's hidden states need pooling)");
  return out;
}

mx::array embed_tokens(model::CausalLM& model, const std::vector<int32_t>& tokens, const EmbeddingConfig& config,
                       std::optional<int> dimensions) {
  if (tokens.empty()) throw UsageError("the input has no tokens");
  model::check_token_ids(model, tokens);
  auto ids = mx::array(tokens.data(), {1, static_cast<int>(tokens.size())}, mx::int32);
  auto h = model.hidden_states(ids, nullptr);  // [1, L, D]
  const int length = h.shape(1), width = h.shape(2);
  if (dimensions && (*dimensions < 1 || *dimensions > width))
    throw UsageError("dimensions must be between 1 and the model's embedding width " + std::to_string(width) +
                     ", got " + std::to_string(*dimensions));
  mx::array v = config.pooling == Pooling::last_token
                    ? mx::reshape(mx::slice(h, {0, length - 1, 0}, {1, length, width}), {width})  // h[0, -1]
                    : mx::mean(mx::reshape(h, {length, width}), 0);                                 // mean(h[0], 0)
  if (dimensions && *dimensions < width) v = mx::slice(v, {0}, {*dimensions});
  if (config.normalize) v = mx::divide(v, mx::maximum(mx::linalg::norm(v), mx::array(1e-12f, v.dtype())));
  return mx::astype(v, mx::float32);
}

std::vector<float> to_floats(const mx::array& v) {
  auto c = mx::astype(v, mx::float32);
  mx::eval(c);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.size());
}

std::string floats_base64(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  // float32 little-endian, as numpy's tobytes() on the machines MLX runs on.
  std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t b0 = static_cast<unsigned char>(bytes[i]);
    const uint32_t b1 = i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1]) : 0;
    const uint32_t b2 = i + 2 < bytes.size() ? static_cast<unsigned char>(bytes[i + 2]) : 0;
    const uint32_t n = (b0 << 16) | (b1 << 8) | b2;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

}  // namespace mlxrt::generate
