#!/usr/bin/env python3
"""faultproxy — an HTTP/1.1 proxy for the remote-source tests that puts
faults between chute and a real S3 server (tests/test_remote.py).

    faultproxy.py --upstream HOST:PORT --port-file F --stats F
                  [--mode 503|reset|none] [--every K] [--count C] [--delay-ms D]
                  [--log F] [--tls CERT KEY]

Every K-th request (1-based) gets the fault, C faults in all (0 = no
limit): "503" answers 503 with S3's <Code>SlowDown</Code> error document,
"reset" closes the connection with an RST and no answer.  Every request
is first delayed by D ms.  Other requests are forwarded unchanged (the
Host header too: SigV4 signed it).  When the upstream cannot be reached
(the server was killed) the client's connection is reset, as a dead
server's would be.  The stats file holds "requests faults" after every
request.  The chosen port is written to --port-file once listening.
--log appends "METHOD PATH" (the request line's target) per request, so a
test can see which keys a client asked for.  --tls makes the client's
side https with that certificate chain and key (the upstream stays
plain http): an S3 server behind a private CA (test_tls_ca.py).
"""
import argparse
import http.client
import http.server
import socket
import socketserver
import struct
import threading
import time

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


class State:
    lock = threading.Lock()
    requests = 0
    faults = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--stats", required=True)
    ap.add_argument("--mode", default="none")
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    a = ap.parse_args()
    uh, up = a.upstream.rsplit(":", 1)

    def reset(sock):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        except OSError:
            pass

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def handle_any(self):
            if a.delay_ms:
                time.sleep(a.delay_ms / 1000.0)
            with State.lock:
                State.requests += 1
                n = State.requests
                fault = (a.mode != "none" and n % a.every == 0
                         and (a.count == 0 or State.faults < a.count))
                if fault:
                    State.faults += 1
                with open(a.stats, "w") as f:
                    f.write("%d %d\n" % (State.requests, State.faults))
                if a.log:
                    with open(a.log, "a") as f:
                        f.write("%s %s\n" % (self.command, self.path))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if fault and a.mode == "reset":
                self.close_connection = True
                reset(self.connection)
                return
            if fault and a.mode == "503":
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(SLOWDOWN)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(SLOWDOWN)
                return
            try:
                c = http.client.HTTPConnection(uh, int(up), timeout=30)
                c.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    c.putheader(k, v)
                c.endheaders(body)
                r = c.getresponse()
                data = r.read()
            except OSError:
                self.close_connection = True
                reset(self.connection)
                return
            self.send_response_only(r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(k, v)
            clen = r.getheader("Content-Length")
            self.send_header("Content-Length", clen if self.command == "HEAD" and clen else str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            c.close()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any

    class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    s = S(("127.0.0.1", 0), H)
    if a.tls:
        import ssl
        tc = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tc.load_cert_chain(a.tls[0], a.tls[1])
        s.socket = tc.wrap_socket(s.socket, server_side=True)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(s.server_address[1]))
    import os
    os.replace(a.port_file + ".tmp", a.port_file)
    s.serve_forever()


if __name__ == "__main__":
    main()
