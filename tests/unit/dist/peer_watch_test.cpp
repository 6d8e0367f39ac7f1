// PeerWatch: a rank whose CPU stream waits on a peer that is gone ends with an error; a rank whose
// peer left while its own streams are free is left alone.
#include "mlxrt/dist/peer_watch.h"

#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <mlx/scheduler.h>
#include <mlx/stream.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace mlxrt::dist {
namespace {

namespace mx = mlx::core;
using namespace std::chrono_literals;

/** A TCP connection over the loopback: our end (`ours`) and the peer's (`theirs`). */
class LoopbackConnection {
 public:
  LoopbackConnection() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener_, 1) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("loopback listener");
    ours_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (ours_ < 0 || ::connect(ours_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      throw std::runtime_error("loopback connect");
    theirs_ = ::accept(listener_, nullptr, nullptr);
    if (theirs_ < 0) throw std::runtime_error("loopback accept");
  }
  ~LoopbackConnection() {
    for (int fd : {listener_, ours_, theirs_})
      if (fd >= 0) ::close(fd);
  }
  LoopbackConnection(const LoopbackConnection&) = delete;
  LoopbackConnection& operator=(const LoopbackConnection&) = delete;

  /** The peer sends `n` bytes to us. */
  void send_to_ours(size_t n) {
    const std::string bytes(n, 'x');
    if (::send(theirs_, bytes.data(), n, 0) != static_cast<ssize_t>(n)) throw std::runtime_error("loopback send");
  }
  /** Our end reads what is there. */
  void read_ours(size_t n) {
    std::string bytes(n, '\0');
    if (::recv(ours_, bytes.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n)) throw std::runtime_error("loopback recv");
  }

  /** The peer goes away. */
  void hang_up_theirs() {
    ::close(theirs_);
    theirs_ = -1;
  }

 private:
  int listener_ = -1, ours_ = -1, theirs_ = -1;
};

TEST(PeerWatch, FindsTheConnectionsOpenedMeanwhileAndNotTheListener) {
  const auto before = connected_stream_sockets();
  LoopbackConnection connection;
  const auto fresh = opened_between(before, connected_stream_sockets());
  // Both ends are in this process: two connected sockets appeared; the listener is not connected.
  EXPECT_EQ(fresh.size(), 2u);
  connection.hang_up_theirs();
  EXPECT_EQ(opened_between(before, connected_stream_sockets()).size(), 1u);
}

// Milliseconds `f` takes.
template <typename F>
double elapsed_ms(F f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(WaitForPeerData, WakesOnBytesAndHangUpsAndStopsAtItsBound) {
  const auto before = connected_stream_sockets();
  LoopbackConnection connection;
  auto fresh = opened_between(before, connected_stream_sockets());
  ASSERT_EQ(fresh.size(), 2u);
  // Nothing to read: it waits its bound out.
  EXPECT_GE(elapsed_ms([&] { wait_for_peer_data(fresh, 200ms); }), 190.0);
  // Bytes sent before the wait, or during it, end it at once (they stay in the socket).
  connection.send_to_ours(3);
  EXPECT_LT(elapsed_ms([&] { wait_for_peer_data(fresh, 5s); }), 1000.0);
  EXPECT_LT(elapsed_ms([&] { wait_for_peer_data(fresh, 5s); }), 1000.0) << "the bytes were not taken";
  connection.read_ours(3);
  std::thread sender([&] {
    std::this_thread::sleep_for(100ms);
    connection.send_to_ours(1);
  });
  const double waited = elapsed_ms([&] { wait_for_peer_data(fresh, 5s); });
  sender.join();
  EXPECT_GE(waited, 90.0);
  EXPECT_LT(waited, 2000.0);
  connection.read_ours(1);
  // A hang-up ends it too; connections no longer open are not waited on at all.
  connection.hang_up_theirs();
  EXPECT_LT(elapsed_ms([&] { wait_for_peer_data(fresh, 5s); }), 1000.0);
  EXPECT_LT(elapsed_ms([] { wait_for_peer_data({}, 5s); }), 1000.0);
}

TEST(PeerWatchDeathTest, EndsARankWhoseStreamWaitsOnALostPeer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const auto before = connected_stream_sockets();
        LoopbackConnection connection;
        PeerWatch watch(opened_between(before, connected_stream_sockets()), 300ms);
        // A CPU stream blocked the way a collective on a lost peer blocks it: for good.
        std::promise<void> never;
        std::shared_future<void> blocked = never.get_future().share();
        mx::scheduler::enqueue(mx::new_stream(mx::Device::cpu), [blocked] { blocked.wait(); });
        connection.hang_up_theirs();
        std::this_thread::sleep_for(20s);
        std::_Exit(0);  // not reached when the watch works
      },
      testing::ExitedWithCode(1), "the connection to a peer of this distributed run was lost");
}

TEST(PeerWatch, LeavesARankWhoseStreamsAreFreeAfterItsPeerLeft) {
  const auto before = connected_stream_sockets();
  LoopbackConnection connection;
  const auto stream = mx::new_stream(mx::Device::cpu);
  {
    PeerWatch watch(opened_between(before, connected_stream_sockets()), 300ms);
    connection.hang_up_theirs();
    // Several probe rounds pass; the stream keeps taking work.
    std::this_thread::sleep_for(1200ms);
    std::promise<void> ran;
    auto done = ran.get_future();
    mx::scheduler::enqueue(stream, [&ran] { ran.set_value(); });
    EXPECT_EQ(done.wait_for(5s), std::future_status::ready);
  }  // the watch stops and joins
  SUCCEED();
}

}  // namespace
}  // namespace mlxrt::dist
