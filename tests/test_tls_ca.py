#!/usr/bin/env python3
"""tls_ca_*: trusting a private CA for https:// (and S3 over TLS).

A CA and a server certificate for 127.0.0.1 are made here with the
openssl command; tools/range_http.py serves the fixture shards over https
with them.  chute must refuse the server while nothing names that CA
(with a message that says which CAs it trusted and which variables to
set), read it through each of AWS_CA_BUNDLE, CURL_CA_BUNDLE,
SSL_CERT_FILE and SSL_CERT_DIR (an `openssl rehash`ed directory), prefer
AWS_CA_BUNDLE over the others (the AWS CLI's order), and name the
variable and the path when a variable points at nothing.  What is
compared is the local run's listing and batches, never a value computed
from chute.

The machine's own environment may already set these variables (to the
system bundle): every run here starts from an environment without them.

Cases: refuse trust precedence missing system s3
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

VARS = ("AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
DUMP = ("--transform", "eval", "--dtype", "uint8", "--size", "32", "--batch-size", "8",
        "--workers", "2", "--seed", "3")


def openssl(ctx, *args, cwd=None):
    if not shutil.which("openssl"):
        raise T.Skip("no openssl command")
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), p.stderr.decode()[-500:]))


def make_ca(ctx, d, name):
    """A CA (name.crt/.key) and a server cert for 127.0.0.1 signed by it."""
    openssl(ctx, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=chute test CA %s" % name, "-keyout", name + "-ca.key",
            "-out", name + "-ca.crt", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    openssl(ctx, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", name + "-srv.key", "-out", name + "-srv.csr", cwd=d)
    with open(os.path.join(d, name + "-ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    openssl(ctx, "x509", "-req", "-in", name + "-srv.csr", "-CA", name + "-ca.crt",
            "-CAkey", name + "-ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", name + "-ext.cnf", "-out", name + "-srv.crt", cwd=d)
    return os.path.join(d, name + "-ca.crt")


class Pki:
    """The test CA (ca, and cadir: a rehashed directory holding it), the
    server's certificate and key it signed (crt, key), and another CA
    that signed nothing here (other)."""
    def __init__(self, ctx, work):
        self.dir = os.path.join(work, "pki")
        os.makedirs(self.dir, exist_ok=True)
        self.ca = make_ca(ctx, self.dir, "good")
        self.other = make_ca(ctx, self.dir, "other")   # a CA that did not sign the server
        self.crt = os.path.join(self.dir, "good-srv.crt")
        self.key = os.path.join(self.dir, "good-srv.key")
        self.cadir = os.path.join(self.dir, "cadir")
        os.makedirs(self.cadir)
        shutil.copy(self.ca, self.cadir)
        openssl(ctx, "rehash", self.cadir)


class Server(Pki):
    def __init__(self, ctx, work):
        ctx.need_data()
        Pki.__init__(self, ctx, work)
        root = os.path.join(work, "www")
        shutil.copytree(ctx.shards, os.path.join(root, "shards"))
        pf = os.path.join(work, "port")
        self.p = subprocess.Popen([sys.executable, os.path.join(ctx.tools, "range_http.py"), root,
                                   "--port-file", pf, "--tls", self.crt, self.key])
        for _ in range(200):
            if os.path.exists(pf):
                break
            time.sleep(0.05)
        with open(pf) as f:
            self.url = "https://127.0.0.1:%d/shards/" % int(f.read())

    def stop(self):
        self.p.kill()
        self.p.wait()


def env(work, **kw):
    e = {k: v for k, v in os.environ.items() if k not in VARS}
    e["XDG_CACHE_HOME"] = os.path.join(work, "xdg")
    e["CHUTE_REMOTE_RETRIES"] = "1"
    e["CHUTE_REMOTE_BACKOFF_MS"] = "10"
    e.update(kw)
    return e


def read(p):
    with open(p, "rb") as f:
        return f.read()


def same_batches(ctx, srv, work, what, e, url=None):
    url = url or srv.url
    a, b = os.path.join(work, "local.bin"), os.path.join(work, "https.bin")
    if not os.path.exists(a):
        ctx.run([ctx.dump, ctx.shards, a] + list(DUMP), what="dump local shards")
    p = ctx.run([ctx.dump, url, b] + list(DUMP), env=e, what="dump %s (%s)" % (url, what))
    ctx.check(p.returncode == 0 and read(a) == read(b) and len(read(a)) > 0,
              "%s: batches over https differ from the local run's (rc %d): %s"
              % (what, p.returncode, p.err[-600:]))


def with_server(fn):
    def case(ctx):
        work = ctx.scratch(fn.__name__)
        srv = Server(ctx, work)
        try:
            fn(ctx, srv, work)
        finally:
            srv.stop()
    return case


@with_server
def refuse(ctx, srv, work):
    """No variable names the CA: the system's CAs do not trust it, and the
    message says so, which CAs were used and what to set."""
    p = ctx.run([ctx.chute, "inspect", srv.url], env=env(work), expect="nonzero")
    ctx.check("not trusted" in p.err and "AWS_CA_BUNDLE" in p.err and "127.0.0.1" in p.err,
              "no CA given: want a 'not trusted' message naming AWS_CA_BUNDLE: %r" % p.err[-600:])
    # A variable naming the wrong CA: refused too, and the message names it.
    p = ctx.run([ctx.chute, "inspect", srv.url], env=env(work, SSL_CERT_FILE=srv.other), expect="nonzero")
    ctx.check("not trusted" in p.err and "SSL_CERT_FILE" in p.err and srv.other in p.err,
              "wrong CA in SSL_CERT_FILE: %r" % p.err[-600:])


@with_server
def trust(ctx, srv, work):
    """Each variable alone makes the server trusted: the whole epoch's
    batches (manifest, index and every record read over https) equal the
    local run's."""
    for var, val in (("AWS_CA_BUNDLE", srv.ca), ("CURL_CA_BUNDLE", srv.ca),
                     ("SSL_CERT_FILE", srv.ca), ("SSL_CERT_DIR", srv.cadir)):
        e = env(work, **{var: val})
        same_batches(ctx, srv, work, var, e)


@with_server
def precedence(ctx, srv, work):
    """AWS_CA_BUNDLE wins over the curl/OpenSSL variables, CURL_CA_BUNDLE
    over OpenSSL's, as the AWS CLI and curl order them."""
    same_batches(ctx, srv, work, "AWS_CA_BUNDLE right, SSL_CERT_FILE wrong",
                 env(work, AWS_CA_BUNDLE=srv.ca, SSL_CERT_FILE=srv.other, CURL_CA_BUNDLE=srv.other))
    p = ctx.run([ctx.chute, "inspect", srv.url], env=env(work, AWS_CA_BUNDLE=srv.other, SSL_CERT_FILE=srv.ca),
                expect="nonzero")
    ctx.check("AWS_CA_BUNDLE" in p.err and "not trusted" in p.err,
              "AWS_CA_BUNDLE wrong, SSL_CERT_FILE right: AWS_CA_BUNDLE must win: %r" % p.err[-500:])
    same_batches(ctx, srv, work, "CURL_CA_BUNDLE right, SSL_CERT_FILE wrong",
                 env(work, CURL_CA_BUNDLE=srv.ca, SSL_CERT_FILE=srv.other))


@with_server
def missing(ctx, srv, work):
    """A variable naming a path that does not exist or is not a file is
    the user's mistake: a clear error naming the variable and the path.
    So is a file that holds no certificate."""
    nope = os.path.join(work, "no-such-bundle.pem")
    for var, val in (("AWS_CA_BUNDLE", nope), ("CURL_CA_BUNDLE", nope), ("SSL_CERT_FILE", nope),
                     ("SSL_CERT_DIR", nope), ("AWS_CA_BUNDLE", srv.cadir)):
        p = ctx.run([ctx.chute, "inspect", srv.url], env=env(work, **{var: val}), expect="nonzero")
        ctx.check("%s=%s" % (var, val) in p.err and "cannot read" in p.err,
                  "%s=%s: want an error naming both: %r" % (var, val, p.err[-500:]))
    # A file that is there but holds no certificate: curl cannot load it;
    # said as such, naming the variable and the file, not "not trusted".
    junk = os.path.join(work, "junk.pem")
    with open(junk, "w") as f:
        f.write("this is not a PEM certificate\n")
    p = ctx.run([ctx.chute, "inspect", srv.url], env=env(work, CURL_CA_BUNDLE=junk), expect="nonzero")
    ctx.check("CURL_CA_BUNDLE" in p.err and junk in p.err and "cannot be loaded" in p.err
              and "not trusted" not in p.err,
              "CURL_CA_BUNDLE=%s (no certificate in it): %r" % (junk, p.err[-500:]))


# Run a command in a private mount namespace whose /etc/ssl is an empty
# tmpfs holding only $2 copied to $1 ("-" for nothing): a distribution's
# layout without touching the machine's files.
IN_LAYOUT = ("set -e; mount -t tmpfs chute-test /etc/ssl; "
             "if [ \"$1\" != - ]; then mkdir -p \"$(dirname \"$1\")\"; cp \"$2\" \"$1\"; fi; "
             "shift 2; exec \"$@\"")


def in_layout(ctx, target, src, cmd, e, expect=0):
    if not shutil.which("unshare"):
        raise T.Skip("no unshare command")
    p = subprocess.run(["unshare", "-rm", "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise T.Skip("no private mount namespace here (unshare -rm: %s)" % p.stderr.decode()[-200:])
    return ctx.run(["unshare", "-rm", "sh", "-c", IN_LAYOUT, "sh", target, src] + cmd, env=e,
                   expect=expect)


@with_server
def system(ctx, srv, work):
    """No variable set: the system's bundle is found where the
    distribution keeps it, whatever path libcurl was built with (Debian's
    here and in the wheel).  /etc/ssl is replaced by a tmpfs in a private
    mount namespace holding the test CA as Alpine's /etc/ssl/cert.pem,
    then as openSUSE's /etc/ssl/ca-bundle.pem: both read the local run's
    batches.  With no CA anywhere, the message says none was found."""
    a = os.path.join(work, "local.bin")
    ctx.run([ctx.dump, ctx.shards, a] + list(DUMP), what="dump local shards")
    for target in ("/etc/ssl/cert.pem", "/etc/ssl/ca-bundle.pem"):
        b = os.path.join(work, "sys.bin")
        if os.path.exists(b):
            os.unlink(b)
        p = in_layout(ctx, target, srv.ca, [ctx.dump, srv.url, b] + list(DUMP), env(work),
                      expect=None)
        ctx.check(p.returncode == 0 and os.path.exists(b) and read(a) == read(b),
                  "CA only at %s: batches differ from the local run's (rc %d): %s"
                  % (target, p.returncode, p.err[-600:]))
    p = in_layout(ctx, "-", "-", [ctx.chute, "inspect", srv.url], env(work), expect="nonzero")
    ctx.check("no CA bundle in the system's usual locations" in p.err and "AWS_CA_BUNDLE" in p.err,
              "no CA anywhere: want 'no CA bundle in the system's usual locations' and "
              "AWS_CA_BUNDLE named: %r" % p.err[-600:])


def s3(ctx):
    """S3 over TLS: SeaweedFS (test_remote.py's) behind faultproxy.py
    serving https with the test CA's certificate.  Every kind of request
    chute makes goes through the same trust: the loader's reads (dump),
    `chute iobench` and `chute pack`'s uploads (multipart included).
    Without the CA each is refused as untrusted, and no request reaches
    the server; with it (AWS_CA_BUNDLE beating a wrong SSL_CERT_FILE,
    SSL_CERT_DIR, CURL_CA_BUNDLE) the batches equal the local run's and
    the uploaded objects the local pack's files."""
    ctx.need_data()
    import test_remote as R
    work = ctx.scratch("s3")
    pki = Pki(ctx, work)
    w, c = R.server(ctx, "s3_weed")
    pr = None
    try:
        R.upload_dir(c, ctx.shards, "shards")
        log = os.path.join(work, "requests.log")
        pr, ep, _ = R.proxy(ctx, w, work, "--tls", pki.crt, pki.key, "--log", log)
        ep = ep.replace("http://", "https://", 1)
        url = "s3://%s/shards/" % R.BUCKET

        def s3env(**kw):
            e = w.env(ep, XDG_CACHE_HOME=os.path.join(work, "xdg"), CHUTE_REMOTE_RETRIES="1",
                      CHUTE_REMOTE_BACKOFF_MS="10", CHUTE_REMOTE_PART_MB="5")
            for v in VARS:
                e.pop(v, None)
            e.update(kw)
            return e

        def served():
            return os.path.getsize(log) if os.path.exists(log) else 0

        def refused(p, what):
            ctx.check("not trusted" in p.err and "AWS_CA_BUNDLE" in p.err and R.SK not in p.err,
                      "%s without the CA: want a 'not trusted' message naming AWS_CA_BUNDLE: %r"
                      % (what, p.err[-600:]))
            ctx.check(served() == 0, "%s without the CA: a request reached the server" % what)

        # Without the CA: reads, iobench and uploads are all refused.
        refused(ctx.run([ctx.dump, url, os.path.join(work, "x.bin")] + list(DUMP), env=s3env(),
                        expect="nonzero"), "dump")
        refused(ctx.run([ctx.chute, "iobench", url, "--requests", "4"], env=s3env(),
                        expect="nonzero"), "iobench")
        pack = ["pack", ctx.tree, "--format", "chute", "--shard-size", "6M"]
        refused(ctx.run([ctx.chute] + pack[:2] + ["s3://%s/out/" % R.BUCKET] + pack[2:],
                        env=s3env(SSL_CERT_FILE=pki.other), expect="nonzero"), "pack")
        ctx.check(not c.list_objects_v2(Bucket=R.BUCKET, Prefix="out/").get("Contents"),
                  "pack refused, yet objects were written")

        # With it.
        same_batches(ctx, None, work, "s3 AWS_CA_BUNDLE right, SSL_CERT_FILE wrong",
                     s3env(AWS_CA_BUNDLE=pki.ca, SSL_CERT_FILE=pki.other), url=url)
        ctx.check(served() > 0, "the batches were not read through the TLS proxy")
        p = ctx.run([ctx.chute, "iobench", url, "--requests", "8", "--json"],
                    env=s3env(SSL_CERT_DIR=pki.cadir))
        try:
            j = json.loads(p.out)
        except ValueError:
            j = {}
        sizes = {f: os.path.getsize(os.path.join(ctx.shards, f)) for f in os.listdir(ctx.shards)}
        ctx.check(j.get("requests") == 8 and j.get("objects") == len(sizes)
                  and j.get("object_bytes") == sum(sizes.values()),
                  "iobench over TLS: %r; uploaded %d objects, %d bytes"
                  % (j or p.out[-300:], len(sizes), sum(sizes.values())))
        loc = os.path.join(work, "local-pack")
        ctx.run([ctx.chute] + pack[:2] + [loc] + pack[2:])
        ctx.run([ctx.chute] + pack[:2] + ["s3://%s/out/" % R.BUCKET] + pack[2:],
                env=s3env(CURL_CA_BUNDLE=pki.ca))
        want = {f: read(os.path.join(loc, f)) for f in os.listdir(loc) if f != "chute.lock"}
        got = {}
        for o in c.list_objects_v2(Bucket=R.BUCKET, Prefix="out/").get("Contents", []):
            got[o["Key"][4:]] = c.get_object(Bucket=R.BUCKET, Key=o["Key"])["Body"].read()
        ctx.check(sorted(want) == sorted(got) and all(got[k] == v for k, v in want.items()),
                  "pack over TLS: objects %r differ from the local pack's %r"
                  % (sorted(got), sorted(want)))
        ctx.check(any(len(v) > (5 << 20) for v in want.values()),
                  "no shard is over the 5 MB part size: the multipart upload was not exercised")
    finally:
        if pr:
            pr.kill()
            pr.wait()
        w.stop()


cases = {"refuse": refuse, "trust": trust, "precedence": precedence, "missing": missing,
         "system": system, "s3": s3}

if __name__ == "__main__":
    sys.exit(T.main(cases))
