#include "mlxrt/kernels/cpu/sampling_masks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
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

// The layout of a float32 (U = uint32_t), bfloat16 or float16 (U = uint16_t) element.
template <class U>
struct Layout {
  using Signed = std::make_signed_t<U>;
  mx::Dtype dtype;
  U sign;  // the sign bit
  U inf;   // +inf's bits; larger magnitudes are NaNs

  explicit Layout(mx::Dtype t)
      : dtype(t),
        sign(static_cast<U>(U{1} << (8 * sizeof(U) - 1))),
        inf(static_cast<U>(t == mx::float32 ? 0x7F800000u : t == mx::bfloat16 ? 0x7F80u : 0x7C00u)) {}

  bool is_nan(U b) const { return static_cast<U>(b & ~sign) > inf; }
  U negative_inf() const { return static_cast<U>(sign | inf); }
  // An unsigned key in the order of the values (not NaNs): larger value, larger key. -0 has the key
  // just below +0's (zero_key), none between: a zero's run is both keys (count_values).
  U key(U b) const { return static_cast<U>(b ^ (static_cast<U>(static_cast<Signed>(b) >> (8 * sizeof(U) - 1)) | sign)); }
  U bits_of_key(U k) const { return static_cast<U>(k ^ ((k & sign) ? sign : static_cast<U>(~U{0}))); }
  U zero_key() const { return sign; }
  // The smallest key equal in value to the value of key k (-0's for a zero).
  U lowest_equal(U k) const { return k == zero_key() ? static_cast<U>(k - 1) : k; }
  // Keys of NaNs: above +inf's (positive NaNs) or below -inf's (negative NaNs).
  bool nan_key(U k) const { return k > key(inf) || k < key(negative_inf()); }
  float value(U b) const { return detail::load_float(reinterpret_cast<const char*>(&b), dtype, 0); }
};

// A row's values other than NaNs, largest first, each distinct value once (a zero's run is -0 and +0,
// under +0's key) with how many elements hold it: what sorting the row gives, up to the order among
// equal values, which neither filter sees; and how many NaNs it holds.
template <class U>
struct DescendingValues {
  std::vector<U> keys;
  std::vector<long long> counts;
  long long nans = 0;
};

// 16-bit elements: counted, one counter per possible key. Four elements of -inf in a row (what earlier
// filters leave, often most of a row) are counted in one step: one counter bumped element after
// element would make each increment wait for the last.
DescendingValues<std::uint16_t> count_values(const std::uint16_t* x, long long n, const Layout<std::uint16_t>& e) {
  std::vector<std::uint32_t> tally(size_t{1} << 16, 0);
  const std::uint16_t negative_inf = e.negative_inf();
  const std::uint64_t four_masked = 0x0001000100010001ull * negative_inf;
  long long masked = 0, i = 0;
  for (; i + 4 <= n; i += 4) {
    std::uint64_t four;
    std::memcpy(&four, x + i, 8);
    if (four == four_masked) {
      masked += 4;
      continue;
    }
    for (int j = 0; j < 4; ++j) ++tally[e.key(x[i + j])];
  }
  for (; i < n; ++i) ++tally[e.key(x[i])];
  tally[e.key(negative_inf)] += static_cast<std::uint32_t>(masked);
  tally[e.zero_key()] += std::exchange(tally[e.zero_key() - 1u], 0);
  DescendingValues<std::uint16_t> out;
  for (std::uint32_t k = 1u << 16; k-- > 0;) {
    if (!tally[k]) continue;
    if (e.nan_key(static_cast<std::uint16_t>(k))) {
      out.nans += tally[k];
    } else {
      out.keys.push_back(static_cast<std::uint16_t>(k));
      out.counts.push_back(tally[k]);
    }
  }
  return out;
}

// 32-bit elements: keys radix-sorted (11, 11 and 10 bits, least significant first), then grouped.
DescendingValues<std::uint32_t> count_values(const std::uint32_t* x, long long n, const Layout<std::uint32_t>& e) {
  DescendingValues<std::uint32_t> out;
  std::vector<std::uint32_t> keys, spare;
  keys.reserve(static_cast<size_t>(n));
  for (long long i = 0; i < n; ++i) {
    const std::uint32_t k = e.key(x[i]);
    if (e.nan_key(k))
      ++out.nans;
    else
      keys.push_back(k == e.zero_key() - 1u ? e.zero_key() : k);
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

// --- the filters on one row ------------------------------------------------------------------

// `count` additions of p to sum, one after another. Once one leaves the sum as it was, so does every
// later one (the same two operands): the rest are skipped.
float add_repeatedly(float sum, float p, long long count) {
  for (long long c = 0; c < count; ++c) {
    const float next = sum + p;
    if (next == sum) break;
    sum = next;
  }
  return sum;
}

// apply_top_p: sorted = sort(x); p = exp(float32(sorted)); above = the reverse exclusive running sum
// of p (position i: the p above it, added from the largest down); total = above[0] + p[0];
// dropped = the count of above >= top_p * total; x where x >= sorted[dropped], else -inf.
template <class U>
void top_p_row(const U* x, long long n, const Layout<U>& e, float top_p, U* out) {
  const auto values = count_values(x, n, e);
  if (values.nans) {
    // A NaN sorts last, so every running sum above it, the total and the bound are NaNs: nothing
    // compares at or above the bound, dropped is 0 and the smallest value is the threshold.
    std::copy(x, x + n, out);
    return;
  }
  const size_t runs = values.keys.size();
  std::vector<float> v(runs), p(runs);
  for (size_t r = 0; r < runs; ++r) v[r] = e.value(e.bits_of_key(values.keys[r]));
#if defined(MLXRT_CPU_X86_KERNELS)
  exp_as_mlx_avx2(v.data(), static_cast<long long>(runs), p.data());
#endif
  // One addition per element, largest first: MLX's reverse scan, then its final p[0].
  float total = 0.0f;
  for (size_t r = 0; r < runs; ++r) total = add_repeatedly(total, p[r], values.counts[r]);
  const float bound = top_p * total;
  // dropped = n (no element survives) needs a bound of zero or less: MLX then reads its threshold
  // past the row's end; with logprobs that happens only for a row of -inf, which stays -inf whatever
  // the threshold. Ours masks the whole row.
  U threshold_key = static_cast<U>(~U{0});
  if (bound > 0.0f) {
    threshold_key = values.keys[runs - 1];  // dropped = 0: the smallest value
    float above = 0.0f;
    for (size_t r = 0; r < runs; ++r) {
      // The first position, from the top, whose mass above reaches the bound: dropped is one past it,
      // so the threshold is the element just above it (the one walked before).
      if (above >= bound) {
        threshold_key = values.keys[r - 1];
        break;
      }
      // Then the run's next elements, while the mass above them changes.
      long long c = 1;
      for (; c < values.counts[r]; ++c) {
        const float next = above + p[r];
        if (next == above) {
          c = values.counts[r];
          break;
        }
        above = next;
        if (above >= bound) break;
      }
      if (c < values.counts[r]) {  // reached inside this run of equal values
        threshold_key = values.keys[r];
        break;
      }
      above = above + p[r];
    }
  }
  // x < threshold: -0 is not below a zero threshold.
  const U below = e.lowest_equal(threshold_key);
  const U negative_inf = e.negative_inf();
  for (long long i = 0; i < n; ++i) out[i] = e.key(x[i]) < below ? negative_inf : x[i];
}

// apply_top_k: argpartition(-x, k - 1), then -inf at the indices it puts from k on. MLX's partition
// orders by -x, ties by index, NaNs last (nth_element with that comparison): the first k are the k
// largest, ties to the earlier index, unless fewer than k values are not NaNs.
template <class U>
void top_k_by_partition(const U* x, long long n, const Layout<U>& e, long long k, U* out);

template <class U>
void top_k_row(const U* x, long long n, const Layout<U>& e, long long k, U* out) {
  const auto values = count_values(x, n, e);
  if (n - values.nans < k) return top_k_by_partition(x, n, e, k, out);
  long long larger = 0;
  size_t r = 0;
  while (larger + values.counts[r] < k) larger += values.counts[r++];
  const U kth = values.keys[r], kth_low = e.lowest_equal(kth);
  const U negative_inf = e.negative_inf();
  long long ties_kept = k - larger;  // of the elements equal to the k-th largest, the first ones
  if (ties_kept == values.counts[r] && values.nans == 0) {
    for (long long i = 0; i < n; ++i) out[i] = e.key(x[i]) >= kth_low ? x[i] : negative_inf;
    return;
  }
  for (long long i = 0; i < n; ++i) {
    const U b = x[i], key = e.key(b);
    const bool keep = !e.is_nan(b) && (key > kth || (key >= kth_low && ties_kept-- > 0));
    out[i] = keep ? b : negative_inf;
  }
}

// Which NaNs are among the first k is up to the partition's algorithm: run it, as MLX does.
template <class U>
void top_k_by_partition(const U* x, long long n, const Layout<U>& e, long long k, U* out) {
  std::vector<float> negated(static_cast<size_t>(n));
  for (long long i = 0; i < n; ++i) negated[static_cast<size_t>(i)] = -e.value(x[i]);
  std::vector<std::uint32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0u);
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const float va = negated[a], vb = negated[b];
    if (std::isnan(va)) return false;
    if (std::isnan(vb)) return true;
    return va < vb || (va == vb && a < b);
  });
  std::copy(x, x + n, out);
  for (long long j = k; j < n; ++j) out[order[static_cast<size_t>(j)]] = e.negative_inf();
}

// apply_min_p (min_tokens_to_keep 1): top = max(x); bound = top + log(min_p), both of x's type (the
// constant rounded to it first, the sum rounded after); x where x >= bound, else -inf.
template <class U>
void min_p_row(const U* x, long long n, const Layout<U>& e, float log_min_p, U* out) {
  long long nans = 0;
  U top = 0;  // the largest key (its value the row's maximum)
  for (long long i = 0; i < n; ++i) {
    nans += e.is_nan(x[i]);
    const U k = e.key(x[i]);
    top = k > top ? k : top;
  }
  if (nans) {  // MLX's maximum is then a NaN, and nothing compares below NaN + log(min_p)
    std::copy(x, x + n, out);
    return;
  }
  // The bound as MLX rounds it: the constant to x's type, the float sum of the two to x's type.
  char constant[4], bound[4];
  detail::store_float(constant, e.dtype, 0, log_min_p);
  detail::store_float(bound, e.dtype, 0, e.value(e.bits_of_key(top)) + detail::load_float(constant, e.dtype, 0));
  U bound_bits = 0;
  std::memcpy(&bound_bits, bound, sizeof(U));
  if (e.is_nan(bound_bits)) {  // +inf + -inf (a row holding +inf, min_p 0): nothing compares below
    std::copy(x, x + n, out);
    return;
  }
  // x < bound: -0 is not below a zero bound.
  const U below = e.lowest_equal(e.key(bound_bits == e.sign ? U{0} : bound_bits));
  const U negative_inf = e.negative_inf();
  for (long long i = 0; i < n; ++i) out[i] = e.key(x[i]) < below ? negative_inf : x[i];
}

enum class FilterKind { TopP, TopK, MinP };  // the parameter: top_p, top_k, log(min_p)

template <class U>
void filter_rows(FilterKind kind, double parameter, const char* in, long long rows, long long n, mx::Dtype t,
                 char* dst) {
  const Layout<U> e(t);
  for (long long r = 0; r < rows; ++r) {
    const U* row = reinterpret_cast<const U*>(in) + r * n;
    U* row_out = reinterpret_cast<U*>(dst) + r * n;
    if (kind == FilterKind::TopP)
      top_p_row(row, n, e, static_cast<float>(parameter), row_out);
    else if (kind == FilterKind::TopK)
      top_k_row(row, n, e, static_cast<long long>(parameter), row_out);
    else
      min_p_row(row, n, e, static_cast<float>(parameter), row_out);
  }
}

// --- the node ------------------------------------------------------------------------------

// One filter over the rows of its input (the last axis), output of the input's shape and type.
class RowFilter : public mx::UnaryPrimitive {
 public:
  using Kind = FilterKind;
  RowFilter(mx::Stream stream, Kind kind, double parameter)
      : mx::UnaryPrimitive(stream), kind_(kind), parameter_(parameter) {}
  const char* name() const override {
    return kind_ == Kind::TopP ? "TopPRows" : kind_ == Kind::TopK ? "TopKRows" : "MinPRows";
  }
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
      const auto t = in[0].dtype();
      const detail::Operand x(in[0], static_cast<int>(in[0].ndim()));  // rows made contiguous
      const long long n = in[0].shape(-1);
      const long long rows = static_cast<long long>(in[0].size()) / n;
      char* dst = static_cast<char*>(out.data<void>());
      if (t == mx::float32)
        filter_rows<std::uint32_t>(kind, parameter, x.data, rows, n, t, dst);
      else
        filter_rows<std::uint16_t>(kind, parameter, x.data, rows, n, t, dst);
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

std::optional<mx::array> min_p_mask(const mx::array& logprobs, double min_p, int min_tokens_to_keep) {
  if (!ours_apply(logprobs) || min_tokens_to_keep != 1 || !(min_p > 0 && min_p <= 1)) return std::nullopt;
  // mlx-lm's Python float math.log(min_p), made a constant of the logprobs' type from float.
  return filtered(logprobs, RowFilter::Kind::MinP, static_cast<float>(std::log(min_p)));
}

}  // namespace mlxrt::kernels::cpu
