// Building a Tokenizer: tokenizer.json parsing, and the files beside it in a model directory.
#include <fstream>
#include <set>
#include <sstream>

#include "mlxrt/tokenizer/tokenizer_impl.h"
#include "mlxrt/tokenizer/tokenizer_json_reader.h"
#include "mlxrt/tokenizer/utf8.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::tokenizer {

namespace fs = std::filesystem;
using detail::field;
using json = nlohmann::json;

namespace {

std::vector<detail::AddedToken> parse_added_tokens(const json& list, const std::string& where) {
  std::vector<detail::AddedToken> out;
  if (list.is_null()) return out;
  if (!list.is_array()) throw ConfigError(where + ": must be a list");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string at = where + "[" + std::to_string(i) + "]";
    const json& t = list[i];
    detail::AddedToken a;
    a.content = detail::string_field(t, "content", at);
    const json& id = field(t, "id", at);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      throw ConfigError(at + ".id: must be a non-negative integer");
    a.id = id.get<int32_t>();
    a.single_word = detail::bool_field(t, "single_word", false, at);
    a.lstrip = detail::bool_field(t, "lstrip", false, at);
    a.rstrip = detail::bool_field(t, "rstrip", false, at);
    a.special = detail::bool_field(t, "special", false, at);
    a.normalized = detail::bool_field(t, "normalized", !a.special, at);
    out.push_back(std::move(a));
  }
  return out;
}

bool json_match(const json& a, const json& b) { return a == b; }

StreamingKind pick_streaming(const json* decoder) {
  if (!decoder || !decoder->is_object()) return StreamingKind::naive;
  const json spm_base = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}]})");
  json spm = spm_base;
  spm["decoders"].push_back(json::parse(R"({"type": "Strip", "content": " ", "start": 1, "stop": 0})"));
  if (json_match(*decoder, spm)) return StreamingKind::spm;
  if (json_match(*decoder, spm_base)) return StreamingKind::spm_no_trim;
  if (decoder->contains("type") && (*decoder)["type"] == "ByteLevel") return StreamingKind::bpe;
  return StreamingKind::naive;
}

// "<0xAB>" -> the byte, as mlx-lm's SPM detokenizer reads byte tokens.
std::string spm_stream_bytes(const std::string& token) {
  if (token.size() >= 5 && token.compare(0, 3, "<0x") == 0) {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int h = hex(token[3]), l = hex(token[4]);
    if (h >= 0 && l >= 0) return std::string(1, static_cast<char>(h * 16 + l));
  }
  return token;
}

}  // namespace

std::shared_ptr<Tokenizer::Impl> parse_tokenizer_json(const json& doc, const std::string& source,
                                                      detail::ModelTables* tables) {
  if (!doc.is_object()) throw ConfigError(source + ": must be a JSON object, got " + json_type_name(doc));
  auto impl = std::make_shared<Tokenizer::Impl>();
  auto section = [&](const char* key) -> const json& {
    static const json null_value;
    return doc.contains(key) ? doc[key] : null_value;
  };
  impl->normalizer = detail::make_normalizer(section("normalizer"), source + ": normalizer");
  impl->pre_tokenizer = detail::make_pre_tokenizer(section("pre_tokenizer"), source + ": pre_tokenizer");
  impl->model = detail::make_model(field(doc, "model", source), source + ": model", tables);
  impl->post_processor = detail::make_post_processor(section("post_processor"), source + ": post_processor");
  impl->decoder = detail::make_decoder(section("decoder"), source + ": decoder");
  impl->added = detail::AddedVocabulary(parse_added_tokens(section("added_tokens"), source + ": added_tokens"),
                                        impl->normalizer.get());
  return impl;
}

void finish_impl(Tokenizer::Impl& impl, const json* decoder_spec) {
  impl.streaming = impl.spm ? StreamingKind::naive : pick_streaming(decoder_spec);
  if (impl.spm) {
    impl.vocab_size = impl.spm->size();
    impl.base_vocab_size = impl.spm->size();
    impl.id_limit = impl.spm->size();
  } else {
    size_t limit = impl.model->id_limit(), extra = 0;
    for (const auto& t : impl.added.tokens()) {
      limit = std::max(limit, static_cast<size_t>(t.id) + 1);
      if (!impl.model->token_to_id(t.content)) ++extra;
    }
    impl.vocab_size = impl.model->size() + extra;
    impl.base_vocab_size = impl.model->size();
    impl.id_limit = limit;
  }
  const TokenizerConfig& c = impl.config;
  impl.bos_id = c.bos_token ? impl.token_to_id(*c.bos_token) : std::nullopt;
  if (!c.bos_token && impl.spm) impl.bos_id = impl.spm->bos_id();
  std::set<int32_t> seen;
  impl.eos_ids.clear();
  auto add_eos = [&](int32_t id) {
    if (seen.insert(id).second) impl.eos_ids.push_back(id);
  };
  for (int32_t id : c.eos_token_ids) add_eos(id);
  if (c.eos_token) {
    if (auto id = impl.token_to_id(*c.eos_token)) add_eos(*id);
  } else if (impl.spm && impl.spm->eos_id()) {
    add_eos(*impl.spm->eos_id());
  }
  if (impl.streaming == StreamingKind::spm || impl.streaming == StreamingKind::spm_no_trim) {
    impl.spm_token_bytes.resize(impl.id_limit);
    for (size_t id = 0; id < impl.id_limit; ++id)
      impl.spm_token_bytes[id] = spm_stream_bytes(impl.id_to_token(static_cast<int32_t>(id)));
  }
}

Tokenizer Tokenizer::from_json_text(std::string_view text, const std::string& source) {
  detail::TokenizerJson parsed;
  try {
    parsed = detail::read_tokenizer_json(text, source);
  } catch (const json::exception& e) {
    throw ConfigError(source + ": malformed JSON: " + e.what());
  }
  const json& doc = parsed.doc;
  auto impl = parse_tokenizer_json(doc, source, &parsed.tables);
  finish_impl(*impl, doc.contains("decoder") ? &doc["decoder"] : nullptr);
  return Tokenizer(std::move(impl));
}

}  // namespace mlxrt::tokenizer
