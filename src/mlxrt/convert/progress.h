#pragma once
/** Progress of a long job on stderr: a redrawn bar when stderr is a terminal, otherwise one
 * line per 10 percent (so logs stay readable). The last state is finished on destruction. */
#include <cstdint>
#include <string>

namespace mlxrt::convert {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled = true);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /** Moves to `done` of `total`, with `detail` (the item being worked on) shown on a terminal. */
  void update(uint64_t done, const std::string& detail = "");

 private:
  std::string label_;
  uint64_t total_;
  bool enabled_, tty_;
  int last_percent_ = -1;
  bool drawn_ = false;
};

}  // namespace mlxrt::convert
