#!/usr/bin/env python3
"""range_http — a static file server on loopback for the HTTP source's
tests: GET and HEAD with single byte ranges (206 + Content-Range, 416),
HTTP/1.1 keep-alive.  The standard library's SimpleHTTPRequestHandler
ignores Range, which is what --no-range keeps (to test that chute refuses
a server that ignores it).

    range_http.py DIR --port-file F [--no-range] [--tls CERT KEY]

--tls serves https with that certificate chain and key (the private-CA
tests, test_tls_ca.py).
"""
import argparse
import http.server
import os
import re
import socketserver


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--no-range", action="store_true")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    a = ap.parse_args()
    root = os.path.realpath(a.root)

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def serve(self, body):
            from urllib.parse import unquote
            p = os.path.realpath(os.path.join(root, unquote(self.path.split("?")[0]).lstrip("/")))
            if not p.startswith(root + os.sep) or not os.path.isfile(p):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = os.path.getsize(p)
            a0, a1, status = 0, size - 1, 200
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if m and not a.no_range:
                a0 = int(m.group(1))
                a1 = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                if a0 >= size or a1 < a0:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            self.send_response(status)
            if status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (a0, a1, size))
            self.send_header("Content-Length", str(a1 - a0 + 1))
            self.end_headers()
            if body:
                with open(p, "rb") as f:
                    f.seek(a0)
                    self.wfile.write(f.read(a1 - a0 + 1))

        def do_GET(self):
            self.serve(True)

        def do_HEAD(self):
            self.serve(False)

    class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    s = S(("127.0.0.1", 0), H)
    if a.tls:
        import ssl
        tc = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tc.load_cert_chain(a.tls[0], a.tls[1])
        s.socket = tc.wrap_socket(s.socket, server_side=True)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(s.server_address[1]))
    os.replace(a.port_file + ".tmp", a.port_file)
    s.serve_forever()


if __name__ == "__main__":
    main()
