#pragma once
/** One assistant turn of a chat request, for the APIs other than OpenAI's chat completions (the
 * Anthropic Messages API, the OpenAI Responses API): they translate their request into the same
 * CompletionRequest, so the prompt is the chat template's rendering of the same conversation and
 * the job runs through the same scheduler and generation loop. The output is split the way the
 * chat completions path splits it (its CompletionAssembler, in streaming mode: reasoning, text,
 * tool calls, stop words removed) into API-neutral deltas, which a TurnRenderer writes in its
 * API's shape. */
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/server/completion_assembler.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/model_pool.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/options.h"
#include "mlxrt/server/request.h"
#include "mlxrt/server/scheduler.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace mlxrt::server {

struct TurnToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

/** What is new to show after a token: any of reasoning, text and finished tool calls. */
struct TurnDelta {
  std::string reasoning;
  std::string text;
  std::vector<TurnToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && text.empty() && tool_calls.empty(); }
};

/** Why the turn ended. */
enum class TurnEnd { end_turn, max_tokens, stop_sequence, tool_use };

/** The whole turn (the sum of its deltas) and its counts. */
struct TurnResult {
  std::string reasoning;
  std::string text;
  std::vector<TurnToolCall> tool_calls;
  TurnEnd end = TurnEnd::end_turn;
  std::optional<std::string> stop_sequence;  // the stop word that ended it (TurnEnd::stop_sequence)
  size_t prompt_tokens = 0;
  size_t cached_tokens = 0;
  size_t output_tokens = 0;
  size_t reasoning_tokens = 0;  // the reasoning text's length in tokens
};

class ChatTurn {
 public:
  ChatTurn(const CompletionRequest& request, const ModelSession& session, const std::string& initial_state);

  /** Consumes one token; returns what is new (often nothing while a tool call is being written). */
  TurnDelta add(const TokenEvent& event);
  /** The rest, when the job is done; result() is complete after this. */
  TurnDelta finish();
  TurnResult& result() { return result_; }

 private:
  TurnDelta take(const nlohmann::ordered_json& chunk);

  const ModelSession& session_;
  std::vector<std::string> stop_words_;
  CompletionAssembler assembler_;
  std::vector<int32_t> tokens_;
  std::optional<std::string> finish_reason_;
  TurnResult result_;
};

/** Writes a turn in one API's shape. Streaming calls begin, delta..., end (or error) in order. */
class TurnRenderer {
 public:
  virtual ~TurnRenderer() = default;
  /** The API's error body for a status and message (`param`: the request field at fault, or ""). */
  virtual nlohmann::ordered_json error_body(int status, const std::string& message, const std::string& param) const = 0;
  /** The whole response (not streaming). */
  virtual nlohmann::ordered_json whole(const TurnResult& result) = 0;
  /** The events before the first token; `result` holds the prompt counts only. */
  virtual std::string stream_begin(const TurnResult& result) = 0;
  virtual std::string stream_delta(const TurnDelta& delta) = 0;
  /** The last delta and the closing events. */
  virtual std::string stream_end(const TurnDelta& last, const TurnResult& result) = 0;
  /** An error after the stream has begun. */
  virtual std::string stream_error(int status, const std::string& message) = 0;
  /** Sent while the prompt is processed (something clients ignore or take as a keepalive). */
  virtual std::string stream_keepalive(int processed, int total) = 0;
};

/** What an API handler needs of the server. */
struct ApiContext {
  const ServerOptions& options;
  Logger& log;
  ModelPool& models;  // the model a request names is acquired from here
  Scheduler& scheduler;
};

/** Writes `renderer`'s error body with `status`. */
void reply_api_error(httplib::Response& res, const TurnRenderer& renderer, int status, const std::string& message,
                     const std::string& param = {});

/** Runs a translated request as a job (model check, prompt, queue, generation) and writes the
 * answer through `renderer`, whole or as server-sent events (request.stream). */
void serve_turn(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res, CompletionRequest request,
                std::shared_ptr<TurnRenderer> renderer);

/** The prompt tokens a translated request would be given (model check included). */
size_t count_prompt_tokens(const ApiContext& ctx, const CompletionRequest& request);

}  // namespace mlxrt::server
