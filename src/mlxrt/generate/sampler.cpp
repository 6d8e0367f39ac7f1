// Port of mlx_lm/sample_utils.py (mlx-lm 0.32.2): make_sampler and the compiled sampling steps.
//
// mlx-lm wraps every step in mx.compile with the PRNG state as an implicit input and output; a
// compiled (fused) graph can round differently from the same ops run one by one, so each step here
// is an mx::compile'd function that builds the same graph, with the key passed explicitly. Python
// scalars become arrays of the other operand's dtype (mlx's weak scalar typing), so constants are
// made with that dtype, from the double value cast to float as mlx's binding does.
#include "mlxrt/generate/sampler.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <mlx/compile.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/kernels/cpu/categorical.h"
#include "mlxrt/kernels/cpu/sampling_masks.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

namespace {

using Fn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

/** A Python float operand next to `like`. */
mx::array scalar_like(double value, const mx::array& like) {
  return mx::array(static_cast<float>(value), like.dtype());
}

mx::array neg_inf_like(const mx::array& like) {
  return mx::array(-std::numeric_limits<float>::infinity(), like.dtype());
}

std::string fmt_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// --- the graphs, one per compiled mlx-lm function ------------------------------------------

mx::array top_p_graph(const mx::array& logprobs, double top_p) {
  if (auto ours = kernels::cpu::top_p_mask(logprobs, top_p)) return *ours;
  auto sorted_logprobs = mx::sort(logprobs, -1);
  auto sorted_probs = mx::exp(mx::astype(sorted_logprobs, mx::float32));
  auto mass_above = mx::cumsum(sorted_probs, -1, /*reverse=*/true, /*inclusive=*/false);
  const int last = mass_above.ndim() - 1;
  auto first = [&](const mx::array& a) {
    mx::Shape start(a.ndim(), 0), stop = a.shape();
    stop[last] = 1;
    return mx::slice(a, start, stop);
  };
  auto total_mass = mx::add(first(mass_above), first(sorted_probs));
  auto num_dropped =
      mx::sum(mx::greater_equal(mass_above, mx::multiply(scalar_like(top_p, total_mass), total_mass)), -1, true);
  auto threshold = mx::take_along_axis(sorted_logprobs, num_dropped, -1);
  return mx::where(mx::less(logprobs, threshold), neg_inf_like(logprobs), logprobs);
}

mx::array min_p_graph(const mx::array& logprobs, double min_p, int min_tokens_to_keep) {
  if (auto ours = kernels::cpu::min_p_mask(logprobs, min_p, min_tokens_to_keep)) return *ours;
  auto top_logprobs = mx::max(logprobs, -1, true);
  auto scaled_min_p = mx::add(top_logprobs, scalar_like(std::log(min_p), top_logprobs));
  auto tokens_to_remove = mx::less(logprobs, scaled_min_p);
  if (min_tokens_to_keep > 1) {
    auto top_indices = mx::argpartition(logprobs, -min_tokens_to_keep, -1);
    const int last = top_indices.ndim() - 1;
    mx::Shape start(top_indices.ndim(), 0), stop = top_indices.shape();
    start[last] = top_indices.shape(last) - min_tokens_to_keep;
    top_indices = mx::slice(top_indices, start, stop);
    tokens_to_remove = mx::put_along_axis(tokens_to_remove, top_indices, mx::array(false), -1);
  }
  return mx::where(tokens_to_remove, neg_inf_like(logprobs), logprobs);
}

mx::array top_k_graph(const mx::array& logprobs, int top_k) {
  if (auto ours = kernels::cpu::top_k_mask(logprobs, top_k)) return *ours;
  auto mask_idx = mx::argpartition(mx::negative(logprobs), top_k - 1, -1);
  const int last = mask_idx.ndim() - 1;
  mx::Shape start(mask_idx.ndim(), 0), stop = mask_idx.shape();
  start[last] = top_k;
  mask_idx = mx::slice(mask_idx, start, stop);
  return mx::put_along_axis(logprobs, mask_idx, neg_inf_like(logprobs), -1);
}

/** Returns {filtered logits, next key}. */
std::vector<mx::array> xtc_graph(const mx::array& logits, const mx::array& key, double xtc_probability,
                                 double xtc_threshold, const std::vector<int32_t>& special) {
  auto probs = mx::softmax(logits, std::vector<int>{-1}, false);
  auto above = mx::where(mx::greater(probs, scalar_like(xtc_threshold, probs)), probs,
                         scalar_like(std::numeric_limits<double>::infinity(), probs));
  auto mask = mx::greater(probs, mx::min(above, -1, true));
  if (!special.empty()) {
    // mask[..., special] = False: boolean, so any scatter of False gives the same bits.
    mx::array idx(special.data(), {static_cast<int>(special.size())}, mx::int32);
    mx::Shape idx_shape(mask.ndim(), 1);
    idx_shape.back() = static_cast<int>(special.size());
    idx = mx::broadcast_to(mx::reshape(idx, idx_shape), [&] {
      auto s = mask.shape();
      s.back() = static_cast<int>(special.size());
      return s;
    }());
    mask = mx::put_along_axis(mask, idx, mx::array(false), -1);
  }
  auto [next_key, used] = mx::random::split(key);
  auto draw = mx::random::uniform(mx::array(0), mx::array(1), {}, mx::float32, used);
  auto out = mx::where(mx::greater(draw, scalar_like(xtc_probability, draw)), logits,
                       mx::where(mask, neg_inf_like(logits), logits));
  return {out, next_key};
}

/** Returns {token, next key}. */
std::vector<mx::array> categorical_graph(const mx::array& logits, const mx::array& key, double temp) {
  auto scaled = mx::multiply(logits, scalar_like(1.0 / temp, logits));
  auto [next_key, used] = mx::random::split(key);
  return {kernels::cpu::categorical_last_axis(scaled, used), next_key};
}

// --- compiled wrappers ---------------------------------------------------------------------

Fn compiled_top_p(double top_p) {
  return mx::compile([top_p](const std::vector<mx::array>& in) { return std::vector{top_p_graph(in[0], top_p)}; });
}
Fn compiled_min_p(double min_p, int keep) {
  return mx::compile(
      [min_p, keep](const std::vector<mx::array>& in) { return std::vector{min_p_graph(in[0], min_p, keep)}; });
}
Fn compiled_top_k(int top_k) {
  return mx::compile([top_k](const std::vector<mx::array>& in) { return std::vector{top_k_graph(in[0], top_k)}; });
}
Fn compiled_xtc(double p, double t, std::vector<int32_t> special) {
  return mx::compile([p, t, special](const std::vector<mx::array>& in) { return xtc_graph(in[0], in[1], p, t, special); });
}
Fn compiled_categorical(double temp) {
  return mx::compile([temp](const std::vector<mx::array>& in) { return categorical_graph(in[0], in[1], temp); });
}

void check_top_k(int top_k, const mx::array& logprobs) {
  const int vocab = logprobs.shape(-1);
  if (!(0 < top_k && top_k < vocab))
    throw UsageError("top_k: has to be an integer in the (0, " + std::to_string(vocab) + ") interval, but is " +
                     std::to_string(top_k));
}

/** A keyed compiled step: feeds the state's key in and stores the key it returns. */
mx::array run_keyed(const Fn& fn, const mx::array& x, RandomState& rng) {
  auto out = fn({x, rng.key()});
  rng.set_key(out[1]);
  return out[0];
}

}  // namespace

std::optional<ParamProblem> check_sampler_params(const SamplerParams& p) {
  auto bad = [](std::string param, std::string msg) { return ParamProblem{std::move(param), std::move(msg)}; };
  if (!std::isfinite(p.temp) || p.temp < 0)
    return bad("temp", "has to be a non-negative number, but is " + fmt_double(p.temp));
  if (!(p.top_p >= 0 && p.top_p <= 1))
    return bad("top_p", "has to be a float in the [0, 1] interval, but is " + fmt_double(p.top_p));
  if (!(p.min_p >= 0 && p.min_p <= 1))
    return bad("min_p", "has to be a float in the [0, 1] interval, but is " + fmt_double(p.min_p));
  if (p.min_tokens_to_keep < 1)
    return bad("min_tokens_to_keep",
               "has to be a positive integer, but is " + std::to_string(p.min_tokens_to_keep));
  if (p.top_k < 0) return bad("top_k", "has to be a non-negative integer, but is " + std::to_string(p.top_k));
  if (!(p.xtc_probability >= 0 && p.xtc_probability <= 1))
    return bad("xtc_probability",
               "has to be a float in the [0, 1] interval, but is " + fmt_double(p.xtc_probability));
  if (!(p.xtc_threshold >= 0 && p.xtc_threshold <= 0.5))
    return bad("xtc_threshold", "has to be a float in the [0, 0.5] interval, but is " + fmt_double(p.xtc_threshold));
  return std::nullopt;
}

Sampler make_sampler(const SamplerParams& params, std::shared_ptr<RandomState> rng) {
  if (auto problem = check_sampler_params(params)) throw UsageError(problem->param + ": " + problem->message);
  if (params.temp == 0) return greedy_sample;
  if (!rng) throw UsageError("temp: sampling at a non-zero temperature needs a random state");

  // The chain in mlx-lm's order: top_p, min_p, xtc, top_k, then categorical sampling.
  using Step = std::function<mx::array(const mx::array&)>;
  std::vector<Step> steps;
  if (0 < params.top_p && params.top_p < 1.0) {
    auto fn = compiled_top_p(params.top_p);
    steps.push_back([fn](const mx::array& x) { return fn({x})[0]; });
  }
  if (params.min_p != 0.0) {
    auto fn = compiled_min_p(params.min_p, params.min_tokens_to_keep);
    steps.push_back([fn](const mx::array& x) { return fn({x})[0]; });
  }
  if (params.xtc_probability > 0.0) {
    auto fn = compiled_xtc(params.xtc_probability, params.xtc_threshold, params.xtc_special_tokens);
    steps.push_back([fn, rng](const mx::array& x) { return run_keyed(fn, x, *rng); });
  }
  if (params.top_k > 0) {
    auto fn = compiled_top_k(params.top_k);
    int top_k = params.top_k;
    steps.push_back([fn, top_k](const mx::array& x) {
      check_top_k(top_k, x);
      return fn({x})[0];
    });
  }
  auto sample = compiled_categorical(params.temp);
  return [steps = std::move(steps), sample, rng](const mx::array& logprobs) {
    auto x = logprobs;
    for (const auto& step : steps) x = step(x);
    return run_keyed(sample, x, *rng);
  };
}

mx::array apply_top_p(const mx::array& logprobs, double top_p, RandomState&) {
  return compiled_top_p(top_p)({logprobs})[0];
}

mx::array apply_min_p(const mx::array& logprobs, double min_p, int min_tokens_to_keep, RandomState&) {
  if (!(min_p >= 0 && min_p <= 1)) throw UsageError("min_p: has to be a float in the [0, 1] interval");
  if (min_tokens_to_keep < 1) throw UsageError("min_tokens_to_keep: has to be a positive integer");
  return compiled_min_p(min_p, min_tokens_to_keep)({logprobs})[0];
}

mx::array apply_top_k(const mx::array& logprobs, int top_k, RandomState&) {
  check_top_k(top_k, logprobs);
  return compiled_top_k(top_k)({logprobs})[0];
}

mx::array apply_xtc(const mx::array& logits, double xtc_probability, double xtc_threshold,
                    const std::vector<int32_t>& xtc_special_tokens, RandomState& rng) {
  SamplerParams p;
  p.xtc_probability = xtc_probability;
  p.xtc_threshold = xtc_threshold;
  if (auto problem = check_sampler_params(p)) throw UsageError(problem->param + ": " + problem->message);
  return run_keyed(compiled_xtc(xtc_probability, xtc_threshold, xtc_special_tokens), logits, rng);
}

mx::array categorical_sampling(const mx::array& logits, double temp, RandomState& rng) {
  return run_keyed(compiled_categorical(temp), logits, rng);
}

float token_logprob(const mx::array& logprobs, int32_t token) {
  if (logprobs.is_available() && logprobs.ndim() == 1 && logprobs.flags().row_contiguous && token >= 0 &&
      token < logprobs.shape(0)) {
    switch (logprobs.dtype()) {
      case mx::float32:
        return logprobs.data<float>()[token];
      case mx::bfloat16:
        return static_cast<float>(logprobs.data<mx::bfloat16_t>()[token]);
      case mx::float16:
        return static_cast<float>(logprobs.data<mx::float16_t>()[token]);
      default:
        break;
    }
  }
  return mx::astype(mx::take(logprobs, token), mx::float32).item<float>();
}

std::vector<TopLogprob> top_logprobs(const mx::array& logprobs, int n) {
  if (n <= 0) return {};
  auto order = mx::argpartition(mx::negative(logprobs), n - 1);
  auto top = mx::slice(order, {0}, {n});
  auto values = mx::astype(mx::take(logprobs, top), mx::float32);
  auto ids = mx::astype(top, mx::int32);
  mx::eval(ids, values);  // one wait for both (each eval waits for what the stream has queued before it)
  std::vector<TopLogprob> out;
  for (int i = 0; i < n; ++i) out.push_back({ids.data<int32_t>()[i], values.data<float>()[i]});
  return out;
}

}  // namespace mlxrt::generate
