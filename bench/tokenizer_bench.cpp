// Encode throughput of mlxrt's tokenizer: tokenizer_bench MODEL_DIR CORPUS [ADD_SPECIAL]
// CORPUS holds documents separated by NUL bytes; each is encoded once, one thread. Prints one JSON
// object: load and encode seconds, bytes, tokens, and a checksum of all ids (to compare with HF).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "mlxrt/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tokenizer_bench MODEL_DIR CORPUS\n";
    return 2;
  }
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto tok = mlxrt::tokenizer::Tokenizer::from_dir(argv[1]);
  auto t1 = clock::now();
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string corpus = ss.str();
  std::vector<std::string_view> docs;
  for (size_t pos = 0; pos <= corpus.size();) {
    size_t end = corpus.find('\0', pos);
    if (end == std::string::npos) end = corpus.size();
    docs.emplace_back(corpus.data() + pos, end - pos);
    pos = end + 1;
  }
  auto t2 = clock::now();
  uint64_t tokens = 0, checksum = 0;
  for (auto d : docs) {
    for (int32_t id : tok.encode(d, false)) {
      checksum = checksum * 1000003u + static_cast<uint64_t>(id);
      ++tokens;
    }
  }
  auto t3 = clock::now();
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("{\"load_s\": %.4f, \"encode_s\": %.4f, \"bytes\": %zu, \"tokens\": %llu, \"checksum\": %llu}\n",
              secs(t0, t1), secs(t2, t3), corpus.size(), static_cast<unsigned long long>(tokens),
              static_cast<unsigned long long>(checksum));
  return 0;
}
