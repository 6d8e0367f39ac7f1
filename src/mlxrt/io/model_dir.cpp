#include "mlxrt/io/model_dir.h"

#include <algorithm>
#include <fstream>
#include <regex>

#include "mlxrt/io/hf_cache.h"
#include "mlxrt/util/errors.h"

namespace fs = std::filesystem;

namespace mlxrt::io {

fs::path resolve_model_dir(const fs::path& given) {
  if (given.empty()) throw UsageError("--model: no model path given");
  // A local path wins; otherwise org/name[@revision] is looked up in the Hugging Face cache.
  fs::path dir = resolve_path_or_hf_repo(given.string(), "--model");
  if (!fs::is_directory(dir)) throw ConfigError(given.string() + ": not a directory");
  // An HF cache repo folder given by path: follow refs/main to its snapshot, as huggingface_hub does.
  if (!fs::exists(dir / "config.json") && fs::exists(dir / "refs" / "main")) {
    std::ifstream ref(dir / "refs" / "main");
    std::string sha;
    std::getline(ref, sha);
    // Only a commit hash names a snapshot: anything else in refs/main could point outside snapshots/.
    static const std::regex commit("[0-9a-f]{40}");
    if (!std::regex_match(sha, commit))
      throw ConfigError((dir / "refs" / "main").string() + ": expected a 40-character lowercase hex commit hash");
    if (fs::is_directory(dir / "snapshots" / sha)) dir = dir / "snapshots" / sha;
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
