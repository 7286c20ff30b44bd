"""FLV tag bodies (AVC, Enhanced-RTMP HEVC, AAC) and the Annex B / AVCC helpers."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest

from streamer.rtmp import flv
from streamer.rtmp.errors import RtmpProtocolError

SPS = bytes.fromhex("6742c01e da0280bf e5c04400 00030004 00000301 e23c5892")
PPS = bytes.fromhex("68ce3c80")
IDR = bytes.fromhex("65888400aabbcc")


def test_avc_sequence_header_known_bytes():
    record = flv.avc_decoder_config(SPS, PPS)
    assert record[:6] == bytes([1, 0x42, 0xC0, 0x1E, 0xFF, 0xE1])
    tag = flv.build_video_tag(record, keyframe=True, packet_type=flv.VideoPacketType.SEQUENCE_HEADER)
    assert tag[:5] == b"\x17\x00\x00\x00\x00"
    parsed = flv.parse_video_tag(tag)
    assert parsed.is_keyframe and parsed.is_sequence_header and parsed.codec == "avc" and parsed.codec_id == 7
    config = flv.parse_avc_decoder_config(parsed.data)
    assert (config.profile, config.level, config.length_size, config.sps, config.pps) == (0x42, 0x1E, 4, [SPS], [PPS])


@pytest.mark.parametrize("cts", [0, 40, -40, (1 << 23) - 1, -(1 << 23)])
def test_nalu_composition_time_is_signed_24_bit(cts):
    tag = flv.build_video_tag(b"\x00\x00\x00\x01\x41", keyframe=False, composition_time=cts)
    assert tag[0] == 0x27 and tag[1] == 1
    parsed = flv.parse_video_tag(tag)
    assert parsed.composition_time == cts and not parsed.is_keyframe and parsed.packet_type == flv.VideoPacketType.NALU


def test_end_of_sequence_and_other_codecs():
    assert flv.parse_video_tag(b"\x17\x02\x00\x00\x00").packet_type == flv.VideoPacketType.END_OF_SEQUENCE
    sorenson = flv.parse_video_tag(b"\x22abc")
    assert (sorenson.codec, sorenson.codec_id, sorenson.data) == ("other", 2, b"abc")
    command_frame = flv.parse_video_tag(b"\x57\x01")
    assert command_frame.codec == "other" and command_frame.frame_type == flv.FrameType.COMMAND


def test_enhanced_rtmp_hevc():
    header = flv.build_video_tag(b"hvcC", keyframe=True, packet_type=flv.VideoPacketType.SEQUENCE_HEADER, codec="hevc")
    assert header == b"\x90hvc1hvcC"
    parsed = flv.parse_video_tag(header)
    assert (parsed.codec, parsed.is_sequence_header, parsed.is_keyframe, parsed.codec_id) == ("hevc", True, True, None)
    frame = flv.parse_video_tag(flv.build_video_tag(b"nal", keyframe=False, composition_time=-5, codec="hevc"))
    assert (frame.packet_type, frame.composition_time, frame.data) == (flv.VideoPacketType.NALU, -5, b"nal")
    coded_x = flv.parse_video_tag(b"\xa3hvc1nal")  # CodedFramesX: no composition time
    assert (coded_x.packet_type, coded_x.composition_time, coded_x.data) == (flv.VideoPacketType.NALU, 0, b"nal")
    assert flv.is_sequence_header("video", header)


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"", "empty"),
        (b"\x17\x00\x00", "at least 5"),
        (b"\x17\x05\x00\x00\x00", "AVCPacketType"),
        (b"\x90av01xxxx", "unsupported Enhanced-RTMP video codec"),
        (b"\x94hvc1", "packet type"),
        (b"\x91hvc1\x00", "composition time"),
    ],
)
def test_bad_video_tags(payload, match):
    with pytest.raises(RtmpProtocolError, match=match):
        flv.parse_video_tag(payload)


def test_aac_audio_tags():
    asc = bytes.fromhex("1210")
    header = flv.build_audio_tag(asc, aac_packet_type=flv.AacPacketType.SEQUENCE_HEADER)
    assert header == b"\xaf\x00\x12\x10"
    parsed = flv.parse_audio_tag(header)
    assert (parsed.sound_format, parsed.sound_rate, parsed.sound_size, parsed.sound_type) == (10, 3, 1, 1)
    assert parsed.is_sequence_header and parsed.data == asc
    raw = flv.parse_audio_tag(flv.build_audio_tag(b"frame"))
    assert raw.aac_packet_type == flv.AacPacketType.RAW and raw.data == b"frame"
    mp3 = flv.parse_audio_tag(b"\x2fmp3")
    assert (mp3.sound_format, mp3.aac_packet_type, mp3.data) == (2, None, b"mp3")
    assert flv.is_sequence_header("audio", header) and not flv.is_sequence_header("audio", b"\xaf\x01")
    for bad in (b"", b"\xaf", b"\xaf\x02"):
        with pytest.raises(RtmpProtocolError):
            flv.parse_audio_tag(bad)


def test_keyframe_and_header_checks():
    assert flv.is_video_keyframe(b"\x17\x01") and not flv.is_video_keyframe(b"\x27\x01") and not flv.is_video_keyframe(b"")
    assert flv.is_video_keyframe(b"\x91hvc1")
    assert not flv.is_sequence_header("data", b"\x17\x00") and not flv.is_sequence_header("video", b"\x17")


def test_split_annexb_handles_3_and_4_byte_start_codes_and_trailing_zeros():
    stream = b"\x00\x00\x00\x01" + SPS + b"\x00\x00\x01" + PPS + b"\x00\x00\x00\x00\x01" + IDR
    assert flv.split_annexb(stream) == [SPS, PPS, IDR]
    assert flv.split_annexb(IDR) == [IDR]
    assert flv.split_annexb(b"") == [] and flv.split_annexb(b"\x00\x00\x01") == []


def test_annexb_avcc_round_trip():
    annexb = b"\x00\x00\x00\x01" + SPS + b"\x00\x00\x00\x01" + PPS + b"\x00\x00\x00\x01" + IDR
    avcc = flv.annexb_to_avcc(annexb)
    assert avcc == b"".join(len(n).to_bytes(4, "big") + n for n in (SPS, PPS, IDR))
    assert flv.avcc_to_annexb(avcc) == annexb
    assert flv.avcc_to_annexb(b"\x00\x02ab", length_size=2) == b"\x00\x00\x00\x01ab"
    for bad in (b"\x00\x00\x00\x09abc", b"\x00\x00"):
        with pytest.raises(RtmpProtocolError):
            flv.avcc_to_annexb(bad)


def test_decoder_config_from_x264_feeds_pyav():
    """The avcC built from libx264's Annex B SPS/PPS is what PyAV's decoder takes as extradata."""
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = 64, 64, "yuv420p"
    encoder.time_base = Fraction(1, 25)
    encoder.options = {"preset": "ultrafast", "tune": "zerolatency"}
    frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24").reformat(format="yuv420p")
    packets = [bytes(p) for p in encoder.encode(frame)] + [bytes(p) for p in encoder.encode(None)]
    units = flv.split_annexb(b"".join(packets))
    sps = next(u for u in units if u[0] & 0x1F == 7)
    pps = next(u for u in units if u[0] & 0x1F == 8)
    decoder = av.CodecContext.create("h264", "r")
    decoder.extradata = flv.avc_decoder_config(sps, pps)
    picture = [u for u in units if u[0] & 0x1F in (1, 5)]
    frames = decoder.decode(av.Packet(b"".join(len(u).to_bytes(4, "big") + u for u in picture)))
    frames += decoder.decode(None)
    assert frames and (frames[0].width, frames[0].height) == (64, 64)


def test_decoder_config_needs_a_real_sps():
    with pytest.raises(ValueError):
        flv.avc_decoder_config(b"\x67", PPS)
    for bad in (b"", b"\x02" + bytes(6), b"\x01\x42\x00\x1e\xff\xe1\x00\x10"):
        with pytest.raises(RtmpProtocolError):
            flv.parse_avc_decoder_config(bad)
