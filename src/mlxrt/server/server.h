#pragma once
/** `mlxrt server`: the model, the generation thread and the HTTP front, wired together. */
#include <memory>

#include "mlxrt/server/options.h"

namespace mlxrt::server {

class Server {
 public:
  /** Loads the model and binds the port (errors name the flag or file at fault). Distributed
   * (options.parallel), every rank loads its part of the model and only rank 0 binds the port:
   * the others run rank 0's requests with it (see Lockstep). */
  explicit Server(ServerOptions options);
  ~Server();

  /** The bound port (0 on a rank other than 0). */
  int port() const;
  /** Serves until stop() (callable from another thread); a rank other than 0 follows rank 0
   * until rank 0 stops. Error when the generation loop failed (distributed: a rank has gone). */
  void serve();
  void stop();

 private:
  /** --warm-up: queues the prefill warm-up (generate/prefill_warm_up.h) on the generation thread. */
  void warm_up();
  struct Parts;
  ServerOptions options_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace mlxrt::server
