#pragma once
/** Typed errors. Thrown inside the runtime, caught at the edges (CLI, HTTP), where the message is
 * shown as it is: every message names the file, field or parameter and what was expected. */
#include <stdexcept>
#include <string>

namespace mlxrt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** A command-line flag or request parameter is wrong. */
class UsageError : public Error {
 public:
  using Error::Error;
};

/** A file (config.json, tokenizer.json, ...) is missing, unreadable or malformed. */
class ConfigError : public Error {
 public:
  using Error::Error;
};

/** Weights are missing, unexpected, mis-shaped, or their container is corrupt. */
class WeightsError : public Error {
 public:
  using Error::Error;
};

/** The model cannot be run: unsupported model_type, profile mismatch, missing capability. */
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

}  // namespace mlxrt
