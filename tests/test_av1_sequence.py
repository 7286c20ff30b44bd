"""av1_sequence: the largest picture an AV1 sequence header allows, in an av1C's configOBUs
and among a sample's OBUs. Real SVT-AV1 headers are read to the size dav1d decodes; headers
the fuzz crafter resizes (its own grammar, widening the size fields where it must) are read
back, and decoded by dav1d at a size it can afford; too large is refused."""

from __future__ import annotations


import av
import pytest
from media_fixtures import encoded_noise

from streamer.media.av1_sequence import Av1SizeGuard, av1_sequence_size, check_av1_obus
from streamer.media.picture_limits import FrameSizeError, UnreadableHeader
from swapcast.benchmarks.fuzz.picture_bombs import resize_av1_sequence_header, resize_av1_temporal_unit, resize_av1c


def av1_packets(width: int, height: int, frames: int = 3) -> list[bytes]:
    """Temporal units of a small real stream (OBUs with sizes; a sequence header in the first)."""
    return encoded_noise("libsvtav1", width, height, "yuv420p", {"preset": "12"}, frames)


def sequence_header(unit: bytes) -> bytes:
    """The first sequence header OBU of a temporal unit (OBUs with one-byte headers, sizes)."""
    pos = 0
    while pos < len(unit):
        header, size, shift = unit[pos], 0, 0
        at = pos + 1
        while True:
            byte = unit[at]
            size |= (byte & 0x7F) << shift
            at, shift = at + 1, shift + 7
            if not byte & 0x80:
                break
        if (header >> 3) & 0x0F == 1:
            return unit[pos:at + size]
        pos = at + size
    raise AssertionError("no sequence header")


def payload(obu: bytes) -> bytes:
    at = 1
    while obu[at] & 0x80:
        at += 1
    return obu[at + 1:]


def decoded_size(packets: list[bytes]) -> tuple[int, int]:
    decoder = av.CodecContext.create("libdav1d", "r")
    frames = [frame for packet in packets for frame in decoder.decode(av.Packet(packet))] + list(decoder.decode(None))
    return frames[0].width, frames[0].height


@pytest.mark.parametrize(("width", "height"), [(64, 64), (96, 72), (200, 112)])
def test_a_real_sequence_header_is_read_to_the_size_dav1d_decodes(width, height):
    packets = av1_packets(width, height)
    size = av1_sequence_size(payload(sequence_header(packets[0])))
    assert (size.width, size.height) == decoded_size(packets) == (width, height)
    for packet in packets:
        check_av1_obus(packet)


def test_crafted_sizes_read_back_and_the_guard_refuses_too_large_ones():
    packets = av1_packets(64, 64)
    header = sequence_header(packets[0])
    for width, height in ((16, 16), (4096, 2160), (16000, 16000), (65536, 65536)):
        size = av1_sequence_size(payload(resize_av1_sequence_header(header, width, height)))
        assert (size.width, size.height) == (width, height)
    with pytest.raises(FrameSizeError, match=r"^the stream's AV1 sequence header declares 16000x16000 pictures"):
        check_av1_obus(resize_av1_temporal_unit(packets[0], 16000, 16000))
    check_av1_obus(resize_av1_temporal_unit(packets[0], 4096, 2160))
    record = bytes([0x81, 0x00, 0x0C, 0x00]) + header  # an av1C: 4 fixed bytes, the configOBUs
    Av1SizeGuard(record).check(packets[1])
    with pytest.raises(FrameSizeError, match="16000x16000"):
        Av1SizeGuard(resize_av1c(record, 16000, 16000))
    with pytest.raises(UnreadableHeader, match="AV1 sequence header ends before its picture size"):
        check_av1_obus(bytes([header[0], 3]) + payload(header)[:3])  # a sequence header cut after 3 bytes

