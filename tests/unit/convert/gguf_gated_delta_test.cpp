// The gated delta nets' tensors put back from llama.cpp's layout: each of its converter's steps
// (Qwen3NextModel, _LinearAttentionVReorderBase) done here to arrays whose values say where they
// came from, then undone by restore_gated_delta_layers; A_log from -exp(A_log).
#include "mlxrt/convert/gguf_gated_delta.h"

#include <gtest/gtest.h>

#include <cmath>

#include <mlx/mlx.h>

#include "gguf_builder.h"

namespace mx = mlx::core;
using mlxrt::convert::GgufArchitecture;
using mlxrt::convert::GgufFile;
using mlxrt::convert::parse_gguf;
using mlxrt::convert::testing::GgufBuilder;

namespace {

// 2 key heads of 3, 4 value heads of 2 (two per key head), hidden size 5.
constexpr int kK = 2, kDk = 3, kV = 4, kDv = 2, kHidden = 5;

struct Metadata {
  std::string bytes;
  GgufFile file;
};

Metadata metadata(const std::string& arch) {
  Metadata m;
  m.bytes = GgufBuilder()
                .str("general.architecture", arch)
                .u32(arch + ".ssm.group_count", kK)
                .u32(arch + ".ssm.time_step_rank", kV)
                .u32(arch + ".ssm.state_size", kDk)
                .u32(arch + ".ssm.inner_size", kV * kDv)
                .build();
  m.file = parse_gguf(m.bytes, m.bytes.size(), arch + ".gguf");
  return m;
}

mx::array counting(mx::Shape shape) {
  int n = 1;
  for (int d : shape) n *= d;
  return mx::reshape(mx::arange(static_cast<float>(n)), shape);
}

// llama.cpp's _reorder_v_heads along `axis` of the part from `start`: grouped -> tiled.
mx::array tile_v_heads(const mx::array& a, int axis, int start, int size) {
  mx::Shape begin(a.ndim(), 0), end = a.shape();
  begin[axis] = start;
  auto tail = mx::slice(a, begin, end);
  mx::Shape split;
  for (int i = 0; i < static_cast<int>(a.ndim()); ++i) {
    if (i == axis) {
      split.insert(split.end(), {kK, kV / kK, size});
    } else {
      split.push_back(a.shape(i));
    }
  }
  std::vector<int> perm(split.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  std::swap(perm[axis], perm[axis + 1]);
  tail = mx::reshape(mx::transpose(mx::reshape(tail, split), perm), tail.shape());
  if (start == 0) return tail;
  end = a.shape();
  end[axis] = start;
  return mx::concatenate({mx::slice(a, mx::Shape(a.ndim(), 0), end), tail}, axis);
}

void expect_equal(const mx::array& got, const mx::array& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(mx::array_equal(got, want).item<bool>()) << what;
}

}  // namespace

TEST(GgufGatedDelta, Qwen3NextFusesQkvzBackPerKeyHead) {
  auto m = metadata("qwen3next");
  const GgufArchitecture arch{"qwen3next", "qwen3_next", "Qwen3NextForCausalLM", false, {}, {}};
  // HF's in_proj_qkvz: per key head [q (kDk), k (kDk), v (2 * kDv), z (2 * kDv)] rows.
  const int group = 2 * kDk + 2 * (kV / kK) * kDv;
  auto hf = counting({kK * group, kHidden});
  // Qwen3NextModel.modify_tensors: q of every head, then k, then v; z apart.
  auto part = [&](int from, int rows) {
    return mx::reshape(mx::slice(mx::reshape(hf, {kK, group, kHidden}), {0, from, 0}, {kK, from + rows, kHidden}),
                       {kK * rows, kHidden});
  };
  const int v_rows = (kV / kK) * kDv;
  std::unordered_map<std::string, mx::array> arrays;
  const std::string at = "model.layers.0.linear_attn.";
  arrays.emplace(at + "in_proj_qkv.weight",
                 mx::concatenate({part(0, kDk), part(kDk, kDk), part(2 * kDk, v_rows)}, 0));
  arrays.emplace(at + "in_proj_z.weight", part(2 * kDk + v_rows, v_rows));
  arrays.emplace(at + "A_log", mx::negative(mx::exp(mx::array({0.5f, 1.0f, 2.0f, 2.5f}))));
  mlxrt::convert::restore_gated_delta_layers(arch, m.file, arrays);
  EXPECT_EQ(arrays.count(at + "in_proj_qkv.weight") + arrays.count(at + "in_proj_z.weight"), 0u);
  expect_equal(arrays.at(at + "in_proj_qkvz.weight"), hf, "in_proj_qkvz");
}

TEST(GgufGatedDelta, Qwen35RegroupsValueHeads) {
  auto m = metadata("qwen35");
  const GgufArchitecture arch{"qwen35", "qwen3_5", "Qwen3_5ForConditionalGeneration", false, {}, {}, "language_model."};
  const std::string at = "language_model.model.layers.0.linear_attn.";
  const int qk = 2 * kK * kDk;
  std::unordered_map<std::string, mx::array> hf = {
      {at + "in_proj_qkv.weight", counting({qk + kV * kDv, kHidden})},
      {at + "in_proj_z.weight", counting({kV * kDv, kHidden})},
      {at + "in_proj_a.weight", counting({kV, kHidden})},
      {at + "in_proj_b.weight", counting({kV, kHidden})},
      {at + "conv1d.weight", counting({qk + kV * kDv, 4, 1})},
      {at + "dt_bias", counting({kV})},
      {at + "out_proj.weight", counting({kHidden, kV * kDv})},
  };
  std::unordered_map<std::string, mx::array> file = {
      {at + "in_proj_qkv.weight", tile_v_heads(hf.at(at + "in_proj_qkv.weight"), 0, qk, kDv)},
      {at + "in_proj_z.weight", tile_v_heads(hf.at(at + "in_proj_z.weight"), 0, 0, kDv)},
      {at + "in_proj_a.weight", tile_v_heads(hf.at(at + "in_proj_a.weight"), 0, 0, 1)},
      {at + "in_proj_b.weight", tile_v_heads(hf.at(at + "in_proj_b.weight"), 0, 0, 1)},
      {at + "conv1d.weight", tile_v_heads(hf.at(at + "conv1d.weight"), 0, qk, kDv)},
      {at + "dt_bias", tile_v_heads(hf.at(at + "dt_bias"), 0, 0, 1)},
      {at + "out_proj.weight", tile_v_heads(hf.at(at + "out_proj.weight"), 1, 0, kDv)},
  };
  // A = -exp(A_log) of heads 0..3, tiled like the others: A_log comes back in head order.
  auto a_log = mx::array({0.25f, 0.5f, 1.5f, 2.75f});
  file.emplace(at + "A_log", tile_v_heads(mx::negative(mx::exp(a_log)), 0, 0, 1));
  mlxrt::convert::restore_gated_delta_layers(arch, m.file, file);
  for (const auto& [name, want] : hf) expect_equal(file.at(name), want, name);
  expect_equal(mx::exp(file.at(at + "A_log")), mx::exp(a_log), "exp(A_log)");
}

TEST(GgufGatedDelta, ALogIsTheFloatWhoseExpIsTheFilesValue) {
  // Values whose -exp MLX computes: an A_log with exactly that exp exists, so one is found.
  auto x = mx::multiply(mx::arange(1.0f, 3.0f, 1.0f / 512), mx::array(1.0f));
  auto a = mx::negative(mx::exp(x));
  auto got = mlxrt::convert::a_log_from_a(a);
  EXPECT_EQ(got.dtype(), mx::float32);
  expect_equal(mx::exp(got), mx::negative(a), "exp(A_log)");
  // And within a few ulps of the A_log that gave A.
  auto ulps = mx::abs(mx::subtract(mx::view(got, mx::int32), mx::view(x, mx::int32)));
  EXPECT_LE(mx::max(ulps).item<int>(), 4);
}
