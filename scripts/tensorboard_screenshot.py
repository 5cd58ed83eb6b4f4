"""Screenshot of a TensorBoard page in headless Chromium, after real time.

    /usr/bin/python3 scripts/tensorboard_screenshot.py URL OUT.png [--wait 20] [--size 1600,1250]

Why not `chromium --headless --screenshot --virtual-time-budget`: TensorBoard
draws its line charts asynchronously (a worker, animation frames) and the
virtual-time screenshot is taken before some or all of the cards have their
lines (docs/img/tensorboard.png had two empty cards that way).  This drives
Chromium over the DevTools protocol instead: navigate, wait real seconds,
capture.  Standard library only (a minimal WebSocket client, text frames).
"""
import argparse
import base64
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request


class DevTools:
    def __init__(self, ws_url):
        assert ws_url.startswith("ws://")
        hostport, path = ws_url[5:].split("/", 1)
        host, port = hostport.split(":")
        self.s = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.next_id = 0

    def _send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise EOFError("DevTools closed the connection")
            out += chunk
        return out

    def _recv(self):
        msg = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            msg += self._exact(n)
            if b0 & 0x80:
                return msg.decode()

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            r = json.loads(self._recv())
            if r.get("id") == self.next_id:
                if "error" in r:
                    raise RuntimeError("%s: %s" % (method, r["error"]))
                return r.get("result", {})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--wait", type=float, default=20.0)
    ap.add_argument("--size", default="1600,1250")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    a = ap.parse_args()
    w, h = (int(x) for x in a.size.split(","))
    port = random.randint(20000, 40000)
    prof = tempfile.mkdtemp(prefix="chute-shot-")
    p = subprocess.Popen([a.chromium, "--headless", "--no-sandbox", "--hide-scrollbars",
                          "--enable-unsafe-swiftshader", "--remote-debugging-port=%d" % port,
                          "--user-data-dir=" + prof, "--window-size=%d,%d" % (w, h),
                          "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                pages = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json" % port))
                page = next(x for x in pages if x.get("type") == "page")
                break
            except (OSError, StopIteration):
                time.sleep(0.2)
        else:
            sys.exit("Chromium's DevTools did not come up")
        dt = DevTools(page["webSocketDebuggerUrl"])
        dt.call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1,
                mobile=False)
        dt.call("Page.enable")
        dt.call("Page.navigate", url=a.url)
        time.sleep(a.wait)
        png = dt.call("Page.captureScreenshot", format="png")["data"]
        with open(a.out, "wb") as f:
            f.write(base64.b64decode(png))
        print("wrote %s (%dx%d) after %.0f s" % (a.out, w, h, a.wait))
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(prof, ignore_errors=True)


if __name__ == "__main__":
    main()
