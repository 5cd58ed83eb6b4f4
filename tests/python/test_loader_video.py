"""The video format through chute.Loader: clips from a tree of class
directories, the clip samplers against hand-computed expectations
(TorchCodec's linspace; frames shown at a time from ffprobe's pts for the
variable-frame-rate file), every frame identified by the index stamped in
it (tests/tools/make_videos.py), resizing against PIL on ffmpeg's frames,
and decoder contexts released with their loaders.  Pixel exactness against
the ffmpeg command is tests/test_video.py (ctest)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import chute

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import make_videos  # noqa: E402

pytestmark = pytest.mark.skipif(
    not chute.features().get("video") or not shutil.which("ffmpeg"),
    reason="chute built without FFmpeg's libraries, or no ffmpeg command")

NAMES = ("h264_bf.mkv", "h264_long.mp4", "hevc.mp4", "vp9.webm", "h264_vfr.mkv")


@pytest.fixture(scope="module")
def vids(tmp_path_factory):
    return make_videos.make(str(tmp_path_factory.mktemp("videos")), NAMES)


@pytest.fixture(scope="module")
def tree(vids, tmp_path_factory):
    root = tmp_path_factory.mktemp("vtree")
    for cls, names in (("archery", ("h264_bf.mkv", "h264_long.mp4")),
                       ("bowling", ("hevc.mp4", "vp9.webm"))):
        os.makedirs(root / cls)
        for n in names:
            shutil.copy(vids[n], root / cls / n)
    return str(root)


def loader(path, **kw):
    kw.setdefault("format", "video")
    kw.setdefault("as_torch", False)
    kw.setdefault("workers", 2)
    kw.setdefault("index_dir", "")
    return chute.Loader(path, **kw)


def batches(ld, epoch=0):
    ld.set_epoch(epoch)
    return [{k: np.asarray(v) for k, v in b.items()} for b in ld]


def stamps(clip):
    """The stamped index of each frame of a (T, 3, H, W) clip."""
    return [make_videos.stamp_of(f.transpose(1, 2, 0)) for f in clip]


def ffmpeg_frames(path):
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v:0", "-fps_mode",
                          "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, make_videos.H, make_videos.W, 3)


def test_tree_clips_labels_and_stamps(tree):
    ld = loader(tree, batch_size=2, frames_per_clip=4, num_indices_between_frames=3,
                shuffle=False, transform="none")
    got = batches(ld)
    video = np.concatenate([b["video"] for b in got])
    frames = np.concatenate([b["frames"] for b in got])
    labels = np.concatenate([b["labels"] for b in got])
    assert video.shape == (4, 4, 3, make_videos.H, make_videos.W) and video.dtype == np.uint8
    assert labels.tolist() == [0, 0, 1, 1]  # ImageFolder order: classes, then names
    lengths = [120, 300, 60, 60]  # h264_bf, h264_long, hevc, vp9 (sorted within class)
    for k in range(4):
        f = frames[k].tolist()
        assert f == list(range(f[0], f[0] + 12, 3)) and 0 <= f[0] and f[-1] < lengths[k]
        assert stamps(video[k]) == f, (k, f)


def test_random_clips_change_with_epoch_not_workers(tree):
    kw = dict(batch_size=4, frames_per_clip=2, shuffle=False, transform="train", seed=7)
    a = batches(loader(tree, workers=1, **kw))
    b = batches(loader(tree, workers=3, **kw))
    assert np.array_equal(a[0]["frames"], b[0]["frames"])
    assert np.array_equal(a[0]["video"], b[0]["video"])
    e1 = batches(loader(tree, workers=2, **kw), epoch=1)
    assert not np.array_equal(a[0]["frames"], e1[0]["frames"])
    for clip, f in zip(e1[0]["video"], e1[0]["frames"]):
        assert stamps(clip) == f.tolist()


def test_regular_clips_are_torchcodec_linspace(vids):
    T, step, lo, hi, n = 5, 2, 10, 100, 3
    ld = loader(vids["h264_long.mp4"], batch_size=n, frames_per_clip=T, clips_per_video=n,
                clip_sampler="regular", num_indices_between_frames=step,
                sampling_range_start=lo, sampling_range_end=hi, shuffle=False,
                transform="eval")
    b = batches(ld)[0]
    # TorchCodec: the last start is end - span; starts linspace(lo, last, n) truncated.
    last = hi - ((T - 1) * step + 1)
    starts = np.linspace(lo, last, n).astype(int)
    want = [[s + k * step for k in range(T)] for s in starts]
    assert b["frames"].tolist() == want
    for clip, f in zip(b["video"], want):
        assert stamps(clip) == f


def test_vfr_clips_by_presentation_time(vids):
    path = vids["h264_vfr.mkv"]
    pts = [float(x) for x in subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "frame=pts_time", "-of", "csv=p=0", path],
        capture_output=True, text=True, check=True).stdout.replace(",", " ").split()]
    assert pts == sorted(pts) and len(set(np.round(np.diff(pts), 3))) > 1  # really VFR
    T, ms = 8, 100
    ld = loader(path, batch_size=1, frames_per_clip=T, ms_between_frames=ms,
                clip_sampler="regular", shuffle=False, transform="none")
    b = batches(ld)[0]
    # Frame k: the one shown at pts[0] + k * 0.1 s, the last with pts <= that time.
    want = [max(i for i, p in enumerate(pts) if p <= pts[0] + k * ms / 1000 + 1e-9)
            for k in range(T)]
    assert b["frames"][0].tolist() == want
    assert stamps(b["video"][0]) == want


def test_resize_matches_pil_on_ffmpeg_frames(vids):
    Image = pytest.importorskip("PIL.Image")
    path = vids["h264_bf.mkv"]
    S = 48
    ld = loader(path, batch_size=1, frames_per_clip=6, clip_sampler="regular",
                video_size=S, shuffle=False, transform="none")
    b = batches(ld)[0]
    assert b["video"].shape == (1, 6, 3, S, S)
    ref = ffmpeg_frames(path)
    for clip_frame, f in zip(b["video"][0], b["frames"][0]):
        want = np.asarray(Image.fromarray(ref[f]).resize((S, S), Image.BILINEAR))
        d = np.abs(clip_frame.transpose(1, 2, 0).astype(int) - want.astype(int))
        assert d.max() <= 1, (f, d.max())


def test_train_crop_is_one_for_the_whole_clip(vids):
    """A clip pinned to one frame (sampling range [59, 60) of a 60-frame
    video: repeat_last) under the train transform: its six frames must be
    the same crop and flip of that frame; a crop drawn per frame would make
    them differ."""
    path = vids["vp9.webm"]
    ld = loader(path, batch_size=1, frames_per_clip=6, sampling_range_start=59,
                video_size=40, transform="train", shuffle=False, seed=3)
    clip = batches(ld)[0]["video"][0]
    assert batches(ld)[0]["frames"][0].tolist() == [59] * 6
    for t in range(1, 6):
        assert np.array_equal(clip[t], clip[0])


def test_loaders_release_decoders(tree):
    def fds():
        return len(os.listdir("/proc/self/fd"))

    def threads():
        return len(os.listdir("/proc/self/task"))

    kw = dict(batch_size=2, frames_per_clip=2, transform="train")
    for _ in range(2):  # warm: imports, FFmpeg's one-time setup
        batches(loader(tree, **kw))
    f0, t0 = fds(), threads()
    for _ in range(20):
        ld = loader(tree, **kw)
        batches(ld)
        ld.close()
        del ld
    assert fds() <= f0 and threads() <= t0


def test_limits_refuse_before_decoding_too_much(vids):
    # Frames over video_max_side: refused naming the file and the option.
    with pytest.raises(Exception, match=r"h264_bf\.mkv.*128x96.*video_max_side 64"):
        batches(loader(vids["h264_bf.mkv"], batch_size=1, frames_per_clip=2, video_max_side=64,
                       on_corrupt="fail"))
    # A clip deep in a 250-frame GOP needs ~200 frames of 36 KiB decoded:
    # over a 1 MiB budget it is refused; near the keyframe it is not.
    kw = dict(batch_size=1, frames_per_clip=2, clip_sampler="regular",
              video_max_decoded_bytes=1 << 20, on_corrupt="fail")
    with pytest.raises(Exception, match=r"h264_long\.mp4.*video_max_decoded_bytes 1048576"):
        batches(loader(vids["h264_long.mp4"], sampling_range_start=200, **kw))
    b = batches(loader(vids["h264_long.mp4"], sampling_range_start=3, **kw))[0]
    assert b["frames"][0].tolist() == [3, 4]
