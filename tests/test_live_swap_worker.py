import itertools
import threading
import time
from fractions import Fraction

import av
import numpy as np
import pytest

from gpu.analysis.identity import identity_distance
from streamer.live.h264 import H264Decoder, H264Encoder, to_avcc
from streamer.media.publish_pace import PublishPace
from streamer.live.swap_worker import EncoderSettings, LiveSwapWorker, SampleInbox, SequenceHeader, VideoSample
from streamer.pipeline.frame_swapper import FrameSwapper, StageTimes, SwapInFlight
from streamer.rtmp.flv import avc_decoder_config, split_annexb
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
        _wait_for(lambda: worker.stats.frames_in + worker.stats.decode_errors >= packets.index(packet) + 1 and not len(worker._inbox))
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
    _wait_for(lambda: worker.stats.frames_in == len(packets) and not len(worker._inbox))
    _wait_for(lambda: worker.stats.frames_out + worker.stats.frames_dropped == len(packets))
    worker.stop()
    assert worker.stats.frames_dropped > 0
    assert worker.stats.frames_out < len(packets)
    assert out.packets[-1].pts == packets[-1].pts  # the newest frame is never the one dropped
    assert [p.pts for p in out.packets] == sorted(p.pts for p in out.packets)


class QueuingSwapper(FrameSwapper):
    """A frame swapper that overlaps whenever other streams share the batcher (as a GPU
    node's do) and notes, per frame, whether its faces were queued at the batcher."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.queued: list[bool] = []

    def overlaps(self) -> bool:
        batcher = self._batcher_now()
        return batcher is not None and batcher.session_count > 1

    def begin(self, frame, timestamp, overlap=False):
        flight = super().begin(frame, timestamp, overlap)
        self.queued.append(flight.rows is not None)
        return flight


def test_a_stream_that_shares_the_batcher_overlaps_its_frames_and_sends_them_in_order(engine, astronaut_image, camera_stream):
    record, packets, _ = camera_stream
    out = Collector()
    engine.batcher.attach("another-stream")
    try:
        swapper = QueuingSwapper(engine, engine.register_source(astronaut_image))
        worker = LiveSwapWorker(swapper, EncoderSettings(bitrate_kbps=2000), out, name="shared")
        worker.push(SequenceHeader(record))
        for packet in packets[:12]:
            worker.push(VideoSample(packet.data, packet.dts))
            time.sleep(0.03)
        _wait_for(lambda: worker.stats.frames_out + worker.stats.frames_dropped >= 12)
        worker.stop()
    finally:
        engine.batcher.detach("another-stream")
    assert swapper.queued and all(swapper.queued)  # each frame's faces ran in the batcher while the next one began
    assert worker.stats.frames_out == len(swapper.queued) and worker.stats.swap_errors == 0
    assert worker.stats.last_stages.faces_swapped == 1 and worker.stats.stage_cpu_ms["paste"] > 0
    assert out.packets[-1].pts == packets[11].pts  # the last frame begun is sent too, once nothing newer comes
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


class HeldSwapper:
    """A frame swapper that leaves every frame as it is, and holds the thread while told to."""

    def __init__(self):
        self.go = threading.Event()
        self.closed = False

    def begin(self, rgb, seconds, overlap=False):
        self.go.wait(30)
        return SwapInFlight(rgb, StageTimes())

    def complete(self, flight):
        return flight.times

    def overlaps(self):
        return False

    def close(self):
        self.closed = True


def _tiny_stream() -> tuple[bytes, list]:
    """H.264 one pixel wide (yuv444p lets x264 make it): what a crafted publish sends."""
    context = av.CodecContext.create("libx264", "w")
    context.width, context.height, context.pix_fmt = 1, 64, "yuv444p"
    context.time_base, context.framerate = Fraction(1, 1000), 25
    context.options = {"preset": "ultrafast", "tune": "zerolatency"}
    packets = []
    for index in range(5):
        frame = av.VideoFrame.from_ndarray(np.full((64, 1, 3), 90, np.uint8), format="rgb24").reformat(format="yuv444p")
        frame.pts = index * 40
        packets += context.encode(frame)
    units = [split_annexb(bytes(packet)) for packet in packets]
    sps = next(u for u in units[0] if u[0] & 0x1F == 7)
    pps = next(u for u in units[0] if u[0] & 0x1F == 8)
    return avc_decoder_config(sps, pps), [VideoSample(to_avcc(u), p.dts, keyframe=p.is_keyframe) for u, p in zip(units, packets)]


def test_a_picture_size_the_encoder_cannot_take_ends_the_thread_with_a_reason_and_frees_it():
    record, samples = _tiny_stream()
    swapper, failures = HeldSwapper(), []
    swapper.go.set()
    worker = LiveSwapWorker(swapper, EncoderSettings(), Collector(), name="tiny", on_failure=failures.append)
    worker.push(SequenceHeader(record))
    for sample in samples:
        worker.push(sample)
    _wait_for(lambda: failures)
    worker._thread.join(5)
    assert "1x64" in failures[0] and "cannot be re-encoded" in failures[0] and worker.failure == failures[0]
    assert not worker.alive and swapper.closed
    for sample in samples * 100:  # a publisher that goes on sending: nothing piles up any more
        worker.push(sample)
    assert len(worker._inbox) == 0


def test_the_hand_over_to_a_thread_that_falls_behind_stays_bounded_and_restarts_at_a_keyframe(camera_stream):
    record, packets, _ = camera_stream
    swapper, out = HeldSwapper(), Collector()
    paced = itertools.count(0.0, 0.033)  # the publisher sends in real time; the thread is what falls behind
    worker = LiveSwapWorker(swapper, EncoderSettings(), out, name="slow", pace=PublishPace(clock=lambda: next(paced)))
    worker.push(SequenceHeader(record))
    worker.push(VideoSample(packets[0].data, packets[0].dts, keyframe=True))
    _wait_for(lambda: worker.stats.frames_in == 1)  # the thread is now held inside the swap
    dts = packets[-1].dts
    for _ in range(40):  # 1,200 frames, 40 s of video, while the thread is held
        for packet in packets:
            dts += 33
            worker.push(VideoSample(packet.data, dts, keyframe=packet.keyframe))
        assert len(worker._inbox) <= worker._inbox.limit
    swapper.go.set()
    _wait_for(lambda: not len(worker._inbox) and worker.stats.frames_out >= 2)
    worker.stop()
    assert worker._inbox.dropped > 0 and worker.stats.decode_errors == 0  # dropped whole GOPs: nothing undecodable
    assert worker.stats.frames_dropped >= worker._inbox.dropped


def test_the_hand_over_keeps_the_sequence_header_when_it_drops_samples():
    inbox = SampleInbox(limit=4)
    inbox.put(SequenceHeader(b"avcc"))
    for index in range(8):  # full at 3: dropped up to the keyframe at 5
        inbox.put(VideoSample(b"frame", index * 33, keyframe=index % 5 == 0))
    items = inbox.take_all()
    assert items[0] == SequenceHeader(b"avcc") and len(items) <= inbox.limit
    assert all(isinstance(i, SequenceHeader) or i.dts >= 5 * 33 for i in items)  # from the keyframe at 5 on
    assert [i.dts for i in items[1:]] == [5 * 33, 6 * 33, 7 * 33] and items[1].keyframe and inbox.dropped == 5
    inbox.close()
    inbox.put(VideoSample(b"late", 0))
    assert inbox.take_all() is None


class BrokenDecoder:
    """A decoder with a bug of ours (not the stream's): it raises what nobody expects."""

    def configure(self, record):
        raise RuntimeError("a bug")


def test_a_bug_in_the_thread_ends_the_stream_with_a_reason_that_hides_internals(caplog):
    swapper, failures = HeldSwapper(), []
    worker = LiveSwapWorker(swapper, EncoderSettings(), Collector(), name="buggy", on_failure=failures.append)
    worker._decoder = BrokenDecoder()
    with caplog.at_level("ERROR", logger="streamer.live.swap_worker"):
        worker.push(SequenceHeader(b"avcc"))
        _wait_for(lambda: failures)
        worker._thread.join(5)
    assert failures == ["internal error; publish again to start afresh"]  # what the publisher is told
    assert not worker.alive and swapper.closed
    assert any(record.exc_info and "a bug" in str(record.exc_info[1]) for record in caplog.records)  # the traceback: in the log


def test_the_hand_over_is_bounded_in_bytes_too():
    inbox = SampleInbox(limit=1000, max_bytes=10_000)
    for index in range(42):  # 4 KB samples, a keyframe every 10: full at the third sample of each
        inbox.put(VideoSample(bytes(4000), index * 33, keyframe=index % 10 == 0))
        assert sum(len(i.data) for i in inbox._items) <= inbox.max_bytes
    assert [i.dts // 33 for i in inbox.take_all()] == [40, 41]  # restarted at the newest keyframe
    assert inbox.dropped == 42 - 2


def b_frame_stream(frames: list[np.ndarray], fps: int = 30) -> tuple[bytes, list[VideoSample]]:
    """The frames as OBS's x264 sends them: B-frames (2), so decode order is not display
    order and each sample has a composition offset. (avcC, samples in decode order)."""
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
    encoder.time_base = Fraction(1, 1000)
    encoder.options = {"preset": "veryfast", "bf": "2", "g": "60"}
    packets = []
    for index, rgb in enumerate(frames):
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        frame.pts = round(index * 1000 / fps)
        packets += encoder.encode(frame)
    packets += encoder.encode(None)
    record, samples = b"", []
    for packet in packets:
        units = split_annexb(bytes(packet))
        sps = [u for u in units if u[0] & 0x1F == 7]
        pps = [u for u in units if u[0] & 0x1F == 8]
        if sps and not record:
            record = avc_decoder_config(sps[0], pps[0])
        data = to_avcc([u for u in units if u[0] & 0x1F not in (7, 8, 9)])
        samples.append(VideoSample(data, packet.dts, packet.pts - packet.dts, keyframe=packet.is_keyframe))
    assert any(s.composition_offset for s in samples)  # B-frames: the decoder reorders
    return record, samples


def test_every_frame_of_a_b_frame_stream_comes_out_when_the_publisher_leaves(engine, astronaut_image, grace_image):
    """A decoder holds the last frames of a B-frame stream back for reordering: the end of the
    publish flushes them out, swapped and encoded, so every frame sent is sent on."""
    from streamer.live.swap_worker import EndOfPublish

    frames = moving_face_frames(grace_image, 20, (320, 240))
    record, samples = b_frame_stream(frames)
    out = Collector()
    source = engine.register_source(astronaut_image)
    # frames wait as long as they need (no drop on a slow machine): the count is exact
    worker = LiveSwapWorker(FrameSwapper(engine, source), EncoderSettings(bitrate_kbps=800), out, name="b-frames",
                            catch_up_s=3600.0)
    worker.push(SequenceHeader(record))
    for sample in samples:
        worker.push(sample)
    worker.push(EndOfPublish())
    _wait_for(lambda: worker.stats.frames_out == len(frames))
    # the decoder is ready for the next publish (a resume) at once
    worker.push(SequenceHeader(record))
    for sample in samples:
        worker.push(VideoSample(sample.data, sample.dts + 2000, sample.composition_offset, sample.keyframe))
    worker.push(EndOfPublish())
    _wait_for(lambda: worker.stats.frames_out == 2 * len(frames))
    worker.stop()
    shown = sorted(s.dts + s.composition_offset for s in samples)
    assert [p.pts for p in out.packets] == shown + [t + 2000 for t in shown]
    assert worker.stats.frames_dropped == 0 and worker.stats.decode_errors == 0


def test_a_frames_latency_counts_from_its_own_packet_not_the_one_that_released_it(engine, astronaut_image, grace_image):
    """With B-frames a frame leaves the decoder when a later packet arrives; its latency
    must count from the arrival of its own packet (the reorder wait included)."""
    from streamer.live.swap_worker import EndOfPublish

    frames = moving_face_frames(grace_image, 12, (320, 240))
    record, samples = b_frame_stream(frames)
    origin = time.monotonic() - 10_000.0
    # arrival times 100 s apart per ms of pts: a frame stamped with another packet's arrival is off by >= 3300 s
    stamped = [VideoSample(s.data, s.dts, s.composition_offset, s.keyframe, arrived=origin - 100.0 * (s.dts + s.composition_offset))
               for s in samples]
    out = Collector()
    latencies: list[float] = []
    worker = LiveSwapWorker(FrameSwapper(engine, engine.register_source(astronaut_image)), EncoderSettings(bitrate_kbps=800),
                            out, name="stamps", catch_up_s=1e9)
    worker.stats.observer = lambda stats, latency_ms, stages: latencies.append(latency_ms)
    started = time.monotonic()
    worker.push(SequenceHeader(record))
    for sample in stamped:
        worker.push(sample)
    worker.push(EndOfPublish())
    _wait_for(lambda: worker.stats.frames_out == len(frames))
    worker.stop()
    ended = time.monotonic()
    for packet, latency_ms in zip(out.packets, latencies, strict=True):
        own = origin - 100.0 * packet.pts  # when its own packet arrived
        assert started - own <= latency_ms / 1000.0 <= ended - own, (packet.pts, latency_ms)


def test_a_start_up_burst_is_swapped_when_it_may_wait(engine, astronaut_image, camera_stream):
    """What a publisher sends at once when it starts (encoded while it connected) is swapped
    frame by frame when frames may wait long enough (RTMP's catch-up), not dropped to the newest."""
    record, packets, _ = camera_stream
    out = Collector()
    worker = LiveSwapWorker(FrameSwapper(engine, engine.register_source(astronaut_image)), EncoderSettings(bitrate_kbps=2000),
                            out, name="burst", catch_up_s=3600.0)
    worker.push(SequenceHeader(record))
    for packet in packets:
        worker.push(VideoSample(packet.data, packet.dts))
    _wait_for(lambda: worker.stats.frames_out == len(packets))
    worker.stop()
    assert worker.stats.frames_dropped == 0
    assert [p.pts for p in out.packets] == [p.pts for p in packets]


def test_a_publisher_far_faster_than_real_time_ends_the_stream_told_why_and_nothing_more_is_decoded(camera_stream):
    """ffmpeg without -re pushes a file as fast as it reads it: every sample up to the
    hand-over's drops would be decoded, a core kept busy for pictures nobody sees."""
    record, packets, _ = camera_stream
    failures: list[str] = []
    swapper = HeldSwapper()
    swapper.go.set()
    worker = LiveSwapWorker(swapper, EncoderSettings(), Collector(), name="flood", on_failure=failures.append)
    worker.push(SequenceHeader(record))
    dts = 0
    for _ in range(30):  # 900 pictures, 30 s of video, pushed at once
        for packet in packets:
            worker.push(VideoSample(packet.data, dts, keyframe=packet.keyframe))
            dts += 33
    _wait_for(lambda: not worker.alive, timeout=10)
    assert failures and "faster than real time" in failures[0] and "-re" in failures[0]
    assert worker.failure == failures[0]
    assert worker.stats.frames_in <= 20 / 0.033 + 1  # the refusal came at 20 s of video; nothing after it was decoded
    assert swapper.closed
    worker.push(VideoSample(packets[0].data, dts, keyframe=True))  # after the end: ignored, no error
