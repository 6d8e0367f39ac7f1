#pragma once
/** Turns a job's token events into OpenAI responses, as mlx_lm.server's handle_completion does:
 * the text state machine splits the text into normal / reasoning / tool-call parts and strips
 * control sequences and stop words; streaming emits a chunk whenever there is something to show
 * outside a tool call; the end gives the final chunk (and usage) or the whole response. */
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/server/job.h"
#include "mlxrt/server/responses.h"
#include "mlxrt/server/text_state_machine.h"
#include "mlxrt/server/tool_calls.h"

namespace mlxrt::server {

class CompletionAssembler {
 public:
  CompletionAssembler(ResponseMeta meta, const CompletionRequest& request, TextStateMachine machine,
                      const std::string& initial_state, const ToolParser* parser);

  /** Consumes one token; returns the chunk to send now (streaming only), if any. */
  std::optional<nlohmann::ordered_json> add(const TokenEvent& event);

  /** The final chunks when streaming (the last content chunk, then usage when asked for). */
  std::vector<nlohmann::ordered_json> finish_stream(const Usage& usage);
  /** The whole response when not streaming. */
  nlohmann::ordered_json finish(const Usage& usage);

  size_t completion_tokens() const { return tokens_.size(); }

 private:
  void close_tool_call();

  ResponseMeta meta_;
  bool want_logprobs_;
  int top_logprobs_;
  bool include_usage_;
  TextStateMachine machine_;
  TextStateMachine::State state_;
  ToolCallFormatter formatter_;

  std::optional<std::string> prev_state_;
  std::string finish_reason_ = "stop";
  std::string reasoning_, tool_text_, text_;
  bool made_tool_call_ = false;
  std::vector<std::string> tool_calls_;
  std::vector<int32_t> tokens_;
  std::vector<float> token_logprobs_;
  std::vector<std::vector<TopToken>> top_tokens_;
};

}  // namespace mlxrt::server
