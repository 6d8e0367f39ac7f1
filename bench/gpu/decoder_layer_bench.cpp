// The one-kernel decoder layer (src/mlxrt/kernels/cuda/decoder_layer.h) at Qwen3's layer shapes,
// phase by phase: random weights (4- or 8-bit g64, or dense bfloat16) and a cache of `pos` + 1
// positions, a step's layers launched back to back in one eval (each layer's output the next one's
// input, as in a model; enough copies of the weights to stay out of L2), and for each setting:
// - µs a layer, by the host's clock over the eval (launch gaps included);
// - µs a layer by the kernel's own stamps, and each phase's share of it (the stamps are block 0's
//   view past each grid barrier, so a phase's time includes the barrier that ends it);
// - the products' phases' reads (weights, scales, biases) over their time, and the whole layer's
//   over the kernel's time.
// Columns: bps blocks per multiprocessor, dp steps of loads in flight, rw rows a product task (0:
// the kernel's choice), qr rows a q/k/v task (decoder_layer_qkv_rows's; --no-qkv-rounds: 0, as rw),
// st 1 where a warp's tasks are one stream of loads (DecoderLayerGrid::stream; --stream 0,1 sweeps),
// q8 1 where the products take x as int8 (DecoderLayerGrid::q8; --q8 0,1 sweeps), as 1 where phase
// 2's tasks are spread over the blocks, 2 with a key head's query heads on one block
// (DecoderLayerGrid::att_spread; --att-spread 0,1,2 sweeps), ap
// what they prefetch (DecoderLayerGrid::att_prefetch: 0 nothing, 1 into L2, 2 into L1; --att-prefetch),
// pl at most how many lines of each (DecoderLayerGrid::att_prefetch_lines, 0 all; --att-prefetch-lines),
// cb 1 where the grid barrier is one growing count (DecoderLayerGrid::count_barrier; --count-barrier).
// From each block's own stamps: late, how long after block 0 the last block started; bar, how long
// a barrier takes from the last block's arrival to block 0's leaving (the mean of the four); p1 end,
// how far apart the blocks' ends of phase 1 are.
// The position is a host-written scalar made for each launch, as the model makes it (MLX keeps
// such scalars in host-resident managed memory), or with --pos-device one copy in device memory.
// Medians over the launches of `rounds` evals after one unmeasured one (NVRTC, graph capture).
//
// Usage: mlxrt_layer_bench [--models 0.6b,8b] [--bits 4,8,16] [--positions 128,384,1024,4096]
//                          [--blocks-per-sm 1] [--depth 2] [--rows 0] [--no-qkv-rounds] [--warps 8] [--rounds 5]
//                          [--pos-device] [--stream 1] [--q8 0] [--att-spread 0] [--att-prefetch 0]
//                          [--att-prefetch-lines 0] [--count-barrier 0]
// Lists sweep. A setting whose blocks cannot all be resident at once (a kernel of more registers a
// thread than that many blocks leave) stops at the barrier's trap and ends the process: l3_run.sh
// runs one process per blocks-per-SM and depth.
//        mlxrt_layer_bench --emulate   (a small layer on the CPU's SIMT runtime: checks this
//                                       program's bookkeeping without a GPU, as `make test` does;
//                                       its times mean nothing)
// Exits 3 where the stamps come out of order (the barriers failed) or, emulated, the layer is
// declined.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "emulated_kernel.h"
#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/cuda_driver.h"
#include "mlxrt/kernels/cuda/decoder_layer.h"

namespace mx = mlx::core;
using namespace mlxrt::kernels::cuda;

namespace {

struct Dims {
  const char* name;
  int hidden, heads, kv_heads, head_dim, intermediate, layers;
};

// Qwen3's published dims (and a small layer for --emulate).
const Dims kModels[] = {{"0.6b", 1024, 16, 8, 128, 3072, 28},
                        {"8b", 4096, 32, 8, 128, 12288, 36},
                        {"tiny", 256, 4, 2, 64, 512, 4}};

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

std::vector<std::string> name_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

QmvMatrix random_matrix(int n, int k, int bits) {
  constexpr int kGroup = 64;
  if (bits == 16) {
    auto w = mx::astype(mx::multiply(mx::random::normal({n, k}), mx::array(0.02f)), mx::bfloat16);
    mx::eval(w);
    return QmvMatrix::dense(w);
  }
  auto w = mx::random::bits({n, k * bits / 32}, 4);
  auto s = mx::astype(mx::multiply(mx::random::normal({n, k / kGroup}), mx::array(0.002f)), mx::bfloat16);
  auto b = mx::astype(mx::multiply(mx::random::normal({n, k / kGroup}), mx::array(0.01f)), mx::bfloat16);
  mx::eval({w, s, b});
  return {w, s, b, kGroup, bits};
}

mx::array norm_weight(int n) {
  auto w = mx::astype(mx::add(mx::array(1.0f), mx::multiply(mx::random::normal({n}), mx::array(0.1f))), mx::bfloat16);
  mx::eval(w);
  return w;
}

DecoderLayerWeights random_layer(const Dims& d, int bits) {
  const int H = d.heads, HK = d.kv_heads, D = d.head_dim, K = d.hidden, I = d.intermediate;
  return {{norm_weight(K), 1e-6f},
          {random_matrix(H * D, K, bits), random_matrix(HK * D, K, bits), random_matrix(HK * D, K, bits),
           random_matrix(K, H * D, bits), RmsNormIn{norm_weight(D), 1e-6f}, RmsNormIn{norm_weight(D), 1e-6f},
           RopeIn{D, false, 1000000.0f, 1.0f, std::nullopt}, 1.0f / std::sqrt(static_cast<float>(D)), H, HK},
          {norm_weight(K), 1e-6f},
          {random_matrix(I, K, bits), random_matrix(I, K, bits), random_matrix(K, I, bits)}};
}

double bytes_of(const QmvMatrix& m) {
  return static_cast<double>(m.w.nbytes()) + (m.is_dense() ? 0.0 : m.scales.nbytes() + m.biases.nbytes());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What one layer's launch reads in the products' phases 1, 3, 4 and 5.
double product_bytes(const DecoderLayerWeights& w, int phase) {
  switch (phase) {
    case 1: return bytes_of(w.attn.q) + bytes_of(w.attn.k) + bytes_of(w.attn.v);
    case 3: return bytes_of(w.attn.o);
    case 4: return bytes_of(w.mlp.gate) + bytes_of(w.mlp.up);
    case 5: return bytes_of(w.mlp.down);
    default: return 0.0;
  }
}

struct Layer {
  DecoderLayerWeights w;
  mx::array keys, values;  // the cache, `capacity` positions
  mx::array table;         // w's addresses, made once as the model makes them (DecoderLayerWeightTable)
};

Layer make_layer(const Dims& d, int bits, int capacity) {
  const mx::Shape cache = {1, d.kv_heads, capacity, d.head_dim};
  auto w = random_layer(d, bits);
  auto table = decoder_layer_weight_table(w);
  Layer l{std::move(w), mx::astype(mx::multiply(mx::random::normal(cache), mx::array(0.5f)), mx::bfloat16),
          mx::astype(mx::random::normal(cache), mx::bfloat16), table};
  mx::eval(l.keys, l.values);
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "0.6b,8b", bits_arg = "4,8,16", positions_arg = "128,384,1024,4096", per_sm_arg = "1",
              depth_arg = "2", rows_arg = "0", stream_arg = "1", q8_arg = "0",
              spread_arg = "0", prefetch_arg = "0", lines_arg = "0", count_arg = "0";
  int rounds = 5, warps = 8;
  bool emulate = false, qkv_rounds = true, pos_device = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--models" && has_value) models = argv[++i];
    else if (a == "--bits" && has_value) bits_arg = argv[++i];
    else if (a == "--positions" && has_value) positions_arg = argv[++i];
    else if (a == "--blocks-per-sm" && has_value) per_sm_arg = argv[++i];
    else if (a == "--depth" && has_value) depth_arg = argv[++i];
    else if (a == "--rows" && has_value) rows_arg = argv[++i];
    else if (a == "--stream" && has_value) stream_arg = argv[++i];
    else if (a == "--q8" && has_value) q8_arg = argv[++i];
    else if (a == "--att-spread" && has_value) spread_arg = argv[++i];
    else if (a == "--att-prefetch" && has_value) prefetch_arg = argv[++i];
    else if (a == "--att-prefetch-lines" && has_value) lines_arg = argv[++i];
    else if (a == "--count-barrier" && has_value) count_arg = argv[++i];
    else if (a == "--rounds" && has_value) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warps" && has_value) warps = std::atoi(argv[++i]);
    else if (a == "--emulate") emulate = true;
    else if (a == "--no-qkv-rounds") qkv_rounds = false;
    else if (a == "--pos-device") pos_device = true;
    else {
      std::fprintf(stderr, "mlxrt_layer_bench: unknown or incomplete option %s (see the file's head)\n", a.c_str());
      return 2;
    }
  }
  int sms = 0;
  if (emulate) {
    // The SIMT runtime runs resident blocks as system threads: a few, a small layer, short caches.
    models = "tiny";
    positions_arg = positions_arg == "128,384,1024,4096" ? "5,130" : positions_arg;
    per_sm_arg = "1";
    sms = 4;
    rounds = std::min(rounds, 2);
    warps = std::min(warps, 4);
    mx::set_default_device(mx::Device::cpu);
  } else {
    if (!mx::cu::is_available()) {
      std::fprintf(stderr, "mlxrt_layer_bench needs a CUDA device (or --emulate)\n");
      return 1;
    }
    mx::set_default_device(mx::Device::gpu);
    sms = cuda_multiprocessor_count();
  }
  std::unique_ptr<CachedKernel> kernel;
  if (!emulate) kernel = std::make_unique<CachedKernel>(decoder_layer_spec());
  auto launch_layer = [&](const KernelLaunch& l) {
    if (!emulate) return (*kernel)(l);
    return mlxrt::cuda_emu::emulated_launch(*l.spec, l.inputs, l.output_shapes, l.output_dtypes, l.grid,
                                            l.threadgroup, l.template_args, l.spec->grid_barrier);
  };

  std::printf("%d multiprocessors; %s\n", sms, emulate ? "emulated on the CPU (times mean nothing)" : "CUDA");
  static_assert(kDecoderLayerPhases == 5, "the table's columns are the kernel's phases");
  std::printf("%-5s %4s %5s %3s %2s %2s %2s %2s %2s %2s %2s %3s %2s | %8s %8s | %7s %7s %7s %7s %7s | %8s %8s | %6s %6s %6s\n", "model", "bits",
              "pos", "bps", "dp", "rw", "qr", "st", "q8", "as", "ap", "pl", "cb", "us wall", "us kern", "1 qkv", "2 attn", "3 o", "4 g/u", "5 down", "prod GB/s",
              "all GB/s", "late", "bar", "p1 end");
  for (const auto& name : name_list(models)) {
    const Dims* dims = nullptr;
    for (const auto& d : kModels)
      if (name == d.name) dims = &d;
    if (!dims) {
      std::fprintf(stderr, "mlxrt_layer_bench: no model %s (0.6b, 8b)\n", name.c_str());
      return 2;
    }
    const auto positions = int_list(positions_arg);
    const int capacity = *std::max_element(positions.begin(), positions.end()) + 1;
    for (const int bits : int_list(bits_arg)) {
      if (bits != 4 && bits != 8 && bits != 16) {
        std::fprintf(stderr, "mlxrt_layer_bench: --bits takes 4, 8 or 16\n");
        return 2;
      }
      // Copies of the layer: a step's layers read more than L2 holds, as a model's do.
      std::vector<Layer> layers;
      layers.push_back(make_layer(*dims, bits, capacity));
      double layer_bytes = 0;
      for (int p : {1, 3, 4, 5}) layer_bytes += product_bytes(layers[0].w, p);
      const int copies = emulate ? 2 : std::min(dims->layers, std::max(2, static_cast<int>(std::ceil(256e6 / layer_bytes))));
      while (static_cast<int>(layers.size()) < copies) layers.push_back(make_layer(*dims, bits, capacity));
      const int launches = dims->layers;  // a step's
      for (const int per_sm : int_list(per_sm_arg))
      for (const int depth : int_list(depth_arg))
      for (const int rows : int_list(rows_arg))
      for (const int stream : int_list(stream_arg))
      for (const int q8 : int_list(q8_arg))
      for (const int spread : int_list(spread_arg))
      for (const int prefetch : int_list(prefetch_arg))
      for (const int lines : int_list(lines_arg))
      for (const int count : int_list(count_arg)) {
        const int blocks = per_sm * sms;
        // The q/k/v task rows the model's grid (8 warps a block) takes: by default one round's
        // (decoder_layer_qkv_rows), with --no-qkv-rounds those of MLXRT_CUDA_L3_LAYER_QKV_ROUNDS=0.
        const int qkv_rows = decoder_layer_grid(layers[0].w, sms, {per_sm, depth, rows, qkv_rounds}).qkv_rows;
        for (const int pos : positions) {
          std::vector<double> wall, total, phase[kDecoderLayerPhases + 1], late, barrier, p1_end;
          auto bar = mx::zeros({kDecoderLayerBarrierWords}, mx::uint32);
          auto x = mx::astype(mx::random::normal({1, 1, dims->hidden}), mx::bfloat16);
          // --pos-device: the position in a 16-byte buffer a GPU copy fills (device memory: MLX puts
          // only buffers of up to 8 bytes in managed memory), a one-element view of it.
          auto pos_in_device = mx::slice(mx::add(mx::zeros({4}, mx::int32), mx::array(pos, mx::int32)), {0}, {1});
          mx::eval({bar, x, pos_in_device});
          DecoderLayerGrid grid{blocks, warps, depth, rows, qkv_rows, stream != 0, q8 != 0};
          grid.att_spread = spread;
          grid.att_prefetch = prefetch;
          grid.att_prefetch_lines = lines;
          grid.count_barrier = count != 0;
          const auto layout = decoder_layer_scratch(x, layers[0].w, capacity, grid);
          bool declined = false;
          for (int r = 0; r <= rounds && !declined; ++r) {
            std::vector<mx::array> stamps;
            mx::array h = x;
            mx::synchronize();
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < launches; ++i) {
              const auto& l = layers[static_cast<size_t>(i) % layers.size()];
              const auto launch = decoder_layer_launch(h, l.w, l.table, l.keys, l.values,
                                                       pos_device ? pos_in_device : mx::array(pos, mx::int32), bar, grid);
              if (!launch) {
                declined = true;
                break;
              }
              auto out = launch_layer(*launch);
              h = out[0];
              bar = out[1];
              // The stamps sit at the start of the scratch output (decoder_layer_scratch).
              stamps.push_back(out[2]);
            }
            if (declined) break;
            mx::eval(h);
            mx::eval(stamps);
            mx::synchronize();
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (r == 0) continue;  // NVRTC, graph capture
            wall.push_back(s / launches * 1e6);
            for (auto& st : stamps) {
              auto host = mx::astype(decoder_layer_scratch_view(st, 0, kDecoderLayerStamps, mx::uint64), mx::uint64);
              mx::eval(host);
              const uint64_t* t = host.data<uint64_t>();
              for (int p = 1; p <= kDecoderLayerPhases; ++p)
                if (t[p] < t[p - 1]) {
                  std::fprintf(stderr, "mlxrt_layer_bench: stamp %d is before stamp %d: the kernel's barriers failed\n",
                               p, p - 1);
                  return 3;
                }
              total.push_back(static_cast<double>(t[kDecoderLayerPhases] - t[0]) / 1e3);
              for (int p = 1; p <= kDecoderLayerPhases; ++p)
                phase[p].push_back(static_cast<double>(t[p] - t[p - 1]) / 1e3);
              auto per_block = mx::astype(
                  decoder_layer_scratch_view(st, layout.block_stamps, static_cast<size_t>(blocks) * kDecoderLayerBlockStamps,
                                             mx::uint64),
                  mx::uint64);
              mx::eval(per_block);
              const uint64_t* b = per_block.data<uint64_t>();
              const auto us = [](uint64_t later, uint64_t earlier) {
                return later >= earlier ? static_cast<double>(later - earlier) / 1e3 : -static_cast<double>(earlier - later) / 1e3;
              };
              uint64_t last_start = 0, first_end1 = UINT64_MAX, last_end1 = 0;
              double bar_us = 0;
              for (int k = 1; k < kDecoderLayerBlockStamps; ++k) {
                uint64_t last_in = 0;
                for (int blk = 0; blk < blocks; ++blk) last_in = std::max(last_in, b[blk * kDecoderLayerBlockStamps + k]);
                bar_us += us(t[k], last_in) / (kDecoderLayerBlockStamps - 1);
              }
              for (int blk = 0; blk < blocks; ++blk) {
                last_start = std::max(last_start, b[blk * kDecoderLayerBlockStamps]);
                first_end1 = std::min(first_end1, b[blk * kDecoderLayerBlockStamps + 1]);
                last_end1 = std::max(last_end1, b[blk * kDecoderLayerBlockStamps + 1]);
              }
              late.push_back(us(last_start, t[0]));
              barrier.push_back(bar_us);
              p1_end.push_back(us(last_end1, first_end1));
            }
          }
          if (declined) {
            std::printf("%-5s %4d %5d %3d %2d %2d %2d %2d %2d %2d %2d %3d %2d | the kernel declines this setting\n",
                        dims->name, bits, pos, per_sm, depth, rows, qkv_rows, stream, q8, spread, prefetch, lines, count);
            if (emulate) return 3;  // the small layer is always taken: a decline is this program's bug
            continue;
          }
          double prod_bytes = 0, prod_us = 0;
          for (int p : {1, 3, 4, 5}) {
            prod_bytes += product_bytes(layers[0].w, p);
            prod_us += median(phase[p]);
          }
          const double kern = median(total);
          std::printf("%-5s %4d %5d %3d %2d %2d %2d %2d %2d %2d %2d %3d %2d | %8.1f %8.1f | %7.1f %7.1f %7.1f %7.1f %7.1f | %8.0f %8.0f | %6.1f %6.1f %6.1f\n",
                      dims->name, bits, pos, per_sm, depth, rows, qkv_rows, stream, q8, spread, prefetch, lines, count, median(wall), kern, median(phase[1]), median(phase[2]),
                      median(phase[3]), median(phase[4]), median(phase[5]),
                      prod_us > 0 ? prod_bytes / prod_us / 1e3 : 0.0, kern > 0 ? layer_bytes / kern / 1e3 : 0.0, median(late),
                      median(barrier), median(p1_end));
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
