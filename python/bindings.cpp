// mlxrt._core: the C++ core as Python objects, for the package `mlxrt` (python/mlxrt/__init__.py
// builds mlx-lm 0.32.2's Python API on them). Arrays cross as mlx.core.array objects: this module
// links the mlx wheel's libmlx and is built with the nanobind ABI of the wheel's own module, so an
// mx::array returned here is the wheel's array type, shared without a copy (the module joins the
// wheel's nanobind domain, "mlx": cmake/python_package.cmake).
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mlx/array.h>
#include <mlx/memory.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/cli/generation_setup.h"
#include "mlxrt/generate/batch_generator.h"
#include "mlxrt/generate/logits_processors.h"
#include "mlxrt/generate/random_state.h"
#include "mlxrt/generate/sampler.h"
#include "mlxrt/generate/text_generation.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/util/errors.h"

namespace nb = nanobind;
namespace mx = mlx::core;
using namespace nb::literals;
using namespace mlxrt;

namespace {

/** mx.random.state: the one-key sequence (indexable, state[0] the key) that mlx's Python random ops
 * (and mlx-lm's compiled samplers) draw from. */
nb::object random_state() { return nb::module_::import_("mlx.core").attr("random").attr("state"); }

mx::array global_key() { return nb::cast<mx::array>(random_state()[0]); }

/** Moves mx.random.state on by `draws` keys, as that many random ops without a key would (the state
 * can be read from Python but not assigned: each mx.random.uniform() call takes exactly one key). */
void advance_global_key(int draws) {
  auto random = nb::module_::import_("mlx.core").attr("random");
  auto uniform = random.attr("uniform");
  auto eval = nb::module_::import_("mlx.core").attr("eval");
  for (int i = 0; i < draws; ++i) {
    uniform();
    // A long lazy chain of splits would be evaluated recursively later: cut it now and then.
    if (i % 256 == 255) eval(random.attr("state")[0]);
  }
}

/** How many keys were drawn to get from `before` to `after` (each draw keeps split(key).first). */
int draws_between(mx::array before, const mx::array& after) {
  for (int n = 0; n <= 8; ++n) {
    if (mx::array_equal(before, after).item<bool>()) return n;
    before = mx::random::split(before).first;
  }
  throw std::logic_error("sampler: the PRNG key did not advance by whole draws");
}

/** A loaded model with its tokenizer (what load() returns, as one shared session). */
using SessionPtr = std::shared_ptr<cli::Session>;

struct Model {
  SessionPtr session;
  model::CausalLM& lm() const { return *session->loaded.model; }
};

struct Tokenizer {
  SessionPtr session;
};

struct PromptCache {
  explicit PromptCache(model::CacheList l) : layers(std::move(l)) {}
  PromptCache(const PromptCache&) = delete;
  PromptCache(PromptCache&&) = default;
  model::CacheList layers;
};

struct Detokenizer {
  tokenizer::StreamingDetokenizer detok;
  std::string last_segment;
};

/** make_sampler's sampler: draws from mx.random.state exactly as mlx-lm's compiled samplers do
 * (the key is read before the call and the advanced key written back after it). */
struct Sampler {
  generate::Sampler fn;
  std::shared_ptr<generate::RandomState> rng;  // null: greedy
  mx::array operator()(const mx::array& logprobs) const {
    if (!rng) return fn(logprobs);
    const auto before = global_key();
    rng->set_key(before);
    auto out = fn(logprobs);
    advance_global_key(draws_between(before, rng->key()));
    return out;
  }
};

struct LogitsProcessor {
  generate::LogitsProcessor fn;
};

mx::array as_int32(const mx::array& a) { return a.dtype() == mx::int32 ? a : mx::astype(a, mx::int32); }

std::vector<int32_t> to_ids(const mx::array& a) {
  auto flat = mx::reshape(as_int32(a), {-1});
  mx::eval(flat);
  const int32_t* p = flat.data<int32_t>();
  return std::vector<int32_t>(p, p + flat.size());
}

/** A sampler argument: one of ours (make_sampler's), any Python callable, or None (empty: greedy). */
generate::Sampler to_sampler(nb::object sampler) {
  if (sampler.is_none()) return {};
  if (nb::isinstance<Sampler>(sampler)) return [s = nb::cast<Sampler*>(sampler)](const mx::array& x) { return (*s)(x); };
  return [sampler](const mx::array& x) { return nb::cast<mx::array>(sampler(x)); };
}

/** A logits_processors argument: ours (make_logits_processors') or Python callables, or None. */
std::vector<generate::LogitsProcessor> to_processors(nb::object processors) {
  std::vector<generate::LogitsProcessor> out;
  if (processors.is_none()) return out;
  for (nb::handle p : processors) {
    if (nb::isinstance<LogitsProcessor>(p)) {
      out.push_back(nb::cast<LogitsProcessor*>(p)->fn);
    } else {
      nb::object fn = nb::borrow(p);
      out.push_back([fn](const mx::array& t, const mx::array& l) { return nb::cast<mx::array>(fn(t, l)); });
    }
  }
  return out;
}

/** stream_generate as a Python iterator of tuples (python/mlxrt wraps them in GenerationResponse). */
struct Generator {
  SessionPtr session;
  SessionPtr draft_session;
  nb::object keep_alive;  // the prompt cache and the Python callables the C++ generator calls
  std::unique_ptr<generate::TextGenerator> gen;

  nb::object next() {
    auto r = gen->next();
    if (!r) throw nb::stop_iteration();
    nb::object finish = nb::none();
    if (r->finish_reason) finish = nb::str(generate::to_string(*r->finish_reason));
    return nb::make_tuple(r->text, r->token, r->logprobs, r->from_draft, r->prompt_tokens, r->prompt_tps,
                          r->generation_tokens, r->generation_tps, r->peak_memory, finish);
  }
};

Generator make_generator(const Model& m, const std::vector<int32_t>& prompt, int max_tokens, nb::object sampler,
                         nb::object processors, const std::vector<int32_t>& eos_token_ids,
                         std::optional<int> max_kv_size, PromptCache* cache, int prefill_step_size,
                         std::optional<int> kv_bits, int kv_group_size, int quantized_kv_start,
                         nb::object progress, const Model* draft_model, int num_draft_tokens) {
  generate::TextGenerationOptions o;
  o.max_tokens = max_tokens;
  o.prefill_step_size = prefill_step_size;
  o.max_kv_size = max_kv_size;
  o.kv_bits = kv_bits;
  o.kv_group_size = kv_group_size;
  o.quantized_kv_start = quantized_kv_start;
  o.eos_token_ids = eos_token_ids;
  // The generator runs on the caller's thread with the GIL held: Python callables are called
  // directly (ours through their C++ function).
  o.sampler = to_sampler(sampler);
  o.logits_processors = to_processors(processors);
  if (!progress.is_none()) o.prompt_progress = [progress](int done, int total) { progress(done, total); };
  if (draft_model) {
    o.draft_model = &draft_model->lm();
    o.num_draft_tokens = num_draft_tokens;
  }
  model::check_token_ids(m.lm(), prompt);
  Generator g;
  g.session = m.session;
  if (draft_model) g.draft_session = draft_model->session;
  g.keep_alive = nb::make_tuple(sampler, processors, progress);
  g.gen = std::make_unique<generate::TextGenerator>(m.lm(), m.session->tokenizer, prompt, std::move(o),
                                                     cache ? &cache->layers : nullptr);
  return g;
}

/** mlx-lm's batch_generate on the C++ BatchGenerator: every prompt with the one sampler and list of
 * logits processors given (BatchGenerator's `sampler` and `logits_processors`), stopping at the
 * tokenizer's eos ids. Returns, in prompt order, each prompt's tokens and the log-probability of each
 * (batch_generate drops a row's final stop token), then the prompt and generation token counts, the
 * seconds spent in steps that processed prompts and in all steps, and the peak memory in GB. */
nb::tuple batch_generate_tokens(const Model& m, const std::vector<std::vector<int32_t>>& prompts,
                                const std::vector<int>& max_tokens, nb::object sampler, nb::object processors,
                                const std::vector<int32_t>& eos_token_ids, int completion_batch_size,
                                int prefill_batch_size, int prefill_step_size) {
  if (auto why = generate::batching_unsupported_reason(m.lm())) throw UnsupportedError("batch_generate: " + *why);
  if (max_tokens.size() != prompts.size())
    throw UsageError("batch_generate: max_tokens has " + std::to_string(max_tokens.size()) + " entries for " +
                     std::to_string(prompts.size()) + " prompts");
  generate::BatchGeneratorOptions o;
  o.completion_batch_size = completion_batch_size;
  o.prefill_batch_size = prefill_batch_size;
  o.prefill_step_size = prefill_step_size;
  for (int32_t id : eos_token_ids) o.stop_tokens.push_back({id});
  if (auto fn = to_sampler(sampler)) o.sampler = std::make_shared<const generate::Sampler>(std::move(fn));
  const auto procs = to_processors(processors);
  std::vector<generate::BatchRequest> requests;
  size_t prompt_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    model::check_token_ids(m.lm(), prompts[i]);
    generate::BatchRequest r;
    r.prompt = prompts[i];
    r.max_tokens = max_tokens[i];
    r.logits_processors = procs;
    requests.push_back(std::move(r));
    prompt_tokens += prompts[i].size();
  }
  generate::BatchGenerator gen(m.lm(), o);
  const auto uids = gen.insert(std::move(requests));
  std::map<int, size_t> row_of;
  for (size_t i = 0; i < uids.size(); ++i) row_of[uids[i]] = i;
  std::vector<std::vector<int32_t>> tokens(prompts.size());
  std::vector<std::vector<double>> logprobs(prompts.size());
  size_t generated = 0;
  double prompt_seconds = 0, all_seconds = 0;
  while (gen.size() > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    auto [prompt_steps, responses] = gen.next();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    all_seconds += dt;
    if (!prompt_steps.empty()) prompt_seconds += dt;
    for (auto& r : responses) {
      ++generated;
      if (r.finish_reason && *r.finish_reason == "stop") continue;
      const size_t row = row_of.at(r.uid);
      tokens[row].push_back(r.token);
      logprobs[row].push_back(mx::astype(mx::take(r.logprobs, r.token), mx::float32).item<float>());
    }
  }
  return nb::make_tuple(tokens, logprobs, prompt_tokens, generated, prompt_seconds, all_seconds,
                        static_cast<double>(mx::get_peak_memory()) / 1e9);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "mlxrt's C++ core (see the package mlxrt for mlx-lm's API built on it)";
  nb::module_::import_("mlx.core");  // registers mlx.core.array, which this module returns
  // Models held in module globals are still alive when the interpreter exits: not a leak.
  nb::set_leak_warnings(false);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const UnsupportedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    }
  });

  nb::class_<Model>(m, "Model")
      .def(
          "__call__",
          [](const Model& self, const mx::array& inputs, PromptCache* cache) {
            if (inputs.ndim() != 2)
              throw UsageError("model(inputs): expected token ids of shape [batch, length], got " +
                               std::to_string(inputs.ndim()) + " dimensions");
            auto ids = as_int32(inputs);
            model::check_token_ids(self.lm(), to_ids(ids));
            return self.lm()(ids, cache ? &cache->layers : nullptr);
          },
          "inputs"_a, "cache"_a = nb::none())
      .def("make_cache",
           [](const Model& self, std::optional<int> max_kv_size) {
             return PromptCache{model::make_prompt_cache(self.lm(), max_kv_size)};
           },
           "max_kv_size"_a = nb::none())
      .def_prop_ro("model_type", [](const Model& self) { return self.session->loaded.config.model_type(); })
      .def_prop_ro("vocab_size", [](const Model& self) { return self.lm().vocab_size(); })
      .def_prop_ro("path", [](const Model& self) { return self.session->dir.string(); });

  nb::class_<PromptCache>(m, "PromptCache")
      .def("__len__", [](const PromptCache& c) { return c.layers.size(); })
      .def_prop_ro("offset", [](const PromptCache& c) { return c.layers.empty() ? 0 : c.layers.front()->offset(); });

  nb::class_<Tokenizer>(m, "Tokenizer")
      .def("encode",
           [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
             return t.session->tokenizer.encode(text, add_special_tokens);
           },
           "text"_a, "add_special_tokens"_a = true)
      .def("decode",
           [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             return t.session->tokenizer.decode(ids, skip_special_tokens);
           },
           "ids"_a, "skip_special_tokens"_a = false)
      .def("token_to_id", [](const Tokenizer& t, const std::string& s) { return t.session->tokenizer.token_to_id(s); })
      .def("id_to_token", [](const Tokenizer& t, int32_t id) { return t.session->tokenizer.id_to_token(id); })
      .def("__len__", [](const Tokenizer& t) { return t.session->tokenizer.vocab_size(); })
      .def_prop_ro("base_vocab_size", [](const Tokenizer& t) { return t.session->tokenizer.base_vocab_size(); })
      .def_prop_ro("bos_token", [](const Tokenizer& t) { return (t.session->tokenizer.config().bos_token); })
      .def_prop_ro("eos_token", [](const Tokenizer& t) { return (t.session->tokenizer.config().eos_token); })
      .def_prop_ro("pad_token", [](const Tokenizer& t) { return (t.session->tokenizer.config().pad_token); })
      .def_prop_ro("unk_token", [](const Tokenizer& t) { return (t.session->tokenizer.config().unk_token); })
      .def_prop_ro("eos_token_ids", [](const Tokenizer& t) { return t.session->eos_token_ids; })
      .def_prop_ro("has_chat_template", [](const Tokenizer& t) { return t.session->chat_template.has_value(); })
      .def(
          "render_chat",
          [](const Tokenizer& t, const std::string& messages, bool add_generation_prompt, bool continue_final_message,
             const std::string& kwargs) {
            return cli::apply_chat_template(*t.session, nlohmann::ordered_json::parse(messages),
                                            add_generation_prompt, continue_final_message,
                                            nlohmann::ordered_json::parse(kwargs));
          },
          "messages_json"_a, "add_generation_prompt"_a, "continue_final_message"_a, "kwargs_json"_a)
      .def("detokenizer", [](const Tokenizer& t) {
        return Detokenizer{t.session->tokenizer.streaming_detokenizer(), {}};
      });

  nb::class_<Detokenizer>(m, "StreamingDetokenizer")
      .def("reset",
           [](Detokenizer& d) {
             d.detok.reset();
             d.last_segment.clear();
           })
      .def("add_token", [](Detokenizer& d, int32_t id) { d.detok.add_token(id); }, "token"_a)
      .def("finalize", [](Detokenizer& d) { d.detok.finalize(); })
      .def_prop_ro("last_segment", [](Detokenizer& d) { return d.detok.take_segment(); })
      .def_prop_ro("text", [](Detokenizer& d) { return d.detok.text(); })
      .def_prop_ro("tokens", [](Detokenizer& d) { return d.detok.tokens(); });

  nb::class_<Sampler>(m, "Sampler")
      .def("__call__", [](const Sampler& s, const mx::array& logprobs) { return s(logprobs); }, "logprobs"_a);

  nb::class_<LogitsProcessor>(m, "LogitsProcessor")
      .def("__call__",
           [](const LogitsProcessor& p, const mx::array& tokens, const mx::array& logits) {
             return p.fn(tokens, logits);
           },
           "tokens"_a, "logits"_a);

  nb::class_<Generator>(m, "Generator")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", &Generator::next);

  m.def(
      "load",
      [](const std::string& path, const std::string& adapter_path) {
        auto session = std::make_shared<cli::Session>(cli::load_session(path, "", std::nullopt, adapter_path));
        // mlx-lm builds the model (and the LoRA layers) with randomly initialised weights before
        // loading the checkpoint: those draws move mx.random.state, and seeded sampling after
        // load() starts where they leave it.
        const int draws = cli::model_construction_draws(session->dir) + cli::adapter_construction_draws(adapter_path);
        advance_global_key(draws);
        return nb::make_tuple(Model{session}, Tokenizer{session});
      },
      "path"_a, "adapter_path"_a = "");

  m.def(
      "make_sampler",
      [](double temp, double top_p, double min_p, int min_tokens_to_keep, int top_k, double xtc_probability,
         double xtc_threshold, const std::vector<int32_t>& xtc_special_tokens) {
        generate::SamplerParams p{.temp = temp, .top_p = top_p, .min_p = min_p,
                                  .min_tokens_to_keep = min_tokens_to_keep, .top_k = top_k,
                                  .xtc_probability = xtc_probability, .xtc_threshold = xtc_threshold,
                                  .xtc_special_tokens = xtc_special_tokens};
        if (auto problem = generate::check_sampler_params(p)) throw UsageError(problem->param + ": " + problem->message);
        auto rng = temp == 0 ? nullptr : std::make_shared<generate::RandomState>();
        return Sampler{generate::make_sampler(p, rng), rng};
      },
      "temp"_a, "top_p"_a, "min_p"_a, "min_tokens_to_keep"_a, "top_k"_a, "xtc_probability"_a, "xtc_threshold"_a,
      "xtc_special_tokens"_a);

  m.def(
      "make_logits_processors",
      [](const std::vector<std::pair<int32_t, double>>& logit_bias, std::optional<double> repetition_penalty,
         int repetition_context_size, std::optional<double> presence_penalty, int presence_context_size,
         std::optional<double> frequency_penalty, int frequency_context_size) {
        generate::LogitsProcessorParams p;
        p.logit_bias = logit_bias;
        p.repetition_penalty = repetition_penalty;
        p.repetition_context_size = repetition_context_size;
        p.presence_penalty = presence_penalty;
        p.presence_context_size = presence_context_size;
        p.frequency_penalty = frequency_penalty;
        p.frequency_context_size = frequency_context_size;
        std::vector<LogitsProcessor> out;
        for (auto& fn : generate::make_logits_processors(p)) out.push_back(LogitsProcessor{std::move(fn)});
        return out;
      },
      "logit_bias"_a, "repetition_penalty"_a, "repetition_context_size"_a, "presence_penalty"_a,
      "presence_context_size"_a, "frequency_penalty"_a, "frequency_context_size"_a);

  m.def("batch_generate_tokens", &batch_generate_tokens, "model"_a, "prompts"_a, "max_tokens"_a, "sampler"_a.none(),
        "logits_processors"_a.none(), "eos_token_ids"_a, "completion_batch_size"_a, "prefill_batch_size"_a,
        "prefill_step_size"_a);

  m.def("stream_generate", &make_generator, "model"_a, "prompt"_a, "max_tokens"_a, "sampler"_a.none(),
        "logits_processors"_a.none(), "eos_token_ids"_a, "max_kv_size"_a.none(), "prompt_cache"_a.none(),
        "prefill_step_size"_a, "kv_bits"_a.none(), "kv_group_size"_a, "quantized_kv_start"_a,
        "prompt_progress_callback"_a.none(), "draft_model"_a.none(), "num_draft_tokens"_a);
}
