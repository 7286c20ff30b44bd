"""picture_limits: the picture size an H.264 SPS or a VP8 keyframe declares, read before a
decoder allocates it. Real SPS from libx264 (sizes with cropping, High profiles, 4:2:2,
4:4:4, monochrome, interlaced, scaling matrices) are parsed to the size libavcodec decodes;
SPS rewritten by the fuzz layer's crafter to other sizes too, which checks one grammar
against the other; oversize and damaged headers are refused with a clear reason."""

from __future__ import annotations

import random
from fractions import Fraction

import av
import numpy as np
import pytest

from streamer.live.h264 import H264Decoder
from streamer.media.picture_limits import (
    MAX_SIDE,
    DeclaredSize,
    FrameSizeError,
    H264SizeGuard,
    UnreadableHeader,
    check_vp8_frame,
    h264_sps_size,
    vp8_keyframe_size,
)
from streamer.rtmp.flv import annexb_to_avcc, avc_decoder_config, split_annexb
from swapcast.benchmarks.fuzz.picture_bombs import resize_avcc, resize_sps, resize_vp8_keyframe

_CQM4 = ",".join(str(6 + (i * 7) % 40) for i in range(16))
_CQM8 = ",".join(str(6 + (i * 5) % 60) for i in range(64))
# (width, height, pixel format, x264 options): what encoders send, and the SPS branches
STREAMS = [
    (64, 64, "yuv420p", {"preset": "ultrafast"}),  # Baseline
    (1920, 1080, "yuv420p", {"preset": "ultrafast"}),  # cropped 1088 -> 1080
    (34, 18, "yuv420p", {"preset": "medium", "profile": "high"}),  # High, cropped both ways
    (1366, 768, "yuv420p", {"preset": "ultrafast", "x264-params": "interlaced=1"}),  # field coding: map units of 32 rows
    (102, 58, "yuv422p", {"preset": "ultrafast"}),  # High 4:2:2
    (101, 57, "yuv444p", {"preset": "ultrafast"}),  # High 4:4:4, odd sides
    (64, 48, "gray", {"preset": "ultrafast"}),  # monochrome
    (318, 238, "yuv420p", {"preset": "ultrafast", "x264-params": f"cqm4iy={_CQM4}:cqm8i={_CQM8}"}),  # scaling lists
]


def x264_packets(width: int, height: int, pix_fmt: str, options: dict[str, str], frames: int = 3) -> list[bytes]:
    """Annex B access units of a small real stream, SPS and PPS in-band."""
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt, encoder.time_base = width, height, pix_fmt, Fraction(1, 25)
    encoder.options = options
    rng = np.random.default_rng(0)
    packets = []
    for index in range(frames):
        rgb = rng.integers(0, 255, (height, width, 3), np.uint8)
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=pix_fmt)
        frame.pts = index
        packets += [bytes(p) for p in encoder.encode(frame)]
    return packets + [bytes(p) for p in encoder.encode(None)]


def sps_of(packets: list[bytes]) -> bytes:
    return next(u for p in packets for u in split_annexb(p) if u[0] & 0x1F == 7)


def with_sps(packets: list[bytes], sps: bytes) -> list[bytes]:
    """The access units with every SPS replaced by ``sps``."""
    return [b"".join(b"\x00\x00\x00\x01" + (sps if u[0] & 0x1F == 7 else u) for u in split_annexb(p)) for p in packets]


def decoded_size(packets: list[bytes]) -> tuple[int, int]:
    decoder = av.CodecContext.create("h264", "r")
    frames = [f for p in packets for f in decoder.decode(av.Packet(p))] + list(decoder.decode(None))
    return frames[0].width, frames[0].height


@pytest.mark.parametrize(("width", "height", "pix_fmt", "options"), STREAMS, ids=lambda v: str(v)[:24])
def test_a_real_sps_declares_the_size_libavcodec_decodes(width, height, pix_fmt, options):
    packets = x264_packets(width, height, pix_fmt, options)
    size = h264_sps_size(sps_of(packets))
    assert (size.width, size.height) == (width, height) == decoded_size(packets)
    assert size.coded_width == -(-width // 16) * 16 and size.coded_width >= width and size.coded_height >= height


@pytest.mark.parametrize(("width", "height", "pix_fmt", "options"), STREAMS, ids=lambda v: str(v)[:24])
def test_an_sps_rewritten_to_another_size_is_parsed_as_libavcodec_decodes_it(width, height, pix_fmt, options):
    packets = x264_packets(width, height, pix_fmt, options)
    sps = sps_of(packets)
    original = h264_sps_size(sps)
    unit_rows = 32 if "interlaced" in options.get("x264-params", "") else 16  # a map unit is a field pair's
    resized = resize_sps(sps, 30, 20)
    size = h264_sps_size(resized)
    assert (size.coded_width, size.coded_height) == (480, 20 * unit_rows)
    assert (size.width, size.height) == decoded_size(with_sps(packets, resized))
    assert original.coded_width - original.width == size.coded_width - size.width  # the cropping is kept


def test_an_sps_declaring_16000x16000_is_refused_before_any_decoder_reads_it():
    packets = x264_packets(64, 64, "yuv420p", {"preset": "ultrafast"})
    huge = resize_sps(sps_of(packets), 1000, 1000)
    assert h264_sps_size(huge) == DeclaredSize(16000, 16000, 16000, 16000, references=1)
    refusal = (r"the stream's H\.264 SPS declares 16000x16000 pictures, "
               r"which cannot be re-encoded: each side must be 16 to 4096 pixels")
    with pytest.raises(FrameSizeError, match=refusal):
        H264SizeGuard().check(with_sps(packets, huge)[0])


def test_coded_sides_past_the_limit_are_refused_even_when_cropping_shows_less():
    sps = sps_of(x264_packets(1920, 1080, "yuv420p", {"preset": "ultrafast"}))
    size = h264_sps_size(resize_sps(sps, MAX_SIDE // 16 + 1, 68))  # 4112 wide, 1088 rows cropped to 1080
    with pytest.raises(FrameSizeError, match=r"declares 4112x1080 \(coded 4112x1088\) pictures"):
        size.check("the stream's H.264 SPS")
    DeclaredSize(4096, 2160, 4096, 2160).check("a 4K stream")  # the limit itself is taken


def test_the_reference_pictures_an_sps_declares_are_bounded_as_h264s_largest_common_levels_bound_them():
    """libavcodec keeps up to 16 reference pictures of whatever size the SPS declares
    (4096x4096 with 16: +0.6 GB a stream, measured); levels 5.1-5.2 hold 184320 macroblocks
    of them (``MAX_DPB_MACROBLOCKS``): 1080p with 16, 4096x2304 with 5 pass, more is refused."""
    sixteen = sps_of(x264_packets(64, 64, "yuv420p", {"preset": "ultrafast", "x264-params": "ref=16"}))
    assert h264_sps_size(sixteen).references == 16
    h264_sps_size(resize_sps(sixteen, 120, 68)).check("a 1080p stream")  # 8160 macroblocks x 16
    with pytest.raises(FrameSizeError, match=r"declares 16 reference pictures of 4096x4096, more than H\.264's levels"):
        H264SizeGuard().check(with_sps(x264_packets(64, 64, "yuv420p", {"preset": "ultrafast", "x264-params": "ref=16"}),
                                       resize_sps(sixteen, 256, 256))[0])
    five = sps_of(x264_packets(64, 64, "yuv420p", {"preset": "ultrafast", "x264-params": "ref=5"}))
    h264_sps_size(resize_sps(five, 256, 144)).check("a 4096x2304 stream")
    with pytest.raises(FrameSizeError, match="5 reference pictures of 4096x2320"):
        h264_sps_size(resize_sps(five, 256, 145)).check("the stream's H.264 SPS")


def test_a_sps_showing_less_than_the_smallest_side_is_refused():
    with pytest.raises(FrameSizeError, match=r"declares 8x64 \(coded 16x64\) pictures"):
        DeclaredSize(8, 64, 16, 64).check("the stream's H.264 SPS")


def test_every_truncation_of_a_real_sps_is_a_clear_error_never_another_exception():
    sps = sps_of(x264_packets(318, 238, "yuv420p", {"preset": "ultrafast", "x264-params": f"cqm4iy={_CQM4}"}))
    outcomes = set()
    for end in range(1, len(sps)):
        try:
            outcomes.add(h264_sps_size(sps[:end]))
        except UnreadableHeader as exc:
            outcomes.add(str(exc))
    assert "the stream's H.264 SPS ends before its picture size is read" in outcomes
    assert isinstance(h264_sps_size(sps), DeclaredSize)


def test_garbage_sps_is_a_size_or_a_clear_error():
    rng = random.Random(7)
    sizes = errors = 0
    for _ in range(3000):
        garbage = bytes([0x67]) + rng.randbytes(rng.randint(0, 40))
        try:
            assert isinstance(h264_sps_size(garbage), DeclaredSize)
            sizes += 1
        except UnreadableHeader as exc:
            assert str(exc).startswith("the stream's H.264 SPS")
            errors += 1
    assert sizes and errors


def test_an_exp_golomb_code_over_32_bits_is_refused():
    with pytest.raises(UnreadableHeader, match="Exp-Golomb code over 32 bits"):
        h264_sps_size(bytes([0x67, 66, 0, 30]) + bytes(8) + b"\xff")


def test_emulation_prevention_bytes_are_removed_before_reading():
    sps = sps_of(x264_packets(64, 64, "yuv420p", {"preset": "ultrafast"}))
    # 4096 macroblocks a side: the width's 12 trailing zero bits and the height's 12 leading ones
    # make a run of 24, which the NAL unit can only carry escaped
    escaped = resize_sps(sps, 4096, 4096)
    assert b"\x00\x00\x03" in escaped
    assert h264_sps_size(escaped) == DeclaredSize(65536, 65536, 65536, 65536, references=1)


def test_the_guard_reads_an_avcc_record_and_length_framed_samples():
    packets = x264_packets(64, 64, "yuv420p", {"preset": "ultrafast"})
    units = split_annexb(packets[0])
    record = avc_decoder_config(sps_of(packets), next(u for u in units if u[0] & 0x1F == 8))
    guard = H264SizeGuard(record)
    for packet in packets:
        guard.check(annexb_to_avcc(packet))  # a real stream passes, in-band SPS included
    with pytest.raises(FrameSizeError, match="16000x16000"):
        H264SizeGuard(resize_avcc(record, 1000, 1000))
    with pytest.raises(FrameSizeError, match="16000x16000"):
        guard.check(annexb_to_avcc(with_sps(packets, resize_sps(sps_of(packets), 1000, 1000))[0]))
    guard.check(b"\x00\x00\x10\x00\x67")  # a length past the sample: the decoder refuses it whole, nothing to read


def test_a_sample_that_is_an_avcc_record_is_read_as_new_extradata_as_libavcodec_reads_it():
    packets = x264_packets(64, 64, "yuv420p", {"preset": "medium", "profile": "high", "tune": "zerolatency"})
    units = split_annexb(packets[0])
    record = avc_decoder_config(sps_of(packets), next(u for u in units if u[0] & 0x1F == 8))
    assert record[2] == 0  # High profile sets no constraint flags: the sample passes libavcodec's test
    with pytest.raises(FrameSizeError, match="16000x16000"):
        H264SizeGuard(record).check(resize_avcc(record, 1000, 1000))
    decoder = av.CodecContext.create("h264", "r")
    decoder.extradata = record
    assert decoder.decode(av.Packet(resize_avcc(record, 30, 20))) == []
    picture = b"".join(len(u).to_bytes(4, "big") + u for u in units if u[0] & 0x1F not in (7, 8))
    assert decoder.decode(av.Packet(picture))[0].width == 480  # h264dec.c took the sample as its SPS


def test_a_length_framed_stream_switched_to_start_codes_is_read_as_libavcodec_reads_it():
    packets = x264_packets(64, 64, "yuv420p", {"preset": "ultrafast"})
    record = avc_decoder_config(sps_of(packets), next(u for u in split_annexb(packets[0]) if u[0] & 0x1F == 8))
    crafted = with_sps(packets, resize_sps(sps_of(packets), 1000, 1000))[0]
    assert crafted.startswith(b"\x00\x00\x00\x01")  # h264dec.c takes it as Annex B despite the avcC
    with pytest.raises(FrameSizeError, match="16000x16000"):
        H264SizeGuard(record).check(crafted)
    decoder = av.CodecContext.create("h264", "r")
    decoder.extradata = record
    assert decoder.decode(av.Packet(with_sps(packets, resize_sps(sps_of(packets), 30, 20))[0]))[0].width == 480  # as it does


def test_the_live_decoder_refuses_a_crafted_sequence_header_and_in_band_sps():
    packets = x264_packets(64, 64, "yuv420p", {"preset": "ultrafast", "tune": "zerolatency"})
    record = avc_decoder_config(sps_of(packets), next(u for u in split_annexb(packets[0]) if u[0] & 0x1F == 8))
    decoder = H264Decoder()
    with pytest.raises(FrameSizeError, match="16000x16000"):
        decoder.configure(resize_avcc(record, 1000, 1000))
    assert not decoder.configured  # the decoder was never opened with it
    decoder.configure(record)
    assert decoder.decode(annexb_to_avcc(packets[0]), 0)[0].width == 64
    with pytest.raises(FrameSizeError, match="16000x16000"):
        decoder.decode(annexb_to_avcc(with_sps(packets, resize_sps(sps_of(packets), 1000, 1000))[0]), 40)


def vp8_packets(width: int, height: int) -> list[bytes]:
    encoder = av.CodecContext.create("libvpx", "w")
    encoder.width, encoder.height, encoder.pix_fmt, encoder.time_base = width, height, "yuv420p", Fraction(1, 25)
    packets = []
    for index in range(3):
        frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), 40 * index, np.uint8), format="rgb24").reformat(format="yuv420p")
        frame.pts = index
        packets += [bytes(p) for p in encoder.encode(frame)]
    return packets + [bytes(p) for p in encoder.encode(None)]


def test_a_vp8_keyframe_declares_its_size_and_interframes_none():
    keyframe, *rest = vp8_packets(102, 58)
    assert vp8_keyframe_size(keyframe) == DeclaredSize(102, 58, 102, 58)
    assert rest and all(vp8_keyframe_size(p) is None for p in rest)


def test_a_vp8_keyframe_declaring_16383x16383_is_refused_and_a_damaged_one_too():
    keyframe = vp8_packets(64, 64)[0]
    with pytest.raises(FrameSizeError, match=r"the stream's VP8 keyframe declares 16383x16383 pictures"):
        check_vp8_frame(resize_vp8_keyframe(keyframe, 16383, 16383))
    check_vp8_frame(resize_vp8_keyframe(keyframe, 4096, 2160))
    for damaged in (keyframe[:9], keyframe[:3] + b"\x9d\x01\x2b" + keyframe[6:]):
        with pytest.raises(UnreadableHeader, match="VP8 keyframe header is damaged"):
            check_vp8_frame(damaged)
