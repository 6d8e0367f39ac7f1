// Encode and decode over the tokenizer.json pipeline (or SentencePiece), and the Tokenizer handle.
#include "mlxrt/tokenizer/tokenizer.h"

#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "mlxrt/tokenizer/tokenizer_impl.h"
#include "mlxrt/tokenizer/utf8.h"

namespace mlxrt::tokenizer {

using detail::Segment;

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view input, bool add_special_tokens) const {
  std::string text = detail::repair_utf8(input);
  std::vector<int32_t> ids;
  if (spm) {
    ids = spm->encode(text);
    if (add_special_tokens) {
      if (add_bos_spm && spm->bos_id()) ids.insert(ids.begin(), *spm->bos_id());
      if (add_eos_spm && spm->eos_id()) ids.push_back(*spm->eos_id());
    }
    return ids;
  }
  // 1. tokens matched in the raw text; 2. normalize the rest, then tokens matched after normalizing.
  std::vector<Segment> raw, normalized;
  added.split(Segment{std::move(text), std::nullopt, true}, false, raw);
  std::vector<detail::Piece> pieces;
  for (auto& seg : raw) {
    if (seg.id) {
      ids.push_back(*seg.id);
      continue;
    }
    if (normalizer) normalizer->normalize(seg.text);
    normalized.clear();
    added.split(seg, true, normalized);
    for (auto& part : normalized) {
      if (part.id) {
        ids.push_back(*part.id);
        continue;
      }
      pieces.clear();
      pieces.push_back({std::move(part.text), part.at_start});
      if (pre_tokenizer) pre_tokenizer->split(pieces);
      for (const auto& p : pieces) model->tokenize(p.text, ids);
    }
  }
  if (add_special_tokens && post_processor) post_processor->process(ids);
  return ids;
}

std::string Tokenizer::Impl::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  if (spm) return spm->decode(ids, skip_special_tokens);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* t = nullptr;
    if (const auto* a = added.by_id(id)) t = &a->surface;
    else t = model->id_to_token(id);
    if (!t) continue;
    if (skip_special_tokens && added.is_special_content(*t)) continue;
    tokens.push_back(*t);
  }
  std::string out;
  if (decoder) {
    decoder->decode_chain(tokens);
    for (const auto& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
  }
  return out;
}

std::optional<int32_t> Tokenizer::Impl::token_to_id(std::string_view token) const {
  if (spm) return spm->piece_to_id(token);
  if (auto id = added.find(token)) return id;
  return model->token_to_id(token);
}

std::string Tokenizer::Impl::id_to_token(int32_t id) const {
  if (spm) return spm->id_to_piece(id);
  if (const auto* a = added.by_id(id)) return a->surface;
  const std::string* t = model->id_to_token(id);
  return t ? *t : std::string();
}

bool Tokenizer::Impl::is_special(int32_t id) const {
  if (spm) return spm->is_control(id);
  const auto* a = added.by_id(id);
  return a && a->special;
}

namespace {

/** transformers' model_max_length: tokenizer_config.json's "model_max_length" (or the old
 * "max_len"); absent or null means no limit (VERY_LARGE_INTEGER). Its Python text for the warning. */
std::optional<std::pair<double, std::string>> model_max_length(const nlohmann::json& raw) {
  const nlohmann::json* v = nullptr;
  if (raw.contains("model_max_length")) v = &raw["model_max_length"];
  else if (raw.contains("max_len")) v = &raw["max_len"];
  if (!v || !v->is_number()) return std::nullopt;
  if (v->is_number_unsigned()) return std::make_pair(double(v->get<uint64_t>()), std::to_string(v->get<uint64_t>()));
  if (v->is_number_integer()) return std::make_pair(double(v->get<int64_t>()), std::to_string(v->get<int64_t>()));
  double d = v->get<double>();
  // A float limit a prompt can exceed is integral and small: Python prints it as "8192.0".
  if (!(std::abs(d) < 1e15) || d != std::floor(d)) return std::nullopt;
  return std::make_pair(d, std::to_string(static_cast<int64_t>(d)) + ".0");
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  auto ids = impl_->encode(text, add_special_tokens);
  // _eventual_warn_about_too_long_sequence (transformers 5): on stderr through its logger, once.
  if (auto limit = model_max_length(impl_->config.raw);
      limit && limit->first != 0 && double(ids.size()) > limit->first && !impl_->warned_too_long.exchange(true)) {
    std::cout.flush();
    std::cerr << "[transformers] Token indices sequence length is longer than the specified maximum sequence length "
                 "for this model ("
              << ids.size() << " > " << limit->second
              << "). Running this sequence through the model will result in indexing errors\n"
              << std::flush;
  }
  return ids;
}
std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }
std::string Tokenizer::id_to_token(int32_t id) const { return impl_->id_to_token(id); }
size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
size_t Tokenizer::base_vocab_size() const { return impl_->base_vocab_size; }
size_t Tokenizer::id_limit() const { return impl_->id_limit; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::vector<int32_t> Tokenizer::eos_token_ids() const { return impl_->eos_ids; }
const TokenizerConfig& Tokenizer::config() const { return impl_->config; }
bool Tokenizer::is_special(int32_t id) const { return impl_->is_special(id); }
StreamingKind Tokenizer::streaming_kind() const { return impl_->streaming; }
StreamingDetokenizer Tokenizer::streaming_detokenizer() const { return StreamingDetokenizer(*this); }

}  // namespace mlxrt::tokenizer
