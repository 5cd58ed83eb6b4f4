#!/usr/bin/env python3
"""delayproxy_*: the latency proxy of the remote benchmarks (tools/delayproxy.c).

Why a test for a test tool: bench/remote.sh and bench/remote_latency.py
read issue #10's "20 ms per request / no delay" ratio off this proxy.  If
it delayed requests one after the other instead of side by side, or not
at all, or dropped a byte, the ratio would blame or flatter chute's
read-ahead for the proxy's fault.  So each property the figure relies on is
checked here against small loopback servers written below (no S3 server
needed):

  delay        a request answered at once by the server takes >= D ms
               through the proxy, on every request of a kept-alive
               connection; what the server sends unprompted arrives with no
               delay; 4 MiB echoed through it come back intact
  parallel     50 connections each sending a request at once, D = 100 ms:
               all answered in well under 50 x D (they are delayed side by
               side), each after >= D; --stats counts 50 connections, 50
               sends of their bytes, 50 held at once
  half_close   a client's FIN reaches the server after its last byte (the
               server sees all of them, then EOF), the server's answer and
               its FIN reach the client; the proxy then holds no descriptor
               for the connection
  resets       no upstream listening -> the client's connection is closed
               at once; a server that resets -> the client sees the
               connection end; a client that resets -> the server's end
               closes; descriptors back to where they started
  backpressure a server that does not read: the client can push only a
               bounded number of bytes (the proxy stops reading), and a
               client that does not read: the server can push only a
               bounded number; once both read again every byte arrives
               intact

Every case ends with SIGTERM: the proxy must exit 0 with nothing on
stderr (in the ASan build LeakSanitizer checks that every chunk and
connection was freed).
"""
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402


def binary():
    p = os.environ.get("CHUTE_DELAYPROXY")
    if not p or not os.path.exists(p):
        raise T.Skip("CHUTE_DELAYPROXY not set (run through ctest)")
    return p


class Proxy:
    def __init__(self, ctx, upstream_port, delay_ms, *extra):
        self.ctx = ctx
        self.p = subprocess.Popen([binary(), "--upstream", "127.0.0.1:%d" % upstream_port,
                                   "--delay-ms", str(delay_ms)] + list(extra),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.p.stdout.readline().decode()
        if not line.startswith("port "):
            self.p.kill()
            raise RuntimeError("delayproxy did not start: %r %r" % (line, self.p.stderr.read()))
        self.port = int(line.split()[1])

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.p.pid))

    def fds_settle(self, want, limit=5.0):
        t = time.time() + limit
        while self.fds() != want and time.time() < t:
            time.sleep(0.02)
        return self.fds()

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            out, err = self.p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            self.ctx.check(False, "delayproxy ignored SIGTERM for 30 s")
        err = err.decode("utf-8", "replace")
        self.ctx.check(self.p.returncode == 0, "delayproxy exit %d on SIGTERM: %s"
                       % (self.p.returncode, err[-3000:]))
        self.ctx.check(err.strip() == "", "delayproxy wrote to stderr: %s" % err[-3000:])


class Server:
    """A loopback TCP server running handler(conn) per connection in a thread."""

    def __init__(self, handler):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(128)
        self.port = self.s.getsockname()[1]
        self.handler = handler
        self.threads = []
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                c, _ = self.s.accept()
            except OSError:
                return
            t = threading.Thread(target=self.run, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def run(self, c):
        try:
            self.handler(c)
        except (OSError, EOFError):  # the client went away: its business
            pass
        finally:
            c.close()

    def close(self):
        self.s.close()


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        x = s.recv(min(1 << 20, n - len(b)))
        if not x:
            raise EOFError("connection ended after %d of %d bytes" % (len(b), n))
        b += x
    return bytes(b)


def recv_line(s):
    b = bytearray()
    while not b.endswith(b"\n"):
        x = s.recv(1)
        if not x:
            raise EOFError("connection ended inside a line")
        b += x
    return bytes(b)


def line_server(greet=False):
    """Answers each line at once with 'ok <line>'; greets first if asked."""
    def h(c):
        if greet:
            c.sendall(b"hello\n")
        while True:
            line = recv_line(c)
            if line == b"echo\n":  # then: 8-byte length, that many bytes echoed back
                n = int(recv_exact(c, 8))
                c.sendall(recv_exact(c, n))
            else:
                c.sendall(b"ok " + line)
    return Server(h)


def delay(ctx):
    D = 300
    srv = line_server(greet=True)
    px = Proxy(ctx, srv.port, D)
    try:
        base = px.fds()
        t0 = time.perf_counter()
        s = px.connect()
        g = recv_line(s)
        tg = time.perf_counter() - t0
        ctx.check(g == b"hello\n", "greeting %r" % g)
        # server -> client is not delayed: well under D (generous for a loaded machine)
        ctx.check(tg < D / 1000.0 / 2, "the server's bytes took %.0f ms (want < %d)" % (tg * 1e3, D // 2))
        for i in range(3):  # every request of a kept-alive connection is delayed
            t0 = time.perf_counter()
            s.sendall(b"req %d\n" % i)
            r = recv_line(s)
            dt = time.perf_counter() - t0
            ctx.check(r == b"ok req %d\n" % i, "answer %r" % r)
            ctx.check(dt >= D / 1000.0, "request %d answered after %.1f ms, want >= %d" % (i, dt * 1e3, D))
            ctx.check(dt < D / 1000.0 + 2.0, "request %d answered after %.1f ms" % (i, dt * 1e3))
        data = os.urandom(4 << 20)
        s.sendall(b"echo\n%08d" % len(data))
        got = []

        def rd():
            got.append(recv_exact(s, len(data)))
        t = threading.Thread(target=rd)
        t.start()
        s.sendall(data)
        t.join(60)
        ctx.check(got and got[0] == data, "4 MiB echoed through the proxy differ")
        s.close()
        n = px.fds_settle(base)
        ctx.check(n == base, "after the connection closed the proxy holds %d fds, had %d" % (n, base))
    finally:
        px.stop()
        srv.close()


def parallel(ctx):
    D, N = 100, 50
    srv = line_server()
    st = os.path.join(ctx.scratch("parallel"), "stats")
    px = Proxy(ctx, srv.port, D, "--stats", st)
    try:
        socks = [px.connect() for _ in range(N)]
        go = threading.Barrier(N + 1)
        took = [None] * N

        def one(i):
            go.wait()
            t0 = time.perf_counter()
            socks[i].sendall(b"r%d\n" % i)
            r = recv_line(socks[i])
            took[i] = time.perf_counter() - t0 if r == b"ok r%d\n" % i else -1
        ts = [threading.Thread(target=one, args=(i,)) for i in range(N)]
        for t in ts:
            t.start()
        go.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join(60)
        wall = time.perf_counter() - t0
        ctx.check(all(x is not None and x >= 0 for x in took), "some answers wrong or missing: %r" % took)
        ok = [x for x in took if x is not None and x >= 0]
        ctx.check(ok and min(ok) >= D / 1000.0, "a request answered in %.1f ms < %d ms"
                  % (min(ok or [0]) * 1e3, D))
        # serially this would be N x D = 5 s; side by side ~D plus thread start-up
        ctx.check(wall < N * D / 1000.0 / 4, "%d requests at %d ms took %.2f s together (serial: %.1f s)"
                  % (N, D, wall, N * D / 1000.0))
        ctx.note("%d requests, %d ms each: %.3f s wall, max %.1f ms"
                 % (N, D, wall, max(ok or [0]) * 1e3))
        for s in socks:
            s.close()
    finally:
        px.stop()
        srv.close()
    with open(st) as f:
        kv = f.read().split()
    got = dict(zip(kv[0::2], kv[1::2]))
    want = {"connections": str(N), "sends": str(N), "held_max": str(N),
            "bytes": str(sum(len(b"r%d\n" % i) for i in range(N)))}
    ctx.check(all(got.get(k) == v for k, v in want.items()), "--stats: %r, want %r" % (got, want))
    ctx.check(0 < float(got.get("held_mean", 0)) <= N, "--stats held_mean %r" % got.get("held_mean"))


def half_close(ctx):
    D = 100
    seen = {}

    def h(c):  # read to EOF, then answer with the count and digest, then close
        b = bytearray()
        while True:
            x = c.recv(1 << 16)
            if not x:
                break
            b += x
        seen["n"] = len(b)
        c.sendall(b"%d %s\n" % (len(b), hashlib.sha256(b).hexdigest().encode()))
    srv = Server(h)
    px = Proxy(ctx, srv.port, D)
    try:
        base = px.fds()
        data = os.urandom(3 << 20)
        s = px.connect()
        t0 = time.perf_counter()
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        r = b""
        while True:
            x = s.recv(4096)
            if not x:
                break
            r += x
        dt = time.perf_counter() - t0
        ctx.check(r == b"%d %s\n" % (len(data), hashlib.sha256(data).hexdigest().encode()),
                  "the server saw %r (want all %d bytes before EOF)" % (r, len(data)))
        ctx.check(dt >= D / 1000.0, "answer to a half-closed request after %.1f ms < %d" % (dt * 1e3, D))
        s.close()
        n = px.fds_settle(base)
        ctx.check(n == base, "after a half-closed exchange the proxy holds %d fds, had %d" % (n, base))
    finally:
        px.stop()
        srv.close()


def rst(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()


def ends(s, limit=5.0):
    """True when the peer ends the connection (EOF or reset) within limit s."""
    s.settimeout(limit)
    try:
        while s.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def resets(ctx):
    # no server: a port that was free a moment ago
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    dead_port = t.getsockname()[1]
    t.close()
    px = Proxy(ctx, dead_port, 50)
    try:
        base = px.fds()
        for _ in range(20):
            try:
                s = px.connect()
            except ConnectionResetError:  # the reset came before connect() returned
                continue
            ctx.check(ends(s), "no upstream: the client's connection stays open")
            s.close()
        ctx.check(px.fds_settle(base) == base, "no upstream: fds leaked")
    finally:
        px.stop()

    server_ended = threading.Event()

    def h(c):
        line = recv_line(c)
        if line == b"reset\n":
            rst(c)
            return
        c.settimeout(10)  # "wait": until the client's reset reaches us
        try:
            while c.recv(4096):
                pass
        except (ConnectionResetError, socket.timeout):
            pass
        server_ended.set()
    srv = Server(h)
    px = Proxy(ctx, srv.port, 50)
    try:
        base = px.fds()
        s = px.connect()
        s.sendall(b"reset\n")
        ctx.check(ends(s), "the server reset: the client's connection stays open")
        s.close()
        s = px.connect()
        s.sendall(b"wait\n")
        time.sleep(0.2)  # the line has reached the server
        rst(s)
        ctx.check(server_ended.wait(5), "the client reset: the server's connection stays open")
        # many short connections, some closed with data still held
        for i in range(200):
            s = px.connect()
            s.sendall(b"wait\n")
            if i % 2:
                rst(s)
            else:
                s.close()
        n = px.fds_settle(base, 10)
        ctx.check(n == base, "after resets the proxy holds %d fds, had %d" % (n, base))
    finally:
        px.stop()
        srv.close()


def backpressure(ctx):
    D = 20
    BOUND = 48 << 20  # kernel socket buffers on both sides plus the 1 MiB queue
    TOTAL = 128 << 20
    release = threading.Event()
    got_up = {}
    sent_down = {"n": 0}
    payload = os.urandom(1 << 20)

    def h(c):
        line = recv_line(c)
        if line == b"up\n":  # do not read until released, then hash what came
            release.wait(60)
            hs, n = hashlib.sha256(), 0
            while n < TOTAL:
                x = c.recv(1 << 20)
                if not x:
                    break
                hs.update(x)
                n += len(x)
            got_up["n"], got_up["h"] = n, hs.hexdigest()
            c.sendall(b"done\n")
        else:  # push TOTAL bytes as fast as the client takes them
            for _ in range(TOTAL // len(payload)):
                c.sendall(payload)
                sent_down["n"] += len(payload)
    srv = Server(h)
    px = Proxy(ctx, srv.port, D)
    try:
        # client -> server against a server that does not read
        s = px.connect()
        s.sendall(b"up\n")
        s.setblocking(False)
        pushed, idle_since, want = 0, time.time(), hashlib.sha256()
        blob = b"".join(payload for _ in range(1))
        while pushed < TOTAL and time.time() - idle_since < 2.0:
            try:
                k = s.send(blob[pushed % len(blob):][:TOTAL - pushed])
                want.update(blob[pushed % len(blob):][:k])
                pushed += k
                idle_since = time.time()
            except BlockingIOError:
                time.sleep(0.01)
        ctx.check(pushed < BOUND, "a server that does not read: the client pushed %d MiB"
                  % (pushed >> 20))
        ctx.note("client pushed %.1f MiB before blocking" % (pushed / 2**20))
        release.set()
        s.setblocking(True)
        while pushed < TOTAL:
            k = s.send(blob[pushed % len(blob):][:TOTAL - pushed])
            want.update(blob[pushed % len(blob):][:k])
            pushed += k
        s.settimeout(60)
        ctx.check(recv_line(s) == b"done\n", "no answer after the server read")
        ctx.check(got_up.get("n") == TOTAL and got_up.get("h") == want.hexdigest(),
                  "client -> server: %s of %d bytes, digest %s"
                  % (got_up.get("n"), TOTAL, "ok" if got_up.get("h") == want.hexdigest() else "differs"))
        s.close()

        # server -> client against a client that does not read
        s = px.connect()
        s.sendall(b"down\n")
        last, t = -1, time.time()
        while time.time() - t < 10:
            time.sleep(0.5)
            if sent_down["n"] == last:
                break
            last = sent_down["n"]
        ctx.check(sent_down["n"] < BOUND, "a client that does not read: the server pushed %d MiB"
                  % (sent_down["n"] >> 20))
        ctx.note("server pushed %.1f MiB before blocking" % (sent_down["n"] / 2**20))
        hs, n = hashlib.sha256(), 0
        s.settimeout(60)
        while n < TOTAL:
            x = s.recv(1 << 20)
            if not x:
                break
            hs.update(x)
            n += len(x)
        want = hashlib.sha256()
        for _ in range(TOTAL // len(payload)):
            want.update(payload)
        ctx.check(n == TOTAL and hs.hexdigest() == want.hexdigest(),
                  "server -> client: %d of %d bytes, digest %s"
                  % (n, TOTAL, "ok" if hs.hexdigest() == want.hexdigest() else "differs"))
        s.close()
    finally:
        px.stop()
        srv.close()


cases = {"delay": delay, "parallel": parallel, "half_close": half_close, "resets": resets,
         "backpressure": backpressure}

if __name__ == "__main__":
    sys.exit(T.main(cases))
