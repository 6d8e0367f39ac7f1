#pragma once
/** One request in flight between its HTTP thread and the generation thread: the prepared prompt
 * and parameters going in, a queue of events coming out, and the stop conditions (cancelled,
 * deadline passed, client gone) that the generation loop checks at every step. */
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "mlxrt/server/request.h"

namespace mlxrt::server {

struct ModelSession;
class Lockstep;

/** A tokenized prompt and the text state it starts in ("normal", or "reasoning" when the prompt
 * leaves a think block open). */
struct PreparedPrompt {
  std::vector<int32_t> tokens;
  std::string initial_state = "normal";
};

struct TopToken {
  int32_t id;
  std::string token;
  float logprob;
};

struct StartedEvent {
  size_t prompt_tokens;
  size_t cached_tokens;
};
struct ProgressEvent {
  int processed, total;
};
struct TokenEvent {
  std::string text;
  int32_t token;
  float logprob;
  std::optional<std::string> finish_reason;
  std::vector<TopToken> top;
};
struct DoneEvent {};
struct ErrorEvent {
  int status;
  std::string message;
};
using JobEvent = std::variant<StartedEvent, ProgressEvent, TokenEvent, DoneEvent, ErrorEvent>;

class Job {
 public:
  using Clock = std::chrono::steady_clock;

  Job(CompletionRequest request, PreparedPrompt prompt, std::optional<Clock::time_point> deadline)
      : request_(std::move(request)), prompt_(std::move(prompt)), deadline_(deadline), queued_at_(Clock::now()) {}
  /** A job that runs `task` on the generation thread instead of generating (embeddings); the task
   * pushes its own DoneEvent or ErrorEvent. */
  Job(std::function<void(Job&)> task, std::optional<Clock::time_point> deadline)
      : deadline_(deadline), queued_at_(Clock::now()), task_(std::move(task)) {}

  const std::function<void(Job&)>& task() const { return task_; }

  const CompletionRequest& request() const { return request_; }
  /** The model the job runs on, held until the job is gone (a model evicted from the server's
   * pool meanwhile stays alive for it); null: the generator's current model. */
  const std::shared_ptr<ModelSession>& session() const { return session_; }
  void set_session(std::shared_ptr<ModelSession> session) { session_ = std::move(session); }
  const PreparedPrompt& prompt() const { return prompt_; }

  void push(JobEvent event);
  /** The next event, waiting at most `wait`; nullopt on timeout. */
  std::optional<JobEvent> pop(std::chrono::milliseconds wait);

  /** A DoneEvent or ErrorEvent has been pushed: the job no longer runs on the model. */
  bool finished() const { return finished_; }

  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  bool timed_out() const { return deadline_ && Clock::now() > *deadline_; }
  /** The deadline of a job made now under a timeout of `seconds` (none for 0 or less). */
  static std::optional<Clock::time_point> deadline_after(double seconds) {
    if (seconds <= 0) return std::nullopt;
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  /** When the job was made (just before it is queued): the start of its time to first token. */
  Clock::time_point queued_at() const { return queued_at_; }

  /** A check that the client is still connected, valid until clear_probe(). */
  void set_probe(std::function<bool()> client_gone);
  void clear_probe();
  /** cancelled, past the deadline, or the client has gone away. */
  bool should_stop();
  /** should_stop() as the generation thread asks it: in a distributed server, the leader's answer
   * on every rank (see Lockstep), so every rank stops the job at the same step. */
  bool stop_now();
  /** The distributed server's ranks this job runs on (null: one process). */
  void set_lockstep(std::shared_ptr<Lockstep> lockstep) { lockstep_ = std::move(lockstep); }

 private:
  CompletionRequest request_;
  PreparedPrompt prompt_;
  std::optional<Clock::time_point> deadline_;
  Clock::time_point queued_at_;
  std::function<void(Job&)> task_;
  std::shared_ptr<ModelSession> session_;
  std::shared_ptr<Lockstep> lockstep_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<JobEvent> events_;
  std::function<bool()> client_gone_;
};

/** Ends a request's hold on its job: cancels it and clears its connection probe (the socket may be
 * reused). A stream's releaser takes over by resetting `job`. */
struct ProbeGuard {
  std::shared_ptr<Job> job;
  ~ProbeGuard() {
    if (job) {
      job->cancel();
      job->clear_probe();
    }
  }
};

}  // namespace mlxrt::server
