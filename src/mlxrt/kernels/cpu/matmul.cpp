#include "mlxrt/kernels/cpu/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <mlx/allocator.h>
#include <mlx/backend/cpu/encoder.h>
#include <mlx/ops.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"
#include "mlxrt/kernels/cpu/cpu_workers.h"
#include "mlxrt/kernels/cpu/operand.h"
#include "mlxrt/util/errors.h"

#if defined(MLXRT_CPU_NEON_KERNELS)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace mlxrt::kernels::cpu {

namespace {

using detail::Operand;

bool cpu_has_avx2() {
#if defined(MLXRT_CPU_X86_KERNELS)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_has_fma() {
#if defined(MLXRT_CPU_X86_KERNELS)
  return __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512_vnni() {
#if defined(MLXRT_CPU_X86_KERNELS)
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// The ARMv8.2 dot product (SDOT), as the kernel reports it.
bool cpu_has_dotprod() {
#if defined(MLXRT_CPU_NEON_KERNELS)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(MLXRT_CPU_X86_KERNELS)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

QmmElem elem_of(mx::Dtype t) {
  return t == mx::bfloat16 ? QmmElem::bf16 : t == mx::float16 ? QmmElem::f16 : QmmElem::f32;
}

// Runs `count` matmuls of one shape, matmul i being args_of(i), with every work unit of every
// matmul one item for the threads.
void run_matmuls(const CpuKernels& kernels, int count, const AffineQmmArgs& shape,
                 const std::function<AffineQmmArgs(int)>& args_of) {
  const int units = ((shape.n + kColumnsPerUnit - 1) / kColumnsPerUnit) * ((shape.rows + kRowsPerUnit - 1) / kRowsPerUnit);
  const bool avx512 = kernels.avx512();
  kernels.workers().run(count * units, scratch_floats(shape), [&](float* scratch, int begin, int end) {
    for (int u = begin; u < end;) {
      const int i = u / units;
      const int stop = std::min(end, (i + 1) * units);
      const AffineQmmArgs args = args_of(i);
#if defined(MLXRT_CPU_X86_KERNELS)
      if (avx512)
        affine_qmm_units_avx512(args, u - i * units, stop - i * units, scratch);
      else
        affine_qmm_units_avx2(args, u - i * units, stop - i * units, scratch);
#elif defined(MLXRT_CPU_NEON_KERNELS)
      (void)avx512;
      affine_qmm_units_neon(args, u - i * units, stop - i * units, scratch);
#else
      (void)avx512, (void)scratch, (void)args;
#endif
      u = stop;
    }
  });
}

// The shape of one matmul of out [..., M, N] from x [..., M, K].
AffineQmmArgs matmul_shape(const mx::array& out, const mx::array& x, int rows, int group_size, int bits) {
  AffineQmmArgs args;
  args.k = x.shape(-1);
  args.rows = rows;
  args.n = out.shape(-1);
  args.bits = bits;
  args.group_size = group_size;
  args.elem = elem_of(out.dtype());
  return args;
}

// What both primitives share: the CPU kernels, the quantization, and running on the CPU only.
class AffinePrimitive : public mx::UnaryPrimitive {
 public:
  AffinePrimitive(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, int group_size, int bits)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)), group_size_(group_size), bits_(bits) {}

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[") + name() + "] runs on the CPU only");
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const AffinePrimitive*>(&other);
    return o && std::string(o->name()) == name() && o->group_size_ == group_size_ && o->bits_ == bits_ &&
           o->kernels_ == kernels_;
  }

 protected:
  // Allocates `out` and schedules fn(out, inputs) on the stream, as MLX's CPU primitives do.
  template <class Fn>
  void schedule(const std::vector<mx::array>& inputs, mx::array& out, Fn fn) {
    detail::schedule_on_cpu(stream(), inputs, out, fn);
  }

  std::shared_ptr<const CpuKernels> kernels_;
  int group_size_;
  int bits_;
};

// MLX's QuantizedMatmul (transposed, affine) with a 2-D weight: x's rows all against one matrix.
class AffineQuantizedMatmul : public AffinePrimitive {
 public:
  using AffinePrimitive::AffinePrimitive;
  const char* name() const override { return "AffineQuantizedMatmul"; }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    schedule(inputs, out, [k = kernels_, g = group_size_, b = bits_](mx::array& out, const std::vector<mx::array>& in) {
      const Operand x(in[0], static_cast<int>(in[0].ndim())), w(in[1], 2), scales(in[2], 2), biases(in[3], 2);
      AffineQmmArgs args = matmul_shape(out, in[0], static_cast<int>(in[0].size() / static_cast<size_t>(in[0].shape(-1))), g, b);
      args.out = out.data<void>();
      args.x = x.data;
      args.w = reinterpret_cast<const std::uint32_t*>(w.data);
      args.scales = scales.data;
      args.biases = biases.data;
      run_matmuls(*k, 1, args, [&args](int) { return args; });
    });
  }
};

// MLX's GatherQMM (transposed, affine): output block i is x's block lhs[i] (M rows) against
// expert rhs[i]'s matrix, as MLX's _bs_qmm_dispatch_typed walks them.
class AffineGatherQuantizedMatmul : public AffinePrimitive {
 public:
  using AffinePrimitive::AffinePrimitive;
  const char* name() const override { return "AffineGatherQuantizedMatmul"; }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    schedule(inputs, out, [k = kernels_, g = group_size_, b = bits_](mx::array& out, const std::vector<mx::array>& in) {
      const Operand x(in[0], 2), w(in[1], 2), scales(in[2], 2), biases(in[3], 2);
      const Operand lhs(in[4], 0), rhs(in[5], 0);
      const int m = in[0].shape(-2);
      const AffineQmmArgs shape = matmul_shape(out, in[0], m, g, b);
      const int64_t x_block = static_cast<int64_t>(m) * shape.k;
      const int64_t w_block = static_cast<int64_t>(in[1].shape(-1)) * in[1].shape(-2);
      const int64_t g_block = static_cast<int64_t>(in[2].shape(-1)) * in[2].shape(-2);
      const size_t item = out.itemsize();
      const auto* lhs_ids = reinterpret_cast<const std::uint32_t*>(lhs.data);
      const auto* rhs_ids = reinterpret_cast<const std::uint32_t*>(rhs.data);
      char* out_data = static_cast<char*>(out.data<void>());
      run_matmuls(*k, static_cast<int>(in[4].size()), shape, [&](int i) {
        const int64_t xi = lhs_ids[lhs.offset(i)];
        const int64_t wi = rhs_ids[rhs.offset(i)];
        AffineQmmArgs args = shape;
        args.out = out_data + static_cast<size_t>(i) * static_cast<size_t>(m) * shape.n * item;
        args.x = x.data + x.offset(xi * x_block) * static_cast<int64_t>(item);
        args.w = reinterpret_cast<const std::uint32_t*>(w.data) + w.offset(wi * w_block);
        args.scales = scales.data + scales.offset(wi * g_block) * static_cast<int64_t>(item);
        args.biases = biases.data + biases.offset(wi * g_block) * static_cast<int64_t>(item);
        return args;
      });
    });
  }
};

// x @ w.T (+ bias) in bfloat16 with a 2-D weight: MLX's Matmul / AddMM (alpha = beta = 1).
class Bf16MatmulTransposed : public mx::UnaryPrimitive {
 public:
  Bf16MatmulTransposed(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)) {}
  const char* name() const override { return "Bf16MatmulTransposed"; }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[Bf16MatmulTransposed] runs on the CPU only");
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const Bf16MatmulTransposed*>(&other);
    return o && o->kernels_ == kernels_;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    if (out.size() == 0) return;
    std::vector<mx::array> in;
    for (const auto& a : inputs) in.push_back(mx::array::unsafe_weak_copy(a));
    mx::cpu::get_command_encoder(stream()).dispatch(
        [out = mx::array::unsafe_weak_copy(out), in = std::move(in), k = kernels_]() mutable {
          const Operand x(in[0], static_cast<int>(in[0].ndim())), w(in[1], 2);
          std::optional<Operand> bias;
          if (in.size() > 2) bias.emplace(in[2], 1);
          Bf16MatmulArgs args;
          args.out = static_cast<std::uint16_t*>(out.data<void>());
          args.x = reinterpret_cast<const std::uint16_t*>(x.data);
          args.w = reinterpret_cast<const std::uint16_t*>(w.data);
          args.bias = bias ? reinterpret_cast<const std::uint16_t*>(bias->data) : nullptr;
          args.k = in[0].shape(-1);
          args.rows = static_cast<int>(in[0].size() / static_cast<size_t>(args.k));
          args.n = out.shape(-1);
          const int units = ((args.n + kColumnsPerUnit - 1) / kColumnsPerUnit) * ((args.rows + kRowsPerUnit - 1) / kRowsPerUnit);
          const bool avx512 = k->avx512();
          k->workers().run(units, scratch_floats(args), [&](float* scratch, int begin, int end) {
#if defined(MLXRT_CPU_X86_KERNELS)
            if (avx512)
              bf16_matmul_units_avx512(args, begin, end, scratch);
            else
              bf16_matmul_units_avx2(args, begin, end, scratch);
#elif defined(MLXRT_CPU_NEON_KERNELS)
            (void)avx512;
            bf16_matmul_units_neon(args, begin, end, scratch);
#else
            (void)avx512, (void)scratch, (void)begin, (void)end;
#endif
          });
        });
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
};

// Whether our kernel computes this affine call exactly as MLX's (see matmul.h).
bool computes_exactly(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& y, const std::string& mode,
                      bool has_biases, int group_size, int bits) {
  if (!kernels || mode != "affine" || !has_biases) return false;
  if (bits != 2 && bits != 4 && bits != 8) return false;
  if (group_size != 32 && group_size != 64 && group_size != 128) return false;  // MLX's CPU kernel's set
  if (y.dtype() != mx::float32 && y.dtype() != mx::bfloat16 && y.dtype() != mx::float16) return false;
  return y.primitive().stream().device == mx::Device::cpu;
}

int parse_threads(const char* v) {
  if (!v || !*v) return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 1024)
    throw UsageError(std::string("MLXRT_CPU_THREADS must be a whole number from 1 to 1024, got '") + v + "'");
  return static_cast<int>(n);
}

}  // namespace

CpuKernels::CpuKernels(bool avx512, bool vnni, bool l3, int threads)
    : avx512_(avx512), vnni_(vnni), l3_(l3), workers_(std::make_unique<CpuWorkers>(threads)) {}
CpuKernels::~CpuKernels() = default;
int CpuKernels::threads() const { return workers_->threads(); }

std::shared_ptr<CpuKernels> CpuKernels::create(int threads, bool allow_avx512, bool l3) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(MLXRT_CPU_NEON_KERNELS)
  // 64-bit Arm: NEON (every ARMv8-A CPU has it); the L3 integer products by SDOT where the CPU has
  // it and allow_avx512 (here: the wider instruction set) is set.
  return std::shared_ptr<CpuKernels>(new CpuKernels(false, allow_avx512 && cpu_has_dotprod(), l3, threads));
#endif
  if (!cpu_has_avx2() || (l3 && !cpu_has_fma())) return nullptr;
  const bool avx512 = allow_avx512 && cpu_has_avx512();
  auto kernels = std::shared_ptr<CpuKernels>(new CpuKernels(avx512, avx512 && cpu_has_avx512_vnni(), l3, threads));
  kernels->fma_ = cpu_has_fma();
  return kernels;
}

bool own_kernels_here(bool fma) {
  const char* choice = std::getenv("MLXRT_CPU_KERNELS");
  return cpu_has_avx2() && (!fma || cpu_has_fma()) && !(choice && std::string(choice) == "mlx");
}

std::shared_ptr<CpuKernels> CpuKernels::from_environment(bool l3) {
  const char* choice = std::getenv("MLXRT_CPU_KERNELS");
  if (choice && *choice && std::string(choice) != "native" && std::string(choice) != "mlx")
    throw UsageError(std::string("MLXRT_CPU_KERNELS must be 'native' or 'mlx', got '") + choice + "'");
  if (choice && std::string(choice) == "mlx") {
    if (l3) throw UsageError("--fidelity l3 runs mlxrt's own CPU kernels; MLXRT_CPU_KERNELS=mlx asks for MLX's only");
    return nullptr;
  }
  auto kernels = create(parse_threads(std::getenv("MLXRT_CPU_THREADS")), true, l3);
  if (l3 && !kernels)
    throw UnsupportedError(
        "--fidelity l3: this build's L3 CPU kernels need an x86-64 CPU with AVX2, FMA and F16C, or aarch64 Linux");
  if (const char* blocks = std::getenv("MLXRT_L3_BLOCKS"); blocks && *blocks) {
    if (std::string(blocks) != "0" && std::string(blocks) != "1")
      throw UsageError(std::string("MLXRT_L3_BLOCKS must be 0 or 1, got '") + blocks + "'");
    if (kernels) kernels->l3_blocks_ = std::string(blocks) == "1";
  }
  return kernels;
}

mx::array quantized_matmul(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, const mx::array& w,
                           const mx::array& scales, const std::optional<mx::array>& biases, int group_size, int bits,
                           const std::string& mode) {
  // MLX's own node first: its checks, its type promotion and its inputs (x, scales and biases cast
  // to the result type) are what ours computes from.
  auto y = mx::quantized_matmul(x, w, scales, biases, true, group_size, bits, mode);
  if (w.ndim() != 2 || !computes_exactly(kernels, y, mode, biases.has_value(), group_size, bits)) return y;
  return mx::array(y.shape(), y.dtype(),
                   std::make_shared<AffineQuantizedMatmul>(y.primitive().stream(), kernels, group_size, bits), y.inputs());
}

mx::array matmul_transposed(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, const mx::array& w,
                            const std::optional<mx::array>& bias, const std::optional<mx::array>& w_t) {
  const auto wt = w_t ? *w_t : mx::transpose(w);
  auto y = bias ? mx::addmm(*bias, x, wt) : mx::matmul(x, wt);
  const bool ours = kernels && x.dtype() == mx::bfloat16 && w.dtype() == mx::bfloat16 && w.ndim() == 2 &&
                    x.ndim() >= 1 && x.shape(-1) > 0 && (!bias || (bias->dtype() == mx::bfloat16 && bias->ndim() == 1)) &&
                    y.dtype() == mx::bfloat16 && y.shape(-1) == w.shape(0) &&
                    y.primitive().stream().device == mx::Device::cpu;
  if (!ours) return y;
  std::vector<mx::array> inputs{x, w};
  if (bias) inputs.push_back(*bias);
  return mx::array(y.shape(), y.dtype(), std::make_shared<Bf16MatmulTransposed>(y.primitive().stream(), kernels),
                   std::move(inputs));
}

mx::array gather_qmm(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, const mx::array& w,
                     const mx::array& scales, const std::optional<mx::array>& biases, const mx::array& rhs_indices,
                     int group_size, int bits, const std::string& mode, const std::optional<mx::array>& global_scale,
                     bool sorted_indices) {
  auto y = mx::gather_qmm(x, w, scales, biases, std::nullopt, rhs_indices, true, group_size, bits, mode, global_scale,
                          sorted_indices);
  if (global_scale || y.inputs().size() != 6 || !computes_exactly(kernels, y, mode, biases.has_value(), group_size, bits))
    return y;
  return mx::array(y.shape(), y.dtype(),
                   std::make_shared<AffineGatherQuantizedMatmul>(y.primitive().stream(), kernels, group_size, bits),
                   y.inputs());
}

}  // namespace mlxrt::kernels::cpu
