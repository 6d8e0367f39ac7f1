#pragma once
// Tiny checkpoints for the family tests: random weights of given shapes and a config.json in a
// scratch directory removed when the test ends, and the load / forward helpers the tests share.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unordered_map>

#include <mlx/io.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>
#include <nlohmann/json.hpp>

#include "mlxrt/model/loader.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::test {

using Shapes = std::map<std::string, mlx::core::Shape>;
using Arrays = std::unordered_map<std::string, mlx::core::array>;

/** Normal weights times 0.2, one key per tensor split off `seed` in name order. */
inline Arrays random_weights(const Shapes& shapes, int seed) {
  namespace mx = mlx::core;
  auto key = mx::random::key(seed);
  Arrays arrays;
  for (const auto& [name, shape] : shapes) {
    auto parts = mx::random::split(key);
    key = parts.first;
    arrays.insert({name, mx::multiply(mx::random::normal(shape, mx::float32, parts.second), mx::array(0.2f))});
  }
  return arrays;
}

class TinyCheckpoint {
 public:
  TinyCheckpoint(const std::string& name, const nlohmann::json& config, const Arrays& arrays)
      : dir_(std::filesystem::temp_directory_path() / ("mlxrt_test_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << config.dump();
    mlx::core::save_safetensors((dir_ / "model.safetensors").string(), arrays, {{"format", "mlx"}});
  }
  ~TinyCheckpoint() { std::filesystem::remove_all(dir_); }
  TinyCheckpoint(const TinyCheckpoint&) = delete;
  TinyCheckpoint& operator=(const TinyCheckpoint&) = delete;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

/** Logits of tokens 1, 5, 9, 3 through the loaded model, no cache. */
inline mlx::core::array logits_of(const std::filesystem::path& dir) {
  namespace mx = mlx::core;
  auto loaded = model::load_model(dir);
  auto out = (*loaded.model)(mx::array({1, 5, 9, 3}, {1, 4}, mx::int32), nullptr);
  mx::eval(out);
  return out;
}

/** The message loading `dir` fails with, or "" when it loads. */
inline std::string load_error(const std::filesystem::path& dir) {
  try {
    model::load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace mlxrt::test
