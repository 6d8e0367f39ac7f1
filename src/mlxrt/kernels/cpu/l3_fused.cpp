#include "mlxrt/kernels/cpu/l3_fused.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/cpu_workers.h"
#include "mlxrt/kernels/cpu/l3_fused_args.h"
#include "mlxrt/kernels/cpu/l3_rows.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cpu/operand.h"

namespace mlxrt::kernels::cpu {

namespace {

using detail::load_float;
using detail::Operand;
using detail::store_float;

bool l3_on_cpu(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x) {
  const auto t = x.dtype();
  return kernels && kernels->l3() && mx::default_device() == mx::Device::cpu &&
         (t == mx::float32 || t == mx::bfloat16 || t == mx::float16);
}

class L3Primitive : public mx::UnaryPrimitive {
 public:
  using mx::UnaryPrimitive::UnaryPrimitive;
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[") + name() + "] runs on the CPU only");
  }
};

float load_float_rounded(mx::Dtype t, float f) {
  char b[4];
  store_float(b, t, 0, f);
  return load_float(b, t, 0);
}

// One row of d values of type t: x * rsqrt(mean(x²) + eps), rounded to t, times w (d floats).
// `v`: d floats of scratch.
void rms_norm_row(const char* row, mx::Dtype t, int d, const float* w, float eps, char* dst, float* v) {
  // Eight partial sums (the compiler keeps them in one vector), added pairwise.
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < d; ++i) {
    v[i] = load_float(row, t, i);
    part[i % 8] += v[i] * v[i];
  }
  const float sum = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
  for (int i = 0; i < d; ++i) {
    // Rounded to x's type before the weight, as the reference's normed x is.
    const float normed = load_float_rounded(t, v[i] * inverse);
    store_float(dst, t, i, normed * w[i]);
  }
}

class L3RmsNorm : public L3Primitive {
 public:
  L3RmsNorm(mx::Stream stream, float eps, bool has_weight) : L3Primitive(stream), eps_(eps), has_weight_(has_weight) {}
  const char* name() const override { return "L3RmsNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3RmsNorm*>(&other);
    return o && o->eps_ == eps_ && o->has_weight_ == has_weight_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [eps = eps_, has_weight = has_weight_](mx::array& out, const std::vector<mx::array>& in) {
      const Operand x(in[0], 1);
      const int d = in[0].shape(-1);
      const long long rows = static_cast<long long>(in[0].size()) / d;
      const auto t = in[0].dtype();
      std::vector<float> w(static_cast<size_t>(d), 1.0f);
      if (has_weight) {
        const Operand wo(in[1], 1);
        for (int i = 0; i < d; ++i) w[static_cast<size_t>(i)] = load_float(wo.data, t, wo.offset(i));
      }
      char* dst = static_cast<char*>(out.data<void>());
      const size_t item = in[0].itemsize();
      std::vector<float> v(static_cast<size_t>(d));
      for (long long r = 0; r < rows; ++r)
        rms_norm_row(x.data + x.offset(r * d) * static_cast<long long>(item), t, d, w.data(), eps,
                     dst + r * d * static_cast<long long>(item), v.data());
    });
  }

 private:
  float eps_;
  bool has_weight_;
};

// What one RoPE call computes, and its parameters.
struct RopeCall {
  int dims_;
  bool traditional_;
  float base_;
  float scale_;
  int offset_;
  bool has_freqs_;

  bool operator==(const RopeCall& o) const {
    return dims_ == o.dims_ && traditional_ == o.traditional_ && base_ == o.base_ && scale_ == o.scale_ &&
           offset_ == o.offset_ && has_freqs_ == o.has_freqs_;
  }

  void compute(const std::vector<mx::array>& in, mx::array& out) const {
    const Operand x(in[0], 1);
    const int d = in[0].shape(-1);
    const int length = in[0].shape(-2);
    const long long rows = static_cast<long long>(in[0].size()) / d;
    const auto t = in[0].dtype();
    const size_t item = in[0].itemsize();
    std::vector<float> freqs;
    if (has_freqs_) {
      const Operand f(in[1], 1);
      for (int i = 0; i < dims_ / 2; ++i) freqs.push_back(load_float(f.data, in[1].dtype(), f.offset(i)));
    }
    const auto table = detail::rope_table({dims_, traditional_, base_, scale_}, freqs, offset_, length);
    char* dst = static_cast<char*>(out.data<void>());
    for (long long r = 0; r < rows; ++r)
      detail::rope_row(table, x.data + x.offset(r * d) * static_cast<long long>(item), t, d, r % length,
                       dst + r * d * static_cast<long long>(item));
  }

};

class L3Rope : public L3Primitive {
 public:
  L3Rope(mx::Stream stream, RopeCall call) : L3Primitive(stream), call_(call) {}
  const char* name() const override { return "L3Rope"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3Rope*>(&other);
    return o && o->call_ == call_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [call = call_](mx::array& out, const std::vector<mx::array>& in) {
      call.compute(in, out);
    });
  }

 private:
  RopeCall call_;
};

class L3Attention : public L3Primitive {
 public:
  L3Attention(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, float scale, bool causal)
      : L3Primitive(stream), kernels_(std::move(kernels)), scale_(scale), causal_(causal) {}
  const char* name() const override { return "L3Attention"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3Attention*>(&other);
    return o && o->scale_ == scale_ && o->causal_ == causal_ && o->kernels_ == kernels_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [k = kernels_, scale = scale_, causal = causal_](mx::array& out, const std::vector<mx::array>& in) {
      detail::attend_into(*k, in[0], in[1], in[2], scale, causal, out.data<void>());
    });
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
  float scale_;
  bool causal_;
};

// Log-softmax along the last axis of a float32 array, row by row.
class L3LogSoftmax : public L3Primitive {
 public:
  explicit L3LogSoftmax(mx::Stream stream) : L3Primitive(stream) {}
  const char* name() const override { return "L3LogSoftmax"; }
  bool is_equivalent(const mx::Primitive& other) const override { return dynamic_cast<const L3LogSoftmax*>(&other); }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [](mx::array& out, const std::vector<mx::array>& in) {
      const Operand x(in[0], static_cast<int>(in[0].ndim()));  // dense rows
      const long long n = in[0].shape(-1), rows = static_cast<long long>(in[0].size()) / n;
      for (long long r = 0; r < rows; ++r) {
#if defined(MLXRT_CPU_X86_KERNELS)
        l3_log_softmax_avx2(reinterpret_cast<const float*>(x.data) + r * n, out.data<float>() + r * n, n);
#elif defined(MLXRT_CPU_NEON_KERNELS)
        l3_log_softmax_neon(reinterpret_cast<const float*>(x.data) + r * n, out.data<float>() + r * n, n);
#else
        (void)x, (void)r;
#endif
      }
    });
  }
};

class L3Swiglu : public L3Primitive {
 public:
  L3Swiglu(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels)
      : L3Primitive(stream), kernels_(std::move(kernels)) {}
  const char* name() const override { return "L3Swiglu"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const L3Swiglu*>(&other);
    return o && o->kernels_ == kernels_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [k = kernels_](mx::array& out, const std::vector<mx::array>& in) {
      const Operand gate(in[0], static_cast<int>(in[0].ndim())), up(in[1], static_cast<int>(in[1].ndim()));
      const auto t = in[0].dtype();
      const QmmElem elem = t == mx::bfloat16 ? QmmElem::bf16 : t == mx::float16 ? QmmElem::f16 : QmmElem::f32;
      const long long count = static_cast<long long>(out.size());
      constexpr long long kPerUnit = 8192;
      void* dst = out.data<void>();
      k->workers().run(static_cast<int>((count + kPerUnit - 1) / kPerUnit), 0, [&](float*, int begin, int end) {
#if defined(MLXRT_CPU_X86_KERNELS)
        l3_swiglu_avx2(gate.data, up.data, dst, elem, begin * kPerUnit, std::min(count, end * kPerUnit));
#elif defined(MLXRT_CPU_NEON_KERNELS)
        l3_swiglu_neon(gate.data, up.data, dst, elem, begin * kPerUnit, std::min(count, end * kPerUnit));
#else
        (void)begin, (void)end, (void)elem, (void)dst;
#endif
      });
    });
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
};

}  // namespace

std::optional<mx::array> swiglu(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& gate,
                                const mx::array& up) {
  if (!l3_on_cpu(kernels, gate) || up.dtype() != gate.dtype() || up.shape() != gate.shape() || gate.size() == 0 ||
      gate.size() > (1ull << 40))
    return std::nullopt;
  return mx::array(gate.shape(), gate.dtype(), std::make_shared<L3Swiglu>(mx::default_stream(mx::Device::cpu), kernels),
                   {gate, up});
}

bool attention_applies(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& q, const mx::array& k,
                       const mx::array& v, bool causal) {
  if (!l3_on_cpu(kernels, q) || q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) return false;
  // Keys and values of the queries' type, or float16 under float32 queries (l3_kv_cache_type).
  if (k.dtype() != v.dtype() || (k.dtype() != q.dtype() && !(q.dtype() == mx::float32 && k.dtype() == mx::float16)))
    return false;
  const int hq = q.shape(1), hkv = k.shape(1);
  return k.shape(0) == q.shape(0) && v.shape(0) == q.shape(0) && v.shape(1) == hkv && hkv > 0 && hq % hkv == 0 &&
         v.shape(2) == k.shape(2) && k.shape(3) == q.shape(3) && q.shape(3) % 8 == 0 && v.shape(3) % 8 == 0 &&
         q.shape(3) <= 256 && v.shape(3) > 0 && q.shape(2) > 0 && (!causal || q.shape(2) <= k.shape(2));
}

std::optional<mx::array> attention(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& q,
                                   const mx::array& k, const mx::array& v, float scale, bool causal) {
  if (!attention_applies(kernels, q, k, v, causal)) return std::nullopt;
  const int hq = q.shape(1);
  return mx::array({q.shape(0), hq, q.shape(2), v.shape(3)}, q.dtype(),
                   std::make_shared<L3Attention>(mx::default_stream(mx::Device::cpu), kernels, scale, causal),
                   {q, k, v});
}

std::optional<mx::array> log_softmax(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x) {
  if (!l3_on_cpu(kernels, x) || x.dtype() != mx::float32 || x.ndim() < 1 || x.size() == 0) return std::nullopt;
  return mx::array(x.shape(), mx::float32, std::make_shared<L3LogSoftmax>(mx::default_stream(mx::Device::cpu)), {x});
}

mx::array rms_norm(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x,
                   const std::optional<mx::array>& weight, float eps) {
  const bool fused = l3_on_cpu(kernels, x) && x.ndim() >= 1 && x.shape(-1) > 0 &&
                     (!weight || (weight->dtype() == x.dtype() && weight->ndim() == 1 && weight->shape(0) == x.shape(-1)));
  if (!fused) return mx::fast::rms_norm(x, weight, eps);
  std::vector<mx::array> inputs{x};
  if (weight) inputs.push_back(*weight);
  return mx::array(x.shape(), x.dtype(),
                   std::make_shared<L3RmsNorm>(mx::default_stream(mx::Device::cpu), eps, weight.has_value()), inputs);
}

mx::array rope(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, int dims, bool traditional,
               std::optional<float> base, float scale, int offset, const std::optional<mx::array>& freqs) {
  const bool fused = l3_on_cpu(kernels, x) && x.ndim() >= 3 && dims > 0 && dims % 2 == 0 && dims <= x.shape(-1) &&
                     (freqs ? freqs->ndim() == 1 && freqs->shape(0) == dims / 2 &&
                                  (freqs->dtype() == mx::float32 || freqs->dtype() == mx::bfloat16 ||
                                   freqs->dtype() == mx::float16)
                            : base.has_value());
  if (!fused) return mx::fast::rope(x, dims, traditional, base, scale, offset, freqs);
  std::vector<mx::array> inputs{x};
  if (freqs) inputs.push_back(*freqs);
  return mx::array(x.shape(), x.dtype(),
                   std::make_shared<L3Rope>(mx::default_stream(mx::Device::cpu),
                                            RopeCall{dims, traditional, base.value_or(0.0f), scale, offset, freqs.has_value()}),
                   inputs);
}

namespace detail {

void attend_into(const CpuKernels& kernels, const mx::array& queries, const mx::array& keys_in,
                 const mx::array& values_in, float scale, bool causal, void* out) {
  const Operand q(queries, 1), keys(keys_in, 1), values(values_in, 1);
  L3AttentionArgs a;
  a.out = out;
  a.q = q.data;
  a.k = keys.data;
  a.v = values.data;
  for (int d = 0; d < 3; ++d) {
    a.q_strides[d] = q.strides[static_cast<size_t>(d)];
    a.k_strides[d] = keys.strides[static_cast<size_t>(d)];
    a.v_strides[d] = values.strides[static_cast<size_t>(d)];
  }
  a.batch = queries.shape(0);
  a.q_heads = queries.shape(1);
  a.kv_heads = keys_in.shape(1);
  a.q_length = queries.shape(2);
  a.kv_length = keys_in.shape(2);
  a.dims = queries.shape(3);
  a.v_dims = values_in.shape(3);
  a.scale = scale;
  a.causal = causal;
  a.elem = elem_of(queries.dtype());
  a.kv_elem = elem_of(keys_in.dtype());
  kernels.workers().run(l3_attention_units(a), l3_attention_scratch(a), [&a](float* scratch, int begin, int end) {
#if defined(MLXRT_CPU_X86_KERNELS)
    l3_attention_units_avx2(a, begin, end, scratch);
#elif defined(MLXRT_CPU_NEON_KERNELS)
    l3_attention_units_neon(a, begin, end, scratch);
#else
    (void)scratch, (void)begin, (void)end;
#endif
  });
}

RopeTable rope_table(const L3RopeSpec& spec, const std::vector<float>& freqs, int offset, int length) {
  RopeTable table{spec, spec.dims / 2, {}, {}};
  const int half = table.half;
  // The inverse frequencies: base^(-i / half), or 1 / freqs[i].
  std::vector<double> inverse(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i)
    inverse[static_cast<size_t>(i)] = !freqs.empty() ? 1.0 / static_cast<double>(freqs[static_cast<size_t>(i)])
                                                     : std::pow(static_cast<double>(spec.base), -static_cast<double>(i) / half);
  // cos and sin per position of this call, shared by every head and batch row.
  table.cosines.resize(static_cast<size_t>(length) * half);
  table.sines.resize(static_cast<size_t>(length) * half);
  for (int l = 0; l < length; ++l)
    for (int i = 0; i < half; ++i) {
      const double theta = static_cast<double>(spec.scale) * static_cast<double>(offset + l) * inverse[static_cast<size_t>(i)];
      table.cosines[static_cast<size_t>(l) * half + i] = static_cast<float>(std::cos(theta));
      table.sines[static_cast<size_t>(l) * half + i] = static_cast<float>(std::sin(theta));
    }
  return table;
}

void rope_row(const RopeTable& table, const char* row, mx::Dtype t, int d, long long position, char* dst) {
  const int half = table.half;
  const float* c = table.cosines.data() + position * half;
  const float* s = table.sines.data() + position * half;
  for (int i = 0; i < half; ++i) {
    const int a = table.spec.traditional ? 2 * i : i;
    const int b = table.spec.traditional ? 2 * i + 1 : i + half;
    const float x1 = load_float(row, t, a), x2 = load_float(row, t, b);
    store_float(dst, t, a, x1 * c[i] - x2 * s[i]);
    store_float(dst, t, b, x1 * s[i] + x2 * c[i]);
  }
  for (int i = 2 * half; i < d; ++i) store_float(dst, t, i, load_float(row, t, i));
}

void rms_norm_rows(const char* x, mx::Dtype t, long long rows, int d, const float* weight, float eps, char* out) {
  std::vector<float> ones, v(static_cast<size_t>(d));
  if (!weight) {
    ones.assign(static_cast<size_t>(d), 1.0f);
    weight = ones.data();
  }
  const long long row_bytes = static_cast<long long>(d) * static_cast<long long>(mx::size_of(t));
  for (long long r = 0; r < rows; ++r) rms_norm_row(x + r * row_bytes, t, d, weight, eps, out + r * row_bytes, v.data());
}

void add_rows(const char* a, const char* b, mx::Dtype t, long long n, char* out) {
  if (t == mx::float32) {
    const auto* fa = reinterpret_cast<const float*>(a);
    const auto* fb = reinterpret_cast<const float*>(b);
    auto* fo = reinterpret_cast<float*>(out);
    for (long long i = 0; i < n; ++i) fo[i] = fa[i] + fb[i];
    return;
  }
  for (long long i = 0; i < n; ++i) store_float(out, t, i, load_float(a, t, i) + load_float(b, t, i));
}

}  // namespace detail

}  // namespace mlxrt::kernels::cpu
