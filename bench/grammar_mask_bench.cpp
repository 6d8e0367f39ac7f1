// Host cost of constrained decoding per token: grammar_mask_bench MODEL_DIR SCHEMA_FILE [STEPS]
// Builds the engine for the model's tokenizer and vocabulary, compiles the schema, then runs STEPS
// steps of what a constrained decode step adds: accept the previous token, compute the bitmask,
// apply it to [1, vocab] logits on the device. Tokens are drawn from the masked random logits (a
// random model's decoding); a finished value starts a new one. Prints one JSON object: engine build
// and schema compile seconds, and microseconds per step (mean, median, p90) of the masked draw, of
// its host part (accept + bitmask), and of the same draw from unmasked logits (what a step costs
// anyway).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>
#include <nlohmann/json.hpp>

#include "mlxrt/structured/grammar_constraint.h"

namespace mx = mlx::core;
using clock_type = std::chrono::steady_clock;

static double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: grammar_mask_bench MODEL_DIR SCHEMA_FILE [STEPS]\n";
    return 2;
  }
  const std::string dir = argv[1];
  const int steps = argc > 3 ? std::stoi(argv[3]) : 200;
  std::ifstream schema_in(argv[2]), config_in(dir + "/config.json");
  std::stringstream schema;
  schema << schema_in.rdbuf();
  const int vocab = nlohmann::json::parse(config_in).at("vocab_size").get<int>();
  auto tok = mlxrt::tokenizer::Tokenizer::from_dir(dir);
  const std::vector<int32_t> eos = tok.eos_token_ids();

  auto t0 = clock_type::now();
  mlxrt::structured::GrammarEngine engine(tok, vocab, eos);
  const double build_s = since(t0);
  t0 = clock_type::now();
  auto constraint = engine.json_schema(schema.str(), true, "schema");
  const double compile_s = since(t0);

  mx::random::seed(0);
  std::vector<double> masked_us, plain_us, host_us;
  int finished = 0;
  std::optional<int32_t> previous;
  for (int i = 0; i < steps; ++i) {
    auto logits = mx::random::normal({1, vocab});
    mx::eval(logits);
    auto t = clock_type::now();
    mx::eval(mx::random::categorical(logits));
    plain_us.push_back(since(t) * 1e6);
    t = clock_type::now();
    if (previous) constraint->accept(*previous);
    auto masked = constraint->mask(logits);  // the bitmask is computed here, on the host
    host_us.push_back(since(t) * 1e6);
    auto token = mx::random::categorical(masked);
    mx::eval(token);
    masked_us.push_back(since(t) * 1e6);
    previous = token.item<int32_t>();
    if (std::find(eos.begin(), eos.end(), *previous) != eos.end()) {
      constraint = engine.json_schema(schema.str(), true, "schema");  // cached: no recompilation
      previous.reset();
      ++finished;
    }
  }
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double mean = 0;
    for (double x : v) mean += x;
    return nlohmann::json{{"mean", mean / v.size()}, {"median", v[v.size() / 2]}, {"p90", v[v.size() * 9 / 10]}};
  };
  nlohmann::json out = {{"vocab", vocab}, {"engine_build_s", build_s}, {"schema_compile_s", compile_s},
                        {"steps", steps}, {"values_finished", finished},
                        {"masked_step_us", stats(masked_us)}, {"host_accept_and_bitmask_us", stats(host_us)}, {"plain_draw_us", stats(plain_us)}};
  std::cout << out.dump() << "\n";
}
