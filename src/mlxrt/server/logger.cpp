#include "mlxrt/server/logger.h"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "mlxrt/util/errors.h"

namespace mlxrt::server {

namespace {

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "DEBUG";
    case LogLevel::info: return "INFO";
    case LogLevel::warning: return "WARNING";
    case LogLevel::error: return "ERROR";
    default: return "CRITICAL";
  }
}

}  // namespace

void Logger::log(LogLevel level, const std::string& message) {
  if (!enabled(level)) return;
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
  std::lock_guard lock(mutex_);
  std::fprintf(stderr, "%s,%03d - %s - %s\n", stamp, static_cast<int>(ms), level_name(level), message.c_str());
  std::fflush(stderr);
}

LogLevel parse_log_level(const std::string& name) {
  if (name == "DEBUG") return LogLevel::debug;
  if (name == "INFO") return LogLevel::info;
  if (name == "WARNING") return LogLevel::warning;
  if (name == "ERROR") return LogLevel::error;
  if (name == "CRITICAL") return LogLevel::critical;
  throw UsageError("--log-level: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got '" + name + "'");
}

}  // namespace mlxrt::server
