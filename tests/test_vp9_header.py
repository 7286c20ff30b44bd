"""vp9_header: the picture size any VP9 frame declares (keyframes, intra-only frames,
inter frames with their own size), in superframes too. Real libvpx frames of profiles 0-2
are read to the size libavcodec decodes; frames the fuzz crafter resizes (its own grammar)
are read back, and decoded by libavcodec at a size it can afford; too large is refused."""

from __future__ import annotations


import av
import pytest
from media_fixtures import encoded_noise

from streamer.media.picture_limits import FrameSizeError, UnreadableHeader
from streamer.media.vp9_header import check_vp9_frame, vp9_frame_sizes
from swapcast.benchmarks.fuzz.picture_bombs import resize_vp9_frame


def vp9_packets(width: int, height: int, pix_fmt: str = "yuv420p", frames: int = 6) -> list[bytes]:
    return encoded_noise("libvpx-vp9", width, height, pix_fmt, {"deadline": "realtime"}, frames)


def decoded_sizes(packets: list[bytes]) -> set[tuple[int, int]]:
    decoder = av.CodecContext.create("vp9", "r")
    frames = [frame for packet in packets for frame in decoder.decode(av.Packet(packet))] + list(decoder.decode(None))
    return {(frame.width, frame.height) for frame in frames}


@pytest.mark.parametrize(("width", "height", "pix_fmt"), [(64, 48, "yuv420p"), (66, 50, "yuv420p"),
                                                           (64, 48, "yuv444p"), (64, 48, "yuv422p")])
def test_a_real_keyframe_is_read_to_the_size_libavcodec_decodes_and_inter_frames_declare_none(width, height, pix_fmt):
    packets = vp9_packets(width, height, pix_fmt)
    sizes = [vp9_frame_sizes(packet) for packet in packets]
    assert [(s.width, s.height) for s in sizes[0]] == [(width, height)]
    assert all(not found for found in sizes[1:])  # inter frames take their reference's size
    assert decoded_sizes(packets) == {(width, height)}


def superframe(*frames: bytes) -> bytes:
    """Frames joined with a superframe index (VP9 Annex B: 2-byte sizes)."""
    marker = 0xC0 | (1 << 3) | (len(frames) - 1)
    return b"".join(frames) + bytes([marker]) + b"".join(len(f).to_bytes(2, "little") for f in frames) + bytes([marker])


def test_the_frames_of_a_superframe_are_each_read():
    packets = vp9_packets(64, 48)
    both = superframe(packets[0], packets[1])
    assert [(s.width, s.height) for s in vp9_frame_sizes(both)] == [(64, 48)]
    assert decoded_sizes([both, *packets[2:]]) == {(64, 48)}  # libavcodec splits it as read here
    with pytest.raises(FrameSizeError, match=r"^the stream's VP9 frame header declares 16000x16000 pictures"):
        check_vp9_frame(superframe(packets[1], resize_vp9_frame(packets[0], 16000, 16000)))


def test_crafted_sizes_read_back_and_libavcodec_decodes_the_same():
    packets = vp9_packets(64, 48)
    for width, height in ((96, 80), (4096, 2160), (16000, 16000), (65536, 65536)):
        (size,) = vp9_frame_sizes(resize_vp9_frame(packets[0], width, height))
        assert (size.width, size.height) == (width, height)
    assert resize_vp9_frame(packets[0], 64, 48) == packets[0]
    assert decoded_sizes([resize_vp9_frame(packets[0], 96, 80)]) == {(96, 80)}
    check_vp9_frame(resize_vp9_frame(packets[0], 4096, 2160))
    with pytest.raises(UnreadableHeader, match="VP9 frame header ends before its picture size"):
        check_vp9_frame(packets[0][:5])
    assert vp9_frame_sizes(b"\x00" + packets[0][1:]) == []  # no frame marker: the decoder refuses it first
