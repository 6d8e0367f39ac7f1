#pragma once
// The HF oracle's expectations (tools/tokenizer_oracle.py), produced once per test process into a
// temporary directory (removed at exit) by the project's Python environment.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::tokenizer::testing {

inline std::string unhex(const std::string& h) {
  std::string out;
  out.reserve(h.size() / 2);
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

inline std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Oracle {
  nlohmann::json cases = nlohmann::json::object();
  std::string log;  // the oracle's output when it failed
  std::filesystem::path dir;
  ~Oracle() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

/** Runs the oracle once. MLXRT_TOKENIZER_CASES=path reuses a cases.json made earlier (while
 * iterating); its tokenizer directories must still exist. */
inline const Oracle& oracle() {
  static const Oracle result = [] {
    namespace fs = std::filesystem;
    Oracle o;
    if (const char* reuse = std::getenv("MLXRT_TOKENIZER_CASES")) {
      o.cases = nlohmann::json::parse(slurp(reuse));
      return o;
    }
    o.dir = fs::temp_directory_path() / ("mlxrt_tokenizer_oracle_" + std::to_string(::getpid()));
    fs::create_directories(o.dir);
    std::string cmd = std::string(MLXRT_SOURCE_DIR) + "/.venv/bin/python " + MLXRT_SOURCE_DIR +
                      "/tools/tokenizer_oracle.py --shared " + MLXRT_SHARED_DIR + " --out " + o.dir.string() +
                      " > " + (o.dir / "log.txt").string() + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      o.log = slurp(o.dir / "log.txt");
      return o;
    }
    o.cases = nlohmann::json::parse(slurp(o.dir / "cases.json"));
    return o;
  }();
  return result;
}

}  // namespace mlxrt::tokenizer::testing
