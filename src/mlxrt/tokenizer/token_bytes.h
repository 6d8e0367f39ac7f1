#pragma once
#include <cstdint>
#include <string>

#include "mlxrt/tokenizer/tokenizer.h"

namespace mlxrt::tokenizer {

/** The raw bytes token `id` adds to decoded text, before any UTF-8 repair: byte-level BPE
 * characters mapped back to their bytes, SentencePiece "<0xAB>" byte pieces as that byte and "▁" as
 * a space (the leading space a decode strips included), an added token's content. Special tokens and
 * ids outside the vocabulary give "" (they write no text). What a grammar engine matches token by
 * token. */
std::string token_bytes(const Tokenizer& tokenizer, int32_t id);

}  // namespace mlxrt::tokenizer
