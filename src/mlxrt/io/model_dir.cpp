#include "mlxrt/io/model_dir.h"

#include <algorithm>
#include <fstream>
#include <regex>

#include "mlxrt/util/errors.h"

namespace fs = std::filesystem;

namespace mlxrt::io {

fs::path resolve_model_dir(const fs::path& given) {
  if (given.empty()) throw UsageError("--model: no model path given");
  if (!fs::exists(given)) throw ConfigError(given.string() + ": model directory does not exist");
  if (!fs::is_directory(given)) throw ConfigError(given.string() + ": not a directory");
  fs::path dir = given;
  // An HF cache repo folder: follow refs/main to its snapshot, as huggingface_hub does.
  if (!fs::exists(dir / "config.json") && fs::exists(dir / "refs" / "main")) {
    std::ifstream ref(dir / "refs" / "main");
    std::string sha;
    std::getline(ref, sha);
    if (!sha.empty() && fs::is_directory(dir / "snapshots" / sha)) dir = dir / "snapshots" / sha;
  }
  if (!fs::exists(dir / "config.json"))
    throw ConfigError((dir / "config.json").string() + ": file not found (is this a model directory?)");
  return dir;
}

std::optional<std::string> external_artifact_fingerprint(const fs::path& dir) {
  std::string path = dir.lexically_normal().generic_string();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  static const std::regex snapshot(R"((?:^|/)models--([^/]+)/snapshots/([0-9a-fA-F]{40,64})$)");
  std::smatch m;
  if (!std::regex_search(path, m, snapshot)) return std::nullopt;
  std::string encoded = m[1];
  auto sep = encoded.find("--");
  if (sep == std::string::npos || sep == 0 || sep + 2 >= encoded.size()) return std::nullopt;
  std::string repo = encoded.substr(0, sep) + "/" + encoded.substr(sep + 2);
  std::string sha = m[2];
  std::transform(sha.begin(), sha.end(), sha.begin(), [](unsigned char c) { return std::tolower(c); });
  return "hf:" + repo + "@" + sha;
}

}  // namespace mlxrt::io
