// The one-kernel decoder layer (kernels/cuda/decoder_layer.h), phase by phase: each phase's output
// (the launch returns them all) against float64 computed from the kernel's own output of the phase
// before, so each check has a local bound and a wrong row, head, position, chunk or rounding shows
// where it happens:
//  - RMSNorm(x): x drawn from {±0.5, ±1, ±2} (squares sum exactly), so it is mx.fast.rms_norm's
//    bytes on the test's device;
//  - the products (q/k/v, o_proj, gate/up, down): float32 bounds (reference.h), the residual adds
//    and SwiGLU with the roundings fused_qmv_test.cpp bounds;
//  - q/k norms and RoPE: the normalised row may differ from float64's by an ulp of the type per
//    rounding (the sum of squares' order), so the bound is two ulps of the pair plus float32's
//    rotation;
//  - the cache: the new key (rotated) and value at the position, every other position untouched;
//  - the attention: softmax over the positions up to the new one, grouped-query heads, float32
//    sums (2^-16 of the largest value), then rounded;
//  - RMSNorm(h): within two roundings of mx.fast.rms_norm (h's squares do not sum exactly).
// Runs on a CUDA GPU and on the CPU's SIMT runtime, whose blocks then run together (the kernel's
// grid-wide barrier).
#include <cmath>
#include <cstdio>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "mlxrt/kernels/cuda/decoder_layer.h"
#include "reference.h"

namespace mlxrt::kernels::cuda {
namespace {

using namespace kernel_tests;

struct Case {
  mx::Dtype type;
  int group_size, bits;  // bits 0: dense weights of `type`
  int hidden, heads, kv_heads, head_dim, rot, intermediate, capacity;
  bool norm, traditional, freqs;
  std::vector<int> positions;  // steps run in turn, each checked
  int depth = 2;               // the products' steps of loads in flight
  int rows = 0;                // rows a product task (0: the kernel's choice)
  int qkv_rows = 0;            // rows a q/k/v task (0: as `rows`)
  bool q8 = false;             // x as int8 in the products (DecoderLayerGrid::q8)
};

std::string label(const Case& c, int pos) {
  char text[200];
  std::snprintf(text, sizeof text, "%s %d-bit g%d hidden %d heads %d/%d of %d rot %d inter %d%s%s%s depth %d pos %d",
                c.type == mx::bfloat16 ? "bfloat16" : c.type == mx::float16 ? "float16" : "float32", c.bits,
                c.group_size, c.hidden, c.heads, c.kv_heads, c.head_dim, c.rot, c.intermediate,
                c.norm ? " norm" : "", c.traditional ? " traditional" : "", c.freqs ? " freqs" : "", c.depth, pos);
  return text;
}

// Evaluated, with a buffer of its own (the kernel writes the caches in place): `a` is a fresh
// node's output here (astype's, zeros'), which nothing else holds.
mx::array owned(mx::array a) {
  mx::eval(a);
  return a;
}

double ulp(mx::Dtype t) { return t == mx::float32 ? std::ldexp(1.0, -23) : 2 * half_ulp(t); }

// float64 of the type's value of x (the kernel stores a float32 result in the type).
double rounded(double x, mx::Dtype t) {
  auto a = mx::astype(mx::astype(mx::array(static_cast<float>(x)), t), mx::float32);
  mx::eval(a);
  return a.item<float>();
}

class DecoderLayer : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(use_kernel_device()) << "these tests need a CUDA device"; }
};

// A layer of c's shapes and kinds, random; freqs: the RoPE frequencies where c.freqs.
DecoderLayerWeights layer_weights(const Case& c, Keys& keys, std::vector<double>& freqs) {
  const auto t = c.type;
  const int K = c.hidden, H = c.heads, HK = c.kv_heads, D = c.head_dim, I = c.intermediate;
  auto weight = [&](int n) {
    auto w = mx::astype(mx::add(mx::array(1.0f), mx::multiply(mx::random::normal({n}, mx::float32, keys.next()),
                                                               mx::array(0.1f))), t);
    mx::eval(w);
    return w;
  };
  DecoderLayerWeights w{{weight(K), 1e-6f},
                        {random_matrix(keys, H * D, K, c.group_size, c.bits, t),
                         random_matrix(keys, HK * D, K, c.group_size, c.bits, t),
                         random_matrix(keys, HK * D, K, c.group_size, c.bits, t),
                         random_matrix(keys, K, H * D, c.group_size, c.bits, t),
                         std::nullopt,
                         std::nullopt,
                         {c.rot, c.traditional, std::nullopt, 1.0f, std::nullopt},
                         1.0f / std::sqrt(static_cast<float>(D)),
                         H,
                         HK},
                        {weight(K), 1e-5f},
                        {random_matrix(keys, I, K, c.group_size, c.bits, t),
                         random_matrix(keys, I, K, c.group_size, c.bits, t),
                         random_matrix(keys, K, I, c.group_size, c.bits, t)}};
  if (c.norm) {
    w.attn.q_norm = RmsNormIn{weight(D), 1e-6f};
    w.attn.k_norm = RmsNormIn{weight(D), 1e-6f};
  }
  if (c.freqs) {
    auto i = mx::astype(mx::arange(0, c.rot, 2), mx::float32);
    auto f = mx::power(mx::array(500000.0f), mx::divide(i, mx::array(static_cast<float>(c.rot))));
    mx::eval(f);
    w.attn.rope.freqs = f;
    freqs = host(f);
  } else {
    w.attn.rope.base = 10000.0f;
  }
  return w;
}

void run_case(const Case& c, int seed) {
  Keys keys(seed);
  const auto t = c.type;
  const int K = c.hidden, H = c.heads, HK = c.kv_heads, D = c.head_dim, I = c.intermediate, S = c.capacity;
  std::vector<double> freqs;
  const auto w = layer_weights(c, keys, freqs);
  auto kc = owned(mx::astype(mx::random::normal({1, HK, S, D}, mx::float32, keys.next()), t));
  auto vc = owned(mx::astype(mx::random::normal({1, HK, S, D}, mx::float32, keys.next()), t));
  auto bar = owned(mx::zeros({kDecoderLayerBarrierWords}, mx::uint32));  // the first launch's; then each launch's next
  const double u = half_ulp(t);
  // A product phase's reference: float32 sums of x, or with c.q8 of x as int8.
  const auto product_of = [&](const std::vector<double>& xv, const QmvMatrix& m) {
    return c.q8 ? q8_products(xv, m) : products(xv, 1, m);
  };

  for (const int pos : c.positions) {
    const auto what = label(c, pos);
    SCOPED_TRACE(what);
    const auto x = exact_square_x(keys, 1, K, t);
    const auto k_before = host(kc), v_before = host(vc);
    const DecoderLayerGrid grid{4, 4, c.depth, c.rows, c.qkv_rows, true, c.q8};
    const auto launch = decoder_layer_launch(x, w, kc, vc, mx::array(pos, mx::int32), bar, grid);
    ASSERT_TRUE(launch.has_value()) << what << ": declined";
    const auto out = run(*launch);
    ASSERT_EQ(out.size(), 3u);
    ASSERT_EQ(out[0].shape(), x.shape());
    const auto layout = decoder_layer_scratch(x, w, S, grid);
    ASSERT_EQ(out[2].size(), layout.bytes);
    const auto region = [&](size_t offset, size_t count, mx::Dtype type) {
      return decoder_layer_scratch_view(out[2], offset, count, type);
    };
    const auto xn1 = host(region(layout.xn1, K, t)), qkv = host(region(layout.qkv, (H + 2 * HK) * D, t));
    const auto qr = host(region(layout.qr, H * D, t)), attn = host(region(layout.attn, H * D, t));
    const auto hres_array = region(layout.hres, K, t);
    const auto hres = host(hres_array), xn2 = host(region(layout.xn2, K, t)), act = host(region(layout.act, I, t));
    const auto y = host(out[0]);
    // The barrier: every block passed its four barriers (the count back to 0, four generations on),
    // and the next launch's state is zeros (the next step takes it).
    const auto bar_now = host(bar), bar_next = host(out[1]);
    EXPECT_EQ(bar_now[0], 0.0);
    EXPECT_EQ(bar_now[kDecoderLayerGenerationWord], 4.0);
    EXPECT_EQ(bar_next[0], 0.0);
    EXPECT_EQ(bar_next[kDecoderLayerGenerationWord], 0.0);
    bar = out[1];
    // The phases' stamps: the start, past each barrier, the end, in order.
    auto stamps = mx::astype(region(layout.stamps, kDecoderLayerStamps, mx::uint64), mx::uint64);
    mx::eval(stamps);
    ASSERT_EQ(stamps.size(), static_cast<size_t>(kDecoderLayerStamps));
    const uint64_t* stamp = stamps.data<uint64_t>();
    EXPECT_GT(stamp[0], 0u);
    for (int i = 1; i <= kDecoderLayerPhases; ++i) EXPECT_LE(stamp[i - 1], stamp[i]) << "stamp " << i;
    // Each block's: its start, then its arrival at each barrier, in order; every block is in before
    // block 0 leaves a barrier.
    auto block_stamps = mx::astype(region(layout.block_stamps, 4 * kDecoderLayerBlockStamps, mx::uint64), mx::uint64);
    mx::eval(block_stamps);
    const uint64_t* bs = block_stamps.data<uint64_t>();
    for (int b = 0; b < 4; ++b) {
      const uint64_t* own = bs + b * kDecoderLayerBlockStamps;
      EXPECT_GT(own[0], 0u) << "block " << b;
      for (int i = 1; i < kDecoderLayerBlockStamps; ++i) {
        EXPECT_LE(own[i - 1], own[i]) << "block " << b << " stamp " << i;
        EXPECT_LE(own[i], stamp[i]) << "block " << b << " arrives at barrier " << i << " after block 0 left it";
      }
    }
    const auto kc_now = host(kc), vc_now = host(vc), xs = host(x);

    // RMSNorm(x): MLX's bytes.
    const auto xn1_ref = host(mx::fast::rms_norm(x, w.attn_norm.weight, w.attn_norm.eps));
    for (int i = 0; i < K; ++i) ASSERT_EQ(xn1[i], xn1_ref[i]) << what << " RMSNorm(x) at " << i;

    // q, k, v from the staged row.
    const QmvMatrix* mats[] = {&w.attn.q, &w.attn.k, &w.attn.v};
    size_t at = 0;
    for (const auto* m : mats) {
      const auto p = product_of(xn1, *m);
      const std::vector<double> got(qkv.begin() + at, qkv.begin() + at + p.ref.size());
      expect_close(what + " q/k/v", got, [&](size_t j) { return p.ref[j]; },
                   [&](size_t j) { return u * std::abs(p.ref[j]) + p.bound[j]; });
      at += p.ref.size();
    }

    // The q/k norms and RoPE; the cache's new key and value.
    const double* q_raw = qkv.data();
    const double* k_raw = qkv.data() + H * D;
    const double* v_raw = qkv.data() + H * D + HK * D;
    auto positioned = [&](const double* src, const std::optional<RmsNormIn>& norm, std::vector<double>& want,
                          std::vector<double>& tol) {
      std::vector<double> row(src, src + D);
      if (norm) {
        const auto nw = host(norm->weight);
        double ss = 0;
        for (double v : row) ss += v * v;
        const double rs = 1.0 / std::sqrt(ss / D + norm->eps);
        for (int i = 0; i < D; ++i) row[i] = rounded(nw[i] * rounded(row[i] * rs, t), t);
      }
      want.assign(D, 0.0);
      tol.assign(D, 0.0);
      const int half = c.rot / 2;
      for (int j = 0; j < half; ++j) {
        const float inv = c.freqs ? static_cast<float>(1.0 / freqs[j])
                                  : std::exp2(-(static_cast<float>(j) / static_cast<float>(half)) *
                                              std::log2(*w.attn.rope.base));
        const double theta = static_cast<double>(static_cast<float>(pos) * inv);
        const int i1 = c.traditional ? 2 * j : j, i2 = c.traditional ? 2 * j + 1 : j + half;
        want[i1] = row[i1] * std::cos(theta) - row[i2] * std::sin(theta);
        want[i2] = row[i1] * std::sin(theta) + row[i2] * std::cos(theta);
        const double mag = std::abs(row[i1]) + std::abs(row[i2]);
        tol[i1] = tol[i2] = (norm ? 2 * ulp(t) : 0.0) * mag + u * mag + std::ldexp(mag, -20);
      }
      for (int i = c.rot; i < D; ++i) {
        want[i] = row[i];
        tol[i] = norm ? 2 * ulp(t) * std::abs(row[i]) : 0.0;
      }
    };
    std::vector<double> want, tol;
    for (int h = 0; h < H; ++h) {
      positioned(q_raw + h * D, w.attn.q_norm, want, tol);
      for (int i = 0; i < D; ++i)
        ASSERT_LE(std::abs(qr[h * D + i] - want[i]), tol[i]) << what << " query head " << h << " dim " << i;
    }
    for (int h = 0; h < HK; ++h) {
      positioned(k_raw + h * D, w.attn.k_norm, want, tol);
      for (int s = 0; s < S; ++s)
        for (int i = 0; i < D; ++i) {
          const size_t e = (size_t(h) * S + s) * D + i;
          if (s != pos) {
            ASSERT_EQ(kc_now[e], k_before[e]) << what << " key cache head " << h << " position " << s << " changed";
            ASSERT_EQ(vc_now[e], v_before[e]) << what << " value cache head " << h << " position " << s << " changed";
          } else {
            ASSERT_LE(std::abs(kc_now[e] - want[i]), tol[i]) << what << " new key, head " << h << " dim " << i;
            ASSERT_EQ(vc_now[e], v_raw[h * D + i]) << what << " new value, head " << h << " dim " << i;
          }
        }
    }

    // The attention over positions 0 .. pos from the rotated queries and the cache.
    for (int h = 0; h < H; ++h) {
      const int hk = h / (H / HK);
      std::vector<double> score(pos + 1);
      double top = -INFINITY;
      for (int s = 0; s <= pos; ++s) {
        double dot = 0;
        for (int i = 0; i < D; ++i) dot += qr[h * D + i] * kc_now[(size_t(hk) * S + s) * D + i];
        score[s] = dot * w.attn.scale;
        top = std::max(top, score[s]);
      }
      double total = 0;
      for (auto& s : score) total += (s = std::exp(s - top));
      for (int i = 0; i < D; ++i) {
        double ref = 0, largest = 0;
        for (int s = 0; s <= pos; ++s) {
          const double v = vc_now[(size_t(hk) * S + s) * D + i];
          ref += score[s] / total * v;
          largest = std::max(largest, std::abs(v));
        }
        ASSERT_LE(std::abs(attn[h * D + i] - ref), u * std::abs(ref) + std::ldexp(largest, -16))
            << what << " attention head " << h << " dim " << i;
      }
    }

    // o_proj and the residual.
    const auto po = product_of(attn, w.attn.o);
    expect_close(what + " h", hres, [&](size_t j) { return xs[j] + po.ref[j]; },
                 [&](size_t j) { return u * std::abs(po.ref[j]) + po.bound[j] + u * (std::abs(xs[j] + po.ref[j]) + po.bound[j]); });

    // RMSNorm(h): within two roundings of MLX's.
    const auto xn2_ref = host(mx::fast::rms_norm(hres_array, w.mlp_norm.weight, w.mlp_norm.eps));
    for (int i = 0; i < K; ++i)
      ASSERT_LE(std::abs(xn2[i] - xn2_ref[i]), 2 * ulp(t) * std::abs(xn2_ref[i]) + 1e-30) << what << " RMSNorm(h) at " << i;

    // gate, up, SwiGLU from the staged row.
    const auto g = product_of(xn2, w.mlp.gate), v = product_of(xn2, w.mlp.up);
    auto silu = [](double a) { return a / (1.0 + std::exp(-a)); };
    expect_close(
        what + " SwiGLU", act, [&](size_t j) { return silu(g.ref[j]) * v.ref[j]; },
        [&](size_t j) {
          const double eg = u * std::abs(g.ref[j]) + g.bound[j], ev = u * std::abs(v.ref[j]) + v.bound[j];
          const double s = std::abs(silu(g.ref[j]));
          return 1.1 * eg * (std::abs(v.ref[j]) + ev) + s * ev + 4 * u * (s + 1.1 * eg) * (std::abs(v.ref[j]) + ev) + 1e-30;
        });

    // down and the residual: the layer's output.
    const auto pd = product_of(act, w.mlp.down);
    expect_close(what + " y", y, [&](size_t j) { return hres[j] + pd.ref[j]; },
                 [&](size_t j) { return u * std::abs(pd.ref[j]) + pd.bound[j] + u * (std::abs(hres[j] + pd.ref[j]) + pd.bound[j]); });
  }
}

TEST_F(DecoderLayer, QwenLayerFourBitThroughSeveralChunks) {
  // Qwen3's layout, small: per-head q/k norms, 2 query heads a key head; positions across the
  // attention's chunks of 128 (1, 2 and 3 of them), the cache kept between the steps.
  run_case({mx::bfloat16, 64, 4, 256, 4, 2, 64, 64, 512, 384, true, false, false, {0, 1, 130, 300}, 4}, 1);
}

TEST_F(DecoderLayer, HalfTraditionalPartialRotationNoNorms) {
  // (float16 with 8-bit random weights would overflow: its products reach 1e5.)
  run_case({mx::float16, 32, 4, 256, 4, 4, 64, 32, 384, 256, false, true, false, {5, 200}, 1}, 2);
}

TEST_F(DecoderLayer, HeadsWhoseRowsDoNotAlignTo16Bytes) {
  // 68 dimensions of float16 (dense weights: 4 x 68 is no multiple of a quantization group): a
  // key's row is 136 bytes, so the attention reads it value by value.
  run_case({mx::float16, 0, 0, 256, 4, 2, 68, 68, 256, 256, true, false, false, {0, 140}, 3}, 5);
}

TEST_F(DecoderLayer, DenseFloat32WithFrequencies) {
  run_case({mx::float32, 0, 0, 128, 2, 1, 64, 64, 256, 256, true, false, true, {3, 129}, 4}, 3);
}

TEST_F(DecoderLayer, EightBitWideQueriesNarrowHidden) {
  // Qwen3-0.6B's shape of projections: the queries (heads x head_dim) wider than the hidden size.
  run_case({mx::bfloat16, 128, 8, 128, 4, 2, 64, 64, 256, 128, true, false, false, {7}}, 4);
}

TEST_F(DecoderLayer, Int8ActivationsInTheFourBitProducts) {
  // DecoderLayerGrid::q8: every product phase's x quantized to int8 a 32 values at a time, the
  // products by DP4A; each phase against float64 of the same quantization. Qwen3's layout, small,
  // through several attention chunks; then rows of 1536 values (a lane's second step partial) and
  // q/k/v tasks of three rows.
  Case c{mx::bfloat16, 64, 4, 256, 4, 2, 64, 64, 512, 384, true, false, false, {0, 1, 130, 300}};
  c.q8 = true;
  run_case(c, 31);
  Case d{mx::float16, 32, 4, 1024, 4, 2, 64, 64, 1536, 64, true, false, false, {9}, 2, 1, 3};
  d.q8 = true;
  run_case(d, 32);
}

TEST_F(DecoderLayer, ProductsOverSeveralStepsAtEachDepth) {
  // 8-bit rows of 1024 and 2560 values: each lane's loop takes 2 and 5 steps (the last partial),
  // so every depth of the ring of loads wraps, stops early or never fills; at depth 3, tasks of 8
  // rows (and 16 of gate and up).
  for (const int depth : {1, 3, 4})
    run_case({mx::bfloat16, 64, 8, 1024, 4, 2, 64, 64, 2560, 64, true, false, false, {2}, depth, depth == 3 ? 8 : 0},
             6 + depth);
}

TEST_F(DecoderLayer, QkvTasksOfOtherRowsThanTheRest) {
  // decoder_layer_qkv_rows's tasks: three rows of q, k and v (their last tasks partial), one or
  // two elsewhere; and five beside tasks of four.
  run_case({mx::bfloat16, 64, 4, 256, 4, 2, 64, 64, 512, 256, true, false, false, {0, 140}, 2, 1, 3}, 21);
  run_case({mx::bfloat16, 32, 8, 512, 4, 2, 64, 64, 512, 64, true, false, false, {7}, 2, 4, 5}, 22);
}

// The bytes of an evaluated array (its whole buffer: the kernel's outputs are contiguous).
std::vector<unsigned char> bytes_of(const mx::array& a) {
  auto u = mx::view(a, mx::uint8);
  mx::eval(u);
  const auto* p = u.data<unsigned char>();
  return {p, p + u.nbytes()};
}

// Each grid's outputs for the same layer, caches and position, compared byte for byte with the
// first grid's: the layer's output, both caches and every phase's result (not the stamps: times;
// not the padding between regions). For settings that change where and when the work runs and not
// its arithmetic.
void expect_grids_give_the_same_bytes(const Case& c, int seed, const std::vector<DecoderLayerGrid>& grids) {
  Keys keys(seed);
  std::vector<double> freqs;
  const auto w = layer_weights(c, keys, freqs);
  const auto cache = [&] {
    return owned(mx::astype(mx::random::normal({1, c.kv_heads, c.capacity, c.head_dim}, mx::float32, keys.next()), c.type));
  };
  const auto kc = cache(), vc = cache();
  const auto x = exact_square_x(keys, 1, c.hidden, c.type);
  for (const int pos : c.positions) {
    const auto what = label(c, pos);
    std::vector<std::vector<std::vector<unsigned char>>> outs;
    for (const auto& grid : grids) {
      // Each run from the same caches (the kernel writes the new key and value in place).
      auto k = owned(mx::copy(kc)), v = owned(mx::copy(vc));
      auto bar = owned(mx::zeros({kDecoderLayerBarrierWords}, mx::uint32));
      const auto launch = decoder_layer_launch(x, w, k, v, mx::array(pos, mx::int32), bar, grid);
      ASSERT_TRUE(launch.has_value()) << what << ": declined";
      const auto out = run(*launch);
      const auto layout = decoder_layer_scratch(x, w, c.capacity, grid);
      // The barrier's state past the four barriers: the count back to 0 and four generations on,
      // or (count_barrier) the count at four times the grid; the next launch's zeros either way.
      const auto bar_now = host(bar), bar_next = host(out[1]);
      EXPECT_EQ(bar_now[0], grid.count_barrier ? 4.0 * grid.blocks : 0.0) << what;
      EXPECT_EQ(bar_now[kDecoderLayerGenerationWord], grid.count_barrier ? 0.0 : 4.0) << what;
      EXPECT_EQ(bar_next[0], 0.0) << what;
      EXPECT_EQ(bar_next[kDecoderLayerGenerationWord], 0.0) << what;
      auto& o = outs.emplace_back();
      o.push_back(bytes_of(out[0]));
      o.push_back(bytes_of(k));
      o.push_back(bytes_of(v));
      const auto all = bytes_of(out[2]);
      const size_t e = mx::size_of(c.type), H = c.heads, HK = c.kv_heads, D = c.head_dim;
      const std::vector<std::pair<size_t, size_t>> regions = {
          {layout.xn1, c.hidden * e}, {layout.qkv, (H + 2 * HK) * D * e}, {layout.qr, H * D * e},
          {layout.attn, H * D * e},   {layout.hres, c.hidden * e},        {layout.xn2, c.hidden * e},
          {layout.act, c.intermediate * e}};
      for (const auto& [at, n] : regions) o.emplace_back(all.begin() + at, all.begin() + at + n);
    }
    const char* names[] = {"layer output", "key cache", "value cache", "xn1", "q/k/v", "rotated q",
                           "attention", "h", "xn2", "SwiGLU"};
    for (size_t g = 1; g < outs.size(); ++g) {
      ASSERT_EQ(outs[g].size(), std::size(names));
      for (size_t i = 0; i < std::size(names); ++i)
        EXPECT_TRUE(outs[0][i] == outs[g][i]) << what << ", grid " << g << ": " << names[i] << " differ";
    }
  }
}

TEST_F(DecoderLayer, StreamedTasksGiveTheBytesOfTasksOneByOne) {
  // DecoderLayerGrid::stream loads a warp's next task before its last step is summed; each row's
  // sums stay those of its tasks run one by one, so every phase's output is the same bytes. Rows
  // of 1024 values (one 4-bit step a lane, two 8-bit), 1536 (the second step's lanes partly past
  // the end) and 256 (o_proj: most lanes idle); 16 warps over tens of tasks each.
  const Case cases[] = {{mx::bfloat16, 64, 4, 1024, 4, 2, 64, 64, 1536, 64, true, false, false, {0, 9}},
                        {mx::float16, 32, 8, 1024, 4, 2, 64, 64, 1536, 64, true, false, false, {5}, 2, 1, 3}};
  int seed = 40;
  for (const auto& c : cases) {
    std::vector<DecoderLayerGrid> grids;
    for (const bool stream : {false, true}) grids.push_back({4, 4, c.depth, c.rows, c.qkv_rows, stream});
    expect_grids_give_the_same_bytes(c, seed++, grids);
  }
}

TEST_F(DecoderLayer, AttentionTaskAndBarrierSettingsGiveTheSameBytes) {
  // DecoderLayerGrid::att_spread hands phase 2's tasks to other warps (2: a key head's query heads
  // to warps of one block), att_prefetch asks for their keys and values first (all, or
  // att_prefetch_lines' first lines: 2 of a chunk's dozens), count_barrier waits otherwise; each
  // task's sums are the same, so are the bytes. Short chunks over every warp, and chunks of 128 keys
  // (the last partial) more than the warps, so that some warp takes two; heads of 64 values (a row
  // half a line: a chunk's span may start and end inside lines) and 128; two, four and three query
  // heads a key head (three do not divide the block's four warps: the plain spread).
  using Setting = std::tuple<int, int, int, bool>;  // spread, prefetch, lines, count
  const std::vector<Setting> all = {{0, 0, 0, false}, {1, 0, 0, false}, {0, 1, 0, false}, {1, 2, 0, true},
                                    {2, 1, 2, false}};
  const std::vector<Setting> grouped = {{0, 0, 0, false}, {2, 1, 0, true}};
  const std::pair<Case, std::vector<Setting>> cases[] = {
      {{mx::bfloat16, 64, 4, 256, 4, 2, 64, 64, 512, 700, true, false, false, {100, 699}}, all},
      {{mx::float16, 128, 8, 512, 4, 2, 128, 128, 512, 300, true, false, false, {299}}, all},
      {{mx::bfloat16, 64, 4, 256, 8, 2, 64, 64, 512, 300, true, false, false, {170}}, grouped},
      {{mx::bfloat16, 64, 4, 256, 6, 2, 64, 64, 512, 300, true, false, false, {170}}, grouped}};
  int seed = 50;
  for (const auto& [c, settings] : cases) {
    std::vector<DecoderLayerGrid> grids;
    for (const auto& [spread, prefetch, lines, count] : settings) {
      DecoderLayerGrid g{4, 4, 2, 0, 0, true};
      g.att_spread = spread;
      g.att_prefetch = prefetch;
      g.att_prefetch_lines = lines;
      g.count_barrier = count;
      grids.push_back(g);
    }
    expect_grids_give_the_same_bytes(c, seed++, grids);
  }
}

TEST_F(DecoderLayer, GridAndUseFollowTheWeights) {
  Keys keys(6);
  const auto t = mx::bfloat16;
  auto layer = [&](int bits, int hidden) {
    auto m = [&](int n, int k) { return random_matrix(keys, n, k, 64, bits, t); };
    auto ones = [&](int n) { return mx::ones({n}, t); };
    return DecoderLayerWeights{{ones(hidden), 1e-6f},
                               {m(hidden, hidden), m(64, hidden), m(64, hidden), m(hidden, hidden), std::nullopt,
                                std::nullopt, {64, false, 10000.0f, 1.0f, std::nullopt}, 0.125f, hidden / 64, 1},
                               {ones(hidden), 1e-6f},
                               {m(256, hidden), m(256, hidden), m(hidden, 256)}};
  };
  const auto q4 = layer(4, 128), q4_wide = layer(4, 8192), q8 = layer(8, 128), dense = layer(0, 128);
  auto grid = [](const DecoderLayerWeights& w, DecoderLayerKnobs k = {}) { return decoder_layer_grid(w, 132, k); };
  // Unset knobs: 4-bit tasks of one or two rows at two blocks a multiprocessor, depth 2.
  EXPECT_EQ(grid(q4).blocks, 264);
  EXPECT_EQ(grid(q4).depth, 2);
  EXPECT_EQ(grid(q4).rows, 0);
  // Hidden 8192 takes tasks of four rows (choose_tiling): one block.
  EXPECT_EQ(grid(q4_wide).blocks, 132);
  // 8-bit: one block at depth 2; dense: one block at depth 4.
  EXPECT_EQ(grid(q8).blocks, 132);
  EXPECT_EQ(grid(q8).depth, 2);
  EXPECT_EQ(grid(dense).blocks, 132);
  EXPECT_EQ(grid(dense).depth, 4);
  // The knobs win; a deeper ring or longer tasks leave one block where blocks are not set.
  EXPECT_EQ(grid(q4, {3, 0, 0}).blocks, 396);
  EXPECT_EQ(grid(q4, {0, 4, 0}).blocks, 132);
  EXPECT_EQ(grid(q4, {0, 4, 0}).depth, 4);
  EXPECT_EQ(grid(q4, {0, 0, 4}).blocks, 132);
  EXPECT_EQ(grid(q4, {0, 0, 4}).rows, 4);
  EXPECT_EQ(grid(q4, {0, 0, 2}).blocks, 264);
  EXPECT_EQ(grid(dense, {2, 2, 0}).blocks, 264);
  EXPECT_EQ(grid(dense, {2, 2, 0}).depth, 2);
  EXPECT_EQ(decoder_layer_grid(q4, 0, {}).blocks, 0) << "no CUDA driver: no grid";
  // q/k/v tasks: Qwen3-8B's 4096 + 2 x 1024 rows over 2112 warps take one round of three-row tasks
  // (two rounds at two); Qwen3-0.6B's 2048 + 2 x 1024 one round of two; no more than twice `rows`;
  // `rows` where it already makes one round.
  EXPECT_EQ(decoder_layer_qkv_rows(4096, 1024, 2112, 2), 3);
  EXPECT_EQ(decoder_layer_qkv_rows(2048, 1024, 2112, 1), 2);
  EXPECT_EQ(decoder_layer_qkv_rows(4096, 1024, 64, 2), 4);
  EXPECT_EQ(decoder_layer_qkv_rows(256, 128, 2112, 2), 2);
  // By default the q/k/v tasks take decoder_layer_qkv_rows's rows; the knob off leaves them `rows`.
  EXPECT_EQ(grid(q4, {0, 0, 0, false}).qkv_rows, 0);
  // Hidden 128: 128 + 2 x 64 rows are one round over 2112 warps already; over 64 warps, fewer rounds
  // with more rows.
  EXPECT_EQ(grid(q4).qkv_rows, decoder_layer_qkv_rows(128, 64, 2112, 1));
  EXPECT_EQ(decoder_layer_grid(q4, 4, {1, 0, 0, true}).qkv_rows, 2);
  // Streamed tasks by default, the knob off one by one; int8 x only when asked, and only for 4-bit
  // rows streamed at depth 2.
  EXPECT_TRUE(grid(q4).stream);
  EXPECT_FALSE(grid(q4, {0, 0, 0, true, false}).stream);
  EXPECT_FALSE(grid(q4).q8);
  EXPECT_TRUE(grid(q4, {0, 0, 0, true, true, true}).q8);
  EXPECT_FALSE(grid(q4, {0, 0, 0, true, false, true}).q8);
  EXPECT_FALSE(grid(q4, {0, 4, 0, true, true, true}).q8);
  EXPECT_FALSE(grid(q8, {0, 0, 0, true, true, true}).q8);
  EXPECT_FALSE(grid(dense, {0, 0, 0, true, true, true}).q8);
  // Phase 2's settings and the barrier's: off unless asked, then as asked, for any kind of weights.
  EXPECT_EQ(grid(q4).att_spread, 0);
  EXPECT_EQ(grid(q4).att_prefetch, 0);
  EXPECT_EQ(grid(q4).att_prefetch_lines, 0);
  EXPECT_FALSE(grid(q4).count_barrier);
  for (const auto* w : {&q4, &q8, &dense}) {
    const auto g = grid(*w, {0, 0, 0, true, true, false, 2, 2, 32, true});
    EXPECT_EQ(g.att_spread, 2);
    EXPECT_EQ(g.att_prefetch, 2);
    EXPECT_EQ(g.att_prefetch_lines, 32);
    EXPECT_TRUE(g.count_barrier);
  }
  // Which layers the model runs as the kernel: by default the 4-bit ones and small dense ones
  // (measured faster); the q projection alone lets a dense layer through to the size test.
  EXPECT_TRUE(decoder_layer_wanted(q4.attn.q, DecoderLayerUse::measured_kinds));
  EXPECT_FALSE(decoder_layer_wanted(q8.attn.q, DecoderLayerUse::measured_kinds));
  EXPECT_TRUE(decoder_layer_wanted(dense.attn.q, DecoderLayerUse::measured_kinds));
  EXPECT_TRUE(decoder_layer_wanted(q4, DecoderLayerUse::measured_kinds));
  EXPECT_FALSE(decoder_layer_wanted(q8, DecoderLayerUse::measured_kinds));
  EXPECT_TRUE(decoder_layer_wanted(dense, DecoderLayerUse::measured_kinds));
  for (const auto* w : {&q4, &q8, &dense}) {
    EXPECT_TRUE(decoder_layer_wanted(w->attn.q, DecoderLayerUse::every_kind));
    EXPECT_TRUE(decoder_layer_wanted(*w, DecoderLayerUse::every_kind));
    EXPECT_FALSE(decoder_layer_wanted(w->attn.q, DecoderLayerUse::off));
    EXPECT_FALSE(decoder_layer_wanted(*w, DecoderLayerUse::off));
  }
  // A dense layer over kDecoderLayerDenseBytes stays per node by default (the 8B bf16 layer's
  // products read faster as cuBLAS's): its gate is swapped for one that takes it past the bound.
  DecoderLayerWeights big = dense;
  const int rows = static_cast<int>(kDecoderLayerDenseBytes / (2 * 128)) + 1;
  big.mlp.gate = QmvMatrix::dense(mx::zeros({rows, 128}, mx::bfloat16));
  EXPECT_FALSE(decoder_layer_wanted(big, DecoderLayerUse::measured_kinds));
  EXPECT_TRUE(decoder_layer_wanted(big, DecoderLayerUse::every_kind));
}

// A small 4-bit layer (hidden 128, two heads of 64 over one key head, no q/k norms, RoPE by base).
DecoderLayerWeights small_layer(Keys& keys) {
  const auto t = mx::bfloat16;
  auto m = [&](int n, int k) { return random_matrix(keys, n, k, 64, 4, t); };
  auto ones = [&](int n) { return mx::ones({n}, t); };
  return {{ones(128), 1e-6f},
          {m(128, 128), m(64, 128), m(64, 128), m(128, 128), std::nullopt, std::nullopt,
           {64, false, 10000.0f, 1.0f, std::nullopt}, 0.125f, 2, 1},
          {ones(128), 1e-6f},
          {m(256, 128), m(256, 128), m(128, 256)}};
}

TEST_F(DecoderLayer, DeclinesWhatItDoesNotCompute) {
  Keys keys(5);
  const auto t = mx::bfloat16;
  auto w = small_layer(keys);
  const auto x = mx::ones({1, 1, 128}, t), cache = mx::zeros({1, 1, 16, 64}, t);
  const auto pos = mx::array(0, mx::int32), bar = mx::zeros({kDecoderLayerBarrierWords}, mx::uint32);
  EXPECT_TRUE(decoder_layer_launch(x, w, cache, cache, pos, bar, {4}).has_value());
  EXPECT_FALSE(decoder_layer_launch(mx::ones({1, 2, 128}, t), w, cache, cache, pos, bar, {4})) << "two positions";
  EXPECT_FALSE(decoder_layer_launch(x, w, mx::zeros({1, 2, 16, 64}, t), mx::zeros({1, 2, 16, 64}, t), pos, bar, {4}))
      << "cache heads";
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, mx::zeros({3}, mx::uint32), {4})) << "barrier state";
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, bar, {4, 8, 5})) << "five steps in flight";
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, bar, {4, 8, 0})) << "no step in flight";
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, bar, {4, 8, 2, 3})) << "three rows a task";
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, bar, {4, 9})) << "nine warps";
  const auto attention = [](int spread, int prefetch, int lines) {
    DecoderLayerGrid g{4};
    g.att_spread = spread;
    g.att_prefetch = prefetch;
    g.att_prefetch_lines = lines;
    return g;
  };
  EXPECT_TRUE(decoder_layer_launch(x, w, cache, cache, pos, bar, attention(2, 2, 4096)).has_value());
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, bar, attention(3, 0, 0))) << "a fourth spread";
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, bar, attention(0, 3, 0))) << "a third prefetch";
  EXPECT_FALSE(decoder_layer_launch(x, w, cache, cache, pos, bar, attention(0, 1, -1))) << "negative lines";
  EXPECT_TRUE(decoder_layer_fits(x, w));
  auto mixed = w;
  mixed.mlp.down = random_matrix(keys, 128, 256, 64, 8, t);
  EXPECT_FALSE(decoder_layer_fits(x, mixed));
  EXPECT_FALSE(decoder_layer_launch(x, mixed, cache, cache, pos, bar, {4})) << "mixed bits";
  auto odd = w;
  odd.attn.rope.dims = 63;
  EXPECT_FALSE(decoder_layer_launch(x, odd, cache, cache, pos, bar, {4})) << "odd rotation";
}

// The launch takes the weights as one table of addresses: each weight's at its slot, the empty
// slots 0; a layer's table is kept until a weight's address changes; a weight the kernel could not
// read in row order is refused by name.
TEST_F(DecoderLayer, WeightTableHoldsEachWeightsAddressInSlotOrder) {
  Keys keys(6);
  auto m = [&](int n, int k) { return random_matrix(keys, n, k, 64, 4, mx::bfloat16); };
  auto w = small_layer(keys);
  const auto arrays = decoder_layer_weight_arrays(w);
  ASSERT_EQ(arrays.size(), kDecoderLayerWeightSlots.size());
  auto host_values = [](mx::array a) {
    a = mx::astype(a, mx::uint64);  // a node's copy, read on the host
    mx::eval(a);
    return std::vector<uint64_t>(a.data<uint64_t>(), a.data<uint64_t>() + a.size());
  };
  const auto table = decoder_layer_weight_table(w);
  EXPECT_EQ(table.dtype(), mx::uint64);
  const auto values = host_values(table);
  ASSERT_EQ(values.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const bool empty = std::string(kDecoderLayerWeightSlots[i]) == "qnw" ||
                       std::string(kDecoderLayerWeightSlots[i]) == "knw" ||
                       std::string(kDecoderLayerWeightSlots[i]) == "freqs";
    EXPECT_EQ(arrays[i].has_value(), !empty) << kDecoderLayerWeightSlots[i];
    EXPECT_EQ(values[i], arrays[i] ? decoder_layer_address(*arrays[i]) : 0) << kDecoderLayerWeightSlots[i];
  }
  EXPECT_EQ(values[1], decoder_layer_address(w.attn.q.w));
  EXPECT_EQ(values[25], decoder_layer_address(w.mlp.down.biases));

  DecoderLayerWeightTable kept;
  const auto first = kept.get(w);
  EXPECT_EQ(kept.get(w).id(), first.id()) << "the same weights: the same table";
  auto moved = w;
  moved.mlp.down = m(128, 256);
  const auto again = kept.get(moved);
  EXPECT_NE(again.id(), first.id()) << "a weight at a new address: a new table";
  EXPECT_EQ(host_values(again)[23], decoder_layer_address(moved.mlp.down.w));

  auto strided = w;
  strided.attn.o.w = mx::transpose(mx::reshape(mx::arange(128 * 16, mx::uint32), {16, 128}));
  try {
    decoder_layer_weight_table(strided);
    ADD_FAILURE() << "a transposed weight was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("wo"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
