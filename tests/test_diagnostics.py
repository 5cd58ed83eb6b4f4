#!/usr/bin/env python3
"""Stall accounting and the diagnostic commands: bench counters, doctor,
iobench, inspect and the HTML report (rendered in headless Chromium).

Cases:
  counters          images counted = delivered; busy time <= wall x workers;
                    read latency percentiles ordered
  slow_consumer     a consumer slower than the pipeline waits ~0
  slow_source       injected read latency: the consumer waits most of the
                    time and doctor names storage
  cpu_starved       1 worker, heavy transform: doctor names decode or transform
  iobench_bytes     iobench's byte count equals the bytes of the files it read
  iobench_json      every pattern prints the documented JSON keys, sane values
  inspect           counts, histogram totals and bad files for tree and shards
  report_renders    doctor --report loads in headless Chromium with its charts
"""
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chute_testlib import Skip, link_tree, main  # noqa: E402


def bench_json(ctx, source, *opts):
    p = ctx.run([ctx.chute, "bench", source, "--json"] + [str(o) for o in opts])
    try:
        return json.loads(p.out)
    except ValueError:
        ctx.check(False, "bench --json printed no JSON: %r" % p.out[:500])
        return {}


def doctor_json(ctx, source, *opts):
    p = ctx.run([ctx.chute, "doctor", source, "--json", "--time", "1.5s"] + [str(o) for o in opts],
                timeout=240)
    try:
        return json.loads(p.out)
    except ValueError:
        ctx.check(False, "doctor --json printed no JSON: %r / %s" % (p.out[:500], p.err[-800:]))
        return {}


def case_counters(ctx):
    ctx.need_data()
    for src in (ctx.tree, ctx.shards):
        j = bench_json(ctx, src, "--batch-size", 16, "--epochs", 2, "--workers", 2)
        if not j:
            continue
        n = int(open(os.path.join(ctx.data, "READY")).read().split()[0])
        ctx.check(j["images"] == j["samples_delivered"],
                  "%s: images %d != samples the loader counted %d" % (src, j["images"], j["samples_delivered"]))
        if n:
            ctx.check(j["images"] == 2 * n, "%s: %d images over 2 epochs of %d" % (src, j["images"], n))
        busy = j["read_busy_s"] + j["decode_busy_s"] + j["transform_busy_s"]
        ctx.check(busy <= j["wall_seconds"] * j["workers"] * 1.02 + 0.01,
                  "%s: busy %.3f s > wall %.3f s x %d workers" % (src, busy, j["wall_seconds"], j["workers"]))
        ctx.check(0 <= j["wait_fraction"] <= 1.0001, "%s: wait fraction %r" % (src, j["wait_fraction"]))
        ctx.check(j["read_lat_p50_us"] <= j["read_lat_p90_us"] <= j["read_lat_p99_us"],
                  "%s: read latency percentiles not ordered: %r" % (src, j))
        ctx.check(0 <= j["queue_fill_avg"] <= j["queue_capacity"], "%s: queue fill %r" % (src, j))


def case_slow_consumer(ctx):
    ctx.need_data()
    # Measure how long the pipeline takes per 8-image batch here (sanitizer
    # builds are much slower), then consume 4x slower than that.
    free = bench_json(ctx, ctx.shards, "--batch-size", 8, "--max-batches", 10, "--workers", 2)
    if not free:
        return
    per_batch_ms = 1000.0 * 8 / max(free["images_per_sec"], 1e-3)
    step = int(max(20, 4 * per_batch_ms))
    j = bench_json(ctx, ctx.shards, "--batch-size", 8, "--max-batches", 25, "--step-ms", step,
                   "--workers", 2)
    if j:
        ctx.check(j["wait_fraction"] < 0.1,
                  "slow consumer waited %.1f%% of the time (expected ~0)" % (100 * j["wait_fraction"]))


def case_slow_source(ctx):
    ctx.need_data()
    # Make reads ~10x slower than processing a sample here (sanitizer builds
    # process far more slowly, so the delay scales with the build's speed).
    free = bench_json(ctx, ctx.shards, "--batch-size", 8, "--max-batches", 4, "--workers", 1)
    if not free:
        return
    per_image_us = 1e6 / max(free["images_per_sec"], 1e-3)
    delay = int(max(20000, 10 * per_image_us))
    d = doctor_json(ctx, ctx.shards, "--read-delay-us", delay, "--workers", 2, "--batch-size", 4)
    if d:
        ctx.check(d["bottleneck"] == "storage", "slow source: doctor named %r, not storage" % d.get("bottleneck"))
        ctx.check(d["pipeline_wait_fraction"] > 0.5,
                  "slow source: consumer waited only %.0f%%" % (100 * d["pipeline_wait_fraction"]))
        ctx.check(d["ceilings"]["storage"] < d["ceilings"]["cpu"],
                  "slow source: storage ceiling %r not below cpu %r" % (d["ceilings"]["storage"], d["ceilings"]["cpu"]))
        ctx.check(any("cache" in a or "storage" in a for a in d["advice"]), "no storage advice: %r" % d["advice"])
        for k in ("images_per_sec", "ceilings", "verdict", "advice", "storage_method"):
            ctx.check(k in d, "doctor JSON lacks %s" % k)


def case_cpu_starved(ctx):
    ctx.need_data()
    d = doctor_json(ctx, ctx.shards, "--workers", 1, "--transform", "eval", "--size", 448,
                    "--batch-size", 8, "--gpu-rate", 3000)
    if d:
        ctx.check(d["bottleneck"] in ("decode", "transform"),
                  "CPU-starved: doctor named %r, not decode/transform" % d.get("bottleneck"))
        ctx.check(d["workers"] == 1, "workers %r" % d.get("workers"))
        ctx.check(d.get("gpus_fed", -1) >= 0 and "gpu_rate" in d, "gpu fields missing: %r" % d)
        ctx.check(d["ceilings"]["storage"] > d["ceilings"]["cpu"], "storage %r should exceed cpu %r"
                  % (d["ceilings"]["storage"], d["ceilings"]["cpu"]))


def case_iobench_bytes(ctx):
    w = ctx.scratch("iobench_bytes")
    # A completed 'files' pass reads every file exactly once.
    p = ctx.run([ctx.chute, "iobench", w, "--pattern", "files", "--files", 300, "--time", "60s",
                 "--threads", 2, "--json"])
    try:
        j = json.loads(p.out)
    except ValueError:
        ctx.check(False, "iobench printed no JSON: %r %s" % (p.out[:300], p.err[-500:]))
        return
    files = [f for f in glob.glob(os.path.join(w, "chute-iobench-files", "*", "*.bin"))]
    total = sum(os.path.getsize(f) for f in files)
    ctx.check(len(files) == 300, "expected 300 files, found %d" % len(files))
    ctx.check(j["ios"] == 300, "iobench counted %d opens+reads, expected 300" % j["ios"])
    ctx.check(j["bytes"] == total, "iobench counted %d bytes, the files hold %d" % (j["bytes"], total))
    # Sequential: every read is one whole block.
    p = ctx.run([ctx.chute, "iobench", w, "--pattern", "sequential", "--size", "8M", "--bs", "1M",
                 "--time", "0.5s", "--json", "--engine", "psync"])
    j = json.loads(p.out)
    ctx.check(j["bytes"] == j["ios"] * (1 << 20), "sequential: %d bytes for %d 1M reads" % (j["bytes"], j["ios"]))


def case_iobench_json(ctx):
    w = ctx.scratch("iobench_json")
    for pat, extra in (("imagenet", ["--size", "16M"]), ("sequential", ["--size", "16M", "--qd", 2]),
                       ("files", ["--files", 50])):
        p = ctx.run([ctx.chute, "iobench", w, "--pattern", pat, "--time", "0.5s", "--json"] + extra)
        try:
            j = json.loads(p.out)
        except ValueError:
            ctx.check(False, "%s: no JSON: %r" % (pat, p.out[:300]))
            continue
        for k in ("iops", "mb_per_sec", "lat_p50_us", "lat_p99_us", "images_per_sec", "bytes", "ios"):
            ctx.check(k in j, "%s: JSON lacks %s" % (pat, k))
        ctx.check(j["ios"] > 0 and j["iops"] > 0, "%s: no I/O measured: %r" % (pat, j))
        ctx.check(j["lat_p50_us"] <= j["lat_p99_us"], "%s: percentiles not ordered" % pat)
        if pat == "imagenet":
            mean = j["bytes"] / j["ios"]
            ctx.check(2048 <= mean <= 262144, "imagenet mix mean read %.0f bytes" % mean)
    ctx.run([ctx.chute, "iobench", "/nonexistent-dir/x", "--time", "0.1s"], expect="nonzero")
    ctx.run([ctx.chute, "iobench", w, "--time", "soon"], expect=2)


def case_inspect(ctx):
    ctx.need_data()
    for src in (ctx.tree, ctx.shards):
        p = ctx.run([ctx.chute, "inspect", src, "--json"])
        j = json.loads(p.out)
        ctx.check(j["samples"] > 0 and j["classes"] > 0, "inspect %s: %r" % (src, j))
        ctx.check(sum(j["size_histogram"].values()) == j["samples"], "size histogram total != samples")
        ctx.check(sum(j["class_counts"].values()) == j["samples"], "class counts total != samples")
        ctx.check(j["formats"]["jpeg"] + j["formats"]["png"] + j["formats"]["undecodable"] == j["samples"],
                  "format counts total != samples")
        ctx.check(j["undecodable"] == 0, "clean data reported undecodable: %r" % j["undecodable_samples"])
    # A tree with a bad file: reported with its path.
    t = ctx.scratch("inspect_bad")
    link_tree(ctx.tree, t)
    first = sorted(os.listdir(t))[0]
    bad = os.path.join(t, first, "zz_garbage.jpg")
    with open(bad, "wb") as f:
        f.write(b"this is not a JPEG" * 10)
    p = ctx.run([ctx.chute, "inspect", t, "--json"])
    j = json.loads(p.out)
    ctx.check(j["undecodable"] == 1, "expected 1 undecodable, got %r" % j["undecodable"])
    ctx.check(any(bad in u["where"] for u in j["undecodable_samples"]),
              "bad file not named: %r" % j["undecodable_samples"])
    p = ctx.run([ctx.chute, "inspect", t])
    ctx.check("zz_garbage.jpg" in p.out, "text output does not name the bad file")


def case_report_renders(ctx):
    ctx.need_data()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chromium:
        raise Skip("no headless Chromium (apt-get install chromium)")
    w = ctx.scratch("report")
    rep = os.path.join(w, "report.html")
    ctx.run([ctx.chute, "doctor", ctx.shards, "--time", "1s", "--gpu-rate", 2500, "--report", rep,
             "--batch-size", 8], timeout=240)
    if not ctx.check(os.path.exists(rep), "doctor --report wrote no file"):
        return
    html = open(rep).read()
    ctx.check("<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", ""),
              "report is not self-contained")
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--user-data-dir=" + os.path.join(w, "profile")]
    try:
        p = subprocess.run(base + ["--enable-logging=stderr", "--v=0", "--dump-dom", "file://" + rep],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    except subprocess.TimeoutExpired:
        ctx.check(False, "chromium --dump-dom timed out")
        return
    dom = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0 and not dom:
        raise Skip("chromium cannot run here: %s" % err[-300:])
    ctx.check('id="ceilings"' in dom, "rendered DOM has no ceilings chart")
    ctx.check('id="timeseries"' in dom, "rendered DOM has no time-series chart")
    ctx.check(dom.count('class="bar"') == 5, "expected 5 bars, found %d" % dom.count('class="bar"'))
    ctx.check('id="bottleneck"' in dom, "no bottleneck line")
    bad = [l for l in err.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    ctx.check(not bad, "page logged errors: %s" % bad[:3])
    png = os.path.join(w, "report.png")
    subprocess.run(base + ["--screenshot=" + png, "--window-size=800,1000", "file://" + rep],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if ctx.check(os.path.exists(png), "no screenshot"):
        from PIL import Image
        im = Image.open(png).convert("RGB")
        colours = len(set(im.getdata()))
        ctx.check(colours > 20, "screenshot looks blank (%d colours)" % colours)


cases = {
    "counters": case_counters,
    "slow_consumer": case_slow_consumer,
    "slow_source": case_slow_source,
    "cpu_starved": case_cpu_starved,
    "iobench_bytes": case_iobench_bytes,
    "iobench_json": case_iobench_json,
    "inspect": case_inspect,
    "report_renders": case_report_renders,
}

if __name__ == "__main__":
    sys.exit(main(cases))
