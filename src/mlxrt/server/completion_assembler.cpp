// Port of the token loop of APIHandler.handle_completion (mlx_lm/server.py @ mlx-lm 0.32.2).
#include "mlxrt/server/completion_assembler.h"

namespace mlxrt::server {

CompletionAssembler::CompletionAssembler(ResponseMeta meta, const CompletionRequest& request,
                                         TextStateMachine machine, const std::string& initial_state,
                                         const ToolParser* parser)
    : meta_(std::move(meta)),
      want_logprobs_(request.logprobs),
      top_logprobs_(request.top_logprobs),
      include_usage_(request.include_usage),
      machine_(std::move(machine)),
      state_(machine_.make_state(initial_state)),
      formatter_(parser, request.tools, request.stream),
      prev_state_(initial_state) {}

std::optional<nlohmann::ordered_json> CompletionAssembler::add(const TokenEvent& gen) {
  std::vector<TextStateMachine::Segment> segments;
  if (gen.finish_reason == "stop") {
    segments.emplace_back(machine_.discard(state_), "");
  } else if (gen.finish_reason == "length") {
    segments = machine_.split(state_, gen.text);
    segments.push_back(machine_.flush(state_));
  } else {
    segments = machine_.split(state_, gen.text);
  }
  std::optional<std::string> current;
  for (auto& [name, clean] : segments) {
    current = name;
    if (name == "reasoning") {
      reasoning_ += clean;
    } else if (name == "tool") {
      tool_text_ += clean;
    } else if (name == "normal") {
      if (prev_state_ == "tool") {
        tool_calls_.push_back(std::move(tool_text_));
        tool_text_.clear();
        made_tool_call_ = true;
      }
      text_ += clean;
    }
    prev_state_ = name;
  }
  tokens_.push_back(gen.token);
  if (want_logprobs_) token_logprobs_.push_back(gen.logprob);
  if (top_logprobs_ > 0) top_tokens_.push_back(gen.top);
  if (gen.finish_reason) finish_reason_ = *gen.finish_reason;

  if (meta_.stream && current != "tool" && (!text_.empty() || !tool_calls_.empty() || !reasoning_.empty())) {
    ChoiceContent c;
    c.text = std::move(text_);
    c.tool_calls = formatter_(tool_calls_);
    c.reasoning = std::move(reasoning_);
    text_.clear();
    reasoning_.clear();
    tool_calls_.clear();
    return build_response(meta_, c);
  }
  return std::nullopt;
}

void CompletionAssembler::close_tool_call() {
  if (prev_state_ == "tool" && !tool_text_.empty()) {
    tool_calls_.push_back(std::move(tool_text_));
    tool_text_.clear();
    made_tool_call_ = true;
  }
  if (finish_reason_ == "stop" && made_tool_call_) finish_reason_ = "tool_calls";
}

std::vector<nlohmann::ordered_json> CompletionAssembler::finish_stream(const Usage& usage) {
  close_tool_call();
  ChoiceContent c;
  c.text = std::move(text_);
  c.finish_reason = finish_reason_;
  c.tool_calls = formatter_(tool_calls_);
  c.reasoning = std::move(reasoning_);
  std::vector<nlohmann::ordered_json> out{build_response(meta_, c)};
  if (include_usage_) out.push_back(build_usage_chunk(meta_, usage));
  return out;
}

nlohmann::ordered_json CompletionAssembler::finish(const Usage& usage) {
  close_tool_call();
  ChoiceContent c;
  c.text = std::move(text_);
  c.finish_reason = finish_reason_;
  c.usage = usage;
  c.token_logprobs = token_logprobs_;
  c.top_tokens = top_tokens_;
  c.tokens = tokens_;
  c.reasoning = std::move(reasoning_);
  c.tool_calls = formatter_(tool_calls_);
  return build_response(meta_, c);
}

}  // namespace mlxrt::server
