// Port of APIHandler.handle_models_request (mlx_lm/server.py @ mlx-lm 0.32.2); the cache scan
// follows huggingface_hub's layout: <cache>/models--org--name/{refs/main, snapshots/<sha>/}.
#include "mlxrt/server/models_list.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "mlxrt/io/hf_cache.h"

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
  std::string id = name.substr(8);
  for (size_t p; (p = id.find("--")) != std::string::npos;) id.replace(p, 2, "/");
  return id;
}

}  // namespace

nlohmann::ordered_json list_models(const std::string& served_model, const std::optional<std::string>& filter,
                                   int64_t created) {
  auto data = nlohmann::ordered_json::array();
  auto entry = [&](const std::string& id) {
    return nlohmann::ordered_json{{"id", id}, {"object", "model"}, {"created", created}};
  };
  std::error_code ec;
  fs::path cache = io::hf_hub_cache_dir().path;
  if (!cache.empty() && fs::is_directory(cache, ec)) {
    for (const auto& e : fs::directory_iterator(cache, ec)) {
      auto id = mlx_repo_id(e.path());
      if (id && (!filter || *filter == *id)) data.push_back(entry(*id));
    }
  }
  if (!served_model.empty() && fs::exists(served_model, ec)) {
    auto resolved = fs::canonical(served_model, ec);
    if (!ec) data.push_back(entry(resolved.string()));
  }
  return nlohmann::ordered_json{{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace mlxrt::server
