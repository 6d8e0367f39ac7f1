// tokenizer.json's vocabulary and merges read while parsing: the same tokenizer and the same
// errors as through the JSON document, for every shape those fields come in.
#include <gtest/gtest.h>

#include <string>

#include "mlxrt/tokenizer/tokenizer.h"
#include "mlxrt/tokenizer/tokenizer_json_reader.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::tokenizer {
namespace {

std::string with_model(const std::string& model) {
  return R"({"added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
             "decoder": {"type": "ByteLevel"}, "model": )" + model + "}";
}

const std::string kVocab = R"({"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4})";

std::string error_of(const std::string& text) {
  try {
    Tokenizer::from_json_text(text, "tok.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(TokenizerJsonReader, TablesLeaveTheDocumentAndFillTheModel) {
  auto parsed = detail::read_tokenizer_json(
      with_model(R"({"type": "BPE", "vocab": )" + kVocab + R"(, "merges": ["a b", ["Ġ", "ab"]]})"), "tok.json");
  ASSERT_TRUE(parsed.tables.vocab && parsed.tables.merges);
  EXPECT_EQ(parsed.tables.vocab->size(), 5u);
  EXPECT_EQ(parsed.tables.vocab->find("Ġab"), 4);
  ASSERT_EQ(parsed.tables.merges->size(), 2u);
  EXPECT_EQ((*parsed.tables.merges)[1], (std::pair<std::string, std::string>{"Ġ", "ab"}));
  EXPECT_TRUE(parsed.doc["model"]["vocab"].empty());
  EXPECT_TRUE(parsed.doc["model"]["merges"].empty());
  EXPECT_EQ(parsed.doc["model"]["type"], "BPE");
  EXPECT_EQ(parsed.doc["decoder"]["type"], "ByteLevel");
}

TEST(TokenizerJsonReader, StringAndPairMergesEncodeAlike) {
  auto strings = Tokenizer::from_json_text(with_model(R"({"type": "BPE", "vocab": )" + kVocab +
                                                      R"(, "merges": ["a b", "Ġ ab"]})"));
  auto pairs = Tokenizer::from_json_text(with_model(R"({"type": "BPE", "vocab": )" + kVocab +
                                                    R"(, "merges": [["a", "b"], ["Ġ", "ab"]]})"));
  EXPECT_EQ(strings.encode("ab ab", false), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(pairs.encode("ab ab", false), (std::vector<int32_t>{2, 4}));
}

TEST(TokenizerJsonReader, VocabularyFieldsElsewhereStayInTheDocument) {
  auto parsed = detail::read_tokenizer_json(
      R"({"vocab": {"x": 1}, "normalizer": {"model": {"vocab": {"y": 2}}},
          "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}})",
      "tok.json");
  EXPECT_EQ(parsed.doc["vocab"]["x"], 1);
  EXPECT_EQ(parsed.doc["normalizer"]["model"]["vocab"]["y"], 2);
  ASSERT_TRUE(parsed.tables.vocab);
  EXPECT_EQ(parsed.tables.vocab->size(), 1u);
  EXPECT_FALSE(parsed.tables.merges);
}

TEST(TokenizerJsonReader, ALaterModelReplacesAnEarlierOne) {
  auto t = Tokenizer::from_json_text(
      R"({"model": {"type": "WordLevel", "vocab": {"x": 0, "y": 1}, "unk_token": "x"},
          "pre_tokenizer": {"type": "WhitespaceSplit"},
          "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}, "unk_token": "a"}})");
  EXPECT_EQ(t.token_to_id("b"), 1);
  EXPECT_EQ(t.token_to_id("y"), std::nullopt);
}

TEST(TokenizerJsonReader, BadIdsNameTheEntry) {
  for (const char* bad : {"-1", "1.5", "\"3\"", "[1]", "{\"id\": 1}", "null", "4294967296"}) {
    std::string msg = error_of(with_model(R"({"type": "BPE", "vocab": {"a": 0, "b": )" + std::string(bad) +
                                          R"(}, "merges": []})"));
    EXPECT_NE(msg.find("tok.json: model.vocab['b']: must be a non-negative integer id"), std::string::npos)
        << bad << ": " << msg;
  }
}

TEST(TokenizerJsonReader, BadMergesNameTheirIndex) {
  std::string msg = error_of(with_model(R"({"type": "BPE", "vocab": )" + kVocab +
                                        R"(, "merges": ["a b", "a  b"]})"));
  EXPECT_NE(msg.find("model.merges[1]: expected two tokens separated by one space, got 'a  b'"), std::string::npos)
      << msg;
  for (const char* bad : {"3", "[\"a\"]", "[\"a\", 2]", "{\"a\": \"b\"}", "[[\"a\"], \"b\"]"}) {
    msg = error_of(with_model(R"({"type": "BPE", "vocab": )" + kVocab + R"(, "merges": ["a b", )" + bad + "]}"));
    EXPECT_NE(msg.find("model.merges[1]: expected \"a b\" or [\"a\", \"b\"]"), std::string::npos) << bad << ": " << msg;
  }
}

TEST(TokenizerJsonReader, FieldsOfTheWrongShapeAreJudgedByTheModel) {
  std::string msg = error_of(with_model(R"({"type": "BPE", "vocab": [["a", 0]], "merges": []})"));
  EXPECT_NE(msg.find("model.vocab: must be an object"), std::string::npos) << msg;
  msg = error_of(with_model(R"({"type": "BPE", "vocab": )" + kVocab + R"(, "merges": {"a": "b"}})"));
  EXPECT_NE(msg.find("model.merges: must be a list"), std::string::npos) << msg;
}

TEST(TokenizerJsonReader, MalformedJsonIsStillReported) {
  std::string msg = error_of(with_model(R"({"type": "BPE", "vocab": {"a": 0, "b": )"));
  EXPECT_NE(msg.find("tok.json: malformed JSON"), std::string::npos) << msg;
}

}  // namespace
}  // namespace mlxrt::tokenizer
