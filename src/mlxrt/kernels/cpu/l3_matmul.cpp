#include "mlxrt/kernels/cpu/l3_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mlx/ops.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/cpu_workers.h"
#include "mlxrt/kernels/cpu/l3_qmm_args.h"
#include "mlxrt/kernels/cpu/l3_rows.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cpu/operand.h"

namespace mlxrt::kernels::cpu {

namespace {

using detail::Operand;

bool l3_applies(int k, int group_size, int bits) {
  return (bits == 4 || bits == 8) && (group_size == 32 || group_size == 64 || group_size == 128) && k > 0 &&
         k % group_size == 0;
}

using detail::load_float;

class CpuOnly : public mx::UnaryPrimitive {
 public:
  CpuOnly(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)) {}
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[") + name() + "] runs on the CPU only");
  }

 protected:
  std::shared_ptr<const CpuKernels> kernels_;
};

// w, scales, biases -> tiles of 16 rows (l3_qmm_args.h), scales and biases as float32; a 3-D w
// (experts) packs each matrix in turn.
class L3PackWeights : public CpuOnly {
 public:
  L3PackWeights(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, int group_size, int bits)
      : CpuOnly(stream, std::move(kernels)), group_size_(group_size), bits_(bits) {}
  const char* name() const override { return "L3PackWeights"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3PackWeights*>(&other);
    return o && o->group_size_ == group_size_ && o->bits_ == bits_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [g = group_size_, bits = bits_](mx::array& out, const std::vector<mx::array>& in) {
      const int dims = static_cast<int>(in[0].ndim());
      const Operand w(in[0], dims), scales(in[1], dims), biases(in[2], dims);
      const int experts = dims == 3 ? in[0].shape(0) : 1;
      const int n = in[0].shape(-2);
      const int words = in[0].shape(-1);
      const int k = words * 32 / bits;
      const int groups = k / g;
      const auto sdt = in[1].dtype(), bdt = in[2].dtype();
      // float16 parameters where every one is exactly a float16 (l3_tile_words).
      bool half = true;
      const long long params = static_cast<long long>(experts) * n * groups;
      for (long long i = 0; i < params && half; ++i)
        for (const auto& [data, t] : {std::pair(scales.data, sdt), std::pair(biases.data, bdt)}) {
          const float f = load_float(data, t, i);
          half = half && static_cast<float>(mx::float16_t(f)) == f;
        }
      std::fill_n(out.data<std::uint32_t>(), kL3HeaderWords, 0u);
      out.data<std::uint32_t>()[0] = half ? 1u : 0u;
      const long long tile_words = l3_tile_words(k, bits, g, half);
      const int tiles = (n + kL3TileRows - 1) / kL3TileRows;
      for (int e = 0; e < experts; ++e) {
      auto* dst = out.data<std::uint32_t>() + kL3HeaderWords + static_cast<long long>(e) * tiles * tile_words;
      const auto* src = reinterpret_cast<const std::uint32_t*>(w.data) + static_cast<long long>(e) * n * words;
      const long long sb_at = static_cast<long long>(e) * n * groups;
      const int group_words = g * bits / 32;
      const long long group_stride = l3_group_stride(g, bits, half);
      for (int t = 0; t < tiles; ++t) {
        std::uint32_t* tile = dst + t * tile_words;
        for (int j = 0; j < words; ++j)
          for (int i = 0; i < kL3TileRows; ++i) {
            const int row = t * kL3TileRows + i;
            tile[(j / group_words) * group_stride + static_cast<long long>(j % group_words) * kL3TileRows + i] =
                row < n ? src[static_cast<long long>(row) * words + j] : 0u;
          }
        for (int gi = 0; gi < groups; ++gi)
          for (int i = 0; i < kL3TileRows; ++i) {
            std::uint32_t* sb = tile + gi * group_stride + static_cast<long long>(group_words) * kL3TileRows;
            const int row = t * kL3TileRows + i;
            const long long at = sb_at + static_cast<long long>(row) * groups + gi;
            const float scale = row < n ? load_float(scales.data, sdt, at) : 0.0f;
            const float bias = row < n ? load_float(biases.data, bdt, at) : 0.0f;
            if (half) {
              auto* h = reinterpret_cast<mx::float16_t*>(sb);
              h[i] = mx::float16_t(scale);
              h[kL3TileRows + i] = mx::float16_t(bias);
            } else {
              auto* f = reinterpret_cast<float*>(sb);
              f[i] = scale;
              f[kL3TileRows + i] = bias;
            }
          }
      }
      }
    });
  }

 private:
  int group_size_;
  int bits_;
};

// One level of a block: d = max|v| / 127, q = nearbyint(v * (127 / max|v|)) (0 where max|v| is 0);
// returns the sum of q. A NaN in v makes d NaN, so every output that reads the block says so.
int quantize_level(const float* v, std::int8_t* q, float& d) {
  float amax = 0.0f;
  bool nan = false;
  for (int i = 0; i < kL3Block; ++i) {
    amax = std::max(amax, std::fabs(v[i]));
    nan = nan || v[i] != v[i];
  }
  if (nan) amax = std::numeric_limits<float>::quiet_NaN();
  d = amax / 127.0f;
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
  // Round to nearest even by adding and taking away 1.5 * 2^23 (|v * inverse| <= 127.5, where the
  // sum's last bit is the integer's): nearbyint without a call per value.
  constexpr float kRound = 12582912.0f;
  int sum = 0;
  for (int i = 0; i < kL3Block; ++i) {
    const float y = v[i] * inverse;
    const float r = std::clamp((y + kRound) - kRound, -127.0f, 127.0f);
    const int c = r == r ? static_cast<int>(r) : 0;
    q[i] = static_cast<std::int8_t>(c);
    sum += c;
  }
  return sum;
}

// One block in portable code (the definition; the instruction-set files compute the same bits).
void quantize_block_scalar(const float* v, std::int8_t* q1, std::int8_t* q2, float* d, int* sums) {
  float rest[kL3Block];
  sums[0] = quantize_level(v, q1, d[0]);
  for (int i = 0; i < kL3Block; ++i) {
    const float approx = d[0] * static_cast<float>(q1[i]);
    rest[i] = v[i] - approx;
  }
  sums[1] = quantize_level(rest, q2, d[1]);
}

void quantize_row(L3QuantizeBlockFn quantize_block, const char* x, mx::Dtype t, long long row, int k, int bits,
                  int group_size, std::int8_t* q, float* block_d, float* group_xs) {
  const int blocks = k / kL3Block;
  std::vector<int> block_sum(static_cast<size_t>(blocks) * kL3Levels);
  const int per_word = 32 / bits;
  for (int b = 0; b < blocks; ++b) {
    float converted[kL3Block];
    const float* v = reinterpret_cast<const float*>(x) + row * k + b * kL3Block;
    if (t != mx::float32) {
      for (int i = 0; i < kL3Block; ++i) converted[i] = load_float(x, t, row * k + b * kL3Block + i);
      v = converted;
    }
    std::int8_t level[kL3Levels][kL3Block];
    quantize_block(v, level[0], level[1], block_d + 2 * b, block_sum.data() + 2 * static_cast<size_t>(b));
    // Each word's values, level by level, in the order of the word's bytes (l3_qmm_args.h).
    for (int word = 0; word < kL3Block / per_word; ++word) {
      std::int8_t* out = q + (static_cast<long long>(b) * kL3Block + word * per_word) * kL3Levels;
      for (int l = 0; l < kL3Levels; ++l) {
        const std::int8_t* in = level[l] + word * per_word;
        std::int8_t* dst = out + l * per_word;
        if (bits == 8) {
          std::memcpy(dst, in, 4);
        } else {
          for (int i = 0; i < 4; ++i) {
            dst[i] = in[2 * i];
            dst[4 + i] = in[2 * i + 1];
          }
        }
      }
    }
  }
  const int per_group = group_size / kL3Block;
  for (int g = 0; g < k / group_size; ++g) {
    float xs = 0.0f;
    for (int b = g * per_group; b < (g + 1) * per_group; ++b)
      for (int l = 0; l < kL3Levels; ++l) {
        const float part = block_d[2 * b + l] * static_cast<float>(block_sum[2 * static_cast<size_t>(b) + l]);
        xs = xs + part;
      }
    group_xs[g] = xs;
  }
}

}  // namespace

namespace detail {

QuantizedRows quantize_rows(const CpuKernels& kernels, const char* x, mx::Dtype t, int rows, int k, int bits, int g) {
  QuantizedRows qx;
  qx.q.resize(static_cast<size_t>(rows) * static_cast<size_t>(k) * kL3Levels);
  qx.block_d.resize(static_cast<size_t>(rows) * static_cast<size_t>(k / kL3Block) * kL3Levels);
  qx.group_xs.resize(static_cast<size_t>(rows) * static_cast<size_t>(k / g));
  L3QuantizeBlockFn block = quantize_block_scalar;
#if defined(MLXRT_CPU_X86_KERNELS)
  block = kernels.vnni() ? l3_quantize_block_avx512vnni : l3_quantize_block_avx2;
#elif defined(MLXRT_CPU_NEON_KERNELS)
  block = l3_quantize_block_neon;
#endif
  kernels.workers().run(rows, 0, [&](float*, int begin, int end) {
    for (int r = begin; r < end; ++r) {
      const L3Rows at = qx.row(r, k, g);
      quantize_row(block, x, t, r, k, bits, g, const_cast<std::int8_t*>(at.q), const_cast<float*>(at.block_d),
                   const_cast<float*>(at.group_xs));
    }
  });
  return qx;
}

void run_l3_products(const CpuKernels& kernels, const std::vector<L3QmmArgs>& products) {
  std::vector<int> first{0};  // each product's first unit
  for (const auto& p : products) {
    const int tiles = (p.n + kL3TileRows - 1) / kL3TileRows;
    const int units = ((tiles + kL3TilesPerUnit - 1) / kL3TilesPerUnit) * ((p.rows + kRowsPerUnit - 1) / kRowsPerUnit);
    first.push_back(first.back() + units);
  }
  const bool vnni = kernels.vnni();
  kernels.workers().run(first.back(), 0, [&](float*, int begin, int end) {
    size_t i = 0;
    for (int u = begin; u < end;) {
      while (first[i + 1] <= u) ++i;
      const int stop = std::min(end, first[i + 1]);
#if defined(MLXRT_CPU_X86_KERNELS)
      if (vnni)
        l3_qmm_units_avx512vnni(products[i], u - first[i], stop - first[i]);
      else
        l3_qmm_units_avx2(products[i], u - first[i], stop - first[i]);
#elif defined(MLXRT_CPU_NEON_KERNELS)
      if (vnni)
        l3_qmm_units_neondot(products[i], u - first[i], stop - first[i]);
      else
        l3_qmm_units_neon(products[i], u - first[i], stop - first[i]);
#else
      (void)vnni;
#endif
      u = stop;
    }
  });
}

QmmElem elem_of(mx::Dtype t) {
  return t == mx::bfloat16 ? QmmElem::bf16 : t == mx::float16 ? QmmElem::f16 : QmmElem::f32;
}

void set_packed(L3QmmArgs& args, const std::uint32_t* packed) {
  args.half_params = packed[0] == 1u;
  args.packed = packed + kL3HeaderWords;
}

}  // namespace detail

namespace {

using detail::elem_of;
using detail::QuantizedRows;
using detail::quantize_rows;

// Runs `count` products (product i being args_of(i)), every work unit of every product one item
// for the threads.
void run_l3(const CpuKernels& kernels, int count, const std::function<L3QmmArgs(int)>& args_of) {
  std::vector<L3QmmArgs> products;
  products.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) products.push_back(args_of(i));
  detail::run_l3_products(kernels, products);
}

class L3QuantizedMatmul : public CpuOnly {
 public:
  L3QuantizedMatmul(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, int n, int group_size, int bits)
      : CpuOnly(stream, std::move(kernels)), n_(n), group_size_(group_size), bits_(bits) {}
  const char* name() const override { return "L3QuantizedMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3QuantizedMatmul*>(&other);
    return o && o->n_ == n_ && o->group_size_ == group_size_ && o->bits_ == bits_ && o->kernels_ == kernels_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [kr = kernels_, n = n_, g = group_size_, bits = bits_](mx::array& out, const std::vector<mx::array>& in) {
      const Operand x(in[0], static_cast<int>(in[0].ndim()));
      const int k = in[0].shape(-1);
      const int rows = static_cast<int>(in[0].size() / static_cast<size_t>(k));
      const QuantizedRows qx = quantize_rows(*kr, x.data, in[0].dtype(), rows, k, bits, g);
      L3QmmArgs args;
      args.out = out.data<void>();
      args.x = qx.row(0, k, g);
      detail::set_packed(args, in[1].data<std::uint32_t>());
      args.rows = rows;
      args.n = n;
      args.k = k;
      args.bits = bits;
      args.group_size = g;
      args.elem = elem_of(out.dtype());
      detail::run_l3_products(*kr, {args});
    });
  }

 private:
  int n_;
  int group_size_;
  int bits_;
};

// MLX's GatherQMM (transposed, affine) over packed experts: output block i is x's block lhs[i]
// (M rows) against expert rhs[i]. Each x block is quantized once, however many experts read it.
class L3GatherQuantizedMatmul : public CpuOnly {
 public:
  L3GatherQuantizedMatmul(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, int n, int group_size, int bits)
      : CpuOnly(stream, std::move(kernels)), n_(n), group_size_(group_size), bits_(bits) {}
  const char* name() const override { return "L3GatherQuantizedMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3GatherQuantizedMatmul*>(&other);
    return o && o->n_ == n_ && o->group_size_ == group_size_ && o->bits_ == bits_ && o->kernels_ == kernels_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [kr = kernels_, n = n_, g = group_size_, bits = bits_](mx::array& out, const std::vector<mx::array>& in) {
      const Operand x(in[0], static_cast<int>(in[0].ndim()));  // dense: blocks one after another
      const Operand lhs(in[2], 0), rhs(in[3], 0);
      const int k = in[0].shape(-1);
      const int m = in[0].shape(-2);
      const int rows = static_cast<int>(in[0].size() / static_cast<size_t>(k));
      const QuantizedRows qx = quantize_rows(*kr, x.data, in[0].dtype(), rows, k, bits, g);
      const int tiles = (n + kL3TileRows - 1) / kL3TileRows;
      const bool half = in[1].data<std::uint32_t>()[0] == 1u;
      const long long expert_words = static_cast<long long>(tiles) * l3_tile_words(k, bits, g, half);
      const auto* lhs_ids = reinterpret_cast<const std::uint32_t*>(lhs.data);
      const auto* rhs_ids = reinterpret_cast<const std::uint32_t*>(rhs.data);
      char* out_data = static_cast<char*>(out.data<void>());
      const size_t item = out.itemsize();
      L3QmmArgs shape;
      shape.rows = m;
      shape.n = n;
      shape.k = k;
      shape.bits = bits;
      shape.group_size = g;
      shape.elem = elem_of(out.dtype());
      run_l3(*kr, static_cast<int>(in[2].size()), [&](int i) {
        L3QmmArgs args = shape;
        args.out = out_data + static_cast<size_t>(i) * static_cast<size_t>(m) * static_cast<size_t>(n) * item;
        args.x = qx.row(static_cast<long long>(lhs_ids[lhs.offset(i)]) * m, k, g);
        detail::set_packed(args, in[1].data<std::uint32_t>());
        args.packed += static_cast<long long>(rhs_ids[rhs.offset(i)]) * expert_words;
        return args;
      });
    });
  }

 private:
  int n_;
  int group_size_;
  int bits_;
};

}  // namespace

std::optional<mx::array> l3_pack(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& w,
                                 const mx::array& scales, const std::optional<mx::array>& biases, int group_size,
                                 int bits, const std::string& mode) {
  if (!kernels || !kernels->l3() || mode != "affine" || !biases || (w.ndim() != 2 && w.ndim() != 3) ||
      w.dtype() != mx::uint32)
    return std::nullopt;
  const int k = w.shape(-1) * 32 / bits;
  if (!l3_applies(k, group_size, bits) || scales.ndim() != w.ndim() || scales.shape(-1) != k / group_size)
    return std::nullopt;
  const int n = w.shape(-2);
  const long long experts = w.ndim() == 3 ? w.shape(0) : 1;
  const long long tiles = (n + kL3TileRows - 1) / kL3TileRows;
  const long long words = kL3HeaderWords + experts * tiles * l3_tile_words(k, bits, group_size, false);
  if (words > std::numeric_limits<int>::max()) return std::nullopt;
  const auto cpu = mx::default_stream(mx::Device::cpu);
  return mx::array({static_cast<int>(words)}, mx::uint32,
                   std::make_shared<L3PackWeights>(cpu, kernels, group_size, bits), {w, scales, *biases});
}

mx::array l3_quantized_matmul(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x,
                              const mx::array& packed, int n, int k, int group_size, int bits, mx::Dtype dtype) {
  if (x.ndim() < 1 || x.shape(-1) != k)
    throw std::invalid_argument("[l3_quantized_matmul] x's last dimension must be " + std::to_string(k));
  auto shape = x.shape();
  shape.back() = n;
  const auto cpu = mx::default_stream(mx::Device::cpu);
  return mx::array(shape, dtype, std::make_shared<L3QuantizedMatmul>(cpu, kernels, n, group_size, bits), {x, packed});
}

}  // namespace mlxrt::kernels::cpu

namespace mlxrt::kernels::cpu {

std::optional<mx::array> l3_gather_qmm(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x,
                                       const mx::array& w, const mx::array& scales, const mx::array& biases,
                                       const mx::array& packed, const mx::array& rhs_indices, int group_size, int bits,
                                       bool sorted_indices) {
  const auto t = x.dtype();
  if (!kernels || !kernels->l3() || mx::default_device() != mx::Device::cpu ||
      (t != mx::float32 && t != mx::bfloat16 && t != mx::float16) || w.ndim() != 3)
    return std::nullopt;
  // MLX's node first: its checks, its broadcasting of x and the indices, its result type.
  auto y = mx::gather_qmm(x, w, scales, biases, std::nullopt, rhs_indices, true, group_size, bits, "affine",
                          std::nullopt, sorted_indices);
  if (y.inputs().size() != 6) return std::nullopt;
  const auto& in = y.inputs();
  return mx::array(y.shape(), y.dtype(),
                   std::make_shared<L3GatherQuantizedMatmul>(y.primitive().stream(), kernels, w.shape(-2), group_size, bits),
                   {in[0], packed, in[4], in[5]});
}

}  // namespace mlxrt::kernels::cpu
