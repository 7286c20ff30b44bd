"""Video frames reach the decoder at their marked last packet (``streamer.webrtc.frame_assembly``),
with the same bytes aiortc's own jitter buffer hands over one frame later."""

from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket

from streamer.webrtc.frame_assembly import MarkedFrameJitterBuffer


def packet(sequence: int, timestamp: int, data: bytes, marker: bool = False) -> RtpPacket:
    rtp = RtpPacket(payload_type=96, marker=int(marker), sequence_number=sequence % 65536, timestamp=timestamp)
    rtp._data = data  # what the depayloader made of it
    return rtp


def stream_packets() -> list[RtpPacket]:
    """Three frames of 3, 1 and 2 packets, each ending with a marked packet, sequence numbers
    wrapping past 65535."""
    frames = [[b"a1", b"a2", b"a3"], [b"b1"], [b"c1", b"c2"]]
    packets, sequence = [], 65534
    for number, parts in enumerate(frames):
        for index, part in enumerate(parts):
            packets.append(packet(sequence, 3000 * number, part, marker=index == len(parts) - 1))
            sequence += 1
    return packets


def test_a_frame_comes_out_with_its_marked_last_packet_not_with_the_next_frame():
    marked, plain = MarkedFrameJitterBuffer(), JitterBuffer(capacity=512, is_video=True)
    out_marked, out_plain = [], []
    for index, rtp in enumerate(stream_packets()):
        for buffer, out in ((marked, out_marked), (plain, out_plain)):
            _, frame = buffer.add(rtp)
            if frame is not None:
                out.append((index, frame.timestamp, frame.data))
    # at the packet index that completed it: the marked one, vs the next frame's first packet
    assert out_marked == [(2, 0, b"a1a2a3"), (3, 3000, b"b1"), (5, 6000, b"c1c2")]
    assert out_plain == [(3, 0, b"a1a2a3"), (4, 3000, b"b1")]  # aiortc's: the last frame waits for a next one


def test_a_gap_holds_the_frame_until_the_missing_packet_comes():
    buffer = MarkedFrameJitterBuffer()
    first, second, last = stream_packets()[:3]
    assert buffer.add(first)[1] is None
    assert buffer.add(last)[1] is None  # the marked packet, but the middle one is missing
    _, frame = buffer.add(second)  # retransmitted late
    assert frame is not None and frame.data == b"a1a2a3"


def test_a_frame_whose_marked_packet_was_lost_is_ended_by_the_next_frame():
    packets = stream_packets()
    buffer = MarkedFrameJitterBuffer()
    lost_marker = [packet(p.sequence_number, p.timestamp, p._data, marker=False) if i == 2 else p
                   for i, p in enumerate(packets)]
    frames = [frame for rtp in lost_marker if (frame := buffer.add(rtp)[1]) is not None]
    assert [(f.timestamp, f.data) for f in frames] == [(0, b"a1a2a3"), (3000, b"b1"), (6000, b"c1c2")]
