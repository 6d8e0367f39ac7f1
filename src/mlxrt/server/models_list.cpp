// Port of APIHandler.handle_models_request (mlx_lm/server.py @ mlx-lm 0.32.2); the cache scan
// follows huggingface_hub's layout: <cache>/models--org--name/{refs/main, snapshots/<sha>/}.
#include "mlxrt/server/models_list.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "mlxrt/io/hf_cache.h"
#include "mlxrt/io/model_config.h"
#include "mlxrt/model/profile.h"

namespace mlxrt::server {

namespace fs = std::filesystem;

namespace {

/** "models--org--name" with refs/main naming a snapshot that holds the files mlx-lm checks. */
std::optional<std::string> mlx_repo_id(const fs::path& repo) {
  std::string name = repo.filename().string();
  if (name.rfind("models--", 0) != 0) return std::nullopt;
  std::ifstream ref(repo / "refs" / "main");
  std::string sha;
  if (!(ref >> sha)) return std::nullopt;
  std::error_code ec;
  for (const char* f : {"config.json", "model.safetensors.index.json", "tokenizer_config.json"})
    if (!fs::exists(repo / "snapshots" / sha / f, ec)) return std::nullopt;
  // Only what this server can load: a config it reads, of a model_type it runs.
  try {
    model::resolve_profile(io::ModelConfig::load(repo / "snapshots" / sha));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string id = name.substr(8);
  for (size_t p; (p = id.find("--")) != std::string::npos;) id.replace(p, 2, "/");
  return id;
}

}  // namespace

nlohmann::ordered_json list_models(const std::string& startup_id, const std::optional<std::string>& startup_repo_id,
                                   const std::optional<std::string>& filter, int64_t created) {
  auto data = nlohmann::ordered_json::array();
  auto entry = [&](const std::string& id) {
    return nlohmann::ordered_json{{"id", id}, {"object", "model"}, {"created", created}};
  };
  std::error_code ec;
  fs::path cache = io::hf_hub_cache_dir().path;
  if (!cache.empty() && fs::is_directory(cache, ec)) {
    for (const auto& e : fs::directory_iterator(cache, ec)) {
      auto id = mlx_repo_id(e.path());
      if (id && (!filter || *filter == *id) && id != startup_repo_id) data.push_back(entry(*id));
    }
  }
  // mlx_lm.server appends the --model directory (by its absolute path) when it is a local path.
  // Here the start-up model always comes last (a cache model too: the chat page picks the last).
  if (!startup_id.empty() && (!filter || *filter == startup_id)) data.push_back(entry(startup_id));
  return nlohmann::ordered_json{{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace mlxrt::server
