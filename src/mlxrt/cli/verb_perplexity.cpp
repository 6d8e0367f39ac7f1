// `mlxrt perplexity`: mlx_lm.perplexity's command (mlx_lm/perplexity.py main() and load_data @
// mlx-lm 0.32.2): the same flags, defaults, data sampling, arithmetic and printed report.
// Where mlx-lm downloads a Hugging Face dataset, this engine reads local files only: --data-path
// takes a JSONL file of {"text": ...} rows or a folder holding train.jsonl (what the datasets
// library reads from a local folder), and --text-file takes one plain text file as one row.
// Ours besides: --losses-file (every token's loss, for parity checks).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <mlx/io.h>
#include <mlx/memory.h>
#include <mlx/ops.h>
#include <nlohmann/json.hpp>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/generate/perplexity.h"
#include "mlxrt/io/hf_cache.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/tokenizer/tokenizer.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace mx = mlx::core;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string model, data_path = "allenai/tulu-3-sft-mixture", text_file, losses_file, profile_file;
  int batch_size = 8, sequence_length = 512, num_samples = 256;
  int64_t seed = 123;
  bool trust_remote_code = false;
  DistributedArgs dist;
  model::FidelityTier fidelity = model::FidelityTier::l1;  // --fidelity
};

std::string read_file(const fs::path& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag + ": cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/** The dataset's texts, in file order (TextDataset rows). */
std::vector<std::string> load_texts(const Args& a) {
  if (!a.text_file.empty()) return {read_file(a.text_file, "--text-file")};
  fs::path path = a.data_path;
  if (fs::is_directory(path)) path /= "train.jsonl";
  if (!fs::is_regular_file(path)) {
    bool dataset_id = false;
    try {
      dataset_id = !fs::exists(a.data_path) && a.data_path.find('@') == std::string::npos &&
                   io::parse_hf_repo_ref(a.data_path, "--data-path").has_value();
    } catch (const UsageError&) {
    }
    if (dataset_id)
      throw UsageError(
          "--data-path " + a.data_path + ": this looks like a Hugging Face dataset id" +
          (a.data_path == "allenai/tulu-3-sft-mixture" ? " (mlx_lm.perplexity's default)" : "") +
          ", and mlxrt reads local data only (it downloads no datasets). Accepted: --data-path FILE.jsonl "
          "with one {\"text\": \"...\"} object per line; --data-path DIR holding train.jsonl in that format; "
          "or --text-file FILE, a plain text file evaluated as one sample. To use a dataset with a \"text\" "
          "column, export it first: python -c \"import datasets; datasets.load_dataset('" + a.data_path +
          "', split='train').to_json('train.jsonl')\"");
    throw UsageError("--data-path: " + a.data_path +
                     " is not a local JSONL file or a folder holding train.jsonl (this engine downloads no "
                     "Hugging Face datasets; give a local file, or --text-file with plain text)");
  }
  std::istringstream lines(read_file(path, "--data-path"));
  std::vector<std::string> texts;
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(path.string() + ":" + std::to_string(n) + ": not valid JSON (" + e.what() + ")");
    }
    if (!row.is_object() || !row.contains("text") || !row["text"].is_string())
      throw UnsupportedError(path.string() + ":" + std::to_string(n) +
                             ": expected an object with a string \"text\" field (chat and prompt/completion "
                             "rows are not supported here)");
    texts.push_back(row["text"].get<std::string>());
  }
  if (texts.empty()) throw UsageError("--data-path: " + path.string() + " holds no rows");
  return texts;
}

/** load_data: rows visited in numpy's permutation order, each encoded with an eos appended,
 * until num_samples * sequence_length tokens are collected (all of them for num_samples <= 0;
 * mlx-lm fails with an IndexError when the rows run out, here the rows collected so far are used),
 * then cut into [rows, sequence_length]. */
mx::array load_data(const tokenizer::Tokenizer& tok, const std::vector<std::string>& texts, const Args& a) {
  auto eos_name = tok.config().eos_token;
  auto eos = eos_name ? tok.token_to_id(*eos_name) : std::nullopt;
  if (!eos) throw ConfigError("the tokenizer has no eos token (needed to end each sample)");
  const auto perm = generate::numpy_permutation(static_cast<uint32_t>(a.seed), static_cast<int64_t>(texts.size()));
  const double num_tokens = a.num_samples > 0 ? double(a.sequence_length) * a.num_samples : INFINITY;
  std::vector<int32_t> data;
  for (size_t i = 0; double(data.size()) < num_tokens && i < perm.size(); ++i) {
    auto ids = tok.encode(texts[static_cast<size_t>(perm[i])]);
    if (ids.empty() || ids.back() != *eos) ids.push_back(*eos);
    data.insert(data.end(), ids.begin(), ids.end());
  }
  int rows = static_cast<int>(data.size() / static_cast<size_t>(a.sequence_length));
  if (a.num_samples > 0) rows = std::min(rows, a.num_samples);
  if (rows == 0)
    throw UsageError("the data holds " + std::to_string(data.size()) + " tokens, fewer than one row of --sequence-length " +
                     std::to_string(a.sequence_length));
  return mx::array(data.data(), {rows, a.sequence_length}, mx::int32);
}

/** get_total_parameters: a quantized module counts weight.size * 32 / bits (plus its bias), any
 * other module the sizes of its arrays. */
double total_parameters(const model::LoadedModel& loaded, const fs::path& dir) {
  auto weights = io::load_weights(dir);
  const auto& q = loaded.config.quantization();
  auto module_of = [](const std::string& name) { return name.substr(0, name.rfind('.')); };
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  double total = 0;
  for (const auto& [name, t] : weights) {
    const auto module = module_of(name);
    const bool quantized = weights.count(module + ".scales") > 0;
    if (quantized && (ends_with(name, ".scales") || ends_with(name, ".biases"))) continue;
    if (quantized && ends_with(name, ".weight")) {
      int bits = q.global().bits;
      if (auto spec = q.for_module(module, 0, std::nullopt)) bits = spec->bits;  // an override, if any
      total += double(t.size()) * 32 / bits;
      continue;
    }
    total += double(t.size());
  }
  return total;
}

void run(const Args& a) {
  if (a.batch_size < 1) throw UsageError("--batch-size: must be positive");
  if (a.sequence_length < 2) throw UsageError("--sequence-length: must be at least 2");
  if (a.seed < 0 || a.seed > 0xffffffffLL) throw UsageError("--seed: must be between 0 and 2**32 - 1");
  auto texts = load_texts(a);
  // Every rank evaluates the same batches on its shard of the model (mlx_lm.perplexity has no
  // distributed mode; this is its loop over a model sharded as sharded_load shards it); rank 0 prints.
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());

  std::printf("Loading model from %s...\n", a.model.c_str());
  const auto dir = io::resolve_model_dir(a.model);
  auto options = load_options(a.profile_file);
  options.parallel = dist_run.parallel;
  options.fidelity = a.fidelity;
  auto loaded = model::load_model(dir, options);
  auto tok = tokenizer::Tokenizer::from_dir(dir);
  std::printf("Model loaded: %.1fM parameters\n", total_parameters(loaded, dir) / 1e6);

  std::printf("\nLoading dataset...\n");
  std::printf("  Sequence length: %d\n", a.sequence_length);
  auto data = load_data(tok, texts, a);
  std::printf("  Loaded %d samples\n", data.shape(0));

  std::printf("\nEvaluating perplexity with batch size %d...\n", a.batch_size);
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  auto result = generate::eval_ppl(*loaded.model, data, a.batch_size, [](int done, int total) {
    std::printf("  Processed %d/%d batches...\r", done, total);
    std::fflush(stdout);
  });
  std::printf("\n");
  const double eval_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double tokens_evaluated = double(data.shape(0)) * (data.shape(1) - 1);

  std::printf("\n%s\nEVALUATION RESULTS\n%s\n", std::string(60, '=').c_str(), std::string(60, '=').c_str());
  std::printf("Model: %s\n", a.model.c_str());
  std::printf("Perplexity: %.3f \u00b1 %.3f\n", result.ppl, result.standard_error);
  std::printf("Evaluation time: %.2f seconds\n", eval_time);
  std::printf("Peak memory: %.2f GB\n", mx::get_peak_memory() / 1e9);
  std::printf("Tokens per second: %.0f\n", tokens_evaluated / eval_time);
  std::printf("\nDataset statistics:\n");
  std::printf("  Total samples: %d\n", data.shape(0));
  std::printf("  Total tokens: %zu\n", data.size());
  if (!a.losses_file.empty() && dist_run.primary()) {
    write_safetensors_output(a.losses_file, {{"losses", result.losses}, {"tokens", data}}, "--losses-file");
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Evaluate perplexity of MLX models (as mlx_lm.perplexity)");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "Path to the local model directory or Hugging Face repo (from the local cache)")->required();
  cmd->add_flag("--trust-remote-code", a->trust_remote_code,
                "Accepted for compatibility (no code from the model directory is ever run)");
  cmd->add_option("--batch-size", a->batch_size, "Batch size for evaluation")->capture_default_str();
  cmd->add_option("--sequence-length", a->sequence_length, "Sequence length for evaluation")->capture_default_str();
  cmd->add_option("--num-samples", a->num_samples, "Number of samples to use (-1 for all available)")
      ->capture_default_str();
  cmd->add_option("--data-path", a->data_path,
                  "A local JSONL file of {\"text\": ...} rows, or a folder holding train.jsonl (mlx-lm's Hugging "
                  "Face dataset names are not downloaded here)")
      ->capture_default_str();
  cmd->add_option("--text-file", a->text_file, "A plain text file evaluated as one sample (instead of --data-path)");
  cmd->add_option("--seed", a->seed, "Random seed for data sampling")->capture_default_str();
  cmd->add_option("--losses-file", a->losses_file,
                  "Write every token's loss and the evaluated tokens to this .safetensors file");
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  add_fidelity_flag(cmd, a->fidelity);
  add_distributed_flags(cmd, a->dist);
  cmd->callback([a] { run(*a); });
}

}  // namespace mlxrt::cli
