// Port of make_logits_processors and the penalty processors of mlx_lm/sample_utils.py
// (mlx-lm 0.32.2), with the same ops: scatter-add for the bias and the frequency penalty
// (duplicates in the window count once per occurrence), gather then scatter for the repetition
// and presence penalties (duplicates count once).
#include "mlxrt/generate/logits_processors.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include <mlx/ops.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

namespace {

/** tokens[-context_size:] */
mx::array last_tokens(const mx::array& tokens, int context_size) {
  const int n = tokens.shape(0);
  return mx::slice(tokens, {std::max(0, n - context_size)}, {n});
}

/** logits[:, idx] -> [B, n] */
mx::array gather_columns(const mx::array& logits, const mx::array& idx) { return mx::take(logits, idx, 1); }

/** logits[:, idx] = values ([B, n]) */
mx::array set_columns(const mx::array& logits, const mx::array& idx, const mx::array& values) {
  auto cols = mx::broadcast_to(mx::reshape(idx, {1, idx.shape(0)}), values.shape());
  return mx::put_along_axis(logits, cols, values, 1);
}

/** logits.at[:, idx].add(values): values [n] or a scalar, added once per occurrence of an index. */
mx::array add_columns(const mx::array& logits, const mx::array& idx, const mx::array& values) {
  const int n = idx.shape(0);
  // mlx's scatter_add: updates are cast to the array's dtype, then added in it.
  auto upd = mx::astype(values, logits.dtype());
  upd = mx::broadcast_to(mx::reshape(upd, {1, upd.ndim() == 0 ? 1 : n}), {logits.shape(0), n});
  auto cols = mx::broadcast_to(mx::reshape(idx, {1, n}), {logits.shape(0), n});
  return mx::scatter_add_axis(logits, cols, upd, 1);
}

std::string fmt_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

LogitsProcessor repetition_penalty(double penalty, int context_size) {
  return [penalty, context_size](const mx::array& tokens, const mx::array& logits) {
    if (tokens.size() == 0) return logits;
    auto window = last_tokens(tokens, context_size);
    auto selected = gather_columns(logits, window);
    auto p = mx::array(static_cast<float>(penalty), selected.dtype());
    selected = mx::where(mx::less(selected, mx::array(0, selected.dtype())), mx::multiply(selected, p),
                         mx::divide(selected, p));
    return set_columns(logits, window, selected);
  };
}

LogitsProcessor presence_penalty(double penalty, int context_size) {
  return [penalty, context_size](const mx::array& tokens, const mx::array& logits) {
    if (tokens.size() == 0) return logits;
    auto window = last_tokens(tokens, context_size);
    auto selected = gather_columns(logits, window);
    selected = mx::subtract(selected, mx::array(static_cast<float>(penalty), selected.dtype()));
    return set_columns(logits, window, selected);
  };
}

LogitsProcessor frequency_penalty(double penalty, int context_size) {
  return [penalty, context_size](const mx::array& tokens, const mx::array& logits) {
    if (tokens.size() == 0) return logits;
    auto window = last_tokens(tokens, context_size);
    // mlx's .at[].subtract(v) is a scatter-add of -v.
    auto neg = mx::negative(mx::array(static_cast<float>(penalty), logits.dtype()));
    return add_columns(logits, window, neg);
  };
}

}  // namespace

std::optional<ParamProblem> check_logits_processor_params(const LogitsProcessorParams& p,
                                                          std::optional<int> vocab_size) {
  auto bad = [](std::string param, std::string msg) { return ParamProblem{std::move(param), std::move(msg)}; };
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || (vocab_size && id >= *vocab_size))
      return bad("logit_bias", "token id " + std::to_string(id) + " is outside the vocabulary" +
                                   (vocab_size ? " [0, " + std::to_string(*vocab_size) + ")" : std::string()));
    if (!std::isfinite(bias))
      return bad("logit_bias", "the bias for token " + std::to_string(id) + " is not a finite number");
  }
  if (p.repetition_penalty && (!std::isfinite(*p.repetition_penalty) || *p.repetition_penalty < 0))
    return bad("repetition_penalty", "must be a non-negative float, got " + fmt_double(*p.repetition_penalty));
  if (p.presence_penalty && !std::isfinite(*p.presence_penalty))
    return bad("presence_penalty", "must be a finite number, got " + fmt_double(*p.presence_penalty));
  if (p.frequency_penalty && !std::isfinite(*p.frequency_penalty))
    return bad("frequency_penalty", "must be a finite number, got " + fmt_double(*p.frequency_penalty));
  if (p.repetition_context_size < 1)
    return bad("repetition_context_size", "must be a positive integer, got " + std::to_string(p.repetition_context_size));
  if (p.presence_context_size < 1)
    return bad("presence_context_size", "must be a positive integer, got " + std::to_string(p.presence_context_size));
  if (p.frequency_context_size < 1)
    return bad("frequency_context_size", "must be a positive integer, got " + std::to_string(p.frequency_context_size));
  return std::nullopt;
}

std::optional<std::vector<std::pair<int32_t, double>>> logit_bias_only(const LogitsProcessorParams& params) {
  auto wanted = [](const std::optional<double>& p) { return p && *p != 0; };
  if (params.logit_bias.empty() || wanted(params.repetition_penalty) || wanted(params.presence_penalty) ||
      wanted(params.frequency_penalty))
    return std::nullopt;
  return params.logit_bias;
}

std::vector<LogitsProcessor> make_logits_processors(const LogitsProcessorParams& params,
                                                    std::optional<int> vocab_size) {
  if (auto problem = check_logits_processor_params(params, vocab_size))
    throw UsageError(problem->param + ": " + problem->message);
  std::vector<LogitsProcessor> out;
  if (!params.logit_bias.empty()) {
    std::vector<int32_t> ids;
    std::vector<float> values;  // mx.array(list of Python floats) is float32
    for (const auto& [id, bias] : params.logit_bias) {
      ids.push_back(id);
      values.push_back(static_cast<float>(bias));
    }
    const int n = static_cast<int>(ids.size());
    mx::array indices(ids.data(), {n}, mx::int32);
    mx::array vals(values.data(), {n}, mx::float32);
    out.push_back([indices, vals](const mx::array&, const mx::array& logits) {
      return add_columns(logits, indices, vals);
    });
  }
  auto wanted = [](const std::optional<double>& p) { return p && *p != 0; };
  if (wanted(params.repetition_penalty))
    out.push_back(repetition_penalty(*params.repetition_penalty, params.repetition_context_size));
  if (wanted(params.presence_penalty))
    out.push_back(presence_penalty(*params.presence_penalty, params.presence_context_size));
  if (wanted(params.frequency_penalty))
    out.push_back(frequency_penalty(*params.frequency_penalty, params.frequency_context_size));
  return out;
}

std::vector<std::pair<int32_t, double>> parse_logit_bias(const nlohmann::ordered_json& object,
                                                         const std::string& what) {
  if (!object.is_object())
    throw UsageError(what + ": expected a JSON object mapping token ids to biases, e.g. {\"42\": -1.5}");
  std::vector<std::pair<int32_t, double>> out;
  for (const auto& [key, value] : object.items()) {
    int64_t id = 0;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty() || id < 0 || id > INT32_MAX)
      throw UsageError(what + ": key \"" + key + "\" is not a token id (a non-negative integer)");
    if (!value.is_number())
      throw UsageError(what + ": the bias for token " + key + " is not a number: " + value.dump());
    // mlx_lm.server's {int(k): float(v) for k, v in ...}: keys naming one id ("17", "017") are one
    // entry, at the first one's place, with the last one's bias.
    auto same = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == id; });
    if (same != out.end())
      same->second = value.get<double>();
    else
      out.emplace_back(static_cast<int32_t>(id), value.get<double>());
  }
  return out;
}

std::vector<std::pair<int32_t, double>> parse_logit_bias(const std::string& json_text, const std::string& what) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(what + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  return parse_logit_bias(doc, what);
}

}  // namespace mlxrt::generate
