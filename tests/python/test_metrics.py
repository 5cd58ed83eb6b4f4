"""Prometheus export (issue 27; docs/METRICS.md), checked by Prometheus itself.

A real Prometheus server (Debian's `prometheus` package) is started on
127.0.0.1 with its own TSDB directory and a generated scrape config
(scrape_interval 1s) and scrapes a running chute.Loader; the test reads the
series back through Prometheus's HTTP API.  `promtool check metrics` (the
same package) lints the exposition and the textfile.  Skips, saying why,
when the binaries are missing (apt-get install prometheus).

tests/test_metrics.c covers the responder's rules under hostile clients.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

import chute

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
need_prometheus = pytest.mark.skipif(
    not PROMETHEUS, reason="prometheus not installed (Debian: apt-get install prometheus)")
need_promtool = pytest.mark.skipif(
    not PROMTOOL, reason="promtool not installed (Debian: apt-get install prometheus)")

LABEL_RE = re.compile(r'([a-z_]+)="([^"]*)"')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def promtool_check(text):
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


class Running:
    """A loader iterating epochs on a thread until stopped."""

    def __init__(self, ld):
        self.ld, self.stop, self.batches = ld, threading.Event(), 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            for _ in self.ld:
                self.batches += 1
                time.sleep(0.01)
                if self.stop.is_set():
                    break

    def close(self):
        self.stop.set()
        self.t.join(timeout=10)


def host_label():
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:63]


@need_prometheus
def test_real_prometheus_scrapes_a_running_loader(shards, tmp_path):
    port, pport = free_port(), free_port()
    ld = chute.Loader(shards, batch_size=8, size=32, workers=2, rank=1, world_size=2,
                      metrics_port=port)
    run = Running(ld)
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                   "scrape_configs:\n  - job_name: chute\n    static_configs:\n"
                   "      - targets: ['127.0.0.1:%d']\n" % port)
    log = open(tmp_path / "prometheus.log", "w")
    prom = subprocess.Popen([PROMETHEUS, "--config.file=%s" % cfg,
                             "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % pport],
                            stdout=log, stderr=subprocess.STDOUT)
    api = "http://127.0.0.1:%d" % pport

    def query(q):
        _, body = fetch(api + "/api/v1/query?" + urllib.parse.urlencode({"query": q}))
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def wait_for(q, pred, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            try:
                res = query(q)
                if pred(res):
                    return res
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail("Prometheus never answered %r as expected (log: %s)"
                    % (q, (tmp_path / "prometheus.log").read_text()[-2000:]))

    try:
        first = wait_for("chute_samples_total", lambda r: r and float(r[0]["value"][1]) > 0)
        m = first[0]["metric"]
        assert (m["rank"], m["host"], m["dataset"], m["job"]) == \
            ("1", host_label(), os.path.basename(shards), "chute"), m
        v1 = {k: float(query(k)[0]["value"][1])
              for k in ("chute_samples_total", "chute_bytes_read_total",
                        "chute_consumer_wait_seconds_total", "chute_batches_total",
                        "chute_read_latency_seconds_count")}
        # Two scrapes later the counters have not decreased, and samples grew.
        t0 = float(first[0]["value"][0])
        second = wait_for("chute_samples_total",
                          lambda r: r and float(r[0]["value"][0]) >= t0 + 2.0)
        v2 = {k: float(query(k)[0]["value"][1]) for k in v1}
        for k in v1:
            assert v2[k] >= v1[k], (k, v1[k], v2[k])
        assert v2["chute_samples_total"] > v1["chute_samples_total"]
        # The histogram as Prometheus reads it: every le, cumulative, and a
        # quantile it can compute.
        buckets = query("chute_read_latency_seconds_bucket")
        les = sorted((float(b["metric"]["le"]), float(b["value"][1])) for b in buckets)
        assert les[-1][0] == float("inf") and len(les) == 14
        assert all(a[1] <= b[1] for a, b in zip(les, les[1:])), les
        q = query("histogram_quantile(0.5, chute_read_latency_seconds_bucket)")
        assert q and float(q[0]["value"][1]) > 0
        up = query('up{job="chute"}')
        assert up and up[0]["value"][1] == "1"
        _, tbody = fetch(api + "/api/v1/targets")
        tgt = json.loads(tbody)["data"]["activeTargets"][0]
        assert tgt["health"] == "up" and tgt["lastError"] == "", tgt
        assert second and first
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=10)
        except subprocess.TimeoutExpired:
            prom.kill()
        log.close()
        run.close()
        ld.close()


@need_promtool
def test_promtool_accepts_the_exposition(shards):
    port = free_port()
    with chute.Loader(shards, batch_size=8, size=32, workers=2, metrics_port=port) as ld:
        next(iter(ld))
        status, text = fetch("http://127.0.0.1:%d/metrics" % port)
    assert status == 200
    rc, out = promtool_check(text)
    assert rc == 0 and out.strip() == "", out


@need_promtool
def test_textfile_parses_and_is_never_partial(shards, tmp_path):
    path = tmp_path / "chute.prom"
    ld = chute.Loader(shards, batch_size=8, size=32, workers=2, metrics_file=str(path))
    run = Running(ld)
    try:
        # A reader that opens the file over and over while it is replaced
        # each second always finds a whole exposition (it ends with the
        # histogram's _count line).
        end, reads = time.time() + 2.5, 0
        while time.time() < end:
            text = path.read_text()
            assert text.endswith("\n") and "chute_read_latency_seconds_count{" in \
                text.rsplit("\n", 2)[-2], text[-200:]
            reads += 1
            time.sleep(0.005)
        assert reads > 50
        rc, out = promtool_check(path.read_text())
        assert rc == 0 and out.strip() == "", out
    finally:
        run.close()
        ld.close()
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]


def test_labels_carry_no_path_or_environment(shards, tmp_path, monkeypatch):
    secret = "s3cr3t-%d" % os.getpid()
    monkeypatch.setenv("CHUTE_TEST_SECRET", secret)
    private = tmp_path / ("private-%s" % secret)
    private.mkdir()
    link = private / "train"
    os.symlink(shards, link)
    port = free_port()
    for kw, want in ((dict(), "train"),
                     (dict(metrics_name="../../etc/passwd $HOME"), ".._.._etc_passwd__HOME")):
        with chute.Loader(str(link), batch_size=8, size=32, workers=1, metrics_port=port,
                          **kw) as ld:
            next(iter(ld))
            _, text = fetch("http://127.0.0.1:%d/metrics" % port)
        assert secret not in text and str(tmp_path) not in text
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            labels = dict(LABEL_RE.findall(line))
            assert labels["dataset"] == want, line
            assert all(re.fullmatch(r"[A-Za-z0-9._+-]*", v) for v in labels.values()), line


def test_metrics_port_default_is_loopback(shards):
    port = free_port()
    with chute.Loader(shards, batch_size=8, size=32, workers=1, metrics_port=port):
        listening = [ln.split() for ln in open("/proc/net/tcp").read().splitlines()[1:]]
        mine = [f for f in listening if f[1].endswith(":%04X" % port) and f[3] == "0A"]
        assert mine and mine[0][1].startswith("0100007F:"), mine
