#pragma once
/** `mlxrt server`: the model, the generation thread and the HTTP front, wired together. */
#include <memory>

#include "mlxrt/server/options.h"

namespace mlxrt::server {

class Server {
 public:
  /** Loads the model and binds the port (errors name the flag or file at fault). */
  explicit Server(ServerOptions options);
  ~Server();

  int port() const;
  /** Serves until stop() (callable from another thread). */
  void serve();
  void stop();

 private:
  struct Parts;
  ServerOptions options_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace mlxrt::server
