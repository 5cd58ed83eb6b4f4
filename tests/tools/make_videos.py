#!/usr/bin/env python3
"""make_videos.py — the test videos of the video format, made here with the
`ffmpeg` command from the wallpaper photos (make_tree.py's pinned ones).

Each video is a pan and zoom over one photo, 128x96, and every frame
carries its own index stamped into the top-left corner: bit k of the
output frame number N is the 8x8 block at x = 8k, y = 0..7, white (luma
235) for 1, black (16) for 0, ten bits, chroma neutral there.  Blocks of
8x8 at these levels survive every encoder below at its default quality,
so a test reads back which frame it got (stamp_of) whatever decoded it.

    make(outdir, names=None)  writes the set below, or those named (skips
                  files already there), and returns {name: path}; encoders
                  this ffmpeg lacks are left out (the test then skips them).

  h264_long.mp4     H.264, 300 frames, GOP 250 (one keyframe inside), B-frames
  h264_bf.mkv       H.264, 120 frames, GOP 12, 3 B-frames with b-pyramid
  h264_open.mp4     H.264, 120 frames, GOP 24, open GOPs (leading B-frames
                    after a non-IDR keyframe reference the GOP before)
  h264_vfr.mkv      H.264, 90 frames, variable frame rate (pts gaps of
                    40/80/120 ms in a repeating pattern)
  h264_audio.mp4    H.264 + an AAC sine track, 75 frames
  hevc.mp4, vp9.webm, av1.mkv   60 frames each, GOP 20
  audio_only.m4a    an AAC track and no video (hostile input)

Usage: make_videos.py OUTDIR
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tree  # noqa: E402  (the pinned photos)

W, H = 128, 96
BITS = 10


def stamp_filter():
    """geq stamping bit k of N as the block x in [8k, 8k+8), y < 8."""
    inside = "lt(Y,8)*lt(X,%d)" % (8 * BITS)
    lum = "if(%s,if(bitand(N,pow(2,floor(X/8))),235,16),lum(X,Y))" % inside
    cin = "lt(Y,4)*lt(X,%d)" % (4 * BITS)  # chroma planes are half size (4:2:0)
    return "geq=lum='%s':cb='if(%s,128,cb(X,Y))':cr='if(%s,128,cr(X,Y))'" % (lum, cin, cin)


def source_args(photo, frames, fps=25):
    pan = ("scale=640:-2,zoompan=z='1+0.003*on':x='iw/2-(iw/zoom/2)+on*0.7':"
           "y='ih/2-(ih/zoom/2)':d=1:s=%dx%d:fps=%d,format=yuv420p,%s"
           % (W, H, fps, stamp_filter()))
    return ["-loop", "1", "-framerate", str(fps), "-i", photo, "-vf", pan,
            "-frames:v", str(frames)]


def encoders():
    out = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True,
                         text=True).stdout
    return {line.split()[1] for line in out.splitlines()[10:] if len(line.split()) > 1}


def photo_list():
    p = make_tree.pinned_photos() or make_tree.photos()
    if not p:
        raise SystemExit("make_videos: no wallpaper photos (Debian: plasma-workspace-wallpapers)")
    return p


def specs():
    x264 = ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]
    return [
        ("h264_long.mp4", "libx264", 300, x264 + ["-g", "250", "-keyint_min", "250",
                                                  "-sc_threshold", "0", "-bf", "2"]),
        ("h264_bf.mkv", "libx264", 120, x264 + ["-g", "12", "-bf", "3",
                                                "-x264-params", "b-pyramid=normal"]),
        ("h264_open.mp4", "libx264", 120, x264 + ["-g", "24", "-bf", "3", "-sc_threshold", "0",
                                                  "-x264-params", "open-gop=1"]),
        ("h264_vfr.mkv", "libx264", 90, x264 + ["-g", "30", "-bf", "2", "-fps_mode", "vfr",
                                                "-vf", None]),
        ("h264_audio.mp4", "libx264", 75, x264 + ["-g", "25", "-c:a", "aac", "-b:a", "64k"]),
        ("hevc.mp4", "libx265", 60, ["-c:v", "libx265", "-preset", "ultrafast", "-g", "20",
                                     "-x265-params", "log-level=error:bframes=2",
                                     "-pix_fmt", "yuv420p", "-tag:v", "hvc1"]),
        ("vp9.webm", "libvpx-vp9", 60, ["-c:v", "libvpx-vp9", "-deadline", "realtime",
                                        "-cpu-used", "8", "-g", "20", "-b:v", "400k",
                                        "-pix_fmt", "yuv420p"]),
        ("av1.mkv", "libsvtav1", 60, ["-c:v", "libsvtav1", "-preset", "12", "-g", "20",
                                      "-pix_fmt", "yuv420p"]),
    ]


def make_one(path, photo, frames, args):
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y"]
    src = source_args(photo, frames)
    if "-vf" in args:  # VFR: the source filter plus a setpts with irregular gaps
        args = [a for a in args if a not in ("-vf", None)]
        k = src.index("-vf") + 1
        src[k] += ",setpts='(N+floor(N/3)+2*floor(N/7))/(25*TB)'"
    if "-c:a" in args:
        src = ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"] + src
        args = args + ["-map", "1:v", "-map", "0:a", "-shortest"]
    tmp = "%s.tmp%d%s" % (path, os.getpid(), os.path.splitext(path)[1])
    r = subprocess.run(cmd + src + args + [tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:  # SVT-AV1 chats on stderr even at -loglevel error: shown on failure only
        raise SystemExit("make_videos: %s failed:\n%s" % (path, r.stderr[-2000:]))
    os.replace(tmp, path)


def make(outdir, names=None):
    if not shutil.which("ffmpeg"):
        raise SystemExit("make_videos: no ffmpeg command (Debian: ffmpeg)")
    os.makedirs(outdir, exist_ok=True)
    have = encoders()
    photos = photo_list()
    out = {}
    for k, (name, enc, frames, args) in enumerate(specs()):
        if enc not in have or (names is not None and name not in names):
            continue
        path = os.path.join(outdir, name)
        if not os.path.exists(path):
            make_one(path, photos[k % len(photos)], frames, args)
        out[name] = path
    path = os.path.join(outdir, "audio_only.m4a")
    if names is not None and "audio_only.m4a" not in names:
        return out
    if not os.path.exists(path):
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        "sine=frequency=440:duration=1", "-c:a", "aac", path + ".tmp.m4a"],
                       check=True)
        os.replace(path + ".tmp.m4a", path)
    out["audio_only.m4a"] = path
    return out


def stamp_of(rgb):
    """The frame index stamped into an (H, W, 3) uint8 frame (numpy or a
    nested sequence indexed [y][x][c]): each block's centre 4x4 mean."""
    n = 0
    for k in range(BITS):
        s = 0
        for y in range(2, 6):
            for x in range(8 * k + 2, 8 * k + 6):
                s += int(rgb[y][x][0]) + int(rgb[y][x][1]) + int(rgb[y][x][2])
        if s / 48 > 128:
            n |= 1 << k
    return n


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    for name, path in sorted(make(sys.argv[1]).items()):
        print(name, path)
