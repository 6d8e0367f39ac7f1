#include "mlxrt/kernels/cpu/l3_block.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <mlx/allocator.h>
#include <mlx/backend/cpu/encoder.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/cpu_workers.h"
#include "mlxrt/kernels/cpu/l3_fused.h"
#include "mlxrt/kernels/cpu/l3_fused_args.h"
#include "mlxrt/kernels/cpu/l3_rows.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cpu/operand.h"

namespace mlxrt::kernels::cpu {

namespace {

using detail::load_float;
using detail::Operand;

// What one matrix's product needs besides its packed words.
struct MatrixShape {
  int n, k, group_size, bits;
  bool operator==(const MatrixShape&) const = default;
};

MatrixShape shape_of(const L3Matrix& m) { return {m.n, m.k, m.group_size, m.bits}; }

// The product of quantized rows `x` (rows × m.k) with packed matrix words `packed`, into `out` (rows × m.n of elem).
L3QmmArgs product(const detail::QuantizedRows& x, const std::uint32_t* packed, const MatrixShape& m, int rows,
                  void* out, QmmElem elem) {
  L3QmmArgs a;
  a.out = out;
  a.x = x.row(0, m.k, m.group_size);
  detail::set_packed(a, packed);
  a.rows = rows;
  a.n = m.n;
  a.k = m.k;
  a.bits = m.bits;
  a.group_size = m.group_size;
  a.elem = elem;
  return a;
}

// The RMSNorm weight (input 1) as floats, and the normed rows of h (input 0: rows of d values).
std::vector<char> normed_rows(const std::vector<mx::array>& in, int d, float eps, int& rows) {
  const auto t = in[0].dtype();
  const Operand h(in[0], static_cast<int>(in[0].ndim()));
  rows = static_cast<int>(in[0].size() / static_cast<size_t>(d));
  const Operand wo(in[1], 1);
  std::vector<float> w(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) w[static_cast<size_t>(i)] = load_float(wo.data, t, wo.offset(i));
  std::vector<char> normed(static_cast<size_t>(rows) * static_cast<size_t>(d) * in[0].itemsize());
  detail::rms_norm_rows(h.data, t, rows, d, w.data(), eps, normed.data());
  return normed;
}

class L3MlpBlock : public mx::UnaryPrimitive {
 public:
  L3MlpBlock(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, float eps, MatrixShape gate,
             MatrixShape up, MatrixShape down)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)), eps_(eps), gate_(gate), up_(up), down_(down) {}
  const char* name() const override { return "L3MlpBlock"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3MlpBlock*>(&other);
    return o && o->kernels_ == kernels_ && o->eps_ == eps_ && o->gate_ == gate_ && o->up_ == up_ && o->down_ == down_;
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[L3MlpBlock] runs on the CPU only");
  }

  // in: h, norm weight, gate, up and down packed.
  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [k = kernels_, eps = eps_, gate = gate_, up = up_, down = down_](
                                                        mx::array& out, const std::vector<mx::array>& in) {
      const auto t = in[0].dtype();
      const size_t item = in[0].itemsize();
      const QmmElem elem = detail::elem_of(t);
      const Operand h(in[0], static_cast<int>(in[0].ndim()));
      const int d = gate.k;
      int rows = 0;
      const auto normed = normed_rows(in, d, eps, rows);
      const size_t row_bytes = static_cast<size_t>(d) * item, hidden_bytes = static_cast<size_t>(gate.n) * item;
      // gate and up from one quantization of the normed rows, in one run of the threads.
      std::vector<char> g(rows * hidden_bytes), u(rows * hidden_bytes), act(rows * hidden_bytes);
      {
        const auto qx = detail::quantize_rows(*k, normed.data(), t, rows, d, gate.bits, gate.group_size);
        detail::run_l3_products(*k, {product(qx, in[2].data<std::uint32_t>(), gate, rows, g.data(), elem),
                                     product(qx, in[3].data<std::uint32_t>(), up, rows, u.data(), elem)});
      }
      const long long count = static_cast<long long>(rows) * gate.n;
      constexpr long long kPerUnit = 8192;
      k->workers().run(static_cast<int>((count + kPerUnit - 1) / kPerUnit), 0, [&](float*, int begin, int end) {
#if defined(MLXRT_CPU_X86_KERNELS)
        l3_swiglu_avx2(g.data(), u.data(), act.data(), elem, begin * kPerUnit, std::min(count, end * kPerUnit));
#elif defined(MLXRT_CPU_NEON_KERNELS)
        l3_swiglu_neon(g.data(), u.data(), act.data(), elem, begin * kPerUnit, std::min(count, end * kPerUnit));
#else
        (void)begin, (void)end;
#endif
      });
      std::vector<char> r(rows * row_bytes);
      {
        const auto qa = detail::quantize_rows(*k, act.data(), t, rows, gate.n, down.bits, down.group_size);
        detail::run_l3_products(*k, {product(qa, in[4].data<std::uint32_t>(), down, rows, r.data(), elem)});
      }
      detail::add_rows(h.data, r.data(), t, static_cast<long long>(rows) * d, static_cast<char*>(out.data<void>()));
    });
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
  float eps_;
  MatrixShape gate_, up_, down_;
};

// What one L3AttentionInput node computes.
struct AttentionInputCall {
  std::shared_ptr<const CpuKernels> kernels;
  float eps;
  MatrixShape q, k, v;
  int heads, kv_heads;
  detail::L3RopeSpec rope;
  bool has_freqs;
  int offset;
  std::optional<std::pair<float, float>> qk_eps;  // the per-head norms' (their weights are inputs)
  bool half_kv = false;                             // keys and values written as float16

  bool operator==(const AttentionInputCall& o) const {
    return kernels == o.kernels && eps == o.eps && q == o.q && k == o.k && v == o.v && heads == o.heads &&
           kv_heads == o.kv_heads && rope.dims == o.rope.dims && rope.traditional == o.rope.traditional &&
           rope.base == o.rope.base && rope.scale == o.rope.scale && has_freqs == o.has_freqs &&
           offset == o.offset && qk_eps == o.qk_eps && half_kv == o.half_kv;
  }

  // in: h [B, L, d], norm weight, q, k, v packed, (freqs), (q and k norm weights); out: queries,
  // keys, values [B, heads, L, D].
  void compute(const std::vector<mx::array>& in, std::vector<mx::array>& out) const {
    const auto t = in[0].dtype();
    const size_t item = in[0].itemsize();
    const QmmElem elem = detail::elem_of(t);
    const int d = q.k, B = in[0].shape(0), L = in[0].shape(1);
    int rows = 0;
    const auto normed = normed_rows(in, d, eps, rows);
    const int D = q.n / heads;
    std::vector<char> lq(static_cast<size_t>(rows) * q.n * item), lk(static_cast<size_t>(rows) * k.n * item),
        lv(static_cast<size_t>(rows) * v.n * item);
    {
      const auto qx = detail::quantize_rows(*kernels, normed.data(), t, rows, d, q.bits, q.group_size);
      detail::run_l3_products(*kernels, {product(qx, in[2].data<std::uint32_t>(), q, rows, lq.data(), elem),
                                         product(qx, in[3].data<std::uint32_t>(), k, rows, lk.data(), elem),
                                         product(qx, in[4].data<std::uint32_t>(), v, rows, lv.data(), elem)});
    }
    std::vector<float> freqs;
    if (has_freqs) {
      const Operand f(in[5], 1);
      for (int i = 0; i < rope.dims / 2; ++i) freqs.push_back(load_float(f.data, in[5].dtype(), f.offset(i)));
    }
    const auto table = detail::rope_table(rope, freqs, offset, L);
    // The per-head norms' weights as floats (qwen3), empty without.
    std::vector<float> q_norm, k_norm, scratch(static_cast<size_t>(D));
    std::vector<char> normed_head(static_cast<size_t>(D) * item), rotated(static_cast<size_t>(D) * item);
    if (qk_eps) {
      const size_t at = has_freqs ? 6 : 5;
      for (auto [w, index] : {std::pair(&q_norm, at), std::pair(&k_norm, at + 1)}) {
        const Operand wo(in[index], 1);
        for (int i = 0; i < D; ++i) w->push_back(load_float(wo.data, t, wo.offset(i)));
      }
    }
    // [B, L, heads, D] -> [B, heads, L, D]: normed (where given) and rotated (queries, keys) or
    // copied (values).
    auto split = [&](const std::vector<char>& lin, int n_heads, char* dst, bool rotate, const std::vector<float>& norm,
                     float norm_eps, bool half) {
      const size_t head_bytes = static_cast<size_t>(D) * item;
      const size_t out_bytes = half ? static_cast<size_t>(D) * 2 : head_bytes;
      for (int b = 0; b < B; ++b)
        for (int l = 0; l < L; ++l)
          for (int hd = 0; hd < n_heads; ++hd) {
            const char* src = lin.data() + ((static_cast<size_t>(b) * L + l) * n_heads + hd) * head_bytes;
            char* to = dst + ((static_cast<size_t>(b) * n_heads + hd) * L + l) * out_bytes;
            if (!norm.empty()) {
              detail::rms_norm_rows(src, t, 1, D, norm.data(), norm_eps, normed_head.data());
              src = normed_head.data();
            }
            char* row = half ? rotated.data() : to;
            if (rotate)
              detail::rope_row(table, src, t, D, l, row);
            else
              std::memcpy(row, src, head_bytes);
            if (half) {  // a float32 row rounded to float16 (l3_kv_cache_type)
              auto* h = reinterpret_cast<mx::float16_t*>(to);
              for (int i = 0; i < D; ++i) h[i] = mx::float16_t(reinterpret_cast<const float*>(row)[i]);
            }
          }
    };
    split(lq, heads, static_cast<char*>(out[0].data<void>()), true, q_norm, qk_eps ? qk_eps->first : 0.0f, false);
    split(lk, kv_heads, static_cast<char*>(out[1].data<void>()), true, k_norm, qk_eps ? qk_eps->second : 0.0f,
          half_kv);
    split(lv, kv_heads, static_cast<char*>(out[2].data<void>()), false, {}, 0.0f, half_kv);
  }
};

class L3AttentionInput : public mx::Primitive {
 public:
  L3AttentionInput(mx::Stream stream, AttentionInputCall call) : mx::Primitive(stream), call_(std::move(call)) {}
  const char* name() const override { return "L3AttentionInput"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3AttentionInput*>(&other);
    return o && o->call_ == call_;
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[L3AttentionInput] runs on the CPU only");
  }
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    // As detail::schedule_on_cpu, for three outputs.
    std::vector<mx::array> in, out;
    for (const auto& a : inputs) in.push_back(mx::array::unsafe_weak_copy(a));
    for (auto& o : outputs) {
      o.set_data(mx::allocator::malloc(o.nbytes()));
      out.push_back(mx::array::unsafe_weak_copy(o));
    }
    mx::cpu::get_command_encoder(stream()).dispatch([call = call_, in = std::move(in), out = std::move(out)]() mutable {
      call.compute(in, out);
    });
  }

 private:
  AttentionInputCall call_;
};

class L3AttentionOutput : public mx::UnaryPrimitive {
 public:
  L3AttentionOutput(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, float scale, bool causal,
                    MatrixShape o)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)), scale_(scale), causal_(causal), o_(o) {}
  const char* name() const override { return "L3AttentionOutput"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3AttentionOutput*>(&other);
    return o && o->kernels_ == kernels_ && o->scale_ == scale_ && o->causal_ == causal_ && o->o_ == o_;
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[L3AttentionOutput] runs on the CPU only");
  }

  // in: h [B, L, d], queries [B, Hq, L, D], keys, values [B, Hkv, T, D or Dv], o packed.
  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [k = kernels_, scale = scale_, causal = causal_, o = o_](
                                                        mx::array& out, const std::vector<mx::array>& in) {
      const auto t = in[0].dtype();
      const size_t item = in[0].itemsize();
      const int B = in[1].shape(0), H = in[1].shape(1), L = in[1].shape(2), Dv = in[3].shape(3);
      const int rows = B * L;
      std::vector<char> attended(static_cast<size_t>(B) * H * L * Dv * item), joined(attended.size());
      detail::attend_into(*k, in[1], in[2], in[3], scale, causal, attended.data());
      // [B, H, L, Dv] -> [B, L, H · Dv]
      const size_t head_bytes = static_cast<size_t>(Dv) * item;
      for (int b = 0; b < B; ++b)
        for (int hd = 0; hd < H; ++hd)
          for (int l = 0; l < L; ++l)
            std::memcpy(joined.data() + ((static_cast<size_t>(b) * L + l) * H + hd) * head_bytes,
                        attended.data() + ((static_cast<size_t>(b) * H + hd) * L + l) * head_bytes, head_bytes);
      std::vector<char> r(static_cast<size_t>(rows) * o.n * item);
      {
        const auto qx = detail::quantize_rows(*k, joined.data(), t, rows, o.k, o.bits, o.group_size);
        detail::run_l3_products(*k, {product(qx, in[4].data<std::uint32_t>(), o, rows, r.data(), detail::elem_of(t))});
      }
      const Operand h(in[0], static_cast<int>(in[0].ndim()));
      detail::add_rows(h.data, r.data(), t, static_cast<long long>(rows) * o.n, static_cast<char*>(out.data<void>()));
    });
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
  float scale_;
  bool causal_;
  MatrixShape o_;
};

bool float_type(mx::Dtype t) { return t == mx::float32 || t == mx::bfloat16 || t == mx::float16; }

// Whether x's rows (of type t) through m give products of type t.
bool keeps_type(const L3Matrix& m, mx::Dtype t) { return mx::promote_types(t, m.params) == t; }

}  // namespace

std::optional<mx::array> l3_mlp_block(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& h,
                                      const mx::array& norm_weight, float eps, const L3Matrix& gate,
                                      const L3Matrix& up, const L3Matrix& down) {
  const auto t = h.dtype();
  if (!kernels || !kernels->l3_blocks() || mx::default_device() != mx::Device::cpu || !float_type(t) || h.ndim() < 1)
    return std::nullopt;
  const int d = h.shape(-1);
  const bool fits = gate.k == d && up.k == d && down.n == d && up.n == gate.n && down.k == gate.n &&
                    up.bits == gate.bits && up.group_size == gate.group_size && norm_weight.dtype() == t &&
                    norm_weight.ndim() == 1 && norm_weight.shape(0) == d && keeps_type(gate, t) &&
                    keeps_type(up, t) && keeps_type(down, t) && h.size() > 0;
  if (!fits) return std::nullopt;
  return mx::array(h.shape(), t,
                   std::make_shared<L3MlpBlock>(mx::default_stream(mx::Device::cpu), kernels, eps, shape_of(gate),
                                                shape_of(up), shape_of(down)),
                   {h, norm_weight, gate.packed, up.packed, down.packed});
}

std::optional<std::vector<mx::array>> l3_attention_input(const std::shared_ptr<const CpuKernels>& kernels,
                                                         const mx::array& h, const mx::array& norm_weight, float eps,
                                                         const L3Matrix& q, const L3Matrix& k, const L3Matrix& v,
                                                         int n_heads, int n_kv_heads, int rope_dims,
                                                         bool rope_traditional, std::optional<float> rope_base,
                                                         float rope_scale, const std::optional<mx::array>& freqs,
                                                         int offset,
                                                         const std::optional<std::pair<L3Norm, L3Norm>>& qk_norms,
                                                         bool half_kv_cache) {
  const auto t = h.dtype();
  if (!kernels || !kernels->l3_blocks() || mx::default_device() != mx::Device::cpu || !float_type(t) ||
      h.ndim() != 3 || h.size() == 0 || n_heads <= 0 || n_kv_heads <= 0)
    return std::nullopt;
  const int d = h.shape(-1);
  const int D = q.n / n_heads;
  const bool fits = q.k == d && k.k == d && v.k == d && q.n == n_heads * D && k.n == n_kv_heads * D &&
                    v.n == n_kv_heads * D && k.bits == q.bits && v.bits == q.bits && k.group_size == q.group_size &&
                    v.group_size == q.group_size && norm_weight.dtype() == t && norm_weight.ndim() == 1 &&
                    norm_weight.shape(0) == d && keeps_type(q, t) && keeps_type(k, t) && keeps_type(v, t);
  // As l3_fused.h's rope fuses it.
  const bool rope = rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= D &&
                    (freqs ? freqs->ndim() == 1 && freqs->shape(0) == rope_dims / 2 && float_type(freqs->dtype())
                           : rope_base.has_value());
  // As l3_fused.h's rms_norm fuses them.
  auto head_norm = [&](const L3Norm& n) { return n.weight.dtype() == t && n.weight.ndim() == 1 && n.weight.shape(0) == D; };
  if (!fits || !rope || (qk_norms && !(head_norm(qk_norms->first) && head_norm(qk_norms->second)))) return std::nullopt;
  std::vector<mx::array> inputs{h, norm_weight, q.packed, k.packed, v.packed};
  if (freqs) inputs.push_back(*freqs);
  std::optional<std::pair<float, float>> qk_eps;
  if (qk_norms) {
    inputs.push_back(qk_norms->first.weight);
    inputs.push_back(qk_norms->second.weight);
    qk_eps = std::pair(qk_norms->first.eps, qk_norms->second.eps);
  }
  const int B = h.shape(0), L = h.shape(1);
  // Float16 keys and values for a float32 model where the L3 attention will read them (its head
  // dimensions), as llama.cpp keeps its cache: half the bytes of a decode step's attention.
  const bool half_kv = half_kv_cache && t == mx::float32 && D % 8 == 0 && D <= 256;
  const auto kv_type = half_kv ? mx::float16 : t;
  return mx::array::make_arrays(
      {{B, n_heads, L, D}, {B, n_kv_heads, L, D}, {B, n_kv_heads, L, D}}, {t, kv_type, kv_type},
      std::make_shared<L3AttentionInput>(
          mx::default_stream(mx::Device::cpu),
          AttentionInputCall{kernels, eps, shape_of(q), shape_of(k), shape_of(v), n_heads, n_kv_heads,
                             detail::L3RopeSpec{rope_dims, rope_traditional, rope_base.value_or(0.0f), rope_scale},
                             freqs.has_value(), offset, qk_eps, half_kv}),
      inputs);
}

std::optional<mx::array> l3_attention_output(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& h,
                                             const mx::array& queries, const mx::array& keys, const mx::array& values,
                                             float scale, bool causal, const L3Matrix& o) {
  const auto t = h.dtype();
  if (!kernels || !kernels->l3_blocks() || mx::default_device() != mx::Device::cpu || !float_type(t) ||
      h.ndim() != 3 || queries.dtype() != t || !attention_applies(kernels, queries, keys, values, causal))
    return std::nullopt;
  const bool fits = queries.shape(0) == h.shape(0) && queries.shape(2) == h.shape(1) &&
                    o.k == queries.shape(1) * values.shape(3) && o.n == h.shape(2) && keeps_type(o, t);
  if (!fits) return std::nullopt;
  return mx::array(h.shape(), t,
                   std::make_shared<L3AttentionOutput>(mx::default_stream(mx::Device::cpu), kernels, scale, causal,
                                                       shape_of(o)),
                   {h, queries, keys, values, o.packed});
}

}  // namespace mlxrt::kernels::cpu
