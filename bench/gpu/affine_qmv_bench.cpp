// The L3 CUDA matrix-vector product (src/mlxrt/kernels/cuda/affine_qmv.h) against MLX's
// quantized_matmul on the projections of Qwen3-8B and -0.6B, 4-bit g64 (and 8-bit), bfloat16: time
// per call and the bytes it must read (packed weights, scales, biases, x) over that time. Each
// timed batch cycles through enough copies of the weights to stay out of the 60 MB L2; one eval
// holds `calls` products (MLX's CUDA graphs launch them back to back). Also a plain copy's
// bandwidth (read + write) as the ceiling. Prints a table; --quick times two shapes only. The
// shapes of 16 bits are dense bfloat16 weights: dense_mv against MLX's matmul with the transposed
// weight (what a dense Linear runs: cuBLAS's matrix-vector product); --dense times only those.
// Under ncu (bench/gpu/l3_run.sh) `--calls 1 --rounds 1` gives one launch per variant to profile.
// --mma [--rows 1,8,32]: the 4-bit shapes at those rows of x, MLX's product against L3's (affine_qmv below 8
// rows, affine_qmv_chunks from 8) and the tensor-core product (affine_mma.h) by tiling.
// --fp4 [--rows 1,2,4]: the same shapes in mxfp4 and nvfp4, MLX's product against L3's (fp4_qmv.h).
// Usage: mlxrt_qmv_bench [--calls N] [--rounds R] [--quick | --dense | --mma [--rows LIST] | --fp4 [--rows LIST]]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/kernels/cuda/affine_mma.h"
#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/fp4_qmv.h"

namespace mx = mlx::core;
using mlxrt::kernels::cuda::MmaTiling;
using mlxrt::kernels::cuda::QmvTiling;

namespace {

struct Shape {
  const char* name;
  int n, k, rows, bits;
};

double seconds_of(const std::function<void()>& f) {
  mx::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  mx::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median seconds per call of `product` over `rounds` evals of `calls` products each.
double time_per_call(const std::function<mx::array(int)>& product, int calls, int rounds) {
  std::vector<double> t;
  for (int r = 0; r < rounds + 1; ++r) {  // the first round warms up (NVRTC, graph capture)
    const double s = seconds_of([&] {
      std::vector<mx::array> outs;
      for (int i = 0; i < calls; ++i) outs.push_back(product(i));
      mx::eval(outs);
    });
    if (r > 0) t.push_back(s / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Random 4-bit operands of one shape, enough copies to stay out of the L2 cache.
struct Packed {
  std::vector<mx::array> w, s, b;
  mx::array x;
  double bytes;
};

Packed packed(int n, int k, int rows, int group_size) {
  const int groups = k / group_size;
  const double bytes = double(n) * k / 2 + 4.0 * n * groups + 2.0 * rows * k + 2.0 * rows * n;
  const int copies = std::max(2, static_cast<int>(std::ceil(256e6 / bytes)));
  Packed p{{}, {}, {}, mx::astype(mx::random::normal({1, rows, k}), mx::bfloat16), bytes};
  for (int c = 0; c < copies; ++c) {
    p.w.push_back(mx::random::bits({n, k / 8}, 4));
    p.s.push_back(mx::astype(mx::multiply(mx::random::normal({n, groups}), mx::array(0.02f)), mx::bfloat16));
    p.b.push_back(mx::astype(mx::multiply(mx::random::normal({n, groups}), mx::array(0.1f)), mx::bfloat16));
  }
  mx::eval(p.w);
  mx::eval(p.s);
  mx::eval(p.b);
  mx::eval(p.x);
  return p;
}

int mma_table(int calls, int rounds, int group_size, const std::vector<int>& row_counts) {
  namespace k = mlxrt::kernels::cuda;
  const std::vector<Shape> shapes = {{"8B q/o 4096x4096", 4096, 4096, 1, 4},
                                     {"8B gate/up 12288x4096", 12288, 4096, 1, 4},
                                     {"8B down 4096x12288", 4096, 12288, 1, 4},
                                     {"8B lm_head 151936x4096", 151936, 4096, 1, 4},
                                     {"0.6B gate/up 3072x1024", 3072, 1024, 1, 4},
                                     {"0.6B lm_head 151936x1024", 151936, 1024, 1, 4}};
  const std::vector<MmaTiling> tilings = {{4, 2}, {2, 2}, {4, 4}, {8, 2}, {2, 4}};
  std::printf("%-26s %4s %6s | %8s %6s | %8s %6s | %8s %6s %5s | %s\n", "shape (N x K)", "rows", "MB", "MLX us", "GB/s",
              "L3 us", "GB/s", "mma us", "GB/s", "x L3", "mma GB/s by tiling (warps x ahead)");
  for (const auto& sh : shapes)
    for (int rows : row_counts) {
      const auto p = packed(sh.n, sh.k, rows, group_size);
      const int copies = static_cast<int>(p.w.size());
      auto at = [&](auto f) {
        return time_per_call([&](int i) { return f(i % copies); }, calls, rounds);
      };
      const double mlx = at([&](int c) { return mx::quantized_matmul(p.x, p.w[c], p.s[c], p.b[c], true, group_size, 4); });
      const double l3 = at([&](int c) {
        return rows < k::kQmvMaxRows ? k::affine_qmv(p.x, p.w[c], p.s[c], p.b[c], group_size, 4)
                        : k::affine_qmv_chunks(p.x, p.w[c], p.s[c], p.b[c], group_size, 4);
      });
      const double ours = at([&](int c) { return k::affine_mma(p.x, p.w[c], p.s[c], p.b[c], group_size, 4); });
      std::string line;
      for (auto t : tilings) {
        const double v = at([&](int c) { return k::affine_mma(p.x, p.w[c], p.s[c], p.b[c], group_size, 4, t); });
        char cell[48];
        std::snprintf(cell, sizeof cell, " %dx%d:%.0f", t.warps_per_block, t.units_ahead, p.bytes / v / 1e9);
        line += cell;
      }
      std::printf("%-26s %4d %6.0f | %8.2f %6.0f | %8.2f %6.0f | %8.2f %6.0f %4.2fx |%s\n", sh.name, rows, p.bytes / 1e6,
                  mlx * 1e6, p.bytes / mlx / 1e9, l3 * 1e6, p.bytes / l3 / 1e9, ours * 1e6, p.bytes / ours / 1e9,
                  l3 / ours, line.c_str());
      std::fflush(stdout);
    }
  return 0;
}

// The 4-bit float modes: random codes and scale bytes near 2^0 (E8M0 120-134, E4M3 48-64), MLX's
// quantized_matmul against fp4_qmv; bytes read: the codes, a scale byte a group, x and y.
int fp4_table(int calls, int rounds, const std::vector<int>& row_counts) {
  namespace k = mlxrt::kernels::cuda;
  const std::vector<Shape> shapes = {{"8B q/o 4096x4096", 4096, 4096, 1, 4},
                                     {"8B gate/up 12288x4096", 12288, 4096, 1, 4},
                                     {"8B down 4096x12288", 4096, 12288, 1, 4},
                                     {"8B lm_head 151936x4096", 151936, 4096, 1, 4},
                                     {"0.6B gate/up 3072x1024", 3072, 1024, 1, 4}};
  std::printf("%-26s %6s %4s %6s | %8s %6s | %8s %6s %5s\n", "shape (N x K)", "mode", "rows", "MB", "MLX us", "GB/s",
              "L3 us", "GB/s", "x MLX");
  for (const char* mode : {"mxfp4", "nvfp4"}) {
    const int gs = std::string(mode) == "mxfp4" ? 32 : 16;
    for (const auto& sh : shapes)
      for (int rows : row_counts) {
        if (rows < 1 || rows > k::kQmvMaxRows) continue;  // fp4_qmv takes 1 to 8 rows
        const double bytes = double(sh.n) * sh.k / 2 + double(sh.n) * sh.k / gs + 2.0 * rows * sh.k + 2.0 * rows * sh.n;
        const int copies = std::max(2, static_cast<int>(std::ceil(256e6 / bytes)));
        const auto x = mx::astype(mx::random::normal({1, rows, sh.k}), mx::bfloat16);
        std::vector<mx::array> w, s;
        for (int c = 0; c < copies; ++c) {
          w.push_back(mx::random::bits({sh.n, sh.k / 8}, 4));
          const int lo = gs == 32 ? 120 : 48, hi = gs == 32 ? 135 : 65;
          s.push_back(mx::astype(mx::random::randint(lo, hi, {sh.n, sh.k / gs}), mx::uint8));
        }
        mx::eval(w);
        mx::eval(s);
        mx::eval(x);
        auto at = [&](auto f) { return time_per_call([&](int i) { return f(i % copies); }, calls, rounds); };
        const double mlx =
            at([&](int c) { return mx::quantized_matmul(x, w[c], s[c], std::nullopt, true, gs, 4, mode); });
        const double l3 = at([&](int c) { return k::fp4_qmv(x, w[c], s[c], gs, mode); });
        std::printf("%-26s %6s %4d %6.0f | %8.2f %6.0f | %8.2f %6.0f %4.2fx\n", sh.name, mode, rows, bytes / 1e6,
                    mlx * 1e6, bytes / mlx / 1e9, l3 * 1e6, bytes / l3 / 1e9, mlx / l3);
        std::fflush(stdout);
      }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 200, rounds = 5;
  bool quick = false, dense_only = false, mma = false, fp4 = false, rows_given = false;
  std::vector<int> mma_rows = {1, 8, 32};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--calls") && i + 1 < argc) calls = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--dense")) dense_only = true;
    else if (!std::strcmp(argv[i], "--mma")) mma = true;
    else if (!std::strcmp(argv[i], "--fp4")) fp4 = true;
    else if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows_given = true;
      mma_rows.clear();
      for (char* r = std::strtok(argv[++i], ","); r; r = std::strtok(nullptr, ",")) mma_rows.push_back(std::atoi(r));
    }
  }
  if (!mx::cu::is_available()) {
    std::fprintf(stderr, "mlxrt_qmv_bench needs a CUDA device\n");
    return 1;
  }
  mx::set_default_device(mx::Device::gpu);
  const int group_size = 64;
  std::vector<Shape> shapes = {
      {"8B q/o 4096x4096", 4096, 4096, 1, 4},       {"8B gate/up 12288x4096", 12288, 4096, 1, 4},
      {"8B down 4096x12288", 4096, 12288, 1, 4},    {"8B lm_head 151936x4096", 151936, 4096, 1, 4},
      {"8B gate/up M=4", 12288, 4096, 4, 4},        {"8B gate/up M=8", 12288, 4096, 8, 4},
      {"0.6B q 2048x1024", 2048, 1024, 1, 4},       {"0.6B gate/up 3072x1024", 3072, 1024, 1, 4},
      {"0.6B down 1024x3072", 1024, 3072, 1, 4},    {"0.6B lm_head 151936x1024", 151936, 1024, 1, 4},
      {"8B gate/up 8-bit", 12288, 4096, 1, 8},      {"8B down 8-bit", 4096, 12288, 1, 8},
      {"8B q/o bf16", 4096, 4096, 1, 16},           {"8B gate/up bf16", 12288, 4096, 1, 16},
      {"8B down bf16", 4096, 12288, 1, 16},         {"8B lm_head bf16", 151936, 4096, 1, 16},
      {"8B gate/up bf16 M=4", 12288, 4096, 4, 16},  {"0.6B gate/up bf16", 3072, 1024, 1, 16},
      {"0.6B down bf16", 1024, 3072, 1, 16},        {"0.6B lm_head bf16", 151936, 1024, 1, 16}};
  if (mma) return mma_table(calls, rounds, group_size, mma_rows);
  if (fp4) return fp4_table(calls, rounds, rows_given ? mma_rows : std::vector<int>{1, 2, 4});
  if (quick) shapes = {shapes[1], shapes[3]};
  if (dense_only) std::erase_if(shapes, [](const Shape& s) { return s.bits != 16; });
  // Then dense_mv's split-K variant (the block's warps share its rows), dense shapes only.
  // Then 3 and 4 steps of loads in flight (QmvTiling::depth; the others take l3_depth(), 2).
  const std::vector<QmvTiling> tilings = {{0, 0},          {1, 4},          {2, 4},          {4, 4},
                                          {1, 8},          {2, 8},          {4, 8},          {8, 4},
                                          {1, 4, true},    {2, 4, true},    {4, 4, true},    {1, 8, true},
                                          {2, 8, true},    {4, 8, true},    {1, 4, false, 4}, {2, 4, false, 4},
                                          {4, 4, false, 4}, {2, 8, false, 3}, {1, 8, false, 4}};

  // The ceiling: a 2 GiB float32 array negated (read + write).
  {
    auto a = mx::random::normal({512 * 1024 * 1024}, mx::float32);
    mx::eval(a);
    double best = 1e9;
    for (int r = 0; r < 5; ++r) best = std::min(best, seconds_of([&] { mx::eval(mx::negative(a)); }));
    std::printf("copy bandwidth (read + write, best of 5): %.0f GB/s\n", 2.0 * a.nbytes() / best / 1e9);
  }

  std::printf("%-26s %5s %9s %8s | %9s %8s %6s | %-6s %9s %8s\n", "shape (N x K)", "MB", "MLX us", "GB/s", "L3 us",
              "GB/s", "ratio", "best", "L3 us", "GB/s");
  for (const auto& sh : shapes) {
    const bool dense = sh.bits == 16;
    const int groups = sh.k / group_size;
    const double bytes = double(sh.n) * sh.k * sh.bits / 8 + (dense ? 0.0 : 2.0 * sh.n * groups * 2) +
                         2.0 * sh.rows * sh.k + 2.0 * sh.rows * sh.n;
    const int copies = std::max(2, static_cast<int>(std::ceil(256e6 / bytes)));
    std::vector<mx::array> ws, ss, bs;
    for (int c = 0; c < copies; ++c) {
      if (dense) {
        ws.push_back(mx::astype(mx::multiply(mx::random::normal({sh.n, sh.k}), mx::array(0.02f)), mx::bfloat16));
        ss.push_back(mx::transpose(ws.back()));  // the transposed view Linear keeps (weight_t_)
        bs.push_back(ws.back());
        continue;
      }
      ws.push_back(mx::random::bits({sh.n, sh.k * sh.bits / 32}, 4));
      ss.push_back(mx::astype(mx::multiply(mx::random::normal({sh.n, groups}), mx::array(0.02f)), mx::bfloat16));
      bs.push_back(mx::astype(mx::multiply(mx::random::normal({sh.n, groups}), mx::array(0.1f)), mx::bfloat16));
    }
    auto x = mx::astype(mx::random::normal({1, sh.rows, sh.k}), mx::bfloat16);
    mx::eval(ws);
    mx::eval(ss);
    mx::eval(bs);
    mx::eval(x);
    const double mlx = time_per_call(
        [&](int i) {
          const int c = i % copies;
          if (dense) return mx::matmul(x, ss[c]);
          return mx::quantized_matmul(x, ws[c], ss[c], bs[c], true, group_size, sh.bits);
        },
        calls, rounds);
    double best = 1e9, chosen = 0;
    QmvTiling best_t;
    std::string line;
    for (auto t : tilings) {
      if (t.split_k && !dense) continue;
      const double ours = time_per_call(
          [&](int i) {
            const int c = i % copies;
            if (dense) return mlxrt::kernels::cuda::dense_mv(x, ws[c], t);
            return mlxrt::kernels::cuda::affine_qmv(x, ws[c], ss[c], bs[c], group_size, sh.bits, t);
          },
          calls, rounds);
      char cell[64];
      std::snprintf(cell, sizeof cell, " %dx%d%s%s:%.0f", t.rows_per_warp, t.warps_per_block, t.split_k ? "s" : "",
                    t.depth ? ("d" + std::to_string(t.depth)).c_str() : "", bytes / ours / 1e9);
      line += cell;
      if (t.rows_per_warp == 0) chosen = ours;
      if (ours < best) best = ours, best_t = t;
    }
    // The chosen tiling (what the model runs) against MLX, then the best fixed one.
    const std::string best_label = std::to_string(best_t.rows_per_warp) + "x" + std::to_string(best_t.warps_per_block) +
                                   (best_t.split_k ? "s" : "") + (best_t.depth ? "d" + std::to_string(best_t.depth) : "");
    std::printf("%-26s %5.0f %9.2f %8.0f | %9.2f %8.0f %5.2fx | %-6s %9.2f %8.0f\n", sh.name, bytes / 1e6, mlx * 1e6,
                bytes / mlx / 1e9, chosen * 1e6, bytes / chosen / 1e9, mlx / chosen, best_label.c_str(), best * 1e6,
                bytes / best / 1e9);
    std::printf("    GB/s by tiling (rows/warp x warps/block; s: split-K, rows per block; dN: N steps in flight):%s\n",
                line.c_str());
    std::fflush(stdout);
  }
  return 0;
}
