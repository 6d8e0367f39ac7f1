#pragma once
/** The OpenAI Responses API: POST /v1/responses (whole or streamed). `input` (a string or items:
 * messages, function_call, function_call_output, reasoning) and `instructions` are translated into
 * the chat completions request of the same conversation, so the prompt is the chat template's
 * rendering of it. Responses are kept in a bounded in-memory store for `previous_response_id`
 * (the conversation so far, instructions excepted, as OpenAI does) for the server's lifetime. */
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/server/chat_turn.h"

namespace mlxrt::server {

/** Finished responses' conversations (chat messages, instructions excepted), oldest dropped first. */
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  void put(const std::string& id, nlohmann::ordered_json messages);
  std::optional<nlohmann::ordered_json> get(const std::string& id) const;

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<std::string> order_;
  std::map<std::string, nlohmann::ordered_json> conversations_;
};

/** A Responses request translated: the chat completions body, and the conversation to store. */
struct ResponsesTranslation {
  nlohmann::ordered_json chat;          // the chat completions body
  nlohmann::ordered_json conversation;  // its messages without the instructions
};

/** A Responses request body -> the chat completions body. HttpError naming the field for anything
 * malformed or unsupported (non-function tools, image/file/audio input, structured text formats);
 * 400 for an unknown previous_response_id. */
ResponsesTranslation responses_to_chat(const nlohmann::ordered_json& body, const ResponseStore& store);

class ResponsesApi {
 public:
  explicit ResponsesApi(size_t store_capacity = 512) : store_(std::make_shared<ResponseStore>(store_capacity)) {}
  void handle(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res);

 private:
  std::shared_ptr<ResponseStore> store_;
};

}  // namespace mlxrt::server
