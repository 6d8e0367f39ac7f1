#include "mlxrt/cli/common.h"

#include <charconv>
#include <cmath>
#include <iostream>
#include <system_error>

#include <mlx/io.h>

#include "mlxrt/model/expert_loading.h"
#include "mlxrt/util/durable_file.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 0 || v > INT32_MAX)
      throw UsageError(flag + ": expected comma-separated non-negative token ids, got \"" + item + "\"");
    ids.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

std::vector<std::pair<std::string, std::string>> parse_adapter_specs(const std::vector<std::string>& specs) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw UsageError("--adapters: expected NAME=DIR, got '" + spec + "'");
    out.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  }
  return out;
}

model::LoadOptions load_options(const std::string& profile_file) {
  model::LoadOptions options;
  if (!profile_file.empty()) options.artifact_profiles = model::load_profile_file(profile_file);
  return options;
}

model::LoadOptions load_options(const std::string& profile_file, const std::string& adapter_path) {
  auto options = load_options(profile_file);
  options.adapter_path = adapter_path;
  return options;
}

std::optional<uint64_t> expert_memory_bytes(std::optional<double> gb) {
  if (!gb) return std::nullopt;
  if (!(std::isfinite(*gb) && *gb > 0 && *gb < 1e9))
    throw UsageError("--expert-memory: expected a positive number of GB, got " + std::to_string(*gb));
  return static_cast<uint64_t>(std::llround(*gb * 1e9));
}

model::LoadedModel load_cli_model(const std::string& model, const std::string& profile_file,
                                  std::optional<double> expert_memory_gb,
                                  std::shared_ptr<model::nn::ExpertStore>& experts,
                                  const std::string& adapter_path, const std::optional<model::Parallel>& parallel,
                                  bool expert_prefetch, model::FidelityTier fidelity, bool row_exact,
                                  bool multi_token_prediction) {
  auto bytes = expert_memory_bytes(expert_memory_gb);
  auto options = load_options(profile_file, adapter_path);
  options.row_exact = row_exact;
  options.multi_token_prediction = multi_token_prediction;
  options.parallel = parallel;
  options.expert_prefetch = expert_prefetch;
  options.fidelity = fidelity;
  return model::load_model(model, options, bytes, experts);
}

const char* fidelity_name(model::FidelityTier tier) {
  switch (tier) {
    case model::FidelityTier::l1: return "l1";
    case model::FidelityTier::l2: return "l2";
    case model::FidelityTier::l3: return "l3";
  }
  return "?";
}

namespace {

constexpr const char* kFidelityValues =
    "expected l1 (bit-exact against mlx-lm, the default) or l3 (mlxrt's own kernels where it has them, "
    "measured against l1 by `mlxrt fidelity`)";

}  // namespace

model::FidelityTier parse_fidelity(const std::string& text, const std::string& flag) {
  if (text == "l1") return model::FidelityTier::l1;
  if (text == "l3") return model::FidelityTier::l3;
  throw UsageError(flag + ": " + kFidelityValues + ", got '" + text + "'");
}

CLI::Option* add_fidelity_flag(CLI::App* cmd, model::FidelityTier& tier, const std::string& name,
                               const std::string& help) {
  // CLI11 reports a validator's message as "NAME: <message>".
  CLI::Validator tiers(
      [](std::string& value) {
        return value == "l1" || value == "l3" ? std::string() : std::string(kFidelityValues) + ", got '" + value + "'";
      },
      "l1|l3");
  return cmd
      ->add_option_function<std::string>(
          name, [&tier, name](const std::string& value) { tier = parse_fidelity(value, name); }, help)
      ->check(tiers)
      ->default_str(fidelity_name(tier));
}

namespace {
/** --NAME YES|NO setting `flag` to whether the value is YES; its default is `flag`'s value. Another
 * value is a parse error naming both. */
CLI::Option* add_two_way_option(CLI::App* cmd, const std::string& name, const std::string& yes, const std::string& no,
                                bool& flag, const std::string& help) {
  CLI::Validator values(
      [yes, no](std::string& value) {
        return value == yes || value == no ? std::string()
                                           : "expected " + yes + " or " + no + ", got '" + value + "'";
      },
      yes + "|" + no);
  return cmd->add_option_function<std::string>(name, [&flag, yes](const std::string& value) { flag = value == yes; }, help)
      ->check(values)
      ->default_str(flag ? yes : no);
}
}  // namespace

CLI::Option* add_batch_order_option(CLI::App* cmd, bool& prompts_first) {
  return add_two_way_option(
      cmd, "--batch-order", "prompts-first", "mlx-lm", prompts_first,
      "The order of a batch step: prompts-first prefills the waiting prompts and hands out their first "
      "tokens in the step that also decodes the running rows (ours); mlx-lm decodes first and hands a new "
      "row's first token out two steps after its prefill, as mlx-lm's BatchGenerator");
}

namespace {
CLI::Validator number_check(bool zero_allowed) {
  const std::string expected = zero_allowed ? "a number >= 0" : "a number > 0";
  return CLI::Validator(
      [zero_allowed, expected](std::string& text) {
        double v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        bool ok = ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) &&
                  (zero_allowed ? v >= 0 : v > 0);
        return ok ? std::string() : "expected " + expected + ", got '" + text + "'";
      },
      zero_allowed ? "NUMBER>=0" : "NUMBER>0");
}
}  // namespace

CLI::Validator non_negative_number() { return number_check(true); }
CLI::Validator positive_number() { return number_check(false); }

CLI::Option* add_join_prefill_option(CLI::App* cmd, bool& beside, bool& interleaved) {
  CLI::Validator values(
      [](std::string& value) {
        return value == "auto" || value == "between" || value == "beside" || value == "interleaved"
                   ? std::string()
                   : "expected auto, between, beside or interleaved, got '" + value + "'";
      },
      "auto|between|beside|interleaved");
  return cmd
      ->add_option_function<std::string>(
          "--join-prefill",
          [&beside, &interleaved](const std::string& value) {
            beside = value != "between";
            interleaved = value == "interleaved" || value == "auto";
          },
          "Where a request that joins a decoding batch is prefilled: between runs it between the batch's "
          "steps, after the step in flight and the one dispatched after it; beside prefills it and runs its "
          "first step on a second stream while the batch's steps go on, hands its first token out when it is "
          "ready and merges it at the next step; interleaved does the same on the batch's own stream, with "
          "the batch's steps dispatched a few ops at a time so that the prefill runs between two pieces of a "
          "step; auto (earlier releases' default) is interleaved (ours; beside and interleaved with "
          "--batch-order prompts-first)")
      ->check(values)
      ->default_str(interleaved ? "interleaved" : beside ? "beside" : "between");
}

CLI::Option* add_first_tokens_option(CLI::App* cmd, bool& early) {
  return add_two_way_option(
      cmd, "--first-tokens", "early", "pipelined", early,
      "When a batch hands out a joining row's first token: early reads it before the batch's next step "
      "is encoded and encodes that step at the next call (ours; with --batch-order prompts-first); "
      "pipelined encodes the next step first, as mlx-lm's BatchGenerator. The same tokens either way");
}

void print_expert_stats(const std::shared_ptr<model::nn::ExpertStore>& experts) {
  if (experts) std::cerr << model::nn::format_expert_stats(experts->stats()) << std::endl;
}

void write_safetensors_output(const std::string& path, const std::unordered_map<std::string, mlx::core::array>& tensors,
                              const std::string& flag) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  util::remove_stale_partials(dir);
  const auto tmp = util::partial_path(target, ".safetensors");  // save_safetensors keeps the suffix as given
  try {
    mlx::core::save_safetensors(tmp.string(), tensors);
    util::durable_rename(tmp, target);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw UsageError(flag + " " + path + ": cannot be written (" + e.what() + ")");
  }
}

}  // namespace mlxrt::cli
