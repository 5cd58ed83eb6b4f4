#!/usr/bin/env python3
"""cache_stats_*: the block cache tier's counters as users see them.

  bench   `chute bench --json` on the shard fixture with a RAM tier whose
          blocks hold whole files: "cache" says the origin was read once
          per file of the directory with exactly the directory's bytes (both
          taken from os.stat, not from chute), later lookups were hits, RAM
          use = those bytes within the budget; the text output has the
          tier's line; without a tier "cache" is null.
  doctor  `chute doctor` with 20 ms added per read: a RAM tier too small
          for one block leaves every epoch to the origin, and doctor names
          the cache as the bottleneck (text and JSON); with room for the
          data, the pipeline stage hits >= 90% and the cache is not blamed.

Cases: bench doctor
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

SMALL = ("--batch-size", "16", "--size", "48", "--workers", "2")


def dir_files(d):
    fs = [os.path.join(d, f) for f in os.listdir(d) if not f.startswith(".")]
    fs = [f for f in fs if os.path.isfile(f)]
    return len(fs), sum(os.path.getsize(f) for f in fs)


def bench(ctx):
    ctx.need_data()
    files, size = dir_files(ctx.shards)
    ram = str(1 << 30)
    p = ctx.run([ctx.chute, "bench", ctx.shards, "--epochs", "3", "--json", "--cache-ram-bytes",
                 ram, "--cache-block-bytes", ram] + list(SMALL))
    d = json.loads(p.out)
    c = d["cache"]
    ctx.check(c["fetches"] == files and c["fetched_bytes"] == size,
              "origin reads %d blocks / %d bytes; the directory has %d files / %d bytes"
              % (c["fetches"], c["fetched_bytes"], files, size))
    ctx.check(c["ram_hits"] >= 2 * d["images"] // 3 and c["disk_hits"] == 0,
              "%d RAM hits for %d images over 3 epochs" % (c["ram_hits"], d["images"]))
    ctx.check(c["ram_bytes"] == size and c["ram_budget"] == 1 << 30 and c["ram_evictions"] == 0,
              "RAM: %r" % c)
    want = (c["ram_hits"] + c["disk_hits"]) / (c["ram_hits"] + c["disk_hits"] + c["fetches"])
    ctx.check(abs(c["hit_rate"] - want) < 1e-3, "hit_rate %r, counters say %r" % (c["hit_rate"], want))
    t = ctx.run([ctx.chute, "bench", ctx.shards, "--epochs", "1", "--cache-ram-bytes", ram]
                + list(SMALL))
    ctx.check("cache tier: hit rate" in t.out and "from the origin" in t.out,
              "bench text has no cache line: %r" % t.out)
    n = ctx.run([ctx.chute, "bench", ctx.shards, "--epochs", "1", "--json"] + list(SMALL))
    ctx.check(json.loads(n.out)["cache"] is None, "no tier, yet cache: %r" % n.out)
    ctx.check("cache tier" not in ctx.run([ctx.chute, "bench", ctx.shards, "--epochs", "1"]
                                          + list(SMALL)).out, "no tier, yet a cache line")


def doctor(ctx):
    ctx.need_data()
    # --readahead 0: the workers read through the tier themselves, so the
    # slow origin behind a too-small cache is what they wait for (the
    # default read-ahead would hide it, and doctor would rightly name decode)
    slow = ["--read-delay-us", "20000", "--time", "1s", "--readahead", "0"] + list(SMALL)
    p = ctx.run([ctx.chute, "doctor", ctx.shards, "--cache-ram-bytes", "4096",
                 "--cache-block-bytes", "65536"] + slow, timeout=180)
    ctx.check("bottleneck: cache" in p.out and "<- bottleneck" in p.out
              and "the cache tier misses" in p.out, "a missing cache not named: %s" % p.out)
    j = json.loads(ctx.run([ctx.chute, "doctor", ctx.shards, "--json", "--cache-ram-bytes", "4096",
                            "--cache-block-bytes", "65536"] + slow, timeout=180).out)
    cs = j["cache_stage"]
    ctx.check(cs["bottleneck"] is True and cs["counters"]["hit_rate"] < 0.9
              and cs["counters"]["fetches"] > 0, "JSON cache_stage: %r" % cs)
    j = json.loads(ctx.run([ctx.chute, "doctor", ctx.shards, "--json", "--cache-ram-bytes",
                            str(1 << 30)] + slow, timeout=180).out)
    cs = j["cache_stage"]
    ctx.check(cs["bottleneck"] is False and cs["counters"]["hit_rate"] >= 0.9
              and "cache" not in j["verdict"].split("bottleneck is")[-1][:8],
              "a cache with room blamed: %r / %r" % (cs, j["verdict"]))
    j = json.loads(ctx.run([ctx.chute, "doctor", ctx.shards, "--json", "--time", "1s"]
                           + list(SMALL), timeout=180).out)
    ctx.check(j["cache_stage"] is None, "no tier, yet cache_stage: %r" % j["cache_stage"])


if __name__ == "__main__":
    sys.exit(T.main({"bench": bench, "doctor": doctor}))
