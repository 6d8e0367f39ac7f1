// Port of the checks and the closing synchronisation of mlx_lm/utils.py's sharded_load (mlx-lm 0.32.2);
// the cross-rank model fingerprint is mlxrt's own (mlx-lm trusts each rank's directory).
#include "mlxrt/model/parallel_load.h"

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <mlx/distributed/ops.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/io/weights.h"
#include "mlxrt/model/registry.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model {

namespace {

struct Fnv1a {
  uint64_t h = 1469598103934665603ull;
  void add(const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(data[i]);
      h *= 1099511628211ull;
    }
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }  // with the NUL: "ab","c" != "a","bc"
};

// The safetensors header of `file` (its 8-byte length and JSON), or what can be read of it.
std::string header_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (!in || n > (100u << 20)) return std::to_string(n);
  std::string json(n, '\0');
  in.read(json.data(), static_cast<std::streamsize>(n));
  return std::to_string(n) + json;
}

uint64_t model_fingerprint(const io::ModelConfig& config) {
  Fnv1a f;
  f.add(config.raw().dump());
  for (const auto& file : io::find_weight_files(config.dir())) {
    f.add(file.filename().string());
    f.add(std::to_string(std::filesystem::file_size(file)));
    f.add(header_bytes(file));
  }
  return f.h;
}

std::string hex(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = digits[v & 15];
  return out;
}

}  // namespace

void check_parallel_support(const Parallel& parallel, const io::ModelConfig& config, const ResolvedProfile& profile,
                            bool has_adapter) {
  if (has_adapter) throw UnsupportedError("adapters are not supported in distributed mode (as in mlx-lm)");
  const Graph graph = profile.profile.execution.graph;
  const auto& model_type = config.model_type();
  if (parallel.mode == Parallel::Mode::tensor && !graph_shards(graph))
    throw UnsupportedError(config.source() + ": model_type '" + model_type +
                           "' has no tensor-parallel sharding (its mlx-lm model defines no shard() that mlxrt "
                           "ports); tensor parallel runs: " + sharded_graph_names(false));
  if (parallel.mode == Parallel::Mode::pipeline && !graph_pipelines(graph))
    throw UnsupportedError(config.source() + ": model_type '" + model_type +
                           "' does not support pipelining (its mlx-lm model is no PipelineMixin); --pipeline "
                           "runs: " + sharded_graph_names(true));
}

void check_same_model_on_all_ranks(const Parallel& parallel, const io::ModelConfig& config) {
  const uint64_t mine = model_fingerprint(config);
  const uint32_t halves[2] = {static_cast<uint32_t>(mine >> 32), static_cast<uint32_t>(mine)};
  auto all = mx::distributed::all_gather(mx::array(halves, {1, 2}, mx::uint32), parallel.group, mx::Device::cpu);
  mx::eval(all);
  const uint32_t* p = all.data<uint32_t>();
  auto of = [&](int r) { return (static_cast<uint64_t>(p[2 * r]) << 32) | p[2 * r + 1]; };
  std::string differing;
  for (int r = 1; r < parallel.size(); ++r)
    if (of(r) != of(0)) differing += (differing.empty() ? "" : ", ") + std::to_string(r) + " (" + hex(of(r)) + ")";
  if (!differing.empty())
    throw ConfigError("the ranks of this distributed run load different models: rank 0's " + config.dir().string() +
                      " has fingerprint " + hex(of(0)) + " (config.json and the weight files' headers), ranks " +
                      differing + " differ; every rank must load the same model directory");
}

void barrier(const Parallel& parallel) {
  mx::eval(mx::distributed::all_sum(mx::array(1.0f), parallel.group, mx::Device::cpu));
}

}  // namespace mlxrt::model
