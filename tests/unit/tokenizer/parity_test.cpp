// Encode / decode / streaming parity with HF tokenizers (and SentencePiece, and mlx-lm's streaming
// detokenizers) over the oracle corpus: fixed multi-script texts, special tokens inside text,
// ill-formed UTF-8, and 10k seeded random Unicode strings, for real and freshly trained tokenizers.
#include <gtest/gtest.h>
#include <unistd.h>

#include "mlxrt/tokenizer/tokenizer.h"
#include "oracle_cases.h"

namespace mlxrt::tokenizer {
namespace {

using testing::hex;
using testing::unhex;

const nlohmann::json* find_case(const std::string& name) {
  const auto& cases = testing::oracle().cases;
  if (!cases.contains("tokenizers")) return nullptr;
  for (const auto& c : cases["tokenizers"])
    if (c["name"] == name) return &c;
  return nullptr;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (auto i : ids) s += std::to_string(i) + " ";
  return s;
}

// One test for all tokenizers: the oracle runs once per process, and CTest runs each test case in
// a process of its own.
void check_tokenizer(const std::string& name) {
  SCOPED_TRACE(name);
  const nlohmann::json* c = find_case(name);
  ASSERT_NE(c, nullptr) << "the oracle produced no case for " << name << "; its output:\n" << testing::oracle().log;
  Tokenizer tok = Tokenizer::from_dir((*c)["dir"].get<std::string>());
  const auto& texts = (*c)["texts"];
  size_t failures = 0;
  auto report = [&](const std::string& what, const std::string& input, const std::string& got, const std::string& want) {
    if (++failures <= 8) ADD_FAILURE() << what << " differs for input hex " << hex(input) << "\n  got:  " << got << "\n  want: " << want;
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    std::string text = unhex(texts[i]);
    auto want = (*c)["encode"][i].get<std::vector<int32_t>>();
    auto got = tok.encode(text, true);
    if (got != want) report("encode", text, ids_str(got), ids_str(want));
    auto want_plain = (*c)["encode_plain"][i].get<std::vector<int32_t>>();
    auto got_plain = tok.encode(text, false);
    if (got_plain != want_plain) report("encode(add_special_tokens=false)", text, ids_str(got_plain), ids_str(want_plain));
    std::string dec = tok.decode(want, false);
    if (dec != unhex((*c)["decode"][i])) report("decode", text, hex(dec), (*c)["decode"][i]);
    std::string dec_skip = tok.decode(want, true);
    if (dec_skip != unhex((*c)["decode_skip"][i])) report("decode(skip_special)", text, hex(dec_skip), (*c)["decode_skip"][i]);
  }
  const auto& seqs = (*c)["id_seqs"];
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto ids = seqs[i].get<std::vector<int32_t>>();
    std::string dec = tok.decode(ids, false);
    if (dec != unhex((*c)["id_seq_decode"][i])) report("decode of random ids " + ids_str(ids), "", hex(dec), (*c)["id_seq_decode"][i]);
  }
  if (c->contains("stream")) {
    for (size_t i = 0; i < (*c)["stream_ids"].size(); ++i) {
      auto ids = (*c)["stream_ids"][i].get<std::vector<int32_t>>();
      StreamingDetokenizer d = tok.streaming_detokenizer();
      std::string all;
      for (auto id : ids) {
        d.add_token(id);
        all += d.take_segment();
      }
      d.finalize();
      all += d.take_segment();
      if (all != unhex((*c)["stream"][i])) report("streamed text of " + ids_str(ids), "", hex(all), (*c)["stream"][i]);
    }
  }
  EXPECT_EQ(failures, 0u) << name << ": " << failures << " mismatches over " << texts.size() << " texts";
}

TEST(TokenizerParity, EncodeDecodeStreamMatchHfForEveryTokenizer) {
  for (const char* name : {"trained_byte_level", "trained_spm_bpe", "trained_metaspace", "trained_wordpiece",
                           "trained_mixed", "trained_roberta", "trained_wordlevel", "qwen3", "llama3_1", "gemma3", "phi-3-mini", "qwen2.5", "gpt2",
                           "llama2_spm", "mistral_spm"})
    check_tokenizer(name);
}

}  // namespace
}  // namespace mlxrt::tokenizer
