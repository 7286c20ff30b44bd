"""hevc_sps: the picture size and reference pictures an HEVC SPS declares, read before
libavcodec's decoder allocates them. Real SPS from libx265 (cropped sides, 4:4:4, 4:2:2,
10-bit, monochrome, temporal sub-layers) are read to the size libavcodec decodes; SPS the
fuzz crafter rewrites (its own grammar) are read back and refused when too large, in an
hvcC record, length-framed in a sample, or Annex B."""

from __future__ import annotations

import subprocess
from pathlib import Path

import av
import pytest
from media_fixtures import encoded_noise

from streamer.media.hevc_sps import HevcSizeGuard, check_hevc_sps, hevc_sps_size
from streamer.media.picture_limits import FrameSizeError, UnreadableHeader
from swapcast.benchmarks.fuzz.picture_bombs import resize_hevc_sps, resize_hvcc

# (width, height, pixel format, extra x265-params)
STREAMS = [
    (64, 64, "yuv420p", ""),
    (66, 50, "yuv420p", ""),  # a conformance window crops 80x64 to 66x50
    (96, 64, "yuv444p", ""),
    (64, 64, "yuv422p", ""),
    (128, 72, "yuv420p10le", ""),
    (64, 48, "gray", ""),
    (64, 64, "yuv420p", "temporal-layers=3"),  # sub-layers in the profile_tier_level
]


def x265_packets(width: int, height: int, pix_fmt: str, params: str = "", frames: int = 3) -> list[bytes]:
    """Annex B access units of a small real stream, VPS, SPS and PPS in the first."""
    options = {"preset": "ultrafast", "x265-params": ":".join(filter(None, ["log-level=error", params]))}
    return encoded_noise("libx265", width, height, pix_fmt, options, frames)


def nal_units(annexb: bytes) -> list[bytes]:
    return [unit.rstrip(b"\x00") for unit in annexb.split(b"\x00\x00\x01")[1:] if unit]


def sps_of(packets: list[bytes]) -> bytes:
    return next(unit for unit in nal_units(packets[0]) if (unit[0] >> 1) & 0x3F == 33)


def with_sps(packet: bytes, sps: bytes) -> bytes:
    """``packet`` (Annex B) with its SPS replaced by ``sps``."""
    return b"".join(b"\x00\x00\x00\x01" + (sps if (unit[0] >> 1) & 0x3F == 33 else unit) for unit in nal_units(packet))


def decoded_size(packets: list[bytes]) -> tuple[int, int]:
    decoder = av.CodecContext.create("hevc", "r")
    frames = [frame for packet in packets for frame in decoder.decode(av.Packet(packet))] + list(decoder.decode(None))
    return frames[0].width, frames[0].height


@pytest.mark.parametrize(("width", "height", "pix_fmt", "params"), STREAMS)
def test_a_real_sps_is_read_to_the_size_libavcodec_decodes(width, height, pix_fmt, params):
    packets = x265_packets(width, height, pix_fmt, params)
    size = hevc_sps_size(sps_of(packets))
    assert (size.width, size.height) == decoded_size(packets) == (width, height)
    assert size.coded_width >= width and size.coded_height >= height and size.coded_width % 8 == 0
    assert size.references == 5  # x265's ultrafast DPB
    check_hevc_sps(sps_of(packets))


def test_the_crafters_sizes_read_back_and_libavcodec_decodes_the_same():
    """The crafter's grammar and the reader's are written apart: each checks the other, and
    libavcodec is the judge on a size it can afford."""
    packets = x265_packets(66, 50, "yuv420p")
    sps = sps_of(packets)
    for width, height in ((128, 96), (4096, 2160), (16000, 16000), (8, 8)):
        size = hevc_sps_size(resize_hevc_sps(sps, width, height))
        assert (size.coded_width, size.coded_height) == (width, height)
        assert (size.width, size.height) == (width - 14, height - 14)  # the 14-pixel crop kept
    assert hevc_sps_size(resize_hevc_sps(sps, 80, 64)) == hevc_sps_size(sps)
    larger = [with_sps(packets[0], resize_hevc_sps(sps, 128, 96)), *packets[1:]]
    assert decoded_size(larger) == (128 - 14, 96 - 14)


def test_an_sps_declaring_16000x16000_or_too_many_references_is_refused():
    sps = sps_of(x265_packets(64, 64, "yuv420p"))
    with pytest.raises(FrameSizeError, match=r"^the stream's HEVC SPS declares 16000x16000 pictures, which cannot be"):
        check_hevc_sps(resize_hevc_sps(sps, 16000, 16000))
    with pytest.raises(FrameSizeError, match=r"declares 16 reference pictures of 4096x2176, more than HEVC's level 5.2"):
        check_hevc_sps(resize_hevc_sps(sps, 4096, 2176, dpb=16))
    check_hevc_sps(resize_hevc_sps(sps, 4096, 2176, dpb=6))  # level 5.2 at its largest picture
    check_hevc_sps(resize_hevc_sps(sps, 1920, 1080, dpb=16))
    with pytest.raises(UnreadableHeader, match="HEVC SPS ends before its picture size"):
        check_hevc_sps(sps[:16])


def test_the_guard_reads_the_hvcc_record_length_framed_samples_and_annex_b(tmp_path: Path):
    clip = tmp_path / "clip.mp4"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=64x64:rate=10",
                    "-t", "1", "-c:v", "libx265", "-x265-params", "log-level=error", str(clip)], check=True, timeout=120)
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        record = bytes(stream.codec_context.extradata)
        samples = [bytes(p) for p in container.demux(stream) if p.size]
    guard = HevcSizeGuard(record)
    assert guard.length_size == 4
    for sample in samples:
        guard.check(sample)
    with pytest.raises(FrameSizeError, match="16000x16000"):
        HevcSizeGuard(resize_hvcc(record, 16000, 16000))
    sps = sps_of(x265_packets(64, 64, "yuv420p"))
    crafted = resize_hevc_sps(sps, 16000, 16000)
    with pytest.raises(FrameSizeError, match="16000x16000"):  # in-band, framed as the record says
        guard.check(len(crafted).to_bytes(4, "big") + crafted + samples[0])
    guard.check(b"\x00\x00\x00\x01" + crafted)  # read as lengths: a 1-byte unit, then a length past the end
    annexb = HevcSizeGuard()
    with pytest.raises(FrameSizeError, match="16000x16000"):
        annexb.check(b"\x00\x00\x00\x01" + crafted)


def test_a_multi_layer_extension_sps_declares_no_size_of_its_own():
    """MV-HEVC's second view (nuh_layer_id 1) may take its size from the VPS; libavcodec
    decodes only the base view unless asked, so such an SPS is passed over."""
    sps = sps_of(x265_packets(64, 64, "yuv420p"))
    second_view = bytes([sps[0], (1 << 3) | (sps[1] & 0x07)]) + bytes([(sps[2] & 0xF1) | (7 << 1)]) + sps[3:]
    assert hevc_sps_size(second_view) is None
