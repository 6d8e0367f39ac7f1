#include "mlxrt/tokenizer/token_bytes.h"

#include "mlxrt/tokenizer/tokenizer_impl.h"
#include "mlxrt/tokenizer/utf8.h"

namespace mlxrt::tokenizer {

namespace {

std::string spm_piece_bytes(const std::string& piece) {
  static const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int h = hex(piece[3]), l = hex(piece[4]);
    if (h >= 0 && l >= 0) return std::string(1, static_cast<char>(h * 16 + l));
  }
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

}  // namespace

std::string token_bytes(const Tokenizer& tokenizer, int32_t id) {
  const Tokenizer::Impl& impl = tokenizer.impl();
  if (id < 0 || static_cast<size_t>(id) >= impl.id_limit || impl.is_special(id)) return {};
  if (impl.spm) return impl.spm->is_control(id) ? std::string() : spm_piece_bytes(impl.spm->id_to_piece(id));
  // Added tokens go through the decoder too, as in HF's decode.
  const std::string* token = nullptr;
  if (const auto* a = impl.added.by_id(id)) token = &a->surface;
  else token = impl.model->id_to_token(id);
  if (!token) return {};
  switch (impl.streaming) {
    case StreamingKind::bpe: {
      std::string out;
      for (size_t i = 0; i < token->size();) {
        size_t len = 0;
        char32_t c = detail::decode_at(*token, i, len);
        int b = detail::char_to_byte(c);
        if (b >= 0) out += static_cast<char>(b);
        else out.append(*token, i, len);
        i += len;
      }
      return out;
    }
    case StreamingKind::spm:
    case StreamingKind::spm_no_trim:
      return spm_piece_bytes(*token);
    case StreamingKind::naive:
      break;
  }
  const int32_t one[1] = {id};
  return impl.decode(one, false);
}

}  // namespace mlxrt::tokenizer
