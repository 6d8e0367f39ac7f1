// `mlxrt fidelity`: the fidelity harness. Measures a model loaded at one tier (--tier, l3 by
// default) against the same model at another (--against, l1: mlx-lm's bytes) on the same tokens
// under teacher forcing: for every position, KL(P_against || P_tier) of the next-token
// distributions and whether the two greedy choices agree. Two modes, since they run different
// kernels: "decode" (one token per model call, through the KV cache: what generation runs) and
// "prefill" (--prefill-chunk tokens per call through a fresh cache: what a prompt runs); with
// --batch B a third, "batch": B rows decoded together one token each per call through a batched
// cache (what a server's batch runs: its products have B rows).
// The two models are loaded one after the other: the reference's log-probabilities are kept on
// the host (tokens x vocab floats per mode), never two sets of weights at once.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include <mlx/memory.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>
#include <nlohmann/json.hpp>

#include "mlxrt/cache/batch_cache.h"
#include "mlxrt/cli/common.h"
#include "mlxrt/cli/fidelity_corpus.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cuda/affine_mma.h"
#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/decoder_layer.h"
#include "mlxrt/kernels/cuda/dequantized_gemm.h"
#include "mlxrt/kernels/cuda/fp4_qmv.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/tokenizer/tokenizer.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace mx = mlx::core;
using ojson = nlohmann::ordered_json;

namespace {

// The project's gate for a tier other than l1: every mode measured within these.
constexpr double kGateMeanKl = 1e-3;
constexpr double kGateAgreement = 0.99;

struct Args {
  std::string model, corpus, profile_file;
  model::FidelityTier against = model::FidelityTier::l1;
  model::FidelityTier tier = model::FidelityTier::l3;
  int tokens = 1024;
  int prefill_chunk = 512;
  int batch = 0;  // --batch: rows of the batch mode (0: no batch mode)
  bool json = false, gate = false;
  bool float32_reference = false;
};

enum class Mode { decode, prefill, batch };
constexpr int kModeCount = 3;
const char* mode_name(Mode m) { return m == Mode::decode ? "decode" : m == Mode::prefill ? "prefill" : "batch"; }
/** The modes a run measures: decode and prefill, and batch with --batch. */
std::vector<Mode> modes_of(const Args& a) {
  std::vector<Mode> modes = {Mode::decode, Mode::prefill};
  if (a.batch > 0) modes.push_back(Mode::batch);
  return modes;
}

/** One mode's figures: KL(P_against || P_tier) per position, summed and at its largest, and how
 * many greedy choices agree. */
struct ModeResult {
  int positions = 0;
  double sum_kl = 0, max_kl = 0;
  int max_kl_position = 0;
  int agree = 0;

  double mean_kl() const { return positions ? sum_kl / positions : 0.0; }
  double agreement() const { return positions ? double(agree) / positions : 0.0; }
  bool passes() const { return mean_kl() <= kGateMeanKl && agreement() >= kGateAgreement; }  // NaN fails
};

/** The reference's float32 log-probabilities, [positions, vocab] row-major, per mode. */
struct Reference {
  int vocab = 0;
  std::vector<float> rows[kModeCount];
};

/** The first N + 1 tokens of the corpus (the last one is only ever a target). */
std::vector<int32_t> corpus_tokens(const Args& a, const std::filesystem::path& dir, size_t& available) {
  std::string text;
  if (a.corpus.empty()) {
    text = std::string(fidelity_corpus());
  } else {
    std::ifstream in(a.corpus, std::ios::binary);
    if (!in) throw UsageError("--corpus: cannot read " + a.corpus);
    std::ostringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  auto ids = tokenizer::Tokenizer::from_dir(dir).encode(text);
  available = ids.size();
  const size_t needed = static_cast<size_t>(a.tokens) + 1;
  if (ids.size() < needed) {
    const auto fits = std::to_string(std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - 1));
    throw UsageError("--tokens " + std::to_string(a.tokens) + ": the corpus (" +
                     (a.corpus.empty() ? std::string("built-in") : a.corpus) + ") has " + std::to_string(ids.size()) +
                     " tokens for this model's tokenizer, and measuring N positions takes N + 1 = " +
                     std::to_string(needed) + "; give --tokens " + fits + " or less, or a longer --corpus FILE");
  }
  ids.resize(needed);
  return ids;
}

/** A model call's rows: `count` float32 log-softmax rows of `width` (row i: the next-token
 * distribution after ids[first + i]). */
struct Rows {
  int first, count, width;
  const float* data;
};

/** Feeds ids[0..N) to `lm` through a fresh cache, `chunk` tokens per call, each call's rows to `take`. */
void forward_log_probs(model::CausalLM& lm, const std::vector<int32_t>& ids, int chunk,
                       const std::function<void(const Rows&)>& take, const std::string& what) {
  const int n = static_cast<int>(ids.size()) - 1;
  const bool progress = ::isatty(STDERR_FILENO);
  mx::array tokens(ids.data(), {1, n}, mx::int32);
  auto cache = model::make_prompt_cache(lm);
  for (int t = 0; t < n; t += chunk) {
    const int end = std::min(n, t + chunk);
    auto logits = mx::astype(mx::squeeze(lm(mx::slice(tokens, {0, t}, {1, end}), &cache), 0), mx::float32);
    auto log_probs = mx::contiguous(mx::subtract(logits, mx::logsumexp(logits, -1, true)));
    mx::eval(log_probs);
    take(Rows{t, end - t, log_probs.shape(-1), log_probs.data<float>()});
    if (progress) std::fprintf(stderr, "\r%s: %d/%d positions", what.c_str(), end, n);
  }
  if (progress) std::fprintf(stderr, "\r\033[K");
}

/** Feeds ids[0..N) to `lm` as `rows` rows decoded together: row b holds positions [b S, (b + 1) S)
 * with S = N / rows (the last N mod rows positions are not measured), and each call takes every
 * row's next token through one batched cache (cache::BatchCache, as the batch generator merges
 * fresh caches), handing each row's distribution to `take`. */
void batch_log_probs(model::CausalLM& lm, const std::vector<int32_t>& ids, int rows,
                     const std::function<void(const Rows&)>& take, const std::string& what) {
  const int span = (static_cast<int>(ids.size()) - 1) / rows;
  const bool progress = ::isatty(STDERR_FILENO);
  std::vector<model::CacheList> fresh(static_cast<size_t>(rows));
  std::vector<const model::CacheList*> parts;
  for (auto& c : fresh) {
    c = model::make_prompt_cache(lm);
    parts.push_back(&c);
  }
  model::CacheList cache;
  try {
    cache = cache::BatchCache::merge_rows(parts);
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(std::string("--batch: ") + e.what());
  }
  std::vector<int32_t> step(static_cast<size_t>(rows));
  for (int t = 0; t < span; ++t) {
    for (int b = 0; b < rows; ++b) step[static_cast<size_t>(b)] = ids[static_cast<size_t>(b * span + t)];
    auto logits = lm(mx::array(step.data(), {rows, 1}, mx::int32), &cache);
    logits = mx::astype(mx::squeeze(logits, 1), mx::float32);
    auto log_probs = mx::contiguous(mx::subtract(logits, mx::logsumexp(logits, -1, true)));
    mx::eval(log_probs);
    const int vocab = log_probs.shape(-1);
    for (int b = 0; b < rows; ++b)
      take(Rows{b * span + t, 1, vocab, log_probs.data<float>() + static_cast<size_t>(b) * vocab});
    if (progress) std::fprintf(stderr, "\r%s: %d/%d steps", what.c_str(), t + 1, span);
  }
  if (progress) std::fprintf(stderr, "\r\033[K");
}

/** KL(p || q) of one position in float64, as the sum over the vocabulary of
 * p log(p/q) - p + q (p = e^lp, q = e^lq): equal to the KL of two distributions, and each term is
 * non-negative, so float32 normalisation error cannot make a KL negative. Equal rows give 0. */
double position_kl(const float* lp, const float* lq, int vocab) {
  double kl = 0;
  for (int i = 0; i < vocab; ++i) {
    const double p = lp[i], q = lq[i];
    if (p == q) continue;  // identical (also both -inf)
    if (std::isinf(p) && p < 0) {
      kl += std::exp(q);
      continue;
    }
    const double d = q - p;
    kl += std::exp(p) * (std::expm1(d) - d);  // p log(p/q) - p + q; +inf where q = 0 < p
  }
  return kl;
}

/** The greedy choice: the first index of the largest log-probability (mx::argmax's choice). */
int greedy(const float* row, int vocab) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

model::LoadOptions tier_options(const Args& a, model::FidelityTier tier, bool float32 = false) {
  auto options = load_options(a.profile_file);
  options.fidelity = tier;
  options.float32 = float32;
  return options;
}

/** Adds KL(p || q) and agreement of one position to `r`. */
void add_position(ModeResult& r, const float* p, const float* q, int vocab, int pos) {
  const double kl = position_kl(p, q, vocab);
  r.sum_kl += kl;
  if (!std::isnan(r.max_kl) && !(kl <= r.max_kl)) {  // a NaN, once seen, stays the largest
    r.max_kl = kl;
    r.max_kl_position = pos;
  }
  r.agree += greedy(p, vocab) == greedy(q, vocab);
  r.positions += 1;
}

/** What computes at `tier` on this machine: MLX's kernels or ours (which, at l3, include the L3
 * quantized matmuls). Throws as the load would where the tier cannot run here. */
std::string kernels_description(const Args& a, model::FidelityTier tier) {
  const auto options = tier_options(a, tier);
  const auto kernels = model::cpu_kernels_for(options);
  const bool cpu = mx::default_device() == mx::Device::cpu;
  if (model::gpu_l3_for(options))
    return std::string("MLX's GPU kernels, with mlxrt's L3 CUDA matrix-vector product for the affine 4- and 8-bit "
                       "layers") +
           (kernels::cuda::dense_l3_opted_in() ? " and the dense ones (MLXRT_CUDA_L3_DENSE=1)" : "") +
           " (1-127 rows, float32 sums; from 8 rows in chunks of 8 where MLX would run them one by one; "
           "kernels/cuda/affine_qmv.h)" +
           (kernels::cuda::affine_mma_min_rows() > 0
                ? "; the 4-bit products of " + std::to_string(kernels::cuda::affine_mma_min_rows()) +
                      "-127 rows on the tensor cores (kernels/cuda/affine_mma.h; MLXRT_CUDA_L3_MMA_ROWS=0 turns "
                      "it off)"
                : std::string()) +
           (kernels::cuda::fp4_l3_opted_in()
                ? "; the mxfp4 and nvfp4 layers' products of 1-7 rows (MLXRT_CUDA_L3_FP4=1; kernels/cuda/fp4_qmv.h)"
                : "") +
           (kernels::cuda::decoder_layer_use() == kernels::cuda::DecoderLayerUse::off
                ? ""
                : kernels::cuda::decoder_layer_use() == kernels::cuda::DecoderLayerUse::every_kind
                      ? "; a decoding step's llama-style layers as one kernel each (MLXRT_CUDA_L3_LAYER=1; "
                        "kernels/cuda/decoder_layer.h)"
                      : "; a decoding step's 4-bit llama-style layers, and dense ones of at most 128 MiB, as one "
                        "kernel each (kernels/cuda/decoder_layer.h; MLXRT_CUDA_L3_LAYER=0 turns it off)") +
           (kernels::cuda::dequantized_gemm_min_rows() > 0
                ? "; a prefill's affine products of at least " +
                      std::to_string(kernels::cuda::dequantized_gemm_min_rows()) +
                      " rows as the matrix dequantized, then a dense matmul (kernels/cuda/dequantized_gemm.h; "
                      "MLXRT_CUDA_L3_PREFILL_ROWS=0 turns it off)"
                : "");
  if (!kernels) return cpu ? "MLX's CPU kernels" : "MLX's GPU kernels";
  std::string text = std::string("mlxrt CPU kernels (") + kernels->instruction_set() + ", " +
                     std::to_string(kernels->threads()) + " threads)";
  if (kernels->l3())
    text += std::string(" with L3 int8-activation quantized matmuls (") + kernels->l3_instruction_set() + ")";
  return text;
}

/** Loads the model at `tier` and runs every mode, each call's rows handed to `take(mode, rows)`;
 * returns the fidelity its resolved profile declares. */
ojson run_tier(const Args& a, const std::filesystem::path& dir, model::FidelityTier tier,
               const std::vector<int32_t>& ids, const std::function<void(Mode, const Rows&)>& take,
               bool float32 = false) {
  auto loaded = model::load_model(dir, tier_options(a, tier, float32));
  model::check_token_ids(*loaded.model, ids);
  for (Mode m : modes_of(a)) {
    const auto what = std::string(fidelity_name(tier)) + " " + mode_name(m);
    const auto take_rows = [&](const Rows& rows) { take(m, rows); };
    if (m == Mode::batch)
      batch_log_probs(*loaded.model, ids, a.batch, take_rows, what);
    else
      forward_log_probs(*loaded.model, ids, m == Mode::decode ? 1 : a.prefill_chunk, take_rows, what);
  }
  return model::to_json(loaded.profile.profile)["fidelity"];
}

/** A load's rows, kept per mode. */
std::function<void(Mode, const Rows&)> keep_rows(Reference& ref, size_t n) {
  return [&ref, n](Mode m, const Rows& rows) {
    ref.vocab = rows.width;
    auto& out = ref.rows[static_cast<int>(m)];
    if (out.empty()) out.resize(n * static_cast<size_t>(ref.vocab));
    std::copy(rows.data, rows.data + size_t(rows.count) * ref.vocab,
              out.begin() + static_cast<ptrdiff_t>(size_t(rows.first) * ref.vocab));
  };
}

/** Compares a load's rows with `ref`'s, position by position, into `results`. */
void compare_rows(const Reference& ref, Mode m, const Rows& rows, std::array<ModeResult, kModeCount>& results) {
  const int vocab = rows.width;
  if (vocab != ref.vocab)
    throw UnsupportedError("the model's logits differ in width between the two loads (" + std::to_string(ref.vocab) +
                           " and " + std::to_string(vocab) + ")");
  const float* ref_rows = ref.rows[static_cast<int>(m)].data();
  for (int i = 0; i < rows.count; ++i)
    add_position(results[static_cast<int>(m)], ref_rows + size_t(rows.first + i) * vocab, rows.data + size_t(i) * vocab,
                 vocab, rows.first + i);
}

/** Against and tier each measured against the model computed in float32 (--float32-reference). */
struct Float32Figures {
  std::array<ModeResult, kModeCount> against, tier;
};

/** The reference's rows, then the tier's compared with them position by position (and, with
 * `float32`, both compared with the float32 computation's rows, loaded first). */
std::array<ModeResult, kModeCount> measure(const Args& a, const std::filesystem::path& dir, const std::vector<int32_t>& ids,
                                  ojson& tier_fidelity, Float32Figures* float32) {
  const size_t n = ids.size() - 1;
  Reference exact;
  if (float32) {
    run_tier(a, dir, model::FidelityTier::l1, ids, keep_rows(exact, n), true);
    mx::clear_cache();
  }
  Reference ref;
  const auto keep = keep_rows(ref, n);
  run_tier(a, dir, a.against, ids, [&](Mode m, const Rows& rows) {
    keep(m, rows);
    if (float32) compare_rows(exact, m, rows, float32->against);
  });
  mx::clear_cache();  // the reference's weights are gone: give their memory back before the next load
  std::array<ModeResult, kModeCount> results;
  tier_fidelity = run_tier(a, dir, a.tier, ids, [&](Mode m, const Rows& rows) {
    compare_rows(ref, m, rows, results);
    if (float32) compare_rows(exact, m, rows, float32->tier);
  });
  return results;
}

std::string format(const char* spec, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}
std::string sci(double v) { return format("%.3e", v); }

void print_table(const Args& a, const ojson& report, const std::array<ModeResult, kModeCount>& results, bool pass) {
  const auto text = [&](const ojson& v) { return v.is_null() ? std::string("none") : v.get<std::string>(); };
  const char* tier = fidelity_name(a.tier);
  const char* against = fidelity_name(a.against);
  std::printf("fidelity %s against %s: %s\n", tier, against, text(report["model"]).c_str());
  std::printf("tier %s: %s (oracle %s)\n", tier, text(report["fidelity"]["claim"]).c_str(),
              text(report["fidelity"]["oracle"]).c_str());
  std::printf("kernels: %s: %s; %s: %s\n", against, text(report["kernels"]["against"]).c_str(), tier,
              text(report["kernels"]["tier"]).c_str());
  std::printf("corpus: %s, first %d of its %d tokens; prefill chunk %d\n\n", text(report["corpus"]).c_str(),
              a.tokens + 1, report["corpus_tokens"].get<int>(), a.prefill_chunk);
  std::printf("%-8s %10s %16s %16s %10s\n", "mode", "positions", "mean KL (nats)", "max KL (nats)", "agreement");
  for (Mode m : modes_of(a)) {
    const auto& r = results[static_cast<int>(m)];
    std::printf("%-8s %10d %16s %16s %9.2f%%\n", mode_name(m), r.positions, sci(r.mean_kl()).c_str(),
                sci(r.max_kl).c_str(), 100.0 * r.agreement());
  }
  std::printf("\ngate (mean KL <= %g, agreement >= %g in every mode): %s\n", kGateMeanKl, kGateAgreement,
              pass ? "pass" : "FAIL");
}

void run(const Args& a) {
  if (a.tokens < 1) throw UsageError("--tokens: must be at least 1");
  if (a.prefill_chunk < 1) throw UsageError("--prefill-chunk: must be at least 1");
  if (a.batch < 0 || a.batch > a.tokens)
    throw UsageError("--batch: expected 0 (no batch mode) to --tokens (" + std::to_string(a.tokens) + ") rows, got " +
                     std::to_string(a.batch));
  const auto dir = io::resolve_model_dir(a.model);
  size_t available = 0;
  const auto ids = corpus_tokens(a, dir, available);
  ojson report;
  report["model"] = dir.string();
  report["tier"] = fidelity_name(a.tier);
  report["against"] = fidelity_name(a.against);
  // Before anything loads: a tier that cannot run here fails now, not after the reference's run.
  report["kernels"] = {{"against", kernels_description(a, a.against)}, {"tier", kernels_description(a, a.tier)}};
  ojson tier_fidelity;
  Float32Figures float32;
  const auto results = measure(a, dir, ids, tier_fidelity, a.float32_reference ? &float32 : nullptr);
  report["fidelity"] = tier_fidelity;
  report["corpus"] = a.corpus.empty() ? "built-in" : a.corpus;
  report["corpus_tokens"] = available;
  report["tokens"] = a.tokens;
  report["prefill_chunk"] = a.prefill_chunk;
  if (a.batch > 0) report["batch"] = a.batch;
  bool pass = true;
  std::string failures;
  for (Mode m : modes_of(a)) {
    const auto& r = results[static_cast<int>(m)];
    report["modes"][mode_name(m)] = {{"positions", r.positions}, {"mean_kl", r.mean_kl()}, {"max_kl", r.max_kl},
                                     {"max_kl_position", r.max_kl_position}, {"agreement", r.agreement()}};
    if (!r.passes()) {
      pass = false;
      failures += std::string(failures.empty() ? "" : "; ") + mode_name(m) + ": mean KL " + sci(r.mean_kl()) +
                  ", agreement " + format("%.2f%%", 100.0 * r.agreement());
    }
  }
  report["gate"] = {{"mean_kl_at_most", kGateMeanKl}, {"agreement_at_least", kGateAgreement}, {"pass", pass}};
  if (a.float32_reference) {
    // Which tier is nearer the model computed in float32: on a bfloat16 checkpoint MLX's CPU
    // quantized matmul sums in bfloat16, so l1 itself sits some way from it.
    for (Mode m : modes_of(a)) {
      const auto& ra = float32.against[static_cast<int>(m)];
      const auto& rt = float32.tier[static_cast<int>(m)];
      report["float32_reference"][mode_name(m)] = {
          {"against", {{"mean_kl", ra.mean_kl()}, {"max_kl", ra.max_kl}, {"agreement", ra.agreement()}}},
          {"tier", {{"mean_kl", rt.mean_kl()}, {"max_kl", rt.max_kl}, {"agreement", rt.agreement()}}}};
    }
  }
  if (a.json) {
    std::cout << report.dump() << std::endl;
  } else {
    print_table(a, report, results, pass);
    if (a.float32_reference) {
      std::printf("\nagainst the model computed in float32 (mean KL, agreement):\n");
      std::printf("%-8s %24s %24s\n", "mode", fidelity_name(a.against), fidelity_name(a.tier));
      for (Mode m : modes_of(a)) {
        const auto& ra = float32.against[static_cast<int>(m)];
        const auto& rt = float32.tier[static_cast<int>(m)];
        std::printf("%-8s %14s %8.2f%% %14s %8.2f%%\n", mode_name(m), sci(ra.mean_kl()).c_str(), 100.0 * ra.agreement(),
                    sci(rt.mean_kl()).c_str(), 100.0 * rt.agreement());
      }
    }
  }
  std::fflush(stdout);
  if (a.gate && !pass)
    throw Error("--gate: fidelity " + std::string(fidelity_name(a.tier)) + " fails the gate (mean KL <= " +
                format("%g", kGateMeanKl) + " and agreement >= " + format("%g", kGateAgreement) +
                " in every mode): " + failures);
}

}  // namespace

void register_fidelity(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "fidelity", "Measure a fidelity tier against another (KL divergence and greedy agreement, teacher forced)");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model,-m", a->model,
                  "Model directory, HF cache snapshot, or Hugging Face repo id (org/name[@revision]) in the local "
                  "cache")
      ->required();
  add_fidelity_flag(cmd, a->tier, "--tier", "The tier measured");
  add_fidelity_flag(cmd, a->against, "--against", "The tier it is measured against (the reference)");
  cmd->add_flag("--float32-reference", a->float32_reference,
                "Also measure both tiers against the model computed in float32 (its floating tensors read as "
                "float32, at l1): which of them is nearer the exact computation");
  cmd->add_option("--tokens", a->tokens, "Positions measured: the corpus's first N + 1 tokens are fed")
      ->capture_default_str();
  cmd->add_option("--corpus", a->corpus, "A UTF-8 text file to measure on (default: the built-in corpus)");
  cmd->add_option("--prefill-chunk", a->prefill_chunk, "Tokens per model call in the prefill mode")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object instead of the table");
  cmd->add_flag("--gate", a->gate,
                "Exit with status 1 unless mean KL <= 1e-3 and greedy agreement >= 0.99 in every mode");
  cmd->add_option("--batch", a->batch,
                  "Also measure a batch mode: the positions as B rows decoded together one token a call through "
                  "a batched cache, as a server's batch runs (its products have B rows)")
      ->capture_default_str();
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  cmd->callback([a] { run(*a); });
}

}  // namespace mlxrt::cli
