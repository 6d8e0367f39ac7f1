#pragma once
/** OpenAI response objects with mlx_lm.server's fields and key order (generate_response,
 * completion_usage_response, the models list). */
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/server/job.h"

namespace mlxrt::server {

/** What stays fixed over one request's responses. */
struct ResponseMeta {
  std::string id;           // chatcmpl-<uuid> / cmpl-<uuid>
  std::string object_type;  // chat.completion, chat.completion.chunk, text_completion
  std::string model;        // as requested
  int64_t created = 0;
  std::string system_fingerprint;
  bool stream = false;
};

ResponseMeta make_response_meta(Endpoint endpoint, bool stream, const std::string& model,
                                const std::string& system_fingerprint);

struct Usage {
  size_t prompt_tokens = 0;
  size_t completion_tokens = 0;
  std::optional<size_t> cached_tokens;
};

/** One response or chunk. `usage` is required when not streaming. */
struct ChoiceContent {
  std::string text;
  std::optional<std::string> finish_reason;
  std::optional<Usage> usage;
  std::vector<float> token_logprobs;
  std::vector<std::vector<TopToken>> top_tokens;
  std::vector<int32_t> tokens;
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();
  std::string reasoning;
};

nlohmann::ordered_json build_response(const ResponseMeta& meta, const ChoiceContent& content);

/** The usage chunk sent after the last chunk when stream_options.include_usage is set. */
nlohmann::ordered_json build_usage_chunk(const ResponseMeta& meta, const Usage& usage);

/** mlxrt's identification, in mlx_lm's "<version>-<mlx version>-<platform>-<device>" layout. */
std::string system_fingerprint();

}  // namespace mlxrt::server
