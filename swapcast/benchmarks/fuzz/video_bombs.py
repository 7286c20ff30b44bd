"""Small real video files, and the same files remuxed so that a header declares 16000x16000
pictures while the container still says 64x64: in the extradata (hvcC, av1C) or in-band,
from the second keyframe on (H.264/HEVC SPS, VP8/VP9 keyframe, AV1 sequence header). A
decoder given one allocates the declared size: a 64x64 HEVC file declaring 16000x16000 grew
its decoder by 4 GB. The fuzzer uploads them and the security tests feed them to every path
that decodes a file. ``described_again``: an MP4 whose later samples a second sample
description (declaring that size) describes, handed to the decoder as new extradata.
``odd_first_frame``: a small first frame, then many identical frames of another size one
90 kHz tick apart, which a reader that skips what it cannot use without counting it never
stops reading (round 3: 45-130 s in the verifier for 335 KB)."""

from __future__ import annotations

import struct
import subprocess
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from swapcast.benchmarks.fuzz.picture_bombs import (
    resize_av1_temporal_unit,
    resize_av1c,
    resize_avcc,
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


_CONFIG_BOXES = {"h264": b"avcC", "hevc": b"hvcC", "av1": b"av1C"}
DESCRIBED_AGAIN = tuple(_CONFIG_BOXES)  # the codecs ``described_again`` takes
_CONFIG_CRAFTERS: dict[str, Callable[[bytes], bytes]] = {
    "h264": lambda record: resize_avcc(record, HUGE // 16, HUGE // 16),
    "hevc": lambda record: resize_hvcc(record, HUGE, HUGE),
    "av1": lambda record: resize_av1c(record, HUGE, HUGE),
}
_PARENTS = {b"moov", b"trak", b"mdia", b"minf", b"stbl"}


def described_again(plain: Path, codec: str, keyframe: int) -> Path:
    """``plain`` (an MP4 of one video track, its moov after its mdat as ffmpeg writes it)
    with a second sample description whose decoder configuration declares 16000x16000,
    describing the samples from its ``keyframe``-th keyframe on: the demuxer hands the
    decoder that configuration as new extradata on the first such packet. The track is
    rewritten to one sample a chunk (its samples stay where they are)."""
    data = plain.read_bytes()
    top = {kind: (at, header, size) for kind, at, header, size in _boxes(data, 0, len(data))}
    if top[b"moov"][0] < top[b"mdat"][0]:
        raise ValueError("the moov comes first: its chunk offsets would move")
    tables: dict[bytes, bytes] = {}
    _rebuild(data, *top[b"moov"], lambda path, body: tables.setdefault(path[-1], body) and None)
    samples = struct.unpack(">I", tables[b"stsz"][8:12])[0]
    sizes = struct.unpack(f">{samples}I", tables[b"stsz"][12:12 + 4 * samples])
    chunks = struct.unpack(f">{struct.unpack('>I', tables[b'stco'][4:8])[0]}I", tables[b"stco"][8:])
    runs = [struct.unpack(">III", tables[b"stsc"][8 + 12 * i:20 + 12 * i])
            for i in range(struct.unpack(">I", tables[b"stsc"][4:8])[0])]
    offsets: list[int] = []
    for number, at in enumerate(chunks, 1):
        for _ in range(next(per_chunk for first, per_chunk, _ in reversed(runs) if first <= number)):
            offsets.append(at)
            at += sizes[len(offsets) - 1]
    sync = struct.unpack(f">{struct.unpack('>I', tables[b'stss'][4:8])[0]}I", tables[b"stss"][8:])
    entry = tables[b"stsd"][8:]
    entry_size, entry_kind = struct.unpack(">I4s", entry[:8])
    fields, children = entry[8:8 + 78], entry[8 + 78:entry_size]  # a VisualSampleEntry's fixed fields
    crafted = b"".join(_box(kind, _CONFIG_CRAFTERS[codec](children[at + header:at + size]))
                       if kind == _CONFIG_BOXES[codec] else children[at:at + size]
                       for kind, at, header, size in _boxes(children, 0, len(children)))
    replaced = {
        b"stsd": tables[b"stsd"][:4] + struct.pack(">I", 2) + entry[:entry_size] + _box(entry_kind, fields + crafted),
        b"stsc": bytes(4) + struct.pack(">IIIIIII", 2, 1, 1, 1, sync[keyframe - 1], 1, 2),
        b"stco": bytes(4) + struct.pack(f">I{samples}I", samples, *offsets),
    }
    at, header, size = top[b"moov"]
    path = plain.with_name(f"described-again-{codec}{plain.suffix}")
    path.write_bytes(data[:at] + _box(b"moov", _rebuild(data, at, header, size, lambda p, body: replaced.get(p[-1])))
                     + data[at + size:])
    return path


def _boxes(data: bytes, start: int, end: int):
    """(kind, offset, header size, size) of each ISO box in ``data[start:end]``."""
    at = start
    while at + 8 <= end:
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[at + 8:at + 16])[0], 16
        elif size == 0:
            size = end - at
        yield kind, at, header, size
        at += size


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _rebuild(data: bytes, at: int, header: int, size: int, edit: Callable[[tuple[bytes, ...], bytes], bytes | None],
             path: tuple[bytes, ...] = ()) -> bytes:
    """The payload of the box at ``at``, its children rebuilt: ``edit(path, payload)`` gives a
    leaf's new payload (None: kept)."""
    out = bytearray()
    for kind, child, child_header, child_size in _boxes(data, at + header, at + size):
        here = (*path, kind)
        if kind in _PARENTS:
            out += _box(kind, _rebuild(data, child, child_header, child_size, edit, here))
        else:
            new = edit(here, data[child + child_header:child + child_size])
            out += data[child:child + child_size] if new is None else _box(kind, new)
    return bytes(out)


def _same_frames_annex_b(width: int, height: int, frames: int) -> bytes:
    """``frames`` identical H.264 frames (a few bytes each after the first), Annex B."""
    context = av.CodecContext.create("libx264", "w")
    context.width, context.height, context.pix_fmt = width, height, "yuv420p"
    context.time_base = Fraction(1, 90000)
    context.options = {"preset": "ultrafast", "tune": "zerolatency", "bframes": "0", "g": "100000"}
    picture = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    out = bytearray()
    for number in range(frames):
        frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
        frame.pts = number
        out += b"".join(bytes(p) for p in context.encode(frame))
    return bytes(out + b"".join(bytes(p) for p in context.encode(None)))


def odd_first_frame(folder: Path, frames: int, size: tuple[int, int] = (160, 120)) -> Path:
    """An MP4: one 64x64 frame, then ``frames`` identical frames of ``size``, one 90 kHz
    tick apart (all of them 1/90 s of media time per thousand frames)."""
    raw = folder / f"odd-{frames}.h264"
    raw.write_bytes(_same_frames_annex_b(64, 64, 1) + _same_frames_annex_b(*size, frames))
    path = raw.with_suffix(".mp4")
    with av.open(str(raw), format="h264") as source, av.open(str(path), "w") as output:
        stream = output.add_stream_from_template(source.streams.video[0])
        stream.time_base = Fraction(1, 90000)
        for number, packet in enumerate(p for p in source.demux(source.streams.video[0]) if p.size):
            packet.stream, packet.time_base = stream, Fraction(1, 90000)
            packet.pts = packet.dts = number
            packet.duration = 1
            output.mux(packet)
    raw.unlink()
    return path
