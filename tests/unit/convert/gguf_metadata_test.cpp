// The architecture table, config.json and the tokenizer files built from GGUF metadata.
#include <gtest/gtest.h>

#include "gguf_builder.h"
#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_tokenizer.h"
#include "mlxrt/util/errors.h"

using namespace mlxrt::convert;
using mlxrt::convert::testing::GgufBuilder;

namespace {

GgufFile parse(const GgufBuilder& b) {
  static std::string keep;  // GgufFile copies what it needs; the bytes only live for the parse
  keep = b.build();
  return parse_gguf(keep, keep.size(), "m.gguf");
}

GgufBuilder llama(const std::string& pre = "smollm") {
  GgufBuilder b;
  b.str("general.architecture", "llama").u32("llama.embedding_length", 64).u32("llama.block_count", 1);
  b.u32("llama.feed_forward_length", 128).u32("llama.attention.head_count", 4);
  b.u32("llama.attention.head_count_kv", 2).u32("llama.context_length", 512);
  b.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).f32("llama.rope.freq_base", 100000.0f);
  b.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", pre);
  b.strings("tokenizer.ggml.tokens", {"<|endoftext|>", "a", "b", "ab", "<x>"});
  b.i32s("tokenizer.ggml.token_type", {3, 1, 1, 1, 4});
  b.strings("tokenizer.ggml.merges", {"a b"});
  b.u32("tokenizer.ggml.bos_token_id", 0).u32("tokenizer.ggml.eos_token_id", 0);
  b.u32("tokenizer.ggml.eot_token_id", 4);
  b.str("tokenizer.chat_template", "{{ messages }}");
  b.tensor("token_embd.weight", {64, 5}, 8, std::string(5 * 2 * 34, '\0'));
  b.tensor("blk.0.attn_q.weight", {64, 64}, 2, std::string(64 * 2 * 18, '\0'));
  b.tensor("blk.0.attn_k.weight", {64, 32}, 2, std::string(32 * 2 * 18, '\0'));
  return b;
}

}  // namespace

TEST(GgufArch, ConfigFromMetadata) {
  auto f = parse(llama());
  const auto& arch = find_architecture(f);
  auto c = build_model_config(arch, f, nullptr);
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["hidden_size"], 64);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["head_dim"], 16);
  EXPECT_EQ(c["rms_norm_eps"].get<double>(), 1e-5);
  EXPECT_EQ(c["rope_theta"].get<double>(), 100000.0);
  EXPECT_EQ(c["vocab_size"], 5);
  EXPECT_EQ(c["max_position_embeddings"], 512);
  EXPECT_TRUE(c["tie_word_embeddings"].get<bool>());
}

TEST(GgufArch, TensorNamesAndQkHeads) {
  auto f = parse(llama());
  const auto& arch = find_architecture(f);
  auto q = plan_tensor(arch, f, *f.find_tensor("blk.0.attn_q.weight"));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->hf_name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q->qk_heads, 4u);
  auto k = plan_tensor(arch, f, *f.find_tensor("blk.0.attn_k.weight"));
  EXPECT_EQ(k->qk_heads, 2u);
  EXPECT_EQ(plan_tensor(arch, f, *f.find_tensor("token_embd.weight"))->hf_name, "model.embed_tokens.weight");
  GgufTensorInfo odd = *f.find_tensor("token_embd.weight");
  odd.name = "blk.0.mystery.weight";
  try {
    plan_tensor(arch, f, odd);
    FAIL() << "expected UnsupportedError";
  } catch (const mlxrt::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.mystery.weight"), std::string::npos);
  }
}

TEST(GgufArch, UnknownArchitectureListsTheSupportedOnes) {
  GgufBuilder b;
  b.str("general.architecture", "mamba");
  auto f = parse(b);
  try {
    find_architecture(f);
    FAIL() << "expected UnsupportedError";
  } catch (const mlxrt::UnsupportedError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'mamba'"), std::string::npos);
    EXPECT_NE(m.find("llama, qwen2, qwen3"), std::string::npos);
  }
}

TEST(GgufArch, ShortestFloat32) {
  EXPECT_EQ(shortest_float32(static_cast<double>(1e-5f)), 1e-5);
  EXPECT_EQ(shortest_float32(static_cast<double>(1e-6f)), 1e-6);
  EXPECT_EQ(shortest_float32(100000.0), 100000.0);
  EXPECT_EQ(static_cast<float>(shortest_float32(static_cast<double>(0.1f))), 0.1f);
}

TEST(GgufTokenizer, ByteLevelBpeWithTheFilesPreTokenizer) {
  auto files = build_tokenizer_files(parse(llama()));
  const auto& t = files.tokenizer;
  EXPECT_EQ(t["model"]["type"], "BPE");
  EXPECT_EQ(t["model"]["vocab"]["ab"], 3);
  EXPECT_EQ(t["model"]["merges"][0], (nlohmann::json{"a", "b"}));
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
  ASSERT_EQ(t["added_tokens"].size(), 2u);
  EXPECT_TRUE(t["added_tokens"][0]["special"].get<bool>());   // control
  EXPECT_FALSE(t["added_tokens"][1]["special"].get<bool>());  // user-defined
  EXPECT_EQ(files.tokenizer_config["chat_template"], "{{ messages }}");
  EXPECT_EQ(files.tokenizer_config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(files.generation_config["eos_token_id"], (nlohmann::ordered_json{0, 4}));  // eos and eot
}

TEST(GgufTokenizer, Llama3PreTokenizerIgnoresMerges) {
  auto t = build_tokenizer_files(parse(llama("llama-bpe"))).tokenizer;
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  EXPECT_TRUE(t["model"]["ignore_merges"].get<bool>());
}

TEST(GgufTokenizer, UnknownPreTokenizerIsRefusedByName) {
  try {
    build_tokenizer_files(parse(llama("wizard")));
    FAIL() << "expected UnsupportedError";
  } catch (const mlxrt::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("'wizard'"), std::string::npos);
  }
}

TEST(GgufTokenizer, SentencePieceMergesComeFromScores) {
  GgufBuilder b;
  b.str("general.architecture", "llama").str("tokenizer.ggml.model", "llama");
  b.strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "a", "b", "c", "ab", "abc", "bc"});
  b.f32s("tokenizer.ggml.scores", {0, 0, -1, -2, -3, -0.5f, -0.1f, -0.7f});
  b.i32s("tokenizer.ggml.token_type", {2, 3, 1, 1, 1, 1, 1, 1});
  b.u32("tokenizer.ggml.bos_token_id", 1);
  auto files = build_tokenizer_files(parse(b));
  const auto& m = files.tokenizer["model"];
  EXPECT_TRUE(m["byte_fallback"].get<bool>());
  EXPECT_EQ(m["unk_token"], "<unk>");
  // abc (-0.1) first: "ab"+"c" before "a"+"bc" (lower ids first); then ab (-0.5), bc (-0.7).
  auto pair = [](const char* l, const char* r) { return nlohmann::json::array({l, r}); };
  nlohmann::json want = nlohmann::json::array({pair("ab", "c"), pair("a", "bc"), pair("a", "b"), pair("b", "c")});
  EXPECT_EQ(m["merges"], want);
  EXPECT_TRUE(files.tokenizer_config["add_bos_token"].get<bool>());  // SentencePiece default
  EXPECT_EQ(files.tokenizer["normalizer"]["normalizers"][0]["type"], "Prepend");
}
