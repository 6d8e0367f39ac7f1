#include "mlxrt/server/lockstep.h"

#include <chrono>
#include <cstring>

#include <mlx/distributed/ops.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>
#include <nlohmann/json.hpp>

#include "mlxrt/util/errors.h"

namespace mlxrt::server {

namespace {

using json = nlohmann::ordered_json;

// Every rank contributes zeros but the leader, so the sum is the leader's value bit for bit.
mx::array from_leader(const mx::array& mine, const mx::distributed::Group& group) {
  auto summed = mx::distributed::all_sum(mine, group);
  mx::eval(summed);
  return summed;
}

}  // namespace

int32_t Lockstep::exchange(int32_t value) {
  // The leader's value, and every rank's count of exchanges so far: ranks that have made
  // different numbers of calls are out of step, and every later model call would mix unrelated
  // arrays. That is a bug, stopped here with an error rather than computed on.
  ++exchanges_;
  const int32_t count = static_cast<int32_t>(exchanges_ & 0xffffff);
  const std::vector<int32_t> mine = leader() ? std::vector<int32_t>{value, count, 0} : std::vector<int32_t>{0, 0, count};
  auto summed = from_leader(mx::array(mine.begin(), {3}, mx::int32), group_);
  const int32_t* got = summed.data<int32_t>();
  if (got[1] != count || got[2] != count * (size() - 1))
    throw LockstepError("distributed server: the ranks are out of step (rank " + std::to_string(rank()) +
                        " at exchange " + std::to_string(count) + "; rank 0 sent " + std::to_string(got[1]) +
                        ", the other ranks' counts sum to " + std::to_string(got[2]) + ")");
  return got[0];
}

bool Lockstep::agree(bool local) { return exchange(local ? 1 : 0) != 0; }

std::optional<std::string> Lockstep::share(const std::optional<std::string>& local) {
  // The length first (0: nothing), then the bytes, as mlx_lm.server's _share_object.
  const int32_t length = exchange(local ? static_cast<int32_t>(local->size()) + 1 : 0);
  if (length == 0) return std::nullopt;
  const auto n = static_cast<size_t>(length - 1);
  if (n == 0) return std::string();
  std::vector<uint8_t> bytes(n, 0);
  if (leader()) std::memcpy(bytes.data(), local->data(), n);
  auto summed = from_leader(mx::array(bytes.begin(), {static_cast<int>(n)}, mx::uint8), group_);
  return std::string(reinterpret_cast<const char*>(summed.data<uint8_t>()), n);
}

std::vector<int32_t> Lockstep::share(const std::vector<int32_t>& local) {
  std::optional<std::string> bytes;
  if (leader()) bytes = std::string(reinterpret_cast<const char*>(local.data()), local.size() * sizeof(int32_t));
  auto shared = share(bytes);
  std::vector<int32_t> out(shared ? shared->size() / sizeof(int32_t) : 0);
  if (!out.empty()) std::memcpy(out.data(), shared->data(), out.size() * sizeof(int32_t));
  return out;
}

void Lockstep::await_leader() const {
  if (leader() || ring_peers_.empty()) return;
  dist::wait_for_peer_data(ring_peers_, std::chrono::seconds(1));
}

uint64_t Lockstep::summed_seed(const mx::array& key) {
  auto summed = mx::view(mx::distributed::all_sum(key, group_), mx::uint64);
  mx::eval(summed);
  return summed.item<uint64_t>();
}

std::string job_to_wire(const Job& job) {
  const CompletionRequest& r = job.request();
  json bias = json::array();
  for (const auto& [id, value] : r.logit_bias) bias.push_back({id, value});
  json j = {
      {"endpoint", r.endpoint == Endpoint::chat ? "chat" : "text"},
      {"adapter", r.adapter ? json(*r.adapter) : json()},
      {"draft_model", r.draft_model ? json(*r.draft_model) : json()},
      {"num_draft_tokens", r.num_draft_tokens},
      {"max_tokens", r.max_tokens},
      {"temperature", r.temperature},
      {"top_p", r.top_p},
      {"top_k", r.top_k},
      {"min_p", r.min_p},
      {"xtc_probability", r.xtc_probability},
      {"xtc_threshold", r.xtc_threshold},
      {"repetition_penalty", r.repetition_penalty},
      {"repetition_context_size", r.repetition_context_size},
      {"presence_penalty", r.presence_penalty},
      {"presence_context_size", r.presence_context_size},
      {"frequency_penalty", r.frequency_penalty},
      {"frequency_context_size", r.frequency_context_size},
      {"logit_bias", bias},
      {"logprobs", r.logprobs},
      {"top_logprobs", r.top_logprobs},
      {"seed", r.seed ? json(*r.seed) : json()},
      {"stop", r.stop},
      {"response_format", r.response_format},
      {"json_schema", r.json_schema},
      {"json_schema_strict", r.json_schema_strict},
      {"tools", r.tools},
      {"force_tool_call", r.force_tool_call},
      {"prompt_tokens", job.prompt().tokens},
      {"initial_state", job.prompt().initial_state},
  };
  // MessagePack keeps every double's bits (a text form would round-trip them too, at more cost).
  auto packed = json::to_msgpack(j);
  return std::string(packed.begin(), packed.end());
}

std::shared_ptr<Job> job_from_wire(const std::string& wire) {
  json j;
  try {
    j = json::from_msgpack(wire);
    CompletionRequest r;
    r.endpoint = j.at("endpoint") == "chat" ? Endpoint::chat : Endpoint::text;
    if (!j.at("adapter").is_null()) r.adapter = j.at("adapter").get<std::string>();
    if (!j.at("draft_model").is_null()) r.draft_model = j.at("draft_model").get<std::string>();
    r.num_draft_tokens = j.at("num_draft_tokens");
    r.max_tokens = j.at("max_tokens");
    r.temperature = j.at("temperature");
    r.top_p = j.at("top_p");
    r.top_k = j.at("top_k");
    r.min_p = j.at("min_p");
    r.xtc_probability = j.at("xtc_probability");
    r.xtc_threshold = j.at("xtc_threshold");
    r.repetition_penalty = j.at("repetition_penalty");
    r.repetition_context_size = j.at("repetition_context_size");
    r.presence_penalty = j.at("presence_penalty");
    r.presence_context_size = j.at("presence_context_size");
    r.frequency_penalty = j.at("frequency_penalty");
    r.frequency_context_size = j.at("frequency_context_size");
    for (const auto& b : j.at("logit_bias")) r.logit_bias.emplace_back(b.at(0).get<int32_t>(), b.at(1).get<double>());
    r.logprobs = j.at("logprobs");
    r.top_logprobs = j.at("top_logprobs");
    if (!j.at("seed").is_null()) r.seed = j.at("seed").get<int64_t>();
    r.stop = j.at("stop").get<std::vector<std::string>>();
    r.response_format = j.at("response_format");
    r.json_schema = j.at("json_schema");
    r.json_schema_strict = j.at("json_schema_strict");
    r.tools = j.at("tools");
    r.force_tool_call = j.at("force_tool_call");
    PreparedPrompt prompt;
    prompt.tokens = j.at("prompt_tokens").get<std::vector<int32_t>>();
    prompt.initial_state = j.at("initial_state");
    return std::make_shared<Job>(std::move(r), std::move(prompt), std::nullopt);
  } catch (const nlohmann::json::exception& e) {
    // Only the leader writes these: a malformed one means the ranks run different builds.
    throw Error(std::string("distributed server: a request from rank 0 could not be read (do all ranks run the same mlxrt?): ") +
                e.what());
  }
}

}  // namespace mlxrt::server
