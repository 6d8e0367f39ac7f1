// Whether MLX's array::is_available() tells a running evaluation from a finished one, on the
// default device, on the default stream and on a second one. `mlxrt server --join-prefill beside`
// polls it while a batch step runs (src/mlxrt/generate/batch_generator_beside.cpp); on an H100 its
// interrupt test saw every step finished by the time it looked (bench/RESULTS.md, twenty-eighth
// session), which this tells apart from a poll that reports too early. Each round times a chain of
// eight 4096-square products: how long async_eval took to return, whether the result was available
// at once, how many polls and microseconds until it was, and what an eval after that still waited.
// Usage: mlxrt_availability_probe [--size N] [--rounds R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <mlx/mlx.h>

namespace mx = mlx::core;
using Clock = std::chrono::steady_clock;

namespace {

double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

void probe(const mx::Stream& stream, const char* name, const mx::array& w, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    mx::StreamContext on(stream);
    auto y = w;
    for (int i = 0; i < 8; ++i) y = mx::matmul(y, w);
    auto total = mx::sum(y);
    const auto t0 = Clock::now();
    mx::async_eval(total);
    const auto t1 = Clock::now();
    const bool at_once = total.is_available();
    long polls = 0;
    while (!total.is_available()) ++polls;
    const auto t2 = Clock::now();
    mx::eval(total);
    const auto t3 = Clock::now();
    std::printf("%-8s round %d: async_eval %8.0f us | available at once %d | polls %10ld | until available %8.0f us | eval after %6.0f us\n",
                name, round, micros(t0, t1), at_once, polls, micros(t1, t2), micros(t2, t3));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int size = 4096, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--size")) size = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: mlxrt_availability_probe [--size N] [--rounds R]\n");
      return 2;
    }
  }
  // Scaled so that the chain of products stays finite.
  auto w = mx::multiply(mx::ones({size, size}), mx::array(1.0f / static_cast<float>(size)));
  mx::eval(w);
  probe(mx::default_stream(mx::default_device()), "default", w, rounds);
  probe(mx::new_stream(mx::default_device()), "second", w, rounds);
  return 0;
}
