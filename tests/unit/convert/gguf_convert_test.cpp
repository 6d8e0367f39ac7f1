// The whole conversion on a small GGUF written here: files, names, shapes, exact dequantised
// values (via MLX's own dequantize), Q/K un-permutation, and nothing left behind on failure.
#include "mlxrt/convert/gguf_convert.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include <mlx/mlx.h>

#include "gguf_builder.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace fs = std::filesystem;
namespace mx = mlx::core;
using mlxrt::convert::GgufConvertOptions;
using mlxrt::convert::convert_gguf;
using mlxrt::convert::testing::GgufBuilder;

namespace {

constexpr int kHidden = 32, kHeads = 2, kVocab = 4;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("mlxrt-convert-test-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string half(float v) {  // values used here are exact in fp16
  uint32_t b;
  std::memcpy(&b, &v, 4);
  uint16_t h = static_cast<uint16_t>(((b >> 16) & 0x8000) | ((((b >> 23) & 0xff) - 112) << 10) | ((b & 0x7fffff) >> 13));
  return GgufBuilder::pod(h);
}

/** Q8_0 rows where row r, element k holds the quant (r * 7 + k) % 200 - 100 and d = 2^-(r % 4). */
std::string q8_rows(int rows, int cols) {
  std::string out;
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < cols / 32; ++b) {
      out += half(std::ldexp(1.0f, -(r % 4)));
      for (int j = 0; j < 32; ++j) out += static_cast<char>(static_cast<int8_t>((r * 7 + b * 32 + j) % 200 - 100));
    }
  return out;
}

float q8_value(int r, int k) { return std::ldexp(1.0f, -(r % 4)) * static_cast<float>((r * 7 + k) % 200 - 100); }

GgufBuilder tiny_llama(float rms_eps = 1e-6f) {
  GgufBuilder b;
  b.str("general.architecture", "llama").u32("llama.embedding_length", kHidden).u32("llama.block_count", 1);
  b.u32("llama.feed_forward_length", 64).u32("llama.attention.head_count", kHeads);
  b.f32("llama.attention.layer_norm_rms_epsilon", rms_eps);
  b.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "gpt-2");
  b.strings("tokenizer.ggml.tokens", {"<s>", "a", "b", "ab"}).strings("tokenizer.ggml.merges", {"a b"});
  b.i32s("tokenizer.ggml.token_type", {3, 1, 1, 1});
  b.tensor("token_embd.weight", {kHidden, kVocab}, 8, q8_rows(kVocab, kHidden));
  b.tensor("output_norm.weight", {kHidden}, 0, std::string(kHidden * 4, '\0'));
  b.tensor("blk.0.attn_q.weight", {kHidden, kHidden}, 8, q8_rows(kHidden, kHidden));
  return b;
}

fs::path write_file(const fs::path& dir, const std::string& bytes) {
  fs::path p = dir / "m.gguf";
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

mx::array dequantized(const mx::SafetensorsLoad& w, const std::string& module, int bits) {
  return mx::dequantize(w.first.at(module + ".weight"), w.first.at(module + ".scales"),
                        w.first.at(module + ".biases"), 32, bits);
}

}  // namespace

TEST(GgufConvert, TinyLlamaConvertsExactly) {
  TempDir tmp;
  GgufConvertOptions o{write_file(tmp.path(), tiny_llama().build()), tmp.path() / "out", false};
  auto summary = convert_gguf(o);
  EXPECT_EQ(summary.model_type, "llama");
  EXPECT_EQ(summary.shards, 1);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"})
    EXPECT_TRUE(fs::exists(o.out / f)) << f;
  auto config = mlxrt::read_json_file(o.out / "config.json");
  EXPECT_EQ(config["quantization"]["bits"], 8);
  EXPECT_EQ(config["num_key_value_heads"], kHeads);

  auto w = mx::load_safetensors((o.out / "model.safetensors").string());
  EXPECT_EQ(w.second.at("format"), "mlx");
  EXPECT_EQ(w.first.at("model.norm.weight").dtype(), mx::float32);
  auto embed = dequantized(w, "model.embed_tokens", 8);
  auto q = dequantized(w, "model.layers.0.self_attn.q_proj", 8);
  mx::eval(embed, q);
  const float* e = embed.data<float>();
  for (int r = 0; r < kVocab; ++r)
    for (int k = 0; k < kHidden; ++k) ASSERT_EQ(e[r * kHidden + k], q8_value(r, k)) << r << "," << k;
  // Q rows come back in HF order: HF row h*hd + a*half + j was GGUF row h*hd + 2j + a.
  const float* qd = q.data<float>();
  const int hd = kHidden / kHeads, half_dim = hd / 2;
  for (int h = 0; h < kHeads; ++h)
    for (int a = 0; a < 2; ++a)
      for (int j = 0; j < half_dim; ++j)
        for (int k = 0; k < kHidden; ++k)
          ASSERT_EQ(qd[(h * hd + a * half_dim + j) * kHidden + k], q8_value(h * hd + 2 * j + a, k));
}

TEST(GgufConvert, FailureLeavesNothingBehind) {
  TempDir tmp;
  auto bytes = tiny_llama().tensor("blk.0.ffn_up.weight", {256, 1}, 15, std::string(292, '\0')).build();  // Q8_K
  GgufConvertOptions o{write_file(tmp.path(), bytes), tmp.path() / "out", false};
  try {
    convert_gguf(o);
    FAIL() << "expected UnsupportedError";
  } catch (const mlxrt::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.ffn_up.weight' has type Q8_K"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);  // only m.gguf
}

TEST(GgufConvert, ExistingOutputIsRefused) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "out");
  std::ofstream(tmp.path() / "out" / "keep") << "x";
  GgufConvertOptions o{write_file(tmp.path(), tiny_llama().build()), tmp.path() / "out", false};
  EXPECT_THROW(convert_gguf(o), mlxrt::UsageError);
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "keep"));
}

TEST(GgufConvert, ShardsWhenAskedTo) {
  TempDir tmp;
  GgufConvertOptions o{write_file(tmp.path(), tiny_llama().build()), tmp.path() / "out", false};
  o.max_shard_bytes = 1500;
  auto summary = convert_gguf(o);
  EXPECT_GT(summary.shards, 1);
  auto index = mlxrt::read_json_file(o.out / "model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"].get<std::string>().rfind("model-0000", 0), 0u);
  EXPECT_EQ(index["weight_map"].size(), summary.tensors);
}

namespace {

/** The id of a process that has exited (and been reaped): what a killed converter leaves behind. */
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

std::string convert_error(const std::string& gguf_bytes) {
  TempDir tmp;
  GgufConvertOptions o{write_file(tmp.path(), gguf_bytes), tmp.path() / "out", false};
  try {
    convert_gguf(o);
  } catch (const mlxrt::ConfigError& e) {
    EXPECT_FALSE(fs::exists(o.out));
    return e.what();
  }
  return "converted";
}

}  // namespace

// A killed run leaves ".NAME.partial-PID"; the next run into that directory removes the folders
// of processes that are gone (whatever their NAME) and keeps those of running ones.
TEST(GgufConvert, RemovesStalePartialsOfDeadProcesses) {
  TempDir tmp;
  const auto dead = std::to_string(dead_pid());
  const fs::path stale_same = tmp.path() / (".out.partial-" + dead);
  const fs::path stale_other = tmp.path() / (".older.partial-" + dead);
  const fs::path live = tmp.path() / (".busy.partial-" + std::to_string(::getppid()));
  const fs::path unrelated = tmp.path() / ".notes";
  for (const auto& d : {stale_same, stale_other, live, unrelated}) {
    fs::create_directories(d);
    std::ofstream(d / "model.safetensors") << "half";
  }
  GgufConvertOptions o{write_file(tmp.path(), tiny_llama().build()), tmp.path() / "out", false};
  convert_gguf(o);
  EXPECT_TRUE(fs::exists(o.out / "config.json"));
  EXPECT_FALSE(fs::exists(stale_same));
  EXPECT_FALSE(fs::exists(stale_other));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(unrelated));
  EXPECT_FALSE(fs::exists(tmp.path() / (".out.partial-" + std::to_string(::getpid()))));
}

// JSON has no inf/NaN: these used to be written as null (a config that no longer loads) or run.
TEST(GgufConvert, NonFiniteNormEpsilonIsRefusedNamingTheKey) {
  for (float eps : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -1.0f}) {
    auto what = convert_error(tiny_llama(eps).build());
    EXPECT_NE(what.find("'llama.attention.layer_norm_rms_epsilon'"), std::string::npos) << what;
    EXPECT_NE(what.find("is not a finite, non-negative number"), std::string::npos) << what;
  }
}

TEST(GgufConvert, NonFiniteRopeBaseIsRefusedNamingTheKey) {
  for (float base : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 0.0f}) {
    auto what = convert_error(tiny_llama().f32("llama.rope.freq_base", base).build());
    EXPECT_NE(what.find("'llama.rope.freq_base'"), std::string::npos) << what;
    EXPECT_NE(what.find("is not a finite, positive number"), std::string::npos) << what;
  }
}
