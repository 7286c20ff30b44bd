"""Small real video files, and the same files remuxed so that a header declares 16000x16000
pictures while the container still says 64x64: in the extradata (hvcC, av1C) or in-band,
from the second keyframe on (H.264/HEVC SPS, VP8/VP9 keyframe, AV1 sequence header). A
decoder given one allocates the declared size: a 64x64 HEVC file declaring 16000x16000 grew
its decoder by 4 GB. The fuzzer uploads them and the security tests feed them to every path
that decodes a file."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import av

from swapcast.benchmarks.fuzz.picture_bombs import (
    resize_av1_temporal_unit,
    resize_av1c,
    resize_hevc_sps,
    resize_hvcc,
    resize_sps,
    resize_vp8_keyframe,
    resize_vp9_frame,
)

HUGE = 16000
# suffix, ffmpeg's encoder options: a keyframe every second, headers repeated on each,
# closed GOPs (as phones record), so a job cuts the plain file into chunks
ENCODERS = {
    "h264": (".mp4", ["-c:v", "libx264", "-preset", "ultrafast", "-g", "10", "-x264-params", "repeat-headers=1"]),
    "hevc": (".mp4", ["-c:v", "libx265", "-x265-params", "log-level=error:keyint=10:min-keyint=10:repeat-headers=1:open-gop=0"]),
    "vp8": (".webm", ["-c:v", "libvpx", "-deadline", "realtime", "-g", "10"]),
    "vp9": (".webm", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-g", "10"]),
    "av1": (".mp4", ["-c:v", "libsvtav1", "-g", "10"]),
}
# what a refusal names: the stream's header, or the container's size libavformat read out of the extradata
HEADERS = {"h264": "H.264 SPS", "hevc": "HEVC SPS", "vp8": "VP8 keyframe", "vp9": "VP9 frame header",
           "av1": "AV1 sequence header"}
WAYS = [("h264", "in-band"), ("hevc", "extradata"), ("hevc", "in-band"), ("vp8", "in-band"), ("vp9", "in-band"),
        ("av1", "extradata"), ("av1", "in-band")]


def encode_clip(codec: str, folder: Path, seconds: float = 3.0) -> Path:
    """A 64x64 test pattern at 10 fps in ``codec`` (ffmpeg needed)."""
    suffix, options = ENCODERS[codec]
    path = folder / f"plain-{codec}{suffix}"
    done = subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                           "testsrc=size=64x64:rate=10", "-t", str(seconds), *options, "-pix_fmt", "yuv420p", str(path)],
                          capture_output=True, text=True, timeout=180)  # SVT-AV1 prints its banner past -loglevel
    if done.returncode:
        raise RuntimeError(f"ffmpeg could not encode {codec}: {done.stderr.strip()[-500:]}")
    return path


def _length_framed(sample: bytes, resize_unit: Callable[[bytes], bytes | None]) -> bytes:
    """A 4-byte length-framed sample with the units ``resize_unit`` rewrites (None: kept)."""
    out, pos = bytearray(), 0
    while pos + 4 <= len(sample):
        size = int.from_bytes(sample[pos:pos + 4], "big")
        unit = sample[pos + 4:pos + 4 + size]
        unit = resize_unit(unit) or unit
        out += len(unit).to_bytes(4, "big") + unit
        pos += 4 + size
    return bytes(out)


def _h264_sps(unit: bytes) -> bytes | None:
    return resize_sps(unit, HUGE // 16, HUGE // 16) if unit[0] & 0x1F == 7 else None


def _hevc_sps(unit: bytes) -> bytes | None:
    return resize_hevc_sps(unit, HUGE, HUGE) if (unit[0] >> 1) & 0x3F == 33 else None


# codec: (extradata crafter, keyframe sample crafter)
CRAFTERS: dict[str, tuple[Callable[[bytes], bytes] | None, Callable[[bytes], bytes]]] = {
    "h264": (None, lambda sample: _length_framed(sample, _h264_sps)),
    "hevc": (lambda record: resize_hvcc(record, HUGE, HUGE), lambda sample: _length_framed(sample, _hevc_sps)),
    "vp8": (None, lambda frame: resize_vp8_keyframe(frame, HUGE, HUGE)),
    "vp9": (None, lambda frame: resize_vp9_frame(frame, HUGE, HUGE)),
    "av1": (lambda record: resize_av1c(record, HUGE, HUGE), lambda unit: resize_av1_temporal_unit(unit, HUGE, HUGE)),
}


def crafted_clip(plain: Path, codec: str, where: str) -> Path:
    """``plain`` remuxed with its extradata (``where`` = "extradata") or its second
    keyframe's sample (``where`` = "in-band") declaring 16000x16000."""
    extradata_crafter, sample_crafter = CRAFTERS[codec]
    path = plain.with_name(f"crafted-{codec}-{where}{plain.suffix}")
    with av.open(str(plain)) as source, av.open(str(path), "w") as output:
        template = source.streams.video[0]
        stream = output.add_stream_from_template(template, opaque=True)
        if where == "extradata":
            stream.codec_context.extradata = extradata_crafter(bytes(template.codec_context.extradata))
        keyframes = 0
        for packet in source.demux(template):
            if not packet.size:
                continue
            keyframes += packet.is_keyframe
            data = bytes(packet)
            if where == "in-band" and packet.is_keyframe and keyframes == 2:
                data = sample_crafter(data)
            crafted = av.Packet(data)
            crafted.pts, crafted.dts, crafted.time_base = packet.pts, packet.dts, packet.time_base
            crafted.is_keyframe, crafted.stream = packet.is_keyframe, stream
            output.mux(crafted)
    return path
