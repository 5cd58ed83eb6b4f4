#!/usr/bin/env python3
"""test_video.py — the video format's frames against the `ffmpeg` command,
and its behaviour on hostile files.  Driven by ctest (chute_testlib); the
frames come from tests/tools/vidframe (chute's decoder at native size, so
an ASan build runs the same requests), the truth from `ffmpeg -i F
-fps_mode passthrough -pix_fmt rgb24` decoding every frame from the start.

Cases:
  exact    a few hundred random (file, frames) requests over every test
           video (tests/tools/make_videos.py: H.264 long/short/open GOP with
           B-frames, VFR, with audio; HEVC, VP9, AV1): every frame pixel-
           identical to ffmpeg's (same swscale conversion to RGB24), half
           through a freshly built index, half through the saved one.
  hostile  truncated, corrupt, audio-only and zero-frame files, a file
           swapped after indexing (on disk and while open), a damaged saved
           index: a clear error or the right frames, never a crash or hang.

Skips (77) without the ffmpeg command or a vidframe binary (no FFmpeg
libraries at build time).
"""
import os
import random
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import chute_testlib as T  # noqa: E402
import make_videos  # noqa: E402

TIMEOUT = float(os.environ.get("CHUTE_TEST_RUN_TIMEOUT", "45"))


def need(ctx):
    vf = os.path.join(os.path.dirname(ctx.dump), "vidframe")
    if not os.path.exists(vf):
        raise T.Skip("no vidframe (built without FFmpeg's libraries)")
    if not shutil.which("ffmpeg"):
        raise T.Skip("no ffmpeg command (Debian: ffmpeg)")
    return vf


def videos(ctx, names=None):
    out = os.path.join(os.path.dirname(ctx.work), "videos")
    try:
        return make_videos.make(out, names)
    except SystemExit as e:
        raise T.Skip(str(e))


def ffmpeg_frames(path):
    """Every frame of the video, decoded from the start by the CLI."""
    info = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                           "stream=width,height", "-of", "csv=p=0", path],
                          capture_output=True, text=True, check=True).stdout.split(",")
    w, h = int(info[0]), int(info[1])
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v:0", "-fps_mode",
                          "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True, timeout=TIMEOUT).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


class Vidframe:
    """One vidframe process: ask(path, frames) -> array or ("error", text)."""

    def __init__(self, exe, index_dir=None):
        args = [exe] + (["-i", index_dir] if index_dir else [])
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)

    def ask(self, path, frames):
        self.p.stdin.write(("%s %s\n" % (path, " ".join(map(str, frames)))).encode())
        self.p.stdin.flush()
        head = self.p.stdout.readline().decode()
        if not head:
            err = self.p.stderr.read().decode()
            raise AssertionError("vidframe died on %s %s: %s" % (path, frames, err[-3000:]))
        parts = head.split(None, 3)
        if parts[0] == "info":
            return tuple(int(x) for x in parts[1:4])
        if parts[0] != "ok":
            return ("error", head.strip())
        n, w, h = int(parts[1]), int(parts[2]), int(parts[3])
        return np.frombuffer(self.p.stdout.read(n * w * h * 3), np.uint8).reshape(n, h, w, 3)

    def close(self):
        self.p.stdin.close()
        err = self.p.stderr.read().decode()
        rc = self.p.wait(timeout=TIMEOUT)
        return rc, err


def finish(ctx, vf):
    rc, err = vf.close()
    ctx.check(rc == 0, "vidframe exit %d" % rc)
    ctx.check(not any(m in err for m in T.CRASH_MARKERS), "vidframe stderr: %s" % err[-2000:])


def exact(ctx):
    exe = need(ctx)
    vids = {k: v for k, v in videos(ctx).items() if k != "audio_only.m4a"}
    for p in vids.values():
        for stale in (p + ".chutevix",):
            if os.path.exists(stale):
                os.unlink(stale)
    truth = {}
    for name, p in sorted(vids.items()):
        truth[name] = ffmpeg_frames(p)
        stamps = [make_videos.stamp_of(f) for f in truth[name]]
        ctx.check(stamps == list(range(len(stamps))), "%s: the fixture's stamps are not 0..n-1"
                  % name)
    rng = random.Random(26)
    names = sorted(vids)
    total = 0
    for half in range(2):  # first a fresh index, then (new process) the saved one
        vf = Vidframe(exe)
        for _ in range(75):
            name = rng.choice(names)
            n = len(truth[name])
            k = sorted(rng.sample(range(n), rng.choice((1, 2, 3))))
            got = vf.ask(vids[name], k)
            if isinstance(got, tuple):
                ctx.check(False, "%s frames %s: %s" % (name, k, got[1]))
                continue
            for j, f in enumerate(k):
                total += 1
                if not np.array_equal(got[j], truth[name][f]):
                    d = np.abs(got[j].astype(int) - truth[name][f].astype(int))
                    ctx.check(False, "%s frame %d: differs from ffmpeg's (max %d, %d px; stamp "
                              "%d)" % (name, f, d.max(), (d > 0).sum(),
                                       make_videos.stamp_of(got[j])))
        finish(ctx, vf)
        if half == 0:
            for name, p in vids.items():
                ctx.check(os.path.exists(p + ".chutevix"), "%s: no saved index" % name)
    ctx.note("%d frames compared over %d videos" % (total, len(vids)))
    ctx.check(total >= 300, "only %d frames compared" % total)


def hostile(ctx):
    exe = need(ctx)
    v = videos(ctx, ("h264_long.mp4", "h264_bf.mkv", "vp9.webm", "audio_only.m4a"))
    w = os.path.join(ctx.work, "hostile")
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    vf = Vidframe(exe, index_dir=os.path.join(w, "idx"))

    def expect_error(path, frames, words, what):
        got = vf.ask(path, frames)
        ok = isinstance(got, tuple) and got[0] == "error"
        ctx.check(ok, "%s: no error (got frames)" % what)
        ctx.note("%s: %s" % (what, got[1] if ok else "frames"))
        if ok:
            ctx.check(all(x in got[1] for x in words), "%s: message %r lacks %s"
                      % (what, got[1], words))
        return got

    # Truncated MP4 (its moov atom is at the end): refused, naming the file.
    data = open(v["h264_long.mp4"], "rb").read()
    p = os.path.join(w, "trunc.mp4")
    open(p, "wb").write(data[:len(data) * 6 // 10])
    expect_error(p, [0], [p, "CHUTE_ECORRUPT"], "truncated mp4")
    # Truncated MKV: the frames that remain decode right; those gone are an error.
    bf = open(v["h264_bf.mkv"], "rb").read()
    truth = ffmpeg_frames(v["h264_bf.mkv"])
    p = os.path.join(w, "trunc.mkv")
    open(p, "wb").write(bf[:len(bf) // 2])
    info = vf.ask(p, ["?"])
    ctx.note("truncated mkv: %s" % (info,))
    if isinstance(info, tuple) and info[0] == "error":
        ctx.check(p in info[1], "truncated mkv: %s" % info[1])
    else:
        n = info[0]
        ctx.check(0 < n < len(truth), "truncated mkv: %d frames of %d" % (n, len(truth)))
        got = vf.ask(p, [0, 1, 2])
        ctx.check(not isinstance(got, tuple) and np.array_equal(got, truth[:3]),
                  "truncated mkv: its first frames are not ffmpeg's")
        got = vf.ask(p, [n - 1])  # the last packet may be cut: right frame or an error
        ctx.check(isinstance(got, tuple) or
                  make_videos.stamp_of(got[0]) == n - 1, "truncated mkv: wrong last frame")
    # Corrupt packets: bytes overwritten in the middle; every request answers.
    r = random.Random(5)
    for t in range(4):
        b = bytearray(bf)
        for _ in range(40):
            k = r.randrange(len(b) // 4, len(b))
            b[k] = r.randrange(256)
        p = os.path.join(w, "corrupt%d.mkv" % t)
        open(p, "wb").write(bytes(b))
        for k in ([0], [30, 31], [100], [119]):
            vf.ask(p, k)  # an error or frames; a crash or hang fails below
    # No video stream; a video stream with no frames.
    expect_error(v["audio_only.m4a"], [0], ["no video stream"], "audio-only file")
    p = os.path.join(w, "empty.mkv")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=duration=1",
                    "-f", "lavfi", "-i", "color=size=64x48:rate=25:duration=1", "-map", "0:a",
                    "-map", "1:v", "-c:v", "libx264", "-c:a", "aac", "-frames:v", "0", p],
                   check=True, timeout=TIMEOUT)  # an H.264 stream of no packets, and audio
    expect_error(p, [0], [p, "no frames"], "zero-frame file")
    # Swapped on disk after indexing: the saved index is stale and rebuilt.
    p = os.path.join(w, "swap.mkv")
    shutil.copy(v["h264_bf.mkv"], p)
    got = vf.ask(p, [5])
    ctx.check(not isinstance(got, tuple) and make_videos.stamp_of(got[0]) == 5, "swap: before")
    # ... while this process holds its index: an error, never wrong frames.
    shutil.copy(v["vp9.webm"], p)
    got = vf.ask(p + "", [5])  # same path: the dataset (and index) stay open
    ctx.note("swap while open: %s" % (got[1] if isinstance(got, tuple) else "frames"))
    ctx.check(isinstance(got, tuple) and "changed" in got[1] or
              (not isinstance(got, tuple) and np.array_equal(got[0], ffmpeg_frames(p)[5])),
              "swap while open: %s" % (got[1] if isinstance(got, tuple) else "wrong frame"))
    finish(ctx, vf)
    # ... and for a new process: same size and mtime, other bytes (the head
    # CRC tells them apart).
    shutil.copy(v["vp9.webm"], p)
    vf = Vidframe(exe, index_dir=os.path.join(w, "idx"))
    got = vf.ask(p, [7])
    ctx.check(not isinstance(got, tuple) and make_videos.stamp_of(got[0]) == 7, "swap: indexed")
    finish(ctx, vf)
    st = os.stat(p)
    swapped = bf + b"\0" * (st.st_size - len(bf))  # Matroska stops at its segment's end
    open(p, "wb").write(swapped)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    vf = Vidframe(exe, index_dir=os.path.join(w, "idx"))
    got = vf.ask(p, [7])
    ctx.check(not isinstance(got, tuple) and np.array_equal(got[0], truth[7]),
              "same size and mtime swap: %s" % (got[1] if isinstance(got, tuple)
                                                else "wrong frame"))
    finish(ctx, vf)
    # A damaged saved index: rebuilt (and rewritten), frames still right.
    p = os.path.join(w, "damaged.mkv")
    shutil.copy(v["h264_bf.mkv"], p)
    vf = Vidframe(exe)
    vf.ask(p, [0])
    finish(ctx, vf)
    ix = p + ".chutevix"
    ctx.check(os.path.exists(ix), "damaged: no saved index")
    good = open(ix, "rb").read()
    for cut in (len(good) // 2, 70):
        bad = bytearray(good)
        bad[cut] ^= 0x5A
        open(ix, "wb").write(bytes(bad))
        vf = Vidframe(exe)
        got = vf.ask(p, [40, 41])
        ctx.check(not isinstance(got, tuple) and np.array_equal(got, truth[40:42]),
                  "damaged index (byte %d): %s" % (cut, got[1] if isinstance(got, tuple)
                                                   else "wrong frames"))
        finish(ctx, vf)
        ctx.check(open(ix, "rb").read() == good, "damaged index (byte %d) not rewritten" % cut)


def loader(ctx):
    """Two epochs of a 2-worker train loader over a class tree of videos:
    every sample delivered, and (under ASan) the workers' decoder state
    freed with the loader."""
    exe = need(ctx)
    v = videos(ctx, ("h264_bf.mkv", "hevc.mp4", "vp9.webm"))
    root = os.path.join(ctx.work, "tree")
    shutil.rmtree(root, ignore_errors=True)
    for cls, names in (("a", ("h264_bf.mkv",)), ("b", ("hevc.mp4", "vp9.webm"))):
        os.makedirs(os.path.join(root, cls))
        for n in names:
            shutil.copy(v[n], os.path.join(root, cls, n))
    r = subprocess.run([exe, "--loader", root], capture_output=True, text=True, timeout=TIMEOUT)
    ctx.check(r.returncode == 0 and r.stdout.strip() == "loader 12",
              "loader: exit %d, %r" % (r.returncode, r.stdout))
    ctx.check(not any(m in r.stderr for m in T.CRASH_MARKERS), "loader: %s" % r.stderr[-2000:])


if __name__ == "__main__":
    sys.exit(T.main({"exact": exact, "hostile": hostile, "loader": loader}))
