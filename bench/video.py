#!/usr/bin/env python3
"""bench/video.py — random 16-frame clips at 112x112: chute's video format
against PyAV (seek to the clip's start, decode 16 frames, RGB, PIL resize),
same videos, same process, one core each (chute: workers=1), one run.

    python3 -m venv --system-site-packages build-bench && build-bench/bin/pip install av
    PYTHONPATH=build-python/lib-test build-bench/bin/python bench/video.py [--clips 200]

Videos: tests/tools/make_videos.py's pan-and-zoom over the wallpapers at
320x240, H.264 GOP 250 with B-frames (300 frames), H.264 GOP 12, HEVC and
VP9 (GOP 20), made once under build-bench/videos.  Prints clips/s and CPU
ms/clip for each and the ratio chute/PyAV.  TorchCodec and decord are not
measured here (TorchCodec needs torch >= 2 and its own FFmpeg; the system
torch is 1.13): issue 26's later slice.
"""
import argparse
import os
import random
import resource
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "tools"))
import make_videos  # noqa: E402

T, S = 16, 112


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bench_chute(root, clips_per_video, nvideos):
    import chute
    ld = chute.Loader(root, format="video", frames_per_clip=T, clips_per_video=clips_per_video,
                      video_size=S, transform="train", batch_size=8, workers=1, as_torch=False,
                      index_dir="")
    for _ in ld:  # warm: indexes built and saved, decoders opened
        break
    t0, c0, n = time.perf_counter(), cpu(), 0
    ld.set_epoch(1)
    for b in ld:
        n += len(b["labels"])
    return n, time.perf_counter() - t0, cpu() - c0


def pyav_clip(path, start):
    import av
    from PIL import Image
    with av.open(path) as c:
        st = c.streams.video[0]
        st.thread_count = 1
        # PyAV's idiom: seek to the time of the start frame (keyframe at or
        # before), then decode until 16 frames from it.
        tb = st.time_base
        rate = st.average_rate
        ts = int(start / rate / tb)
        c.seek(ts, stream=st, backward=True, any_frame=False)
        out = []
        for f in c.decode(st):
            if f.pts is None or f.pts < ts:
                continue
            img = Image.fromarray(f.to_ndarray(format="rgb24")).resize((S, S), Image.BILINEAR)
            out.append(np.asarray(img))
            if len(out) == T:
                break
        return np.stack(out)


def bench_pyav(paths, lengths, nclips):
    rng = random.Random(1)
    t0, c0 = time.perf_counter(), cpu()
    for k in range(nclips):
        i = k % len(paths)
        start = rng.randrange(0, lengths[i] - T + 1)
        pyav_clip(paths[i], start)
    return nclips, time.perf_counter() - t0, cpu() - c0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips-per-video", type=int, default=40)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "build-bench", "videos"))
    a = ap.parse_args()
    make_videos.W, make_videos.H = 320, 240
    names = ("h264_long.mp4", "h264_bf.mkv", "hevc.mp4", "vp9.webm")
    vids = make_videos.make(os.path.join(a.out, "all"), names)
    root = os.path.join(a.out, "tree")
    for n, p in vids.items():
        d = os.path.join(root, n.split(".")[0])
        os.makedirs(d, exist_ok=True)
        if not os.path.exists(os.path.join(d, n)):
            os.symlink(p, os.path.join(d, n))
    lengths = {"h264_long.mp4": 300, "h264_bf.mkv": 120, "hevc.mp4": 60, "vp9.webm": 60}
    paths = [vids[n] for n in names]
    n1, w1, c1 = bench_chute(root, a.clips_per_video, len(paths))
    n2, w2, c2 = bench_pyav(paths, [lengths[n] for n in names], n1)
    print("random %d-frame clips at %dx%d, 320x240 sources, one core each" % (T, S, S))
    print("chute (workers=1): %d clips, %.1f clips/s, %.2f CPU ms/clip" % (n1, n1 / w1,
                                                                        1000 * c1 / n1))
    print("PyAV + PIL       : %d clips, %.1f clips/s, %.2f CPU ms/clip" % (n2, n2 / w2,
                                                                        1000 * c2 / n2))
    print("ratio chute/PyAV : %.2fx clips/s, %.2fx less CPU per clip" % ((n1 / w1) / (n2 / w2),
                                                                        (c2 / n2) / (c1 / n1)))


if __name__ == "__main__":
    main()
