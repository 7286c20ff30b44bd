"""Video files in the codecs phones and browsers record besides H.264 — HEVC (mp4, hvcC),
VP8 and VP9 (webm), AV1 (mp4, av1C) — whose headers declare 16000x16000 pictures while the
container says 64x64: a 64x64 HEVC stream whose SPS says 16000x16000 grew its decoder by
4 GB (8192x8192: 1 GB; measured). Each is refused before anything is decoded, by a job's
split and by ``swapcast swap``'s transcode, saying why; the same files uncrafted go through.
Codecs whose headers are not read are bounded by the decoder's ``max_pixels``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import av
import pytest
from verifier_client import post_to_verifier

from streamer.jobs.split import split_video
from streamer.media import stream_guard
from streamer.media.errors import VideoError
from streamer.media.picture_limits import FrameSizeError
from streamer.media.stream_guard import check_video_file
from streamer.media.transcode import transcode_video
from swapcast.benchmarks.fuzz.picture_bombs import (
    resize_av1_temporal_unit,
    resize_av1c,
    resize_hevc_sps,
    resize_hvcc,
    resize_vp8_keyframe,
    resize_vp9_frame,
)

pytestmark = pytest.mark.slow

HUGE = 16000
ENCODERS = {  # suffix, ffmpeg's encoder options (a keyframe every 10 frames, headers repeated on each; closed GOPs, as phones record)
    "hevc": (".mp4", ["-c:v", "libx265", "-x265-params", "log-level=error:keyint=10:min-keyint=10:repeat-headers=1:open-gop=0"]),
    "vp8": (".webm", ["-c:v", "libvpx", "-deadline", "realtime", "-g", "10"]),
    "vp9": (".webm", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-g", "10"]),
    "av1": (".mp4", ["-c:v", "libsvtav1", "-g", "10"]),
}
HEADERS = {"hevc": "HEVC SPS", "vp8": "VP8 keyframe", "vp9": "VP9 frame header", "av1": "AV1 sequence header"}


def _encode(codec: str, folder: Path) -> Path:
    suffix, options = ENCODERS[codec]
    path = folder / f"plain-{codec}{suffix}"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x64:rate=10",
                    "-t", "3", *options, "-pix_fmt", "yuv420p", str(path)], check=True, timeout=180)
    return path


def _hevc_sample(sample: bytes) -> bytes:
    """A 4-byte length-framed HEVC sample with its SPS resized."""
    out, pos = bytearray(), 0
    while pos + 4 <= len(sample):
        size = int.from_bytes(sample[pos:pos + 4], "big")
        unit = sample[pos + 4:pos + 4 + size]
        if (unit[0] >> 1) & 0x3F == 33:
            unit = resize_hevc_sps(unit, HUGE, HUGE)
        out += len(unit).to_bytes(4, "big") + unit
        pos += 4 + size
    return bytes(out)


CRAFTERS: dict[str, tuple[Callable[[bytes], bytes] | None, Callable[[bytes], bytes]]] = {
    # codec: (extradata crafter, keyframe sample crafter)
    "hevc": (lambda record: resize_hvcc(record, HUGE, HUGE), _hevc_sample),
    "vp8": (None, lambda frame: resize_vp8_keyframe(frame, HUGE, HUGE)),
    "vp9": (None, lambda frame: resize_vp9_frame(frame, HUGE, HUGE)),
    "av1": (lambda record: resize_av1c(record, HUGE, HUGE), lambda unit: resize_av1_temporal_unit(unit, HUGE, HUGE)),
}


def _crafted(plain: Path, codec: str, where: str) -> Path:
    """``plain`` remuxed with the extradata (``where`` = "extradata") or the second
    keyframe's sample on (``where`` = "in-band") declaring 16000x16000."""
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


WAYS = [("hevc", "extradata"), ("hevc", "in-band"), ("vp8", "in-band"), ("vp9", "in-band"), ("av1", "extradata"), ("av1", "in-band")]


@pytest.mark.parametrize(("codec", "where"), WAYS)
def test_a_file_declaring_16000x16000_is_refused_by_a_job_and_by_swap_before_decoding(tmp_path, codec, where):
    plain = _encode(codec, tmp_path)
    check_video_file(plain)
    pieces = split_video(plain, tmp_path / "plain-chunks", 1.0, label="plain").pieces  # VP9, AV1 chunks: mp4; VP8: mkv
    assert len(pieces) >= 2
    with av.open(str(pieces[1].path)) as chunk:
        assert sum(1 for _ in chunk.decode(video=0)) == pieces[1].frames
    crafted = _crafted(plain, codec, where)
    # extradata: libavformat's parser reads the size out of it as the stream's own, refused as such
    declared = rf"the (video stream|stream's {HEADERS[codec]}) declares 16000x16000 pictures, which cannot be re-encoded"
    with pytest.raises(FrameSizeError, match=declared):
        check_video_file(crafted)
    with pytest.raises(VideoError, match=rf"^upload: {declared}"):
        split_video(crafted, tmp_path / "chunks", 1.0, label="upload")
    seen = []
    with pytest.raises(VideoError, match=declared):
        transcode_video(crafted, tmp_path / "out.mp4", lambda rgb, seconds: seen.append(rgb.shape) or rgb)
    assert set(seen) <= {(64, 64, 3)}  # nothing of the crafted size was decoded


@pytest.mark.parametrize(("codec", "where"), [("hevc", "in-band"), ("vp9", "in-band"), ("av1", "extradata")])
def test_the_verifier_answers_413_to_such_an_upload_and_reads_the_plain_one(tmp_path, codec, where):
    """``POST /api/v1/provenance/verify`` decodes uploads in the node's own process: an HEVC
    upload declaring 16000x16000 in-band reached the decoder before (its container and
    H.264/VP8 headers were all that was read)."""
    plain = _encode(codec, tmp_path)
    kind = "video/webm" if plain.suffix == ".webm" else "video/mp4"
    status, answer = post_to_verifier(_crafted(plain, codec, where).read_bytes(), f"clip{plain.suffix}", kind)
    assert status == 413 and "declares 16000x16000 pictures" in answer["error"], (status, answer)
    status, answer = post_to_verifier(plain.read_bytes(), f"clip{plain.suffix}", kind)
    assert status == 200 and answer["kind"] == "video", (status, answer)


def test_a_decoder_refuses_pictures_over_its_bound_whatever_the_codec(tmp_path, monkeypatch):
    """The backstop for codecs whose headers are not read (MPEG-4 here): with the bound
    lowered under the file's own size, its transcode fails instead of decoding."""
    mpeg4 = tmp_path / "clip.avi"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=64x64:rate=10",
                    "-t", "1", "-c:v", "mpeg4", str(mpeg4)], check=True, timeout=60)
    transcode_video(mpeg4, tmp_path / "out.mp4", lambda rgb, seconds: rgb)
    monkeypatch.setattr(stream_guard, "MAX_DECODED_PIXELS", 32 * 32)
    with pytest.raises(VideoError, match="clip.avi"):
        transcode_video(mpeg4, tmp_path / "again.mp4", lambda rgb, seconds: rgb)
