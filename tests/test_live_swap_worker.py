import threading
import time

import pytest

from gpu.analysis.identity import identity_distance
from streamer.live.h264 import H264Decoder, H264Encoder
from streamer.live.swap_worker import EncoderSettings, LiveSwapWorker, SequenceHeader, VideoSample
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.samples import moving_face_frames


@pytest.fixture(scope="module")
def camera_stream(grace_image):
    """A publisher's H.264 stream of a moving real face: (avcC, samples, raw frames)."""
    frames = moving_face_frames(grace_image, 30, (480, 360))
    encoder = H264Encoder(480, 360, bitrate_kbps=2000, fps_hint=30)
    packets = [p for i, f in enumerate(frames) for p in encoder.encode(f, i * 33)]
    return encoder.sequence_header, packets, frames


class Collector:
    def __init__(self):
        self.packets, self.headers = [], []
        self.done = threading.Event()

    def __call__(self, packet, header):
        if header is not None:
            self.headers.append(header)
        self.packets.append(packet)


def _worker(engine, astronaut_image, collector):
    source = engine.register_source(astronaut_image)
    return LiveSwapWorker(FrameSwapper(engine, source), EncoderSettings(bitrate_kbps=2000), collector, name="test")


def _wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert predicate()


def test_paced_input_is_swapped_frame_by_frame(engine, astronaut_image, camera_stream, identity_of):
    record, packets, frames = camera_stream
    out = Collector()
    worker = _worker(engine, astronaut_image, out)
    worker.push(SequenceHeader(record))
    for packet in packets[:12]:
        worker.push(VideoSample(packet.data, packet.dts))
        _wait_for(lambda: worker.stats.frames_in + worker.stats.decode_errors >= packets.index(packet) + 1 and not worker._inbox.qsize())
        time.sleep(0.03)
    _wait_for(lambda: worker.stats.frames_out + worker.stats.frames_dropped >= 12)
    worker.stop()
    assert len(out.headers) == 1 and out.packets[0].keyframe
    assert worker.stats.frames_out >= 10  # paced at ~30 fps the CPU keeps up: (almost) nothing dropped
    decoder = H264Decoder()
    decoder.configure(out.headers[0])
    decoded = [f for p in out.packets for f in decoder.decode(p.data, p.dts)]
    swapped = decoded[-1].to_ndarray(format="rgb24")
    source, camera = identity_of(astronaut_image), identity_of(frames[0])
    assert identity_distance(identity_of(swapped), source) < identity_distance(identity_of(swapped), camera)
    snapshot = worker.stats.snapshot()
    assert snapshot["latency_p50_ms"] is not None and snapshot["latency_p50_ms"] < 1000


def test_a_burst_is_decoded_fully_but_only_the_newest_frames_are_swapped(engine, astronaut_image, camera_stream):
    record, packets, _ = camera_stream
    out = Collector()
    worker = _worker(engine, astronaut_image, out)
    worker.push(SequenceHeader(record))
    for packet in packets:  # 30 frames at once: far faster than real time
        worker.push(VideoSample(packet.data, packet.dts))
    _wait_for(lambda: worker.stats.frames_in == len(packets) and not worker._inbox.qsize())
    _wait_for(lambda: worker.stats.frames_out + worker.stats.frames_dropped == len(packets))
    worker.stop()
    assert worker.stats.frames_dropped > 0
    assert worker.stats.frames_out < len(packets)
    assert out.packets[-1].pts == packets[-1].pts  # the newest frame is never the one dropped
    assert [p.pts for p in out.packets] == sorted(p.pts for p in out.packets)


def test_garbage_samples_are_counted_not_fatal(engine, astronaut_image, camera_stream):
    record, packets, _ = camera_stream
    out = Collector()
    worker = _worker(engine, astronaut_image, out)
    worker.push(SequenceHeader(record))
    worker.push(VideoSample(b"\x00\x00\x00\x05garbage-and-more", 0))
    for packet in packets[:3]:
        worker.push(VideoSample(packet.data, packet.dts))
    _wait_for(lambda: worker.stats.frames_out >= 1)
    worker.stop()
    assert worker.stats.frames_out >= 1


def test_stats_count_frames_sent_unswapped_because_the_batcher_was_busy():
    from streamer.live.swap_worker import LiveStats
    from streamer.pipeline.frame_swapper import StageTimes

    stats = LiveStats()
    stats.record_output(10.0, StageTimes())
    busy = StageTimes()
    busy.dropped_by_batcher = 1
    stats.record_output(12.0, busy)
    snapshot = stats.snapshot()
    assert snapshot["frames_out"] == 2 and snapshot["frames_unswapped_busy"] == 1
