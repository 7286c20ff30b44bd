import numpy as np
import pytest

from streamer.live.h264 import H264Decoder, H264Encoder, avc_decoder_config, split_annexb, split_avcc, to_avcc
from streamer.samples import grace_hopper, moving_face_frames


def test_annexb_and_avcc_framing_round_trip():
    units = [b"\x67\x42\x00\x1f\xaa", b"\x68\xce\x3c\x80", b"\x65" + bytes(range(40))]
    annexb = b"\x00\x00\x00\x01" + units[0] + b"\x00\x00\x01" + units[1] + b"\x00\x00\x00\x01" + units[2]
    assert split_annexb(annexb) == units
    assert split_avcc(to_avcc(units)) == units
    with pytest.raises(ValueError, match="overruns"):
        split_avcc(b"\x00\x00\x00\x09abc")


def test_avcc_record_layout():
    record = avc_decoder_config(b"\x67\x64\x00\x1f\x01", b"\x68\x02")
    assert record[:6] == bytes([1, 0x64, 0x00, 0x1F, 0xFF, 0xE1])
    assert record[6:8] == (5).to_bytes(2, "big") and record[8:13] == b"\x67\x64\x00\x1f\x01"
    assert record[13] == 1 and record[14:16] == (2).to_bytes(2, "big") and record[16:] == b"\x68\x02"


def test_encoder_output_decodes_back_to_the_frames_with_exact_keyframe_timing():
    frames = moving_face_frames(grace_hopper(), 40, (320, 240))
    encoder = H264Encoder(320, 240, keyframe_interval_s=0.5, bitrate_kbps=1500)
    packets = []
    for index, frame in enumerate(frames):
        pts = index * 40 if index < 20 else index * 40 + 7  # irregular spacing, like dropped frames
        packets += encoder.encode(frame, pts)
    assert len(packets) == len(frames)  # zerolatency: one packet per frame, no delay
    keyframes = [p.pts for p in packets if p.keyframe]
    assert keyframes[0] == 0 and all(b - a >= 500 for a, b in zip(keyframes, keyframes[1:]))
    assert all(b - a < 560 for a, b in zip(keyframes, keyframes[1:]))
    decoder = H264Decoder()
    decoder.configure(encoder.sequence_header)
    decoded = [f for p in packets for f in decoder.decode(p.data, p.dts)]
    assert [f.pts for f in decoded] == [p.pts for p in packets]
    error = np.abs(decoded[10].to_ndarray(format="rgb24").astype(int) - frames[10]).mean()
    assert error < 6  # lossy, but the same picture


def test_decoder_ignores_samples_before_a_sequence_header():
    assert H264Decoder().decode(b"\x00\x00\x00\x01\x65", 0) == []
