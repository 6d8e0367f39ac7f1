// `mlxrt tokenize --model DIR (--text T | --file F) [--json] [--no-add-special]` prints the ids HF's
// Tokenizer.encode gives (space separated, or {"ids", "pieces"} with --json);
// `mlxrt detokenize --model DIR --ids 1,2,3 [--skip-special]` prints Tokenizer.decode of the ids;
// with --token-bytes, a JSON list of each id's raw bytes in hex (what constrained decoding matches).
#include <iostream>

#include <nlohmann/json.hpp>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/io/hf_cache.h"
#include "mlxrt/tokenizer/token_bytes.h"
#include "mlxrt/tokenizer/tokenizer.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  bool json = false;
  bool no_add_special = false;
};

void run_tokenize(const TokenizeArgs& a) {
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(io::resolve_path_or_hf_repo(a.model));
  std::string text = a.file.empty() ? a.text : read_text_file(a.file);
  std::vector<int32_t> ids = tok.encode(text, !a.no_add_special);
  if (a.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok.id_to_token(id));
    nlohmann::json out = {{"ids", ids}, {"pieces", pieces}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
}

struct DetokenizeArgs {
  std::string model;
  std::string ids;
  bool skip_special = false;
  bool token_bytes = false;
};

void run_detokenize(const DetokenizeArgs& a) {
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(io::resolve_path_or_hf_repo(a.model));
  std::vector<int32_t> ids = a.ids.empty() ? std::vector<int32_t>{} : parse_token_list(a.ids, "--ids");
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= tok.id_limit())
      throw UsageError("--ids: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                       std::to_string(tok.id_limit() - 1) + ")");
  if (a.token_bytes) {
    nlohmann::json out = nlohmann::json::array();
    static const char* kHex = "0123456789abcdef";
    for (int32_t id : ids) {
      std::string hex;
      for (unsigned char c : tokenizer::token_bytes(tok, id)) {
        hex += kHex[c >> 4];
        hex += kHex[c & 15];
      }
      out.push_back(hex);
    }
    std::cout << out.dump() << "\n";
    return;
  }
  std::cout << tok.decode(ids, a.skip_special) << "\n";
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (as HF tokenizers encodes it)");
  cmd->add_option("--model", args->model, "Directory holding tokenizer files, or a Hugging Face repo id (org/name[@revision]) in the local cache")->required();
  auto* text = cmd->add_option("--text", args->text, "Text to tokenize");
  auto* file = cmd->add_option("--file", args->file, "File whose bytes are tokenized");
  text->excludes(file);
  cmd->add_flag("--json", args->json, "Print {\"ids\": [...], \"pieces\": [...]}");
  cmd->add_flag("--no-add-special", args->no_add_special, "Do not add the post-processor's special tokens");
  cmd->callback([args, text, file] {
    if (text->count() == 0 && file->count() == 0) throw UsageError("tokenize: one of --text or --file is required");
    run_tokenize(*args);
  });
}

void register_detokenize(CLI::App& app) {
  auto args = std::make_shared<DetokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Print the text of token ids (as HF tokenizers decodes them)");
  cmd->add_option("--model", args->model, "Directory holding tokenizer files, or a Hugging Face repo id (org/name[@revision]) in the local cache")->required();
  cmd->add_option("--ids", args->ids, "Comma-separated token ids")->required();
  cmd->add_flag("--skip-special", args->skip_special, "Leave special tokens out");
  cmd->add_flag("--token-bytes", args->token_bytes,
                "Print each id's raw bytes (hex, a JSON list) as constrained decoding matches them");
  cmd->callback([args] { run_detokenize(*args); });
}

}  // namespace mlxrt::cli
