// `mlxrt embed --model DIR (TEXT... | --file F | --tokens 1,2,3 ...) [--dimensions N] [--pooling
// last|mean] [--normalize|--no-normalize] [--encoding-format float|base64]`: sentence embeddings of
// the inputs (pooled hidden states, see generate/embedding.h), printed as one JSON object in the
// shape of OpenAI's embeddings response.
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/generate/embedding.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/server/python_json.h"
#include "mlxrt/tokenizer/tokenizer.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace {

struct Args {
  std::string model, file, profile_file, adapter_path, pooling, encoding_format = "float";
  std::vector<std::string> texts, tokens;
  std::optional<int> dimensions;
  bool normalize = false, no_normalize = false;
  DistributedArgs dist;
};

std::vector<std::string> file_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--file: cannot read '" + path + "'");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) throw UsageError("--file: '" + path + "' holds no non-empty line");
  return lines;
}

void run(const Args& a) {
  if (a.encoding_format != "float" && a.encoding_format != "base64")
    throw UsageError("--encoding-format must be 'float' or 'base64', got '" + a.encoding_format + "'");
  if (a.dimensions && *a.dimensions < 1) throw UsageError("--dimensions must be at least 1");
  const auto dir = io::resolve_model_dir(a.model);
  auto config = generate::read_embedding_config(dir);
  if (!a.pooling.empty()) config.pooling = generate::parse_pooling(a.pooling, "--pooling");
  if (a.normalize) config.normalize = true;
  if (a.no_normalize) config.normalize = false;
  if (a.dimensions && config.width && *a.dimensions > *config.width)
    throw UsageError("--dimensions " + std::to_string(*a.dimensions) + " is larger than the model's embedding width " +
                     std::to_string(*config.width));

  std::vector<std::vector<int32_t>> inputs;
  for (const auto& t : a.tokens) inputs.push_back(parse_token_list(t, "--tokens"));
  std::vector<std::string> texts = a.texts;
  if (!a.file.empty()) texts = file_lines(a.file);
  if (!texts.empty()) {
    auto tok = tokenizer::Tokenizer::from_dir(dir);
    for (size_t i = 0; i < texts.size(); ++i) {
      inputs.push_back(tok.encode(texts[i], true));
      if (inputs.back().empty()) throw UsageError("input " + std::to_string(i) + " has no tokens");
    }
  }
  if (inputs.empty()) throw UsageError("embed: give texts, --file or --tokens");

  // Every rank runs each input through its shard of the model (the final hidden states are whole on
  // every rank: all_sum in tensor parallel, all_gather after a pipeline); rank 0 prints.
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());
  std::shared_ptr<model::nn::ExpertStore> experts;
  auto loaded = load_cli_model(a.model, a.profile_file, std::nullopt, experts, a.adapter_path, dist_run.parallel);
  if (!loaded.model->has_hidden_states())
    throw UnsupportedError("embed: the " + loaded.config.model_type() +
                           " family does not expose its hidden states here; embeddings need them");
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  size_t used = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto values = generate::to_floats(generate::embed_tokens(*loaded.model, inputs[i], config, a.dimensions));
    used += inputs[i].size();
    nlohmann::ordered_json item = {{"object", "embedding"}, {"index", i}};
    if (a.encoding_format == "base64")
      item["embedding"] = generate::floats_base64(values);
    else
      item["embedding"] = values;
    data.push_back(std::move(item));
  }
  nlohmann::ordered_json out = {{"object", "list"},
                                {"data", std::move(data)},
                                {"model", a.model},
                                {"usage", {{"prompt_tokens", used}, {"total_tokens", used}}}};
  std::cout << server::python_dumps(out) << "\n";
}

}  // namespace

void register_embed(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Sentence embeddings of texts (the model's pooled final hidden states), as OpenAI's JSON");
  cmd->add_option("--model", a->model, "The model directory or a Hugging Face repo id in the local cache")->required();
  auto* texts = cmd->add_option("texts", a->texts, "Texts to embed (one embedding each)");
  auto* file = cmd->add_option("--file", a->file, "A file with one text per line (empty lines are skipped)");
  file->excludes(texts);
  cmd->add_option("--tokens", a->tokens, "Token ids of an input, comma-separated (repeat for several inputs)");
  cmd->add_option("--dimensions", a->dimensions,
                  "Keep the first N dimensions (normalised after truncation when the model normalises)");
  cmd->add_option("--pooling", a->pooling,
                  "last or mean (default: the checkpoint's sentence-transformers config, else last)");
  auto* norm = cmd->add_flag("--normalize", a->normalize, "L2-normalise the embeddings");
  auto* no_norm = cmd->add_flag("--no-normalize", a->no_normalize, "Do not L2-normalise the embeddings");
  norm->excludes(no_norm);
  cmd->add_option("--encoding-format", a->encoding_format, "float (default) or base64 (little-endian float32)");
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  cmd->add_option("--adapter-path", a->adapter_path, kAdapterPathHelp);
  add_distributed_flags(cmd, a->dist);
  cmd->callback([a] { run(*a); });
}

}  // namespace mlxrt::cli
