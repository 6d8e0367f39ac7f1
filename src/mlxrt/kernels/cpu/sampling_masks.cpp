#include "mlxrt/kernels/cpu/sampling_masks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mlx/ops.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/exp_args.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cpu/operand.h"

namespace mlxrt::kernels::cpu {

namespace {

// --- a row's elements as bits, and the order of their values --------------------------------------

// The layout of a float32, bfloat16 or float16 element.
struct Layout {
  mx::Dtype dtype;
  int width;            // bytes
  std::uint32_t sign;   // the sign bit
  std::uint32_t inf;    // +inf's bits; larger magnitudes are NaNs
  std::uint32_t all;    // every bit of the element

  explicit Layout(mx::Dtype t)
      : dtype(t),
        width(t == mx::float32 ? 4 : 2),
        sign(t == mx::float32 ? 0x80000000u : 0x8000u),
        inf(t == mx::float32 ? 0x7F800000u : t == mx::bfloat16 ? 0x7F80u : 0x7C00u),
        all(t == mx::float32 ? 0xFFFFFFFFu : 0xFFFFu) {}

  std::uint32_t bits(const char* row, long long i) const {
    if (width == 4) {
      std::uint32_t b;
      std::memcpy(&b, row + i * 4, 4);
      return b;
    }
    std::uint16_t h;
    std::memcpy(&h, row + i * 2, 2);
    return h;
  }
  void store(char* row, long long i, std::uint32_t b) const {
    if (width == 4) {
      std::memcpy(row + i * 4, &b, 4);
    } else {
      const auto h = static_cast<std::uint16_t>(b);
      std::memcpy(row + i * 2, &h, 2);
    }
  }
  bool is_nan(std::uint32_t b) const { return (b & ~sign & all) > inf; }
  std::uint32_t negative_inf() const { return sign | inf; }

  // An unsigned key in the order of the values (not NaNs): larger value, larger key; -0 and +0 one
  // key, as they compare equal.
  std::uint32_t key(std::uint32_t b) const {
    if ((b & ~sign & all) == 0) b = 0;
    return (b & sign) ? (~b & all) : (b | sign);
  }
  std::uint32_t bits_of_key(std::uint32_t k) const { return (k & sign) ? (k & ~sign) : (~k & all); }
  float value(std::uint32_t b) const {
    char buf[4];
    std::memcpy(buf, &b, 4);  // little-endian: the element's bytes come first
    return detail::load_float(buf, dtype, 0);
  }
};

// A row's values other than NaNs, largest first, each distinct value once with how many elements
// hold it: what sorting the row gives, up to the order among equal values, which neither filter
// sees.
struct DescendingValues {
  std::vector<std::uint32_t> keys;
  std::vector<long long> counts;
};

// 16-bit elements: counted, one counter per possible value.
DescendingValues count_values(const char* row, long long n, const Layout& e) {
  std::vector<std::uint32_t> tally(size_t{1} << 16, 0);
  for (long long i = 0; i < n; ++i) {
    const std::uint32_t b = e.bits(row, i);
    if (!e.is_nan(b)) ++tally[e.key(b)];
  }
  DescendingValues out;
  for (std::uint32_t k = 1u << 16; k-- > 0;)
    if (tally[k]) {
      out.keys.push_back(k);
      out.counts.push_back(tally[k]);
    }
  return out;
}

// 32-bit elements: keys radix-sorted (11, 11 and 10 bits, least significant first), then grouped.
DescendingValues sort_values(const char* row, long long n, const Layout& e) {
  std::vector<std::uint32_t> keys, spare;
  keys.reserve(static_cast<size_t>(n));
  for (long long i = 0; i < n; ++i) {
    const std::uint32_t b = e.bits(row, i);
    if (!e.is_nan(b)) keys.push_back(e.key(b));
  }
  spare.resize(keys.size());
  for (int shift : {0, 11, 22}) {
    std::vector<size_t> start(size_t{1} << 11, 0);
    for (auto k : keys) ++start[(k >> shift) & 0x7FF];
    size_t at = 0;
    for (auto& s : start) at += std::exchange(s, at);
    for (auto k : keys) spare[start[(k >> shift) & 0x7FF]++] = k;
    keys.swap(spare);
  }
  DescendingValues out;
  for (size_t i = keys.size(); i-- > 0;) {
    if (!out.keys.empty() && out.keys.back() == keys[i]) {
      ++out.counts.back();
    } else {
      out.keys.push_back(keys[i]);
      out.counts.push_back(1);
    }
  }
  return out;
}

DescendingValues descending_values(const char* row, long long n, const Layout& e) {
  return e.width == 2 ? count_values(row, n, e) : sort_values(row, n, e);
}

// --- the filters on one row ------------------------------------------------------------------

// apply_top_p: sorted = sort(x); p = exp(float32(sorted)); above = the reverse exclusive running sum
// of p (position i: the p above it, added from the largest down); total = above[0] + p[0];
// dropped = the count of above >= top_p * total; x where x >= sorted[dropped], else -inf.
void top_p_row(const char* row, long long n, const Layout& e, float top_p, char* out) {
  for (long long i = 0; i < n; ++i)
    if (e.is_nan(e.bits(row, i))) {
      // A NaN sorts last, so every running sum above it, the total and the bound are NaNs: nothing
      // compares at or above the bound, dropped is 0 and the smallest value is the threshold.
      std::memcpy(out, row, static_cast<size_t>(n * e.width));
      return;
    }
  const auto values = descending_values(row, n, e);
  const size_t runs = values.keys.size();
  std::vector<float> v(runs), p(runs);
  for (size_t r = 0; r < runs; ++r) v[r] = e.value(e.bits_of_key(values.keys[r]));
#if defined(MLXRT_CPU_X86_KERNELS)
  exp_as_mlx_avx2(v.data(), static_cast<long long>(runs), p.data());
#endif
  // One addition per element, largest first: MLX's reverse scan, then its final p[0].
  float total = 0.0f;
  for (size_t r = 0; r < runs; ++r)
    for (long long c = 0; c < values.counts[r]; ++c) total = total + p[r];
  const float bound = top_p * total;
  // dropped = n (no element survives) needs a bound of zero or less: MLX then reads its threshold
  // past the row's end; with logprobs that happens only for a row of -inf, which stays -inf whatever
  // the threshold. Ours masks the whole row.
  float threshold = INFINITY;
  if (bound > 0.0f) {
    threshold = v[runs - 1];  // dropped = 0: the smallest value
    float above = 0.0f;
    bool found = false;
    for (size_t r = 0; r < runs && !found; ++r)
      for (long long c = 0; c < values.counts[r]; ++c) {
        if (above >= bound) {
          // The first position, from the top, whose mass above reaches the bound: dropped is one
          // past it, so the threshold is the element just above (the one walked before).
          threshold = c > 0 ? v[r] : v[r - 1];
          found = true;
          break;
        }
        above = above + p[r];
      }
  }
  for (long long i = 0; i < n; ++i) {
    const std::uint32_t b = e.bits(row, i);
    e.store(out, i, e.value(b) < threshold ? e.negative_inf() : b);
  }
}

// apply_top_k: argpartition(-x, k - 1), then -inf at the indices it puts from k on. MLX's partition
// orders by -x, ties by index, NaNs last (nth_element with that comparison): the first k are the k
// largest, ties to the earlier index, unless fewer than k values are not NaNs.
void top_k_by_partition(const char* row, long long n, const Layout& e, long long k, char* out);

void top_k_row(const char* row, long long n, const Layout& e, long long k, char* out) {
  long long nans = 0;
  for (long long i = 0; i < n; ++i) nans += e.is_nan(e.bits(row, i));
  if (n - nans < k) return top_k_by_partition(row, n, e, k, out);
  const auto values = descending_values(row, n, e);
  long long larger = 0;
  size_t r = 0;
  while (larger + values.counts[r] < k) larger += values.counts[r++];
  const std::uint32_t kth = values.keys[r];
  long long ties_kept = k - larger;  // of the elements equal to the k-th largest, the first ones
  for (long long i = 0; i < n; ++i) {
    const std::uint32_t b = e.bits(row, i);
    bool keep = false;
    if (!e.is_nan(b)) {
      const std::uint32_t key = e.key(b);
      keep = key > kth || (key == kth && ties_kept-- > 0);
    }
    e.store(out, i, keep ? b : e.negative_inf());
  }
}

// Which NaNs are among the first k is up to the partition's algorithm: run it, as MLX does.
void top_k_by_partition(const char* row, long long n, const Layout& e, long long k, char* out) {
  std::vector<float> negated(static_cast<size_t>(n));
  for (long long i = 0; i < n; ++i) negated[static_cast<size_t>(i)] = -e.value(e.bits(row, i));
  std::vector<std::uint32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0u);
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const float va = negated[a], vb = negated[b];
    if (std::isnan(va)) return false;
    if (std::isnan(vb)) return true;
    return va < vb || (va == vb && a < b);
  });
  std::memcpy(out, row, static_cast<size_t>(n * e.width));
  for (long long j = k; j < n; ++j) e.store(out, order[static_cast<size_t>(j)], e.negative_inf());
}

// --- the node ------------------------------------------------------------------------------

// One filter over the rows of its input (the last axis), output of the input's shape and type.
class RowFilter : public mx::UnaryPrimitive {
 public:
  enum class Kind { TopP, TopK };
  RowFilter(mx::Stream stream, Kind kind, double parameter)
      : mx::UnaryPrimitive(stream), kind_(kind), parameter_(parameter) {}
  const char* name() const override { return kind_ == Kind::TopP ? "TopPRows" : "TopKRows"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const RowFilter*>(&other);
    return o && o->kind_ == kind_ && o->parameter_ == parameter_;
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[") + name() + "] runs on the CPU only");
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [kind = kind_, parameter = parameter_](
                                                        mx::array& out, const std::vector<mx::array>& in) {
      const Layout e(in[0].dtype());
      const detail::Operand x(in[0], static_cast<int>(in[0].ndim()));  // rows made contiguous
      const long long n = in[0].shape(-1);
      const long long rows = static_cast<long long>(in[0].size()) / n;
      char* dst = static_cast<char*>(out.data<void>());
      for (long long r = 0; r < rows; ++r) {
        const char* row = x.data + r * n * e.width;
        char* row_out = dst + r * n * e.width;
        if (kind == Kind::TopP)
          top_p_row(row, n, e, static_cast<float>(parameter), row_out);
        else
          top_k_row(row, n, e, static_cast<long long>(parameter), row_out);
      }
    });
  }

 private:
  Kind kind_;
  double parameter_;
};

bool ours_apply(const mx::array& x) {
#if !defined(MLXRT_CPU_X86_KERNELS)
  return false;  // the exponentials are the AVX2 file's
#endif
  const auto t = x.dtype();
  return (t == mx::float32 || t == mx::bfloat16 || t == mx::float16) && x.ndim() >= 1 && x.size() > 0 &&
         own_kernels_here(/*fma=*/true) && mx::default_device() == mx::Device::cpu;
}

mx::array filtered(const mx::array& x, RowFilter::Kind kind, double parameter) {
  return mx::array(x.shape(), x.dtype(), std::make_shared<RowFilter>(mx::default_stream(mx::Device::cpu), kind, parameter),
                   {x});
}

}  // namespace

std::optional<mx::array> top_p_mask(const mx::array& logprobs, double top_p) {
  if (!ours_apply(logprobs) || !(top_p > 0 && top_p < 1)) return std::nullopt;
  return filtered(logprobs, RowFilter::Kind::TopP, top_p);
}

std::optional<mx::array> top_k_mask(const mx::array& logprobs, int top_k) {
  if (!ours_apply(logprobs) || !(top_k > 0 && top_k < logprobs.shape(-1))) return std::nullopt;
  return filtered(logprobs, RowFilter::Kind::TopK, top_k);
}

}  // namespace mlxrt::kernels::cpu
