// `mlxrt logits`: the parity interface. Writes tensor "logits" [T, vocab] in the model's dtype,
// from one forward over all tokens or (--incremental) one token at a time through the KV cache.
#include <fstream>
#include <sstream>

#include <mlx/io.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/verbs.h"

namespace mlxrt::cli {

namespace mx = mlx::core;

namespace {

mx::array compute_logits(model::CausalLM& lm, const std::vector<int32_t>& ids, bool incremental) {
  mx::array tokens(ids.data(), {1, static_cast<int>(ids.size())}, mx::int32);
  if (!incremental) {
    auto logits = lm(tokens, nullptr);
    return mx::squeeze(logits, 0);
  }
  auto cache = lm.make_cache();
  std::vector<mx::array> rows;
  for (int t = 0; t < static_cast<int>(ids.size()); ++t) {
    auto logits = lm(mx::slice(tokens, {0, t}, {1, t + 1}), &cache);
    auto row = mx::squeeze(logits, 0);  // [1, vocab]
    mx::eval(row);
    rows.push_back(row);
  }
  return mx::concatenate(rows, 0);
}

}  // namespace

void register_logits(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "Write the model's logits for a token sequence (parity interface)");
  struct Args {
    std::string model, tokens, out, profile_file;
    bool incremental = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "Model directory or HF cache snapshot")->required();
  cmd->add_option("--tokens", a->tokens, "Comma-separated token ids")->required();
  cmd->add_option("--out", a->out, "Output .safetensors file (tensor 'logits' [T, vocab])")->required();
  cmd->add_flag("--incremental", a->incremental, "One token at a time through the KV cache");
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  cmd->callback([a] {
    auto ids = parse_token_list(a->tokens, "--tokens");
    auto loaded = model::load_model(a->model, load_options(a->profile_file));
    for (auto id : ids)
      if (id >= loaded.model->vocab_size())
        throw UsageError("--tokens: id " + std::to_string(id) + " is outside the vocabulary (size " +
                         std::to_string(loaded.model->vocab_size()) + ")");
    auto logits = compute_logits(*loaded.model, ids, a->incremental);
    mx::eval(logits);
    // save_safetensors appends ".safetensors" to a name without it.
    auto tmp = a->out + ".partial.safetensors";
    mx::save_safetensors(tmp, {{"logits", logits}});
    std::filesystem::rename(tmp, a->out);
  });
}

}  // namespace mlxrt::cli
