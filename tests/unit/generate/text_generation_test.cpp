// TextGenerator (stream_generate) on a fake model whose next token is (last + 1) % 5, with a small
// word-level tokenizer: the chunks, finish reasons and counts stream_generate gives.
#include <gtest/gtest.h>

#include <mlx/ops.h>

#include "mlxrt/generate/logits_processors.h"
#include "mlxrt/generate/text_generation.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {
namespace {

constexpr int kVocab = 5;
constexpr int32_t kEos = 4;

class CountingModel : public model::CausalLM {
 public:
  mx::array operator()(const mx::array& inputs, model::CacheList*) override {
    auto next = mx::remainder(mx::add(inputs, mx::array(1)), mx::array(kVocab));
    auto hit = mx::equal(mx::expand_dims(next, -1), mx::arange(kVocab));
    return mx::multiply(mx::astype(hit, mx::float32), mx::array(10.0f));
  }
  model::CacheList make_cache() const override { return {}; }
  int vocab_size() const override { return kVocab; }
};

tokenizer::Tokenizer word_tokenizer() {
  return tokenizer::Tokenizer::from_json_text(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
    "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}, "unk_token": "a"}})");
}

std::vector<GenerationResponse> run(TextGenerationOptions options, std::vector<int32_t> prompt = {0}) {
  CountingModel model;
  options.eos_token_ids = std::vector<int32_t>{kEos};
  TextGenerator gen(model, word_tokenizer(), std::move(prompt), std::move(options));
  std::vector<GenerationResponse> out;
  while (auto r = gen.next()) out.push_back(std::move(*r));
  return out;
}

TEST(TextGenerator, StopsAtEosWithoutItsText) {
  TextGenerationOptions o;
  o.max_tokens = 10;
  auto chunks = run(o);
  ASSERT_EQ(chunks.size(), 4u);  // b c d, then the eos chunk
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(chunks[i].token, i + 1);
    EXPECT_FALSE(chunks[i].finish_reason.has_value());
    EXPECT_EQ(chunks[i].generation_tokens, i + 1);
  }
  EXPECT_EQ(chunks[3].token, kEos);
  EXPECT_EQ(chunks[3].finish_reason, FinishReason::stop);
  EXPECT_EQ(chunks[3].generation_tokens, 4);
  EXPECT_EQ(chunks[3].prompt_tokens, 1);
  std::string text;
  for (const auto& c : chunks) text += c.text;
  EXPECT_EQ(text, word_tokenizer().decode(std::vector<int32_t>{1, 2, 3}));
}

TEST(TextGenerator, LengthEndsOnTheLastToken) {
  TextGenerationOptions o;
  o.max_tokens = 2;
  auto chunks = run(o);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_FALSE(chunks[0].finish_reason.has_value());
  EXPECT_EQ(chunks[1].token, 2);
  EXPECT_EQ(chunks[1].finish_reason, FinishReason::length);
  EXPECT_EQ(chunks[1].generation_tokens, 2);
}

TEST(TextGenerator, StopWordEndsWithStop) {
  TextGenerationOptions o;
  o.max_tokens = 10;
  o.stop_words = {"c"};
  auto chunks = run(o);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1].token, 2);
  EXPECT_EQ(chunks[1].finish_reason, FinishReason::stop);
}

TEST(TextGenerator, ProcessorsAndSamplerAreUsed) {
  TextGenerationOptions o;
  o.max_tokens = 3;
  // A bias strong enough to force token 3 every step.
  LogitsProcessorParams p;
  p.logit_bias = {{3, 100.0}};
  o.logits_processors = make_logits_processors(p, kVocab);
  auto chunks = run(o);
  ASSERT_EQ(chunks.size(), 3u);
  for (const auto& c : chunks) EXPECT_EQ(c.token, 3);
}

TEST(TextGenerator, ZeroMaxTokensIsAnError) {
  TextGenerationOptions o;
  o.max_tokens = 0;
  EXPECT_THROW(run(o), UsageError);
}

TEST(TextGenerator, EncodePromptAddsSpecialTokensUnlessBosLeads) {
  auto tok = word_tokenizer();
  EXPECT_EQ(encode_prompt(tok, "a b"), (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace mlxrt::generate
