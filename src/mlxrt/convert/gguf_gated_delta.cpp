#include "mlxrt/convert/gguf_gated_delta.h"

#include <cmath>
#include <limits>
#include <vector>

#include <mlx/mlx.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace mx = mlx::core;

namespace {

struct Heads {
  int k_heads, v_heads, k_dim, v_dim;
};

Heads heads_of(const GgufArchitecture& arch, const GgufFile& file) {
  auto u = [&](const char* key) { return static_cast<int>(file.require_uint(std::string(arch.gguf_name) + "." + key)); };
  const int v_heads = u("ssm.time_step_rank");
  return {u("ssm.group_count"), v_heads, u("ssm.state_size"), u("ssm.inner_size") / v_heads};
}

/** The arrays of one module that share its rows: the weight, and the scales and biases of a
 * quantized one (names as the checkpoint holds them). */
std::vector<std::string> row_arrays(const std::unordered_map<std::string, mx::array>& arrays, const std::string& module) {
  std::vector<std::string> names;
  for (const char* part : {".weight", ".scales", ".biases"})
    if (arrays.count(module + part)) names.push_back(module + part);
  return names;
}

const mx::array& need(const std::unordered_map<std::string, mx::array>& arrays, const std::string& name,
                      const GgufFile& file) {
  auto it = arrays.find(name);
  if (it == arrays.end()) throw WeightsError(file.source + ": the gated delta layer lacks the tensor for '" + name + "'");
  return it->second;
}

/** Inverse of llama.cpp's _reorder_v_heads along `axis` from `start`: the value heads there are
 * tiled ([per-key, key heads, size]) and go back to grouped by key head ([key heads, per-key, size]). */
mx::array group_v_heads(const mx::array& a, int axis, int start, const Heads& h, int size, const std::string& name) {
  const int per_key = h.v_heads / h.k_heads;
  if (a.shape(axis) - start != h.v_heads * size)
    throw WeightsError(name + ": " + std::to_string(a.shape(axis) - start) + " entries along axis " +
                       std::to_string(axis) + " where " + std::to_string(h.v_heads) + " value heads of " +
                       std::to_string(size) + " were expected");
  mx::Shape begin(a.ndim(), 0), end = a.shape();
  begin[axis] = start;
  mx::array tail = mx::slice(a, begin, end);
  mx::Shape split;
  for (int i = 0; i < static_cast<int>(a.ndim()); ++i) {
    if (i == axis) {
      split.insert(split.end(), {per_key, h.k_heads, size});
    } else {
      split.push_back(a.shape(i));
    }
  }
  std::vector<int> perm(split.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  std::swap(perm[axis], perm[axis + 1]);
  mx::Shape tail_shape = tail.shape();
  tail = mx::reshape(mx::transpose(mx::reshape(tail, split), perm), tail_shape);
  if (start == 0) return tail;
  end = a.shape();
  end[axis] = start;
  return mx::concatenate({mx::slice(a, mx::Shape(a.ndim(), 0), end), tail}, axis);
}

void regroup_rows(std::unordered_map<std::string, mx::array>& arrays, const std::string& module, int start_heads_of_k,
                  const Heads& h, int size, const GgufFile& file) {
  auto names = row_arrays(arrays, module);
  if (names.empty()) throw WeightsError(file.source + ": the gated delta layer lacks '" + module + "'");
  for (const auto& n : names) {
    auto& a = arrays.at(n);
    a = group_v_heads(a, 0, start_heads_of_k * h.k_dim * h.k_heads, h, size, file.source + ": " + n);
  }
}

/** Qwen3-Next: attn_qkv ([q heads, k heads, v heads] rows) and attn_gate (z) back into HF's
 * in_proj_qkvz, whose rows run per key head: q, k, then that head's values and gates. */
void fuse_qkvz(std::unordered_map<std::string, mx::array>& arrays, const std::string& at, const Heads& h,
               const GgufFile& file) {
  const std::string qkv = at + "in_proj_qkv", z = at + "in_proj_z";
  const int per_key_v = h.v_heads / h.k_heads * h.v_dim;
  auto names = row_arrays(arrays, qkv);
  if (names.empty() || row_arrays(arrays, z).size() != names.size())
    throw WeightsError(file.source + ": the gated delta layer '" + at + "' needs attn_qkv and attn_gate of one kind");
  for (const auto& n : names) {
    const std::string part = n.substr(qkv.size());
    const mx::array& a = arrays.at(n);
    const mx::array& g = need(arrays, z + part, file);
    const int cols = a.shape(-1), kq = h.k_heads * h.k_dim;
    if (a.ndim() != 2 || a.shape(0) != 2 * kq + h.v_heads * h.v_dim || g.ndim() != 2 || g.shape(0) != h.v_heads * h.v_dim ||
        g.shape(1) != cols)
      throw WeightsError(file.source + ": '" + n + "' / '" + z + part + "' do not have the gated delta net's rows");
    auto rows = [&](const mx::array& x, int from, int to, int each) {
      return mx::reshape(mx::slice(x, {from, 0}, {to, cols}), {h.k_heads, each, cols});
    };
    mx::array fused = mx::concatenate({rows(a, 0, kq, h.k_dim), rows(a, kq, 2 * kq, h.k_dim),
                                       rows(a, 2 * kq, a.shape(0), per_key_v), rows(g, 0, g.shape(0), per_key_v)},
                                      1);
    arrays.insert_or_assign(at + "in_proj_qkvz" + part, mx::reshape(fused, {-1, cols}));
    arrays.erase(n);
    arrays.erase(z + part);
  }
}

/** Qwen3.5's out_proj: its input columns hold the value heads, tiled; every array of the module
 * (a quantized one's packed words, scales and biases alike) has one whole block per head. */
void regroup_columns(std::unordered_map<std::string, mx::array>& arrays, const std::string& module, const Heads& h,
                     const GgufFile& file) {
  for (const auto& n : row_arrays(arrays, module)) {
    auto& a = arrays.at(n);
    const int cols = a.shape(-1);
    if (cols % h.v_heads != 0)
      throw UnsupportedError(file.source + ": '" + n + "' cannot be reordered by value head: its " + std::to_string(cols) +
                             " columns are not whole blocks per head (a quantization group spans two heads)");
    a = group_v_heads(a, a.ndim() - 1, 0, h, cols / h.v_heads, file.source + ": " + n);
  }
}

}  // namespace

mx::array a_log_from_a(const mx::array& a) {
  mx::array target = mx::negative(mx::astype(a, mx::float32));
  mx::array first = mx::log(target);
  mx::eval(first, target);
  const size_t n = first.size();
  constexpr int kReach = 4;  // ulps tried on either side of log(-A)
  std::vector<float> candidates;
  candidates.reserve(n * (2 * kReach + 1));
  const float* base = first.data<float>();
  for (size_t i = 0; i < n; ++i) {
    float down = base[i], up = base[i];
    candidates.push_back(base[i]);
    for (int s = 0; s < kReach; ++s) {
      up = std::nextafter(up, std::numeric_limits<float>::infinity());
      down = std::nextafter(down, -std::numeric_limits<float>::infinity());
      candidates.push_back(up);
      candidates.push_back(down);
    }
  }
  const int width = 2 * kReach + 1;
  mx::array cand(candidates.begin(), {static_cast<int>(n), width}, mx::float32);
  mx::array hits = mx::equal(mx::exp(cand), mx::reshape(target, {static_cast<int>(n), 1}));
  mx::eval(hits);
  const bool* hit = hits.data<bool>();
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = base[i];
    for (int j = 0; j < width; ++j)
      if (hit[i * width + j]) {
        out[i] = candidates[i * width + j];
        break;
      }
  }
  return mx::array(out.begin(), a.shape(), mx::float32);
}

void restore_gated_delta_layers(const GgufArchitecture& arch, const GgufFile& file,
                                std::unordered_map<std::string, mx::array>& arrays) {
  const Heads h = heads_of(arch, file);
  const bool qwen3_next = std::string(arch.model_type) == "qwen3_next";
  std::vector<std::string> layers;
  for (const auto& [name, _] : arrays)
    if (name.ends_with(".linear_attn.A_log")) layers.push_back(name.substr(0, name.size() - std::string("A_log").size()));
  for (const auto& at : layers) {
    mx::array& a_log = arrays.at(at + "A_log");
    if (qwen3_next) {
      fuse_qkvz(arrays, at, h, file);
    } else if (h.k_heads != h.v_heads) {
      // _LinearAttentionVReorderBase.modify_tensors, step by step.
      regroup_rows(arrays, at + "in_proj_qkv", 2, h, h.v_dim, file);
      regroup_rows(arrays, at + "in_proj_z", 0, h, h.v_dim, file);
      regroup_rows(arrays, at + "in_proj_a", 0, h, 1, file);
      regroup_rows(arrays, at + "in_proj_b", 0, h, 1, file);
      regroup_rows(arrays, at + "conv1d", 2, h, h.v_dim, file);
      a_log = group_v_heads(a_log, 0, 0, h, 1, file.source + ": " + at + "A_log");
      auto& dt = arrays.at(at + "dt_bias");
      dt = group_v_heads(dt, 0, 0, h, 1, file.source + ": " + at + "dt_bias");
      regroup_columns(arrays, at + "out_proj", h, file);
    }
    a_log = a_log_from_a(a_log);
  }
}

}  // namespace mlxrt::convert
