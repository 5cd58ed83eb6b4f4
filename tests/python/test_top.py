"""`chute top` against real loaders (issue 27, docs/TOP.md).

Three loaders run in their own processes for the module: two Python Loader
processes, rank 0 and rank 1 of world 2, and a `chute bench`.  The ranks
are paced so their state is known by construction: rank 0's reads are
instant and its loop sleeps 80 ms per batch of 4 (compute-bound, it hardly
waits); rank 1 reads with a 60 ms delay per sample through one worker and
no read-ahead, and its loop sleeps 5 ms (storage-bound, it waits most of
the time).  Each rank also times itself with its own clock from its first
batch on (samples/s and the fraction spent blocked in next()) and writes
that to a file; top's figures must agree with that clock (25% on the rate,
15 points on the wait: top reads a copy up to 250 ms old and the processes
run on), never with chute's own stats() of the same process.

Also: a loader killed with SIGKILL leaves its segment, which top leaves
out and removes, as does the next loader start; a loader closed, or a
process that exits with a loader open, leaves none; stats_shm=0 makes none;
hostile files in the segment directory are listed as ignored with the
reason and top exits 0; and in a tmux pane the screen names each loader
(skipped without tmux; scripts/deps.sh installs it).
"""
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UID = os.getuid()

WORKER = r"""
import json, os, sys, time
import chute
src, rank, world, delay_us, step_s, out = sys.argv[1:7]
kw = dict(batch_size=4, size=16, workers=1, rank=int(rank), world_size=int(world),
          read_delay_us=int(delay_us), readahead=0)
if len(sys.argv) > 7:
    kw["stats_shm"] = int(sys.argv[7])
ld = chute.Loader(src, **kw)
t_first = None
samples = 0
waited = 0.0
last_write = 0.0
epoch = 0
while True:
    ld.set_epoch(epoch)
    it = iter(ld)
    while True:
        t0 = time.perf_counter()
        try:
            _, labels = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        if t_first is None:
            t_first = t0
        waited += t1 - t0
        samples += len(labels)
        time.sleep(float(step_s))
        now = time.perf_counter()
        if now - last_write > 0.1:
            span = now - t_first
            tmp = out + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"rate": samples / span, "wait": waited / span, "span": span,
                           "samples": samples}, f)
            os.replace(tmp, out)
            last_write = now
    epoch += 1
"""


def chute_cli():
    for p in (os.environ.get("CHUTE_CLI"),
              os.path.join(ROOT, "build-python", "lib-test", "chute", "bin", "chute"),
              os.path.join(ROOT, "build", "chute")):
        if p and os.path.exists(p):
            return p
    pytest.skip("no chute CLI built (build/chute, or set CHUTE_CLI)")


def segments_of(pid):
    return glob.glob("/dev/shm/chute-%d-%d-*" % (UID, pid))


def wait_for(cond, timeout=60.0, what="condition"):
    t_end = time.time() + timeout
    while time.time() < t_end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def start_worker(tmp, src, rank, world, delay_us, step_s, *extra):
    out = os.path.join(str(tmp), "self-%d-%d.json" % (rank, time.monotonic_ns()))
    p = subprocess.Popen([sys.executable, "-c", WORKER, src, str(rank), str(world), str(delay_us),
                          str(step_s), out] + [str(e) for e in extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    p.self_file = out
    return p


def stop(procs):
    """Kill and reap; SIGKILL runs no exit hook, so remove what they left."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for seg in segments_of(p.pid):
            os.unlink(seg)


def top_json(*args, timeout=20):
    r = subprocess.run([chute_cli(), "top", "--once", "--json", "--interval", "0.5"] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def three(shards, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("top")
    r0 = start_worker(tmp, shards, 0, 2, 0, 0.08)
    r1 = start_worker(tmp, shards, 1, 2, 60000, 0.005)
    bench = subprocess.Popen([chute_cli(), "bench", shards, "--epochs", "1000000", "--workers",
                              "1", "--batch-size", "8", "--size", "16"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs = [r0, r1, bench]
    try:
        for p in procs:
            wait_for(lambda: segments_of(p.pid) or p.poll() is not None, what="a segment")
            assert p.poll() is None, p.stderr.read().decode()[-2000:]
        for p in (r0, r1):
            wait_for(lambda: os.path.exists(p.self_file), what="the rank's own figures")
        time.sleep(2.5)  # a few seconds of steady state
        yield r0, r1, bench
    finally:
        stop(procs)


def own_figures(p):
    with open(p.self_file) as f:
        return json.load(f)


def test_top_json_names_each_loader_with_rate_and_wait(three, shards):
    r0, r1, bench = three
    doc = top_json()
    by_pid = {p["pid"]: p for p in doc["processes"]}
    for p in three:
        assert p.pid in by_pid, (p.pid, doc["processes"])
    a, b, c = by_pid[r0.pid], by_pid[r1.pid], by_pid[bench.pid]
    assert (a["rank"], a["world"]) == (0, 2) and (b["rank"], b["world"]) == (1, 2)
    assert c["world"] == 1 and c["comm"] == "chute" and a["comm"].startswith("python")
    assert a["dataset"] == b["dataset"] == os.path.basename(shards)
    for p, row in ((r0, a), (r1, b)):
        own = own_figures(p)
        assert abs(row["images_per_s"] - own["rate"]) <= 0.25 * own["rate"], (row, own)
        assert abs(row["wait_pct"] - 100 * own["wait"]) <= 15, (row, own)
    # The pacing made rank 0 compute-bound and rank 1 storage-bound (margins
    # for a loaded 2-core CI machine: a 60 ms read dwarfs any decode here).
    assert a["wait_pct"] < 20 and a["bottleneck"] == "compute", a
    assert b["wait_pct"] > 50 and b["bottleneck"] == "storage", b
    assert c["images_per_s"] > 0 and 0 <= c["wait_pct"] <= 100, c
    # rank 1's wait is an event; rank 0's is not.
    texts = [e["text"] for e in doc["events"]]
    assert any(t.startswith("rank 1 (pid %d) waited" % r1.pid) and "storage-bound" in t
               for t in texts), texts
    assert not any(t.startswith("rank 0 (pid %d)" % r0.pid) for t in texts), texts
    # Node figures are there (the CPU shares add up to at most 100%).
    cpu = doc["node"]["cpu"]
    assert 0 <= cpu["user_pct"] + cpu["system_pct"] + cpu["iowait_pct"] <= 100.5, cpu
    assert doc["node"]["gpu"] is not None or "no GPU" in doc["node"]["gpu_note"]


def test_top_line_mode_is_one_line_per_refresh(three):
    r = subprocess.run([chute_cli(), "top", "--line", "--count", "2", "--interval", "0.3"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2, lines
    for p in three:
        assert "pid %d" % p.pid in lines[-1], lines[-1]


def test_top_in_tmux_shows_each_loader(three, tmp_path):
    tmux = shutil.which("tmux")
    if not tmux:
        pytest.skip("tmux not installed (scripts/deps.sh installs it)")
    sock = str(tmp_path / "tmux.sock")
    session = "chutetop%d" % os.getpid()
    cmd = "%s top --interval 0.5" % chute_cli()
    subprocess.run([tmux, "-S", sock, "new-session", "-d", "-s", session, "-x", "160", "-y",
                    "40", cmd], check=True, timeout=10)
    try:
        screen = ""
        t_end = time.time() + 10
        while time.time() < t_end:
            time.sleep(0.5)
            screen = subprocess.run([tmux, "-S", sock, "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True, timeout=10).stdout
            if all(("%d " % p.pid) in screen for p in three):
                break
        assert "IMG/S" in screen and "WAIT" in screen, screen
        for p in three:
            rows = [ln for ln in screen.splitlines() if ln.startswith("%d " % p.pid)]
            assert rows, (p.pid, screen)
            fields = rows[0].split()
            # PID RANK COMMAND DATASET IMG/S WAIT ...: a rate and a percentage.
            assert float(fields[4]) > 0 and fields[5].endswith("%"), rows[0]
        r1 = three[1]
        assert any(("rank 1 (pid %d) waited" % r1.pid) in ln for ln in screen.splitlines()), screen
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], timeout=10)


def test_sigkilled_loader_disappears_and_its_segment_is_removed(shards, tmp_path):
    p = start_worker(tmp_path, shards, 0, 1, 0, 0.01)
    try:
        wait_for(lambda: os.path.exists(p.self_file), what="the loader to run")
        segs = segments_of(p.pid)
        assert len(segs) == 1
    finally:
        p.kill()
        p.wait()
    assert os.path.exists(segs[0]), "SIGKILL runs no cleanup: the segment stays until a sweep"
    doc = top_json()
    assert p.pid not in [q["pid"] for q in doc["processes"]]
    assert not os.path.exists(segs[0]), "top's sweep removes the dead process's segment"

    # The next loader start sweeps too.
    q = start_worker(tmp_path, shards, 0, 1, 0, 0.01)
    try:
        wait_for(lambda: os.path.exists(q.self_file), what="the loader to run")
        seg = segments_of(q.pid)[0]
    finally:
        q.kill()
        q.wait()
    assert os.path.exists(seg)
    n = start_worker(tmp_path, shards, 0, 1, 0, 0.01)
    try:
        wait_for(lambda: segments_of(n.pid), what="the new loader's segment")
        assert not os.path.exists(seg), "a loader start removes the dead process's segment"
    finally:
        stop([n])


CLOSE_AND_EXIT = r"""
import glob, os, sys
import chute
src = sys.argv[1]
mine = lambda: glob.glob("/dev/shm/chute-%d-%d-*" % (os.getuid(), os.getpid()))
a = chute.Loader(src, batch_size=4, size=16, workers=1)
assert len(mine()) == 1, mine()
a.close()
assert mine() == [], mine()
off = chute.Loader(src, batch_size=4, size=16, workers=1, stats_shm=0)
assert mine() == [], "stats_shm=0 made " + repr(mine())
b = chute.Loader(src, batch_size=4, size=16, workers=1)
assert len(mine()) == 1
print(mine()[0])
sys.stdout.flush()
# exit with b open: the exit hook removes its segment
"""


def test_closed_loader_and_exiting_process_leave_no_segment(shards):
    r = subprocess.run([sys.executable, "-c", CLOSE_AND_EXIT, shards], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    seg = r.stdout.strip()
    assert seg.startswith("/dev/shm/chute-") and not os.path.exists(seg), seg


def test_bench_stats_shm_0_makes_no_segment(shards):
    p = subprocess.Popen([chute_cli(), "bench", shards, "--epochs", "1000000", "--workers", "1",
                          "--batch-size", "8", "--size", "16", "--stats-shm", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        assert p.poll() is None, p.stderr.read().decode()
        assert segments_of(p.pid) == []
    finally:
        stop([p])


def proc_start_ticks(pid):
    # /proc/PID/stat field 22, counted after the ')' closing field 2.
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[19])


def segment_bytes(pid, start, magic=b"CHUTESTA", version=1, size=4096):
    """A version-1 segment laid out per docs/TOP.md's table."""
    b = bytearray(4096)
    b[0:8] = magic
    struct.pack_into("<IIIIiIQQII", b, 8, version, size, 256, 26, pid, 1, start, 0, 0, 1)
    b[56:60] = b"host"
    b[120:124] = b"hand"
    b[184:188] = b"test"
    for i in range(26):
        struct.pack_into("<Q", b, 256 + 8 * i, 0)
    return bytes(b)


def test_hostile_segments_are_ignored_with_a_note(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    me = os.getpid()
    start = proc_start_ticks(me)

    def put(n, data, mode=0o600):
        path = d / ("chute-%d-%d-%d" % (UID, me, n))
        path.write_bytes(data)
        os.chmod(path, mode)
        return path.name

    good = put(0, segment_bytes(me, start))
    expect = {
        put(1, segment_bytes(me, start, magic=b"NOTCHUTE")): "magic",
        put(2, segment_bytes(me, start, version=9)): "version 9",
        put(3, segment_bytes(me, start)[:100]): "truncated",
        put(4, os.urandom(4096)): "magic",
        put(5, segment_bytes(me, start), mode=0o644): "mode 0644",
        put(6, segment_bytes(me, start, size=1 << 30)): "size",
        put(10, segment_bytes(os.getppid(), start)): "pid %d inside" % os.getppid(),
    }
    link = "chute-%d-%d-7" % (UID, me)
    os.symlink(d / good, d / link)
    expect[link] = "link"
    fifo = "chute-%d-%d-8" % (UID, me)
    os.mkfifo(d / fifo, 0o600)
    expect[fifo] = "regular"
    if UID == 0:
        other = put(9, segment_bytes(me, start))
        os.chown(d / other, 65534, 65534)
        expect[other] = "owned by uid 65534"
    (d / ("chute-%d-1-0" % (UID + 1))).write_bytes(b"another user's name: not read")

    doc = top_json("--dir", str(d), "--interval", "0.1")
    assert [p["pid"] for p in doc["processes"]] == [me], doc["processes"]
    got = {n["name"]: n["reason"] for n in doc["ignored"]}
    assert set(got) == set(expect), (got, expect)
    for name, word in expect.items():
        assert word in got[name], (name, got[name], word)
    # The screen lists them too, and nothing crashed.
    r = subprocess.run([chute_cli(), "top", "--count", "1", "--interval", "0.1", "--dir", str(d)],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and "IGNORED" in r.stdout, r.stdout + r.stderr
    # None of them was removed (they are not stale: the pid is alive).
    assert len(os.listdir(d)) == len(expect) + 2


def test_top_refuses_bad_flags():
    r = subprocess.run([chute_cli(), "top", "--interval", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--interval" in r.stderr
    r = subprocess.run([chute_cli(), "top", "--json", "--line"], capture_output=True, text=True)
    assert r.returncode == 2
    r = subprocess.run([chute_cli(), "top", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--once" in r.stdout and "--json" in r.stdout


FAKE_NVML = r"""
/* A stand-in libnvidia-ml.so.1 with NVML's C signatures: one device. */
#include <string.h>
typedef struct { unsigned int gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev)
{ *dev = (void *)0x1; return i == 0 ? 0 : 2; }
int nvmlDeviceGetUtilizationRates(void *dev, util_t *u) { u->gpu = 37; u->memory = 5; return 0; }
int nvmlDeviceGetName(void *dev, char *name, unsigned int n)
{ strncpy(name, "Fake GPU", n); return 0; }
int nvmlDeviceGetMemoryInfo(void *dev, mem_t *m)
{ m->total = 80ull << 30; m->used = 1ull << 30; m->free = m->total - m->used; return 0; }
"""


def test_gpu_figures_come_from_nvml(tmp_path):
    # No GPU on CI: a stand-in NVML with known answers checks the dlopen
    # path and the units (bytes -> MB) end to end.
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the stand-in NVML")
    (tmp_path / "nvml.c").write_text(FAKE_NVML)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libnvidia-ml.so.1"),
                    str(tmp_path / "nvml.c")], check=True, timeout=60)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    r = subprocess.run([chute_cli(), "top", "--once", "--json", "--interval", "0.1", "--dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode == 0, r.stderr
    gpu = json.loads(r.stdout)["node"]["gpu"]
    assert gpu == {"name": "Fake GPU", "util_pct": 37, "mem_used_mb": round((1 << 30) / 1e6),
                   "mem_total_mb": round((80 << 30) / 1e6)}, gpu
    r = subprocess.run([chute_cli(), "top", "--count", "1", "--interval", "0.1", "--dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=20, env=env)
    assert "GPU  Fake GPU  util 37%  memory 1074 / 85899 MB" in r.stdout, r.stdout


INFER_WORKER = r"""
import glob, json, os, sys, time
import chute
tree, rate, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
kw = dict(size=16, workers=1, max_batch=4, max_delay_us=2000)
if len(sys.argv) > 4:
    kw["stats_shm"] = int(sys.argv[4])
files = sorted(glob.glob(os.path.join(tree, "*", "*")))[:16]
data = [open(p, "rb").read() for p in files]
inf = chute.Infer(**kw)
sent = {}
done = []  # (handed-out time, latency) by this process's own clock
k = 0
t_start = time.perf_counter()
last_write = 0.0
while True:
    now = time.perf_counter()
    while k < (now - t_start) * rate:  # paced arrivals
        sent[k] = time.perf_counter()
        inf.submit(data[k % len(data)], k)
        k += 1
    for i, _ in inf.poll(timeout=0.002) or []:
        t = time.perf_counter()
        done.append((t, t - sent.pop(i)))
    now = time.perf_counter()
    if now - last_write > 0.1 and now - t_start > 1.0:
        last = sorted(l for t, l in done if t > now - 1.0)
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"rate": len(last) / 1.0, "completed": len(done),
                       "max_ms": 1e3 * (last[-1] if last else 0)}, f)
        os.replace(tmp, out)
        last_write = now
"""


def start_infer(tmp, tree, rate, *extra):
    out = os.path.join(str(tmp), "infer-%d.json" % time.monotonic_ns())
    p = subprocess.Popen([sys.executable, "-c", INFER_WORKER, str(tree), str(rate), out]
                         + [str(e) for e in extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    p.self_file = out
    return p


def test_top_lists_inference_sessions(tree, tmp_path):
    """A chute.Infer session paced at 40 requests/s and a `chute bench
    --latency` run both appear as kind "infer": the session's requests/s
    agrees with the rate its own clock counted in the last second (25%),
    its p99 lies within (0, the slowest latency it saw itself + 2 ms], its
    queue capacity is the documented default max(4 x max_batch, 64) = 64;
    --line and the screen name it with req/s and p99; stats_shm=0 makes no
    segment."""
    inf = start_infer(tmp_path, tree, 40)
    off = start_infer(tmp_path, tree, 40, 0)
    bench = subprocess.Popen([chute_cli(), "bench", "--latency", str(tree), "--rate", "30",
                              "--duration", "60", "--size", "16", "--workers", "1",
                              "--images", "16", "--format", "tree"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs = [inf, off, bench]
    try:
        for p in (inf, bench):
            wait_for(lambda: segments_of(p.pid) or p.poll() is not None, what="a segment")
            assert p.poll() is None, p.stderr.read().decode()[-2000:]
        wait_for(lambda: os.path.exists(inf.self_file) or inf.poll() is not None,
                 what="the session's own figures")
        assert inf.poll() is None, inf.stderr.read().decode()[-2000:]
        time.sleep(1.5)  # a full second of the segment's window
        doc = top_json()
        own = json.load(open(inf.self_file))
        by_pid = {p["pid"]: p for p in doc["processes"]}
        assert inf.pid in by_pid and bench.pid in by_pid, doc["processes"]
        a, b = by_pid[inf.pid], by_pid[bench.pid]
        assert a["kind"] == "infer" and b["kind"] == "infer", (a, b)
        assert abs(a["requests_per_s"] - own["rate"]) <= 0.25 * own["rate"], (a, own)
        assert a["images_per_s"] == a["requests_per_s"]
        assert 0 < a["latency_p50_ms"] <= a["latency_p99_ms"] <= own["max_ms"] + 2.0, (a, own)
        assert a["queue_capacity"] == 64 and 0 <= a["queued"] <= 64, a
        assert a["completed"] <= own["completed"] + 40 and a["completed"] >= 40, (a, own)
        assert a["failed"] == 0 and a["rejected_busy"] == 0, a
        assert b["requests_per_s"] > 0 and b["comm"] == "chute", b
        assert off.poll() is None and not segments_of(off.pid), "stats_shm=0 made a segment"
        r = subprocess.run([chute_cli(), "top", "--once", "--line", "--interval", "0.5"],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert "pid %d (infer)" % inf.pid in r.stdout and "req/s p99" in r.stdout, r.stdout
        r = subprocess.run([chute_cli(), "top", "--once", "--interval", "0.5"],
                           capture_output=True, text=True, timeout=20)
        row = [l for l in r.stdout.splitlines() if l.startswith("%-8d infer" % inf.pid)]
        assert row and "ms" in row[0] and "/64" in row[0], r.stdout
    finally:
        stop(procs)
