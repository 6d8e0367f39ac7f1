#include "mlxrt/io/weights.h"

#include <algorithm>
#include <map>
#include <set>

#include <mlx/io.h>

#include "mlxrt/io/safetensors_header.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace fs = std::filesystem;

namespace mlxrt::io {

namespace {

void check_index(const fs::path& dir, const std::map<fs::path, SafetensorsHeader>& headers) {
  fs::path index_path = dir / "model.safetensors.index.json";
  if (!fs::exists(index_path)) return;
  json index = read_json_file(index_path);
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    throw WeightsError(index_path.string() + ": missing object 'weight_map'");
  std::map<std::string, std::set<std::string>> names_in_file;
  for (const auto& [path, header] : headers)
    for (const auto& t : header.tensors) names_in_file[path.filename().string()].insert(t.name);
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it->is_string())
      throw WeightsError(index_path.string() + ": weight_map['" + it.key() + "'] must be a file name");
    std::string file = it->get<std::string>();
    // Checked on the name alone, before any file-system call, so the answer says nothing about
    // what exists outside the model folder. Weight files sit directly in the folder.
    const fs::path name(file);
    if (file.empty() || name.is_absolute() || name.has_parent_path() || file == "." || file == ".." ||
        file.find('\\') != std::string::npos)
      throw WeightsError(index_path.string() + ": weight_map['" + it.key() +
                         "'] must name a file inside the model folder (a plain file name)");
    if (!fs::exists(dir / file))
      throw WeightsError(index_path.string() + ": tensor '" + it.key() + "' maps to missing file " + file);
    auto found = names_in_file.find(file);
    if (found == names_in_file.end() || !found->second.count(it.key()))
      throw WeightsError(index_path.string() + ": tensor '" + it.key() + "' is not in " + file);
  }
}

}  // namespace

std::vector<fs::path> find_weight_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind("model", 0) == 0 && name.size() > 12 &&
        name.substr(name.size() - 12) == ".safetensors")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw WeightsError(dir.string() + ": no model*.safetensors weight files found");
  return files;
}

WeightMap load_weights(const fs::path& dir) {
  auto files = find_weight_files(dir);
  std::map<fs::path, SafetensorsHeader> headers;
  for (const auto& f : files) headers.emplace(f, read_safetensors_header(f));
  check_index(dir, headers);

  WeightMap weights;
  for (const auto& f : files) {
    std::unordered_map<std::string, mx::array> arrays;
    try {
      arrays = mx::load_safetensors(f.string()).first;
    } catch (const std::exception& e) {
      throw WeightsError(f.string() + ": " + e.what());
    }
    for (auto& [name, a] : arrays) {
      // Later files win, as in mlx-lm's dict.update over the glob.
      weights.insert_or_assign(name, std::move(a));
    }
  }
  return weights;
}

}  // namespace mlxrt::io
