"""Slow clients cannot hold the server's threads: a connection that trickles its header block (or
its body) a byte at a second is closed once --header-timeout (--body-timeout) has passed, so a
handful of them do not starve /health on a server of four connection threads; a connection whose
header block has all arrived is not cut for waiting on a thread (the wait is the server's); a
request being answered (a long streamed or waited-for generation) is never cut, whatever it
outlasts."""
import http.client
import re
import select
import socket
import threading
import time

import pytest

from conftest import start_mlxrt, stop

CHAT = "/v1/chat/completions"
DEADLINE = 2.0  # --header-timeout and --body-timeout
# The watchdog cuts within a tick of the deadline; a loaded two-core machine may add seconds more.
LATEST = DEADLINE + 6.0
TRICKLE_FOR = 25.0  # how long a slow client keeps sending if nobody stops it


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    running = start_mlxrt(model_dir, tmp_path_factory, extra=[
        "--http-threads", "4", "--header-timeout", str(DEADLINE), "--body-timeout", str(DEADLINE)])
    yield running
    stop(running)


class Trickler(threading.Thread):
    """Sends `head` at once, then `trickle` one byte a second, until the server closes the
    connection (recv gives b'' or a reset) or TRICKLE_FOR seconds have passed."""

    def __init__(self, port, head, trickle):
        super().__init__(daemon=True)
        self.port, self.head, self.trickle = port, head, trickle
        self.opened = self.closed = None
        self.received = b""

    def run(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.opened = time.monotonic()
        try:
            sock.settimeout(1.0)
            if self.head:
                sock.sendall(self.head)
            for byte in self.trickle:
                if time.monotonic() - self.opened > TRICKLE_FOR:
                    return
                sock.sendall(bytes([byte]))
                while True:  # what the server sent in the second until the next byte
                    try:
                        data = sock.recv(4096)
                    except socket.timeout:
                        break
                    if not data:
                        self.closed = time.monotonic()
                        return
                    self.received += data
        except OSError:  # reset, or a send after the server's close
            self.closed = time.monotonic()
        finally:
            sock.close()


def run_tricklers(server, head, trickle, count):
    clients = [Trickler(server.port, head, trickle) for _ in range(count)]
    for c in clients:
        c.start()
    # All four connection threads are held by them now, the rest queued; /health queues behind them.
    # Its header block arrives at once, so however long it waits for a thread it is not cut.
    time.sleep(DEADLINE - 0.3)
    t0 = time.monotonic()
    status, _, body = server.request("GET", "/health", timeout=30)
    health_seconds = time.monotonic() - t0
    for c in clients:
        c.join(timeout=TRICKLE_FOR + 10)
    return clients, status, health_seconds


def read_timeouts(server):
    """mlxrt_http_read_timeouts_total by phase."""
    _, _, raw = server.request("GET", "/metrics")
    found = re.findall(r'^mlxrt_http_read_timeouts_total{phase="(\w+)"} (\d+)$', raw.decode(), re.M)
    return {phase: int(n) for phase, n in found}


def counted(server, before, at_least):
    """The timeouts counted since `before` (both phases), once `at_least` are (the watchdog counts
    each just after closing it: allow it a moment)."""
    for _ in range(50):
        now = read_timeouts(server)
        delta = {phase: now[phase] - before[phase] for phase in now}
        if sum(delta.values()) >= at_least:
            break
        time.sleep(0.1)
    return delta


def test_header_tricklers_are_closed_and_health_answers(server):
    before = read_timeouts(server)
    # A request line and headers that would take minutes at a byte a second.
    partial = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    clients, status, health_seconds = run_tricklers(server, b"", partial, count=12)
    assert status == 200
    assert health_seconds < LATEST - 0.5, health_seconds
    for c in clients:
        assert c.closed is not None, "a header trickler was never closed"
        assert DEADLINE - 0.5 <= c.closed - c.opened <= LATEST, c.closed - c.opened
        assert c.received == b"", c.received  # a late header block is closed without an answer
    assert counted(server, before, len(clients)) == {"headers": len(clients), "body": 0}


def test_body_tricklers_are_closed_and_health_answers(server):
    before = read_timeouts(server)
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n")
    # Eight: four hold the threads, four queue with their headers sent (so they are not cut while
    # queued), get the threads when the first four are cut and hold them a body deadline more.
    # /health, queued behind them all, waits past its own header deadline and is still answered.
    clients, status, health_seconds = run_tricklers(server, head, b"{" + b" " * 99, count=8)
    assert status == 200
    assert DEADLINE < health_seconds < 2 * LATEST, health_seconds  # it waited past its own deadline
    for c in clients:
        assert c.closed is not None, "a body trickler was never closed"
        assert DEADLINE - 0.5 <= c.closed - c.opened <= 2 * LATEST, c.closed - c.opened
        # 408 when the client read it before the close; a reset may lose it.
        assert c.received == b"" or c.received.startswith(b"HTTP/1.1 408 "), c.received
    assert any(c.received.startswith(b"HTTP/1.1 408 ") for c in clients)
    # All cut reading their bodies: a queued one's headers had arrived, so it was not cut for the wait.
    assert counted(server, before, len(clients)) == {"headers": 0, "body": len(clients)}


def test_kept_alive_connection_deadline_counts_from_its_last_response(server):
    """Requests 1.2 s apart on one connection, for longer than the header deadline: each is
    answered (the deadline restarts with every response); left idle, the connection is closed
    without an answer."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.connect()
        sock = conn.sock
        # Four: httplib closes a connection after its fifth request (keep-alive max=5).
        for _ in range(4):
            conn.request("GET", "/health")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read() and conn.sock is sock  # the same connection
            answered = time.monotonic()
            time.sleep(DEADLINE * 0.6)
        ready, _, _ = select.select([sock], [], [], LATEST)
        assert ready and sock.recv(1) == b""
        assert DEADLINE - 0.5 <= time.monotonic() - answered <= LATEST
    finally:
        conn.close()


def chat(max_tokens, stream):
    body = {"messages": [{"role": "user", "content": "Client number 0"}], "max_tokens": max_tokens}
    return {**body, "stream": True, "stream_options": {"include_usage": True}} if stream else body


def long_generation(server, stream, max_tokens):
    """One request of max_tokens: (seconds, completion tokens, finish reason)."""
    t0 = time.monotonic()
    if stream:
        events, _ = server.stream(CHAT, chat(max_tokens, True), timeout=300)
        assert events[-1] == "[DONE]"
        usage = events[-2]["usage"]
        finish = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]][-1]
        return time.monotonic() - t0, usage["completion_tokens"], finish
    status, r = server.post_json(CHAT, chat(max_tokens, False), timeout=300)
    assert status == 200, r
    return time.monotonic() - t0, r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "waited-for"])
def test_a_request_being_answered_is_not_cut(server, stream):
    # Enough tokens to outlast both deadlines (twice over), sized by how fast this machine decodes.
    seconds, n, _ = long_generation(server, stream, 64)
    max_tokens = max(64, int(64 * 3 * DEADLINE / max(seconds, 1e-3)))
    for _ in range(4):
        seconds, n, finish = long_generation(server, stream, max_tokens)
        assert (n, finish) == (max_tokens, "length")  # the whole answer, not a cut one
        if seconds > 2 * DEADLINE + 0.5:
            break
        max_tokens *= 2
    assert seconds > 2 * DEADLINE + 0.5, "the generation never outlasted the deadlines"
    status, _, _ = server.request("GET", "/health", timeout=30)
    assert status == 200
