// BatchGeneratorOptions::join_prefill_beside (ours): prompts that join a decoding batch are
// prefilled on a second stream of the device, beside the batch's steps.
//
// Why: a batch step of 32 rows takes longer than a request's whole prefill and first step alone
// (bench/RESULTS.md: 33 ms against 18 ms on an 8B model). In the in-order mode a request that
// arrives mid-step waits for that step, then for the step dispatched after it, and only then is
// its prefill run: its time to first token is two of the batch's steps plus its own. Here the host
// notices it while it waits for the step's tokens (the interrupt), the prefill and first step go
// to the prompt stream at once, and the device runs them beside the batch's kernels; the first
// token is handed out when it is there, and the rows merge into the batch at the next boundary.
// Measured, it did not pay (bench/RESULTS.md, twenty-eighth session): on the CPU the host can
// queue only a few of the backend's ops ahead, so dispatching a prefill waits most of it out, and
// on an H100 the time to first token under load was later than between the steps. Opt-in.
//
// join_prefill_interleaved takes the same path on the batch's own stream: the batch's steps go to
// the device a piece at a time (PacedDispatch, pumped while the host waits), so the joining work
// runs between two pieces of a step. On the CPU it more than halved the time to first token
// under a steady load (bench/RESULTS.md, twenty-ninth session), and with pieces of 16 ops and the
// host woken as each is done it took the p99 from 5.5 and 13 times the solo one (8 and 32 clients)
// to 2.3 and 2.8 times (thirtieth session): the server's default there. Between on a GPU until a
// GPU times it.
#include "mlxrt/generate/batch_generator.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include <mlx/ops.h>
#include <mlx/transforms.h>
#include <mlx/utils.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/generate/batch_rows.h"

namespace mlxrt::generate {

namespace {

using batch_rows::Clock;
using batch_rows::ms_since;

/** The indices of the rows of `uids` not in `dropped`. */
std::vector<int> kept(const std::vector<int>& uids, const std::set<int>& dropped) {
  std::vector<int> keep;
  for (size_t i = 0; i < uids.size(); ++i)
    if (!dropped.count(uids[i])) keep.push_back(static_cast<int>(i));
  return keep;
}

bool computed(const std::vector<mx::array>& arrays) {
  return std::all_of(arrays.begin(), arrays.end(), [](const mx::array& a) { return a.is_available(); });
}

/** Schedules what is not scheduled yet (a row filtered out of a batch makes a new gather):
 * polling an array nobody evaluates would never see it done. */
void schedule(const std::vector<mx::array>& arrays) {
  if (std::any_of(arrays.begin(), arrays.end(), [](const mx::array& a) { return a.status() == mx::array::unscheduled; }))
    mx::async_eval(arrays);
}

}  // namespace

bool BatchGenerator::beside() const {
  return prompt_.uids.empty() &&
         (!gen_.uids.empty() || !joining_.empty() || !prefilling_.empty() || unread_.has_value());
}

size_t BatchGenerator::joining_rows() const {
  size_t n = 0;
  for (const auto& p : prefilling_) n += p.batch.uids.size();
  for (const auto& j : joining_) n += j.g.uids.size();
  return n;
}

bool BatchGenerator::prefill_beside(Prefilling& p, std::vector<BatchPromptResponse>& responses) {
  // The in-order path's chunks and splits: rows whose prompt ends first start first.
  if (auto started = split_started(p.batch, p.processing, responses)) joining_.push_back(Joining{std::move(*started)});
  if (p.batch.uids.empty()) return false;
  prompt(p.batch, take_chunk(p.processing, p.batch.uids, responses), PrefillWait::none);
  if (o_.join_prefill_interleaved) {
    // On the batch's stream the rows this chunk left at their last token start at once: their
    // first step goes in right behind the chunk, before the batch's next piece.
    if (auto started = split_started(p.batch, p.processing, responses)) joining_.push_back(Joining{std::move(*started)});
    if (p.batch.uids.empty()) return false;
  }
  return true;
}

void BatchGenerator::join_beside(std::vector<BatchPromptResponse>& responses) {
  const int room = o_.completion_batch_size - static_cast<int>(gen_.uids.size() + joining_rows());
  const int n = std::min({o_.prefill_batch_size, room, static_cast<int>(unprocessed_.size())});
  if (n <= 0 && prefilling_.empty()) return;
  // Beside: a stream of their own. Interleaved: the batch's stream, between its step's pieces.
  if (!prompt_stream_) prompt_stream_ = o_.join_prefill_interleaved ? mx::default_stream(mx::default_device())
                                                                    : mx::new_stream(mx::default_device());
  mx::StreamContext on(*prompt_stream_);
  std::vector<Prefilling> left;
  for (auto& p : prefilling_) {
    if (!computed(cache::state_arrays(p.batch.cache)) || prefill_beside(p, responses)) left.push_back(std::move(p));
  }
  prefilling_ = std::move(left);
  if (n <= 0) return;
  split_.joined_beside += n;
  Prefilling p;
  p.batch = make_batch(n, p.processing);
  if (prefill_beside(p, responses)) prefilling_.push_back(std::move(p));
}

namespace {
std::vector<mx::array> first_step_outputs(const mx::array& tokens, const std::vector<mx::array>& logprobs) {
  std::vector<mx::array> out = {tokens};
  out.insert(out.end(), logprobs.begin(), logprobs.end());
  return out;
}
}  // namespace

bool BatchGenerator::joined_ready() const {
  return std::any_of(joining_.begin(), joining_.end(), [](const Joining& j) {
    return !j.ready && computed(first_step_outputs(*j.g.next_tokens, j.g.next_logprobs));
  });
}

void BatchGenerator::collect_joined(std::vector<BatchGenerationResponse>& responses) {
  for (auto& j : joining_) {
    if (j.ready) continue;
    auto& g = j.g;
    const auto outputs = first_step_outputs(*g.next_tokens, g.next_logprobs);
    schedule(outputs);
    if (!computed(outputs)) continue;
    j.ready = true;
    const auto tokens = token_values(*g.next_tokens);
    bool finishes = false;
    for (size_t i = 0; i < g.uids.size(); ++i) {
      auto matcher = g.matchers[i];
      finishes = finishes || g.rows[i].max_tokens <= 1 || matcher.advance(tokens[i]);
    }
    // A finished row's cache is handed out after the step that follows its last token (mlx-lm's
    // order): that step is the merged batch's, so these first tokens are read with it.
    if (finishes) continue;
    for (size_t i = 0; i < g.uids.size(); ++i) {
      g.num_tokens[i] = 1;
      g.matchers[i].advance(tokens[i]);
      g.rows[i].tokens.push_back(tokens[i]);
      g.ahead[i] = 1;
      responses.push_back(BatchGenerationResponse{g.uids[i], tokens[i], g.next_logprobs[i], std::nullopt, {}, {}});
    }
  }
}

void BatchGenerator::merge_joined() {
  if (unread_) return;  // the batch's rows are those of the step in flight until its tokens are read
  std::vector<Joining> left;
  for (auto& j : joining_) {
    if (j.ready)
      extend_gen(std::move(j.g));
    else
      left.push_back(std::move(j));
  }
  joining_ = std::move(left);
  // The merged tokens as their own evaluation: inside the next step's, they would be counted done
  // (and that step's tokens readable) only when that whole step is. Paced: after the pieces of the
  // step that computes them.
  if (!gen_.next_tokens) return;
  if (paced_)
    paced_->queue({*gen_.next_tokens});
  else
    mx::async_eval(*gen_.next_tokens);
}

bool BatchGenerator::await(const std::vector<mx::array>& arrays) {
  while (true) {
    // Paced: the step's next pieces as the device finishes the last ones; `arrays` are in the
    // queue (a step's outputs) or, once it is drained, scheduled here (e.g. a filtered row's gather).
    if (paced_) paced_->pump();
    if (!paced_ || paced_->drained()) schedule(arrays);
    if (computed(arrays)) {
      if (paced_) paced_->pump(static_cast<size_t>(std::max(1, o_.step_pieces_ahead_on_return)));
      return true;
    }
    // A long prompt's next chunk waits for the step (one chunk a step, as mlx-lm): going in as soon
    // as the last is computed, its chunks would leave the batch's steps a piece or two each.
    const auto stop_waiting = [&] { return (interrupt_ && interrupt_()) || joined_ready(); };
    if (stop_waiting()) return false;
    // Short enough not to matter beside a step (milliseconds); long enough to leave the core to
    // the CPU backend's threads. Paced on the CPU it ends as soon as a piece is done, so the next
    // goes in without the device waiting out the interval.
    constexpr std::chrono::microseconds kPoll{100};
    if (paced_) {
      paced_->wait(kPoll);
      // What arrived meanwhile goes in ahead of the step's next piece.
      if (stop_waiting()) return false;
    } else {
      std::this_thread::sleep_for(kPoll);
    }
  }
}

void BatchGenerator::drop_joining(const std::set<int>& uids) {
  std::vector<Prefilling> still;
  for (auto& p : prefilling_) {
    const auto keep = kept(p.batch.uids, uids);
    if (keep.size() < p.batch.uids.size()) {
      filter_prompt(p.batch, keep);
      p.processing = batch_rows::pick(p.processing, keep);
    }
    if (!keep.empty()) still.push_back(std::move(p));
  }
  prefilling_ = std::move(still);
  std::vector<Joining> left;
  for (auto& j : joining_) {
    const auto keep = kept(j.g.uids, uids);
    if (keep.size() < j.g.uids.size()) filter_gen(j.g, keep);
    if (!keep.empty()) left.push_back(std::move(j));
  }
  joining_ = std::move(left);
}

std::pair<std::vector<BatchPromptResponse>, std::vector<BatchGenerationResponse>> BatchGenerator::next_beside() {
  begin_call();
  std::vector<BatchPromptResponse> prompt_responses;
  std::vector<BatchGenerationResponse> responses;
  const auto t_admit = Clock::now();
  join_beside(prompt_responses);
  split_.admit_ms = ms_since(t_admit);
  collect_joined(responses);
  // One step of the batch, unless first tokens are ready to go out now. A read that only holds
  // tokens handed out already (rows that just merged) is followed by the next step.
  const auto t_generate = Clock::now();
  while (responses.empty()) {
    merge_joined();
    if (gen_.uids.empty()) {  // no batch to step: wait for the joining rows' first tokens, or the next chunk
      if (!joining_.empty()) {
        const auto& first = joining_.front().g;
        const bool done = await(first_step_outputs(*first.next_tokens, first.next_logprobs));
        collect_joined(responses);
        if (!done) break;
      } else if (!prefilling_.empty()) {
        if (!await(cache::state_arrays(prefilling_.front().batch.cache))) break;
        join_beside(prompt_responses);
      } else {
        break;
      }
      continue;
    }
    if (!unread_) unread_ = dispatch_step(gen_);
    if (!await(first_step_outputs(unread_->inputs, unread_->logprobs))) {
      collect_joined(responses);  // a joining batch's first tokens came before the step's
      break;
    }
    Dispatched d = std::move(*unread_);
    unread_.reset();
    auto [tokens, logprobs] = read_step(gen_, d.inputs, d.logprobs, &d);
    responses = hand_out(tokens, logprobs);
    generation_steps_ += 1;
    if (generation_steps_ % 512 == 0) mx::clear_cache();
  }
  split_.generate_ms = ms_since(t_generate);
  return {std::move(prompt_responses), std::move(responses)};
}

}  // namespace mlxrt::generate
