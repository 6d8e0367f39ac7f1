#include "mlxrt/structured/grammar_constraint.h"

#include <algorithm>
#include <limits>
#include <regex>
#include <set>
#include <thread>

#include <mlx/ops.h>
#include <mlx/transforms.h>
#include <nlohmann/json.hpp>
#include <xgrammar/xgrammar.h>

#include "mlxrt/generate/json_schema_check.h"
#include "mlxrt/tokenizer/token_bytes.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::structured {

namespace {

using json = nlohmann::ordered_json;  // key order is the order properties are generated in

// Calls f on every subschema of s (s included), where check_schema looks.
template <class F>
void for_each_subschema(json& s, const F& f) {
  if (!s.is_object()) return;
  f(s);
  for (const char* k : {"properties", "patternProperties", "$defs", "definitions"})
    if (auto it = s.find(k); it != s.end() && it->is_object())
      for (auto& [name, sub] : it->items()) for_each_subschema(sub, f);
  for (const char* k : {"anyOf", "oneOf", "allOf", "prefixItems", "items", "additionalProperties", "propertyNames",
                        "unevaluatedProperties", "unevaluatedItems", "additionalItems"}) {
    if (auto it = s.find(k); it != s.end()) {
      if (it->is_array())
        for (auto& sub : *it) for_each_subschema(sub, f);
      else
        for_each_subschema(*it, f);
    }
  }
}

// xgrammar 0.2.8's pattern for "ipv4" admits leading zeros ("01.2.3.4"), which the format (RFC
// 2673's dotted-quad) does not: such strings are replaced by the format's own pattern.
void replace_loose_formats(json& schema) {
  static const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  for_each_subschema(schema, [](json& s) {
    if (auto f = s.find("format"); f != s.end() && *f == "ipv4") {
      s.erase("format");
      s["pattern"] = "^(" + octet + "\\.){3}" + octet + "$";
    }
  });
}

// xgrammar's messages start with a log prefix "[hh:mm:ss] file.cc:line: ": keep what follows.
std::string engine_message(const std::exception& e) {
  static const std::regex prefix(R"(^\[[0-9:]+\] [^ ]+:[0-9]+: )");
  return std::regex_replace(std::string(e.what()), prefix, "");
}

}  // namespace


struct GrammarEngine::Impl {
  int vocab_size;
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;

  Impl(std::vector<std::string> vocab, int n, std::vector<int32_t> stops)
      : vocab_size(n),
        info(vocab, xgrammar::VocabType::RAW, n, stops),
        // Compiling a grammar precomputes its token masks, spread over a few threads.
        compiler(info, static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)),
                 /*cache_enabled=*/true) {}
};

struct TokenConstraint::State {
  std::shared_ptr<GrammarEngine::Impl> engine;
  xgrammar::GrammarMatcher matcher;
  std::vector<int32_t> bitmask;
  std::vector<uint8_t> allowed;  // the bitmask expanded to one byte per logit
  int64_t shape[1];
  DLTensor tensor{};

  State(std::shared_ptr<GrammarEngine::Impl> e, const xgrammar::CompiledGrammar& g)
      : engine(std::move(e)), matcher(g), bitmask(xgrammar::GetBitmaskSize(engine->vocab_size)) {
    shape[0] = static_cast<int64_t>(bitmask.size());
    tensor.data = bitmask.data();
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = 1;
    tensor.dtype = xgrammar::GetBitmaskDLType();
    tensor.shape = shape;
  }
};

GrammarEngine::GrammarEngine(const tokenizer::Tokenizer& tokenizer, int vocab_size, std::vector<int32_t> stop_tokens) {
  if (vocab_size <= 0) throw UsageError("the model's vocabulary is empty");
  const int n = std::min<int>(vocab_size, static_cast<int>(tokenizer.id_limit()));
  std::vector<std::string> vocab(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) vocab[static_cast<size_t>(id)] = tokenizer::token_bytes(tokenizer, id);
  std::vector<int32_t> stops;
  for (int32_t id : stop_tokens)
    if (id >= 0 && id < vocab_size) stops.push_back(id);
  impl_ = std::make_shared<Impl>(std::move(vocab), vocab_size, std::move(stops));
}

GrammarEngine::~GrammarEngine() = default;

int GrammarEngine::vocab_size() const { return impl_->vocab_size; }

namespace {

std::shared_ptr<TokenConstraint> constraint_for(const std::shared_ptr<GrammarEngine::Impl>& impl,
                                                const xgrammar::CompiledGrammar& grammar) {
  return std::make_shared<TokenConstraint>(std::make_shared<TokenConstraint::State>(impl, grammar));
}

}  // namespace

std::shared_ptr<TokenConstraint> GrammarEngine::json_schema(const std::string& schema_text, bool strict,
                                                            const std::string& what) {
  json s = json::parse(schema_text, nullptr, false);
  if (s.is_discarded()) throw UsageError(what + ": not valid JSON");
  if (!s.is_object() && !s.is_boolean()) throw UsageError(what + ": a JSON schema is an object (or true/false)");
  if (auto problem = generate::unsupported_schema_keyword(s); !problem.empty())
    throw UsageError(what + ": " + problem + " is not supported by constrained decoding");
  replace_loose_formats(s);
  try {
    return constraint_for(impl_, impl_->compiler.CompileJSONSchema(s.dump(), /*any_whitespace=*/false,
                                                                   std::nullopt, std::nullopt, strict));
  } catch (const std::exception& e) {
    throw UsageError(what + ": " + engine_message(e));
  }
}

std::shared_ptr<TokenConstraint> GrammarEngine::json_object() {
  return constraint_for(impl_, impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                                                 std::nullopt, std::nullopt, /*strict_mode=*/false));
}

std::shared_ptr<TokenConstraint> GrammarEngine::gbnf(const std::string& grammar_text, const std::string& what) {
  try {
    return constraint_for(impl_, impl_->compiler.CompileGrammar(grammar_text, "root"));
  } catch (const std::exception& e) {
    throw UsageError(what + ": " + engine_message(e));
  }
}

namespace {

// `text` as a string literal of xgrammar's EBNF.
std::string ebnf_literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out + "\"";
}

}  // namespace

std::shared_ptr<TokenConstraint> GrammarEngine::tool_call(const std::string& start, const std::string& end,
                                                          const json& tools, const std::string& what) {
  json calls = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string where = what + "[" + std::to_string(i) + "]";
    const json* fn = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      throw UsageError(where + ": a function tool needs function.name to be called by tool_choice");
    json params = fn->contains("parameters") ? (*fn)["parameters"] : json{{"type", "object"}};
    if (!params.is_object()) throw UsageError(where + ".function.parameters: a JSON schema is an object");
    if (auto problem = generate::unsupported_schema_keyword(params); !problem.empty())
      throw UsageError(where + ".function.parameters: " + problem + " is not supported by constrained decoding");
    replace_loose_formats(params);
    calls.push_back(json{{"type", "object"},
                         {"properties", json{{"name", json{{"const", (*fn)["name"]}}}, {"arguments", params}}},
                         {"required", json::array({"name", "arguments"})},
                         {"additionalProperties", false}});
  }
  if (calls.empty()) throw UsageError(what + ": tool_choice needs at least one tool");
  const json schema = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
  try {
    auto grammar = xgrammar::Grammar::Concat(
        {xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(start + "\n")),
         xgrammar::Grammar::FromJSONSchema(schema.dump(), /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                           /*strict_mode=*/true),
         xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal("\n" + end))});
    return constraint_for(impl_, impl_->compiler.CompileGrammar(grammar));
  } catch (const std::exception& e) {
    throw UsageError(what + ": " + engine_message(e));
  }
}

generate::LogitsProcessor constraint_processor(std::shared_ptr<TokenConstraint> constraint) {
  auto prompt_length = std::make_shared<int>(-1);
  return [constraint = std::move(constraint), prompt_length](const mx::array& tokens, const mx::array& logits) {
    mx::async_eval(logits);
    const int n = tokens.shape(0);
    if (*prompt_length < 0) {
      *prompt_length = n;
    } else {
      auto generated = mx::astype(mx::slice(tokens, {std::min(*prompt_length, n)}, {n}), mx::int32);
      mx::eval(generated);
      const int32_t* p = generated.data<int32_t>();
      constraint->follow(std::vector<int32_t>(p, p + generated.size()));
    }
    return constraint->mask(logits);
  };
}

TokenConstraint::TokenConstraint(std::shared_ptr<State> state) : state_(std::move(state)) {}
TokenConstraint::~TokenConstraint() = default;

bool TokenConstraint::ended() const { return state_->matcher.IsTerminated(); }

void TokenConstraint::accept(int32_t token) {
  if (state_->matcher.IsTerminated()) return;
  if (!state_->matcher.AcceptToken(token))
    throw std::runtime_error("constrained decoding: the sampler chose token " + std::to_string(token) +
                             ", which the grammar does not allow");
}

void TokenConstraint::follow(const std::vector<int32_t>& generated) {
  size_t common = 0;
  while (common < history_.size() && common < generated.size() && history_[common] == generated[common]) ++common;
  int taken = 0;
  for (size_t i = common; i < history_.size(); ++i) taken += taken_[i] ? 1 : 0;
  if (taken > 0) state_->matcher.Rollback(taken);
  history_.resize(common);
  taken_.resize(common);
  for (size_t i = common; i < generated.size(); ++i) {
    const bool open = !state_->matcher.IsTerminated();
    accept(generated[i]);
    history_.push_back(generated[i]);
    taken_.push_back(open);
  }
}

mx::array TokenConstraint::mask(const mx::array& logits) {
  auto& s = *state_;
  if (s.matcher.IsTerminated()) return logits;
  s.matcher.FillNextTokenBitmask(&s.tensor);
  // Expanded here (one pass over the vocabulary) so the device does a single select.
  const int width = logits.shape(-1);
  s.allowed.assign(static_cast<size_t>(width), false);
  const int n = std::min(width, s.engine->vocab_size);
  for (int id = 0; id < n; ++id)
    s.allowed[static_cast<size_t>(id)] = (static_cast<uint32_t>(s.bitmask[static_cast<size_t>(id) >> 5]) >> (id & 31)) & 1u;
  mx::array allowed(reinterpret_cast<const bool*>(s.allowed.data()), {width}, mx::bool_);
  return mx::where(allowed, logits, mx::array(-std::numeric_limits<float>::infinity(), logits.dtype()));
}

}  // namespace mlxrt::structured
