#pragma once
/** A deadline on reading each request, which cpp-httplib 0.11 lacks: its read timeout bounds one
 * recv, so a client that sends a header (or body) byte every few seconds holds its connection's
 * thread for as long as it likes, and enough of them hold every thread (--http-threads).
 *
 * A connection must deliver its header block within `header_timeout_s` (counted from accept, or on
 * a kept-alive connection from the end of its previous response) and its body within
 * `body_timeout_s` of the headers. A watchdog thread shuts a late connection down, which wakes the
 * thread blocked reading it: httplib then closes it. A late body is first answered 408; a late
 * header block is only closed, as nginx and Go do (a kept-alive connection that is merely idle
 * must not receive a response to a request it has not sent). A connection whose request is being
 * handled (queued for the model, generating, streaming) is never touched; one still waiting for a
 * connection thread (all --http-threads busy) is counted from accept like any other, unless its
 * whole header block has arrived (the socket's buffer shows it): then the client has done its part
 * and the wait is the server's, so it keeps its place until a thread reads it (and its body, if
 * late, is cut by the body deadline from then).
 *
 * httplib shows neither its sockets nor the phases of a request, so the watchdog finds the
 * server's accepted sockets in /proc/self/fd (local port = the server's, with a peer), and the
 * HTTP front reports each request's phases by the peer address httplib records for it. A
 * connection is (fd, peer): a reused descriptor is a new connection, and the peer is checked again
 * right before a shutdown. Deadlines are kept to within one tick of the watchdog. */
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mlxrt::server {

enum class ReadPhase {
  headers,   // waiting for the request's header block
  body,      // headers read, the body not yet
  handling,  // a route is answering the request: no deadline
};

class ReadDeadline {
 public:
  /** Watches the connections accepted on `local_port`; a timeout of 0 means none for that phase.
   * `body_timeout_reply` is written to a connection whose body is late, before it is shut down;
   * `on_timeout` is called (from the watchdog thread) for each connection cut. */
  ReadDeadline(int local_port, double header_timeout_s, double body_timeout_s, std::string body_timeout_reply,
               std::function<void(ReadPhase)> on_timeout);
  /** Stops and joins the watchdog. */
  ~ReadDeadline();
  ReadDeadline(const ReadDeadline&) = delete;
  ReadDeadline& operator=(const ReadDeadline&) = delete;

  /** The request's header block has been read (its body, if any, not yet). */
  void headers_read(const std::string& peer_addr, int peer_port);
  /** A route has started answering the request. */
  void handling(const std::string& peer_addr, int peer_port);
  /** The response has been written; the connection may carry another request. Returns whether the
   * watchdog cut this request (its body was late), so that it can be counted as a 408. */
  bool answered(const std::string& peer_addr, int peer_port);

 private:
  using Clock = std::chrono::steady_clock;
  using Peer = std::pair<std::string, int>;
  struct Connection {
    int fd = -1;  // -1: reported by the front before the watchdog has seen its socket
    ReadPhase phase = ReadPhase::headers;
    Clock::time_point since;    // when the phase began
    Clock::time_point touched;  // the last report or first sighting
    bool cut = false;
  };
  struct Socket {
    int fd;
    Peer peer;
  };

  void mark(const std::string& peer_addr, int peer_port, ReadPhase phase);
  void watch();
  /** Folds one scan of the sockets (started at `scan_start`) into connections_; with mutex_ held. */
  void update(const std::vector<Socket>& sockets, Clock::time_point scan_start);
  /** Cuts the connections past their deadline; with mutex_ held. Returns the phases cut. */
  std::vector<ReadPhase> cut_late(Clock::time_point now);
  enum class Cut { done, gone, retry };
  /** Whether `fd`, still the connection from `peer`, holds a whole header block that no thread has
   * read yet: the client sent its headers in time and waits on the server, so it is not cut. */
  bool header_block_waiting(int fd, const Peer& peer) const;
  /** Shuts down `fd` if it still holds the connection from `peer` (after writing the 408 when
   * `reply`): done; gone when the descriptor closed or holds something else; retry otherwise. */
  Cut shut_down(int fd, const Peer& peer, bool reply) const;

  const int local_port_;
  const Clock::duration header_timeout_, body_timeout_, tick_;
  const std::string body_timeout_reply_;
  const std::function<void(ReadPhase)> on_timeout_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<Peer, Connection> connections_;
  Clock::time_point last_scan_;
  bool stopping_ = false;
  std::thread watchdog_;  // last: started once everything above is set up
};

}  // namespace mlxrt::server
