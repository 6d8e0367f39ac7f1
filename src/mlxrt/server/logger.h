#pragma once
/** The server log on stderr, in mlx_lm.server's layout ("<time> - <LEVEL> - <message>"). One
 * Logger is owned by the server and shared by reference; lines from many threads do not mix. */
#include <mutex>
#include <string>

#include "mlxrt/server/options.h"

namespace mlxrt::server {

class Logger {
 public:
  explicit Logger(LogLevel level) : level_(level) {}
  void log(LogLevel level, const std::string& message);
  void debug(const std::string& m) { log(LogLevel::debug, m); }
  void info(const std::string& m) { log(LogLevel::info, m); }
  void warning(const std::string& m) { log(LogLevel::warning, m); }
  void error(const std::string& m) { log(LogLevel::error, m); }
  bool enabled(LogLevel level) const { return level >= level_; }

 private:
  LogLevel level_;
  std::mutex mutex_;
};

/** "DEBUG" / "INFO" / ... -> LogLevel; UsageError naming --log-level otherwise. */
LogLevel parse_log_level(const std::string& name);

}  // namespace mlxrt::server
