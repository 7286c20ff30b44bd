import numpy as np

from streamer.live.h264 import H264Decoder, H264Encoder, to_avcc
from streamer.rtmp.flv import avcc_to_annexb, split_annexb
from streamer.samples import grace_hopper, moving_face_frames


def test_units_framed_as_avcc_round_trip():
    units = [b"\x67\x42\x00\x1f\xaa", b"\x68\xce\x3c\x80", b"\x65" + bytes(range(40))]
    assert split_annexb(avcc_to_annexb(to_avcc(units))) == units


def test_encoder_packets_carry_no_parameter_sets_in_band():
    encoder = H264Encoder(64, 48)
    packet = encoder.encode(np.zeros((48, 64, 3), np.uint8), 0)[0]
    assert packet.keyframe and encoder.sequence_header[0] == 1
    assert {unit[0] & 0x1F for unit in split_annexb(avcc_to_annexb(packet.data))}.isdisjoint({7, 8, 9})


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
