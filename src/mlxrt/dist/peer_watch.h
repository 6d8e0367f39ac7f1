#pragma once
/** Ends a rank whose distributed run can no longer finish because a peer is gone.
 *
 * MLX's ring backend fails the transfers in flight when a peer vanishes, but the socket thread that
 * failed them stops serving: a collective queued after that one waits forever, and so does the
 * stream that runs it and whoever synchronizes with that stream (MLX's own error path does, while it
 * unwinds). Whether the rank reports the error or hangs is then a matter of timing.
 *
 * The watch holds the connections the backend opened to its peers (the TCP sockets that appeared
 * while the group was joined). Once one of them is hung up, it sends a no-op task down every CPU
 * stream (where the ring runs its collectives) and waits for it; a stream that does not reach it in
 * `stuck_after` is stuck on the lost peer, and the rank ends with an error naming that. A rank
 * finishing its own work after a peer's normal exit passes the probe and is left alone. */
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace mlxrt::dist {

/** An open file descriptor and the object behind it (a descriptor number reused for something else
 * is not the connection that was recorded). */
struct OpenSocket {
  int fd;
  dev_t device;
  ino_t inode;
};

/** The connected stream (TCP) sockets this process holds now. */
std::vector<OpenSocket> connected_stream_sockets();

/** Those in `after` that are not in `before`. */
std::vector<OpenSocket> opened_between(const std::vector<OpenSocket>& before, const std::vector<OpenSocket>& after);

/** Blocks until one of `peers` (those still the connection recorded) has bytes to read or is hung
 * up or in error, or `at_most` has passed; returns at once where none of them is still open. Why:
 * MLX's ring backend polls its sockets without pause while a receive is pending, so a rank that
 * enters a collective long before its peers keeps a core busy for the whole wait; a rank that waits
 * here first enters it once the first peer's bytes have arrived (the backend reads a socket only
 * for a pending receive, so they wait in the socket until then). */
void wait_for_peer_data(const std::vector<OpenSocket>& peers, std::chrono::milliseconds at_most);

class PeerWatch {
 public:
  PeerWatch(std::vector<OpenSocket> peers, std::chrono::milliseconds stuck_after = std::chrono::seconds(3));
  /** Stops and joins the watch (the run ended by itself). */
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

 private:
  void watch();
  /** True once a recorded connection is hung up or in error (and still the one recorded). */
  bool a_peer_hung_up() const;
  /** False when some CPU stream does not run a no-op task within `stuck_after_` (or the watch is
   * stopped meanwhile, then true). */
  bool streams_drain();
  /** Sleeps `d` unless stopped first; returns false when stopped. */
  bool sleep_for(std::chrono::milliseconds d);

  std::vector<OpenSocket> peers_;
  std::chrono::milliseconds stuck_after_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above is set
};

}  // namespace mlxrt::dist
