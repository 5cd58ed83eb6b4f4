#!/usr/bin/env python3
"""`chute bench --latency`: the inference session under an open-loop
Poisson request stream.

rate:     a run at a fixed rate reports every scheduled request (their count
          is a Poisson draw around rate x duration: within 6 sigma), none
          failed or refused, ordered percentiles, and the single-image and
          first-request times the bench compares against.
find_max: --find-max with a generous budget finds a positive rate and runs
          at half of it (the figure bench/latency.py reports).
args:     a missing or non-positive --rate is refused with a message.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

COMMON = ["--workers", "1", "--images", "12", "--size", "24", "--queue-capacity", "4096"]


def run_json(ctx, *args):
    p = ctx.run([ctx.chute, "bench", "--latency", ctx.tree, "--json"] + COMMON + list(args))
    try:
        return json.loads(p.out)
    except ValueError:
        ctx.check(False, "bench --latency --json printed %r" % p.out[-800:])
        return {}


def rate(ctx):
    ctx.need_data()
    r = run_json(ctx, "--rate", "100", "--duration", "1")
    a = r.get("at_rate", {})
    n = a.get("requests", -1)
    ctx.check(abs(n - 100) <= 6 * math.sqrt(100), "%r requests scheduled at 100/s for 1 s" % n)
    ctx.check(a.get("rejected") == 0 and a.get("failed") == 0, "refused/failed: %r" % a)
    ctx.check(0 < a["p50_ms"] <= a["p99_ms"] <= a["p999_ms"] <= a["max_ms"],
              "percentiles out of order: %r" % a)
    ctx.check(r.get("single_image_ms", 0) > 0 and r.get("first_request_ms", 0) > 0
              and r.get("first_request_ms_pretouch", 0) > 0, "reference times: %r" % r)


def find_max(ctx):
    ctx.need_data()
    r = run_json(ctx, "--find-max", "--budget-ms", "3000", "--probe-duration", "0.3", "--probes", "5",
                 "--duration", "0.5", "--size", "16")
    ctx.check(r.get("max_rate", 0) > 0, "no rate under a 3 s budget: %r" % r)
    h = r.get("at_half_max", {})
    ctx.check(abs(h.get("rate", 0) - r.get("max_rate", 0) / 2) < 1e-3 * r.get("max_rate", 1),
              "half-max run at %r for max %r" % (h.get("rate"), r.get("max_rate")))
    ctx.check(r.get("p99_over_single", 0) > 0, "ratio: %r" % r.get("p99_over_single"))


def args(ctx):
    ctx.need_data()
    p = ctx.run([ctx.chute, "bench", "--latency", ctx.tree], expect=2)
    ctx.check("--rate" in p.err, "missing --rate: %r" % p.err)
    p = ctx.run([ctx.chute, "bench", "--latency", ctx.tree, "--rate", "0"], expect=2)
    ctx.check("positive" in p.err, "--rate 0: %r" % p.err)


if __name__ == "__main__":
    sys.exit(T.main({"rate": rate, "find_max": find_max, "args": args}))
