#!/usr/bin/env python3
"""bench_reports_default_workers: the default worker count is the CPUs this
process may use, not the host's cores, and `chute bench --json` says which
count it chose and why.

Runs `chute bench --json` under `taskset -c <one CPU>` (expect 1 worker, the
reason naming the affinity mask), with LOCAL_WORLD_SIZE=2 on two CPUs
(expect half of what the same two CPUs give alone, at least 1), and with
--workers given (the reason says so).
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402


def bench(ctx, cpus, env_extra=None, *extra):
    env = dict(os.environ)
    env.pop("LOCAL_WORLD_SIZE", None)
    env.update(env_extra or {})
    p = ctx.run(["taskset", "-c", cpus, ctx.chute, "bench", ctx.tree, "--json", "--batch-size",
                 "16", "--size", "32", "--max-batches", "2"] + list(extra), env=env)
    try:
        return json.loads(p.out)
    except ValueError:
        ctx.check(False, "bench --json under taskset -c %s printed %r" % (cpus, p.out[-500:]))
        return {}


def workers(ctx):
    ctx.need_data()
    if not shutil.which("taskset") or not hasattr(os, "sched_getaffinity"):
        raise T.Skip("needs taskset")
    cpus = sorted(os.sched_getaffinity(0))
    one = bench(ctx, str(cpus[0]))
    ctx.check(one.get("workers") == 1, "taskset -c %d: workers %r (%r)"
              % (cpus[0], one.get("workers"), one.get("workers_reason")))
    if len(cpus) > 1 or os.cpu_count() > 1:
        ctx.check("affinity" in one.get("workers_reason", ""),
                  "reason does not name the affinity mask: %r" % one.get("workers_reason"))
    given = bench(ctx, str(cpus[0]), None, "--workers", "3")
    ctx.check(given.get("workers") == 3 and given.get("workers_reason") == "--workers",
              "--workers 3: %r / %r" % (given.get("workers"), given.get("workers_reason")))
    if len(cpus) >= 2:
        pair = "%d,%d" % (cpus[0], cpus[1])
        alone = bench(ctx, pair).get("workers", 0)
        split = bench(ctx, pair, {"LOCAL_WORLD_SIZE": "2"})
        ctx.check(alone >= 1 and split.get("workers") == max(1, alone // 2),
                  "2 CPUs: %r workers alone, %r with LOCAL_WORLD_SIZE=2 (%r)"
                  % (alone, split.get("workers"), split.get("workers_reason")))
        ctx.check("LOCAL_WORLD_SIZE=2" in split.get("workers_reason", ""),
                  "reason: %r" % split.get("workers_reason"))


if __name__ == "__main__":
    sys.exit(T.main({"workers": workers}))
