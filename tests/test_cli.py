#!/usr/bin/env python3
"""cli_bench_and_flags: the `chute` command line.

`chute bench --json` prints exactly one JSON object with the documented
keys, and images == samples x epochs (no drop-last); bad flags exit 2 with a
message; help works for every command `chute --help` lists, and version.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402


def p_help_lines(ctx):
    out = ctx.run([ctx.chute, "--help"]).out
    return out.split("commands:", 1)[1].split("\n\n", 1)[0].splitlines() if "commands:" in out else []


def cli(ctx):
    # Commands that need no data first.
    p = ctx.run([ctx.chute, "--help"])
    ctx.check("usage: chute" in p.out and "pack" in p.out and "bench" in p.out, "--help: %r" % p.out)
    for cmd in ("pack", "bench"):
        p = ctx.run([ctx.chute, cmd, "--help"])
        ctx.check(("usage: chute %s" % cmd) in p.out and "--help" in p.out, "%s --help: %r" % (cmd, p.out))
    # Every command `chute --help` lists answers --help too.
    listed = [ln.split()[0] for ln in p_help_lines(ctx) if ln.startswith("  ") and ln.strip()]
    ctx.check("pack" in listed and "bench" in listed, "commands listed: %s" % listed)
    for cmd in listed:
        if cmd == "version":
            continue
        q = ctx.run([ctx.chute, cmd, "--help"], what="chute %s --help" % cmd)
        ctx.check(("usage: chute %s" % cmd) in q.out, "chute %s --help: %r" % (cmd, q.out[:200]))
    p = ctx.run([ctx.chute, "pack", "--help"])
    for flag in ("--shard-size", "--threads", "--align", "--strict", "--no-validate"):
        ctx.check(flag in p.out, "pack --help does not list %s" % flag)
    p = ctx.run([ctx.chute, "bench", "--help"])
    for flag in ("--transform", "--batch-size", "--workers", "--epochs", "--json", "--dtype"):
        ctx.check(flag in p.out, "bench --help does not list %s" % flag)
    p = ctx.run([ctx.chute, "version"])
    ctx.check(p.out.startswith("chute ") and p.out.strip().count(".") == 2, "version: %r" % p.out)
    # "unavailable:" names only what the "features:" line lacks (it used to
    # print "s3, hdf5, kafka (not in this build)" whatever the build had).
    lines = p.out.splitlines()
    feats = set(lines[1].split()[1:]) if len(lines) > 1 and lines[1].startswith("features:") else set()
    gone = lines[2] if len(lines) > 2 and lines[2].startswith("unavailable:") else ""
    ctx.check("jpeg" in feats and gone, "version: no features/unavailable lines: %r" % p.out)
    for name in ("s3", "hdf5", "kafka", "libdeflate", "io_uring", "coco"):
        said = (" %s " % name) in gone.replace(",", " ").replace(";", " ")
        ctx.check(said != (name in feats),
                  "version: %s in features %s, yet unavailable says %r" % (name, sorted(feats), gone))
    p = ctx.run([ctx.chute], expect=2)
    ctx.check("usage" in p.err, "no command: %r" % p.err)
    p = ctx.run([ctx.chute, "frobnicate"], expect=2)
    ctx.check("frobnicate" in p.err, "unknown command: %r" % p.err)

    ctx.need_data()
    tree = ctx.tree
    # Issue 22.1: the read-ahead is on by default (64 reads in flight at
    # most) and --readahead 0 turns it off (0 is not "the default" here,
    # though a zero C field is).
    for extra, want in (([], "on"), (["--readahead", "0"], "off"), (["--readahead", "3"], "on")):
        p = ctx.run([ctx.chute, "bench", ctx.shards, "--json", "--quiet", "--batch-size", "8",
                     "--workers", "2"] + extra, what="bench " + " ".join(extra))
        try:
            j = json.loads(p.out)
        except ValueError:
            ctx.check(False, "bench %s: no JSON: %r" % (extra, p.out[:300]))
            continue
        eng = j.get("readahead_engine")
        ctx.check((eng == "off") == (want == "off"), "bench %s: read-ahead %r" % (extra, eng))
        if want == "on":
            top = 3 if extra else 64
            ctx.check(0 < j.get("readahead_inflight_max", 0) <= top,
                      "bench %s: %r reads in flight" % (extra, j.get("readahead_inflight_max")))
    bad = [
        (["bench", tree, "--workers", "0"], "--workers"),
        (["bench", tree, "--workers", "-1"], "--workers"),
        (["bench", tree, "--workers", "two"], "--workers"),
        (["bench", tree, "--batch-size"], "--batch-size"),
        (["bench", tree, "--transform", "bogus"], "--transform"),
        (["bench", tree, "--dtype", "float64"], "--dtype"),
        (["bench", tree, "--bogus"], "--bogus"),
        (["bench", tree, "--size", "100000"], "--size"),
        (["bench", tree, tree], tree),
        (["bench"], "SOURCE"),
        (["pack", tree], "OUT_DIR"),
        (["pack", tree, os.path.join(ctx.work, "x"), "--shard-size", "lots"], "--shard-size"),
        (["pack", tree, os.path.join(ctx.work, "x"), "--shard-size", "1K"], "--shard-size"),
        (["pack", tree, os.path.join(ctx.work, "x"), "--threads", "0"], "--threads"),
        (["pack", tree, os.path.join(ctx.work, "x"), "--frob"], "--frob"),
    ]
    for args, needle in bad:
        p = ctx.run([ctx.chute] + args, expect=2, what="chute " + " ".join(args))
        ctx.check(needle in p.err, "chute %s: message %r does not mention %r"
                  % (" ".join(args), p.err.strip(), needle))
        ctx.check(p.out == "", "chute %s printed to stdout on error: %r" % (" ".join(args), p.out))
    ctx.check(not os.path.exists(os.path.join(ctx.work, "x")), "a rejected pack created its output dir")
    # A value the parser accepts but the library rejects: clean exit 1.
    p = ctx.run([ctx.chute, "pack", tree, os.path.join(ctx.work, "y"), "--align", "100"], expect=1)
    ctx.check("align" in p.err, "--align 100: %r" % p.err)

    # bench --json: one object, counts add up.
    for src, epochs, bs in ((tree, 2, 32), (ctx.shards, 1, 64), (tree, 3, 7)):
        p = ctx.run([ctx.chute, "bench", src, "--json", "--epochs", epochs, "--batch-size", bs,
                     "--transform", "none", "--size", 16, "--workers", 2])
        lines = [ln for ln in p.out.splitlines() if ln.strip()]
        ctx.check(len(lines) == 1, "bench --json printed %d lines: %r" % (len(lines), p.out))
        try:
            j = json.loads(p.out)
        except ValueError as e:
            ctx.check(False, "bench --json output is not JSON (%s): %r" % (e, p.out))
            continue
        for k in ("images_per_sec", "images", "seconds", "workers"):
            ctx.check(k in j, "bench --json lacks %r: %s" % (k, sorted(j)))
        ctx.check(j.get("images") == 200 * epochs,
                  "images %s, want %d (200 samples x %d epochs)" % (j.get("images"), 200 * epochs, epochs))
        ctx.check(j.get("batches") == epochs * -(-200 // bs),
                  "batches %s, want %d" % (j.get("batches"), epochs * -(-200 // bs)))
        ctx.check(j.get("workers") == 2 and j.get("seconds", 0) > 0 and j.get("images_per_sec", 0) > 0,
                  "workers/seconds/images_per_sec: %s" % j)
        ctx.check(j.get("failed") is False and j.get("corrupt") == 0, "failed/corrupt: %s" % j)
        ctx.check(abs(j["images"] / j["seconds"] - j["images_per_sec"]) <= 0.02 * j["images_per_sec"] + 0.01,
                  "images_per_sec %s != images/seconds" % j.get("images_per_sec"))
        ctx.check(j.get("source") == src, "source %s, want the path %s" % (j.get("source"), src))
        ctx.check(j.get("format") == ("shards" if src == ctx.shards else "tree"), "format %s" % j.get("format"))
    p = ctx.run([ctx.chute, "bench", tree, "--json", "--max-batches", "3", "--batch-size", 10,
                 "--transform", "none", "--size", 16, "--workers", 2])
    j = json.loads(p.out) if p.out.strip() else {}
    ctx.check(j.get("images") == 30 and j.get("batches") == 3, "--max-batches 3: %s" % j)
    # Plain output mentions the rate.
    p = ctx.run([ctx.chute, "bench", tree, "--quiet", "--transform", "none", "--size", 16,
                 "--workers", 2])
    ctx.check("images/s" in p.out and "200 images" in p.out, "bench text output: %r" % p.out)
    # Without a training step the wait figures are explained, with the next
    # step to take (issue 30.7); with --step-ms they stand alone.
    ctx.check("no training step" in p.out and "--step-ms" in p.out and "chute doctor" in p.out,
              "bench without --step-ms does not say why the consumer waits: %r" % p.out)
    p = ctx.run([ctx.chute, "bench", tree, "--quiet", "--transform", "none", "--size", 16,
                 "--workers", 2, "--max-batches", 2, "--step-ms", 1])
    ctx.check("no training step" not in p.out, "bench --step-ms 1 still notes no step: %r" % p.out)
    # --shuffle shards: every sample once per epoch (images == samples x epochs);
    # a bad mode exits 2 naming the flag, on bench and doctor.
    for src in (tree, ctx.shards):
        p = ctx.run([ctx.chute, "bench", src, "--json", "--shuffle", "shards", "--shuffle-buffer",
                     7, "--epochs", 2, "--batch-size", 16, "--transform", "none", "--size", 16,
                     "--workers", 2])
        j = json.loads(p.out) if p.out.strip() else {}
        ctx.check(j.get("images") == 400 and j.get("failed") is False, "--shuffle shards: %s" % j)
    for cmd in ("bench", "doctor"):
        p = ctx.run([ctx.chute, cmd, tree, "--shuffle", "sideways"], expect=2)
        ctx.check("--shuffle" in p.err, "%s --shuffle sideways: %r" % (cmd, p.err))


if __name__ == "__main__":
    sys.exit(T.main({"cli": cli}))
