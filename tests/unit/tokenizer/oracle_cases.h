#pragma once
// The HF oracle's expectations (tools/tokenizer_oracle.py), produced once per test binary into a
// temporary directory by the project's Python environment.
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

/** Runs the oracle (once) and returns its cases.json; empty object if it failed. */
inline const nlohmann::json& oracle_cases() {
  static const nlohmann::json cases = [] {
    namespace fs = std::filesystem;
    // A cases.json made earlier can be reused while iterating: MLXRT_TOKENIZER_CASES=path.
    if (const char* reuse = std::getenv("MLXRT_TOKENIZER_CASES")) {
      std::ifstream in(reuse);
      std::stringstream ss;
      ss << in.rdbuf();
      return nlohmann::json::parse(ss.str());
    }
    fs::path out = fs::temp_directory_path() / ("mlxrt_tokenizer_oracle_" + std::to_string(::getpid()));
    std::string cmd = std::string(MLXRT_SOURCE_DIR) + "/.venv/bin/python " + MLXRT_SOURCE_DIR +
                      "/tools/tokenizer_oracle.py --shared " + MLXRT_SHARED_DIR + " --out " + out.string() +
                      " > " + out.string() + ".log 2>&1";
    if (std::system(cmd.c_str()) != 0) return nlohmann::json::object();
    std::ifstream in(out / "cases.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
  }();
  return cases;
}

}  // namespace mlxrt::tokenizer::testing
