"""Processors in the node: the engine loads them from --models, the enhancer runs on offline
swaps (live only when turned on), and the content gate refuses a source upload (HTTP 422,
counted in /metrics), a sampled live frame (the stream ends with the reason: an RTMP
publisher reads it in an error onStatus) and an offline video (the job fails). Also: bench
engine's processors section, and the torch runner a CUDA node picks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpu.engine import EngineSettings, FaceEngine
from gpu.processors import ProcessorSettings
from gpu.processors.content_gate import ContentRefused
from model_twins import make_enhancer, make_open_nsfw, make_xseg
from streamer.live.swap_worker import EncoderSettings, LiveSwapWorker, SequenceHeader, VideoSample
from streamer.pipeline.frame_swapper import FrameSwapper, StageTimes

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))
from webrtc_harness import bearer, jpeg, node, run  # noqa: E402

pytestmark = pytest.mark.slow  # one face engine with the twins (a few seconds to load)


def magenta(height: int = 360, width: int = 480) -> np.ndarray:
    """What the open_nsfw twin scores ~1."""
    image = np.zeros((height, width, 3), np.uint8)
    image[..., 0] = image[..., 2] = 255
    return image


@pytest.fixture(scope="module")
def twin_engine(tmp_path_factory: pytest.TempPathFactory) -> FaceEngine:
    models = tmp_path_factory.mktemp("models")
    make_xseg(models / "xseg_2.onnx")
    make_enhancer(models / "gpen_bfr_256.onnx", 256)
    make_open_nsfw(models / "open_nsfw.onnx")
    engine = FaceEngine(EngineSettings(models_dir=models, processors=ProcessorSettings(content_sample_s=0.5)))
    yield engine
    engine.close()


def test_engine_loads_the_processors_and_honours_their_masks(twin_engine: FaceEngine) -> None:
    processors = twin_engine.processors
    assert [p.kind for p in processors.loaded] == ["occluder", "enhancer", "content_gate"]
    assert twin_engine.keep_masks == (processors.occluder,)


def test_offline_swaps_are_enhanced_live_ones_not(twin_engine: FaceEngine, astronaut_image, grace_image) -> None:
    source = twin_engine.register_source(grace_image)
    offline = FrameSwapper(twin_engine, source, offline=True)
    plain_offline = astronaut_image.copy()
    times = offline.process_still(plain_offline)
    assert times.faces_swapped == 1 and times.enhance > 0
    live = FrameSwapper(twin_engine, source)
    plain_live = astronaut_image.copy()
    assert live.process_still(plain_live).enhance == 0
    assert not np.array_equal(plain_offline, plain_live)  # the enhancer changed the face
    offline.close()
    live.close()


def test_the_gate_ends_a_live_stream_on_a_sampled_frame(twin_engine: FaceEngine, astronaut_image, grace_image) -> None:
    source = twin_engine.register_source(grace_image)
    refused_before = twin_engine.processors.refusals().get("frame", 0)
    live = FrameSwapper(twin_engine, source)
    for index in range(10):  # safe frames: sampled, scored, passed
        live.process(astronaut_image.copy(), index / 30)
    with pytest.raises(ContentRefused, match="the stream was refused by the content gate"):
        for index in range(200):  # scored in the background: refused a few frames later, never at once
            live.process(magenta(), 1 + index / 30)
            time.sleep(0.005)
    offline = FrameSwapper(twin_engine, source, offline=True)
    with pytest.raises(ContentRefused, match=r"the video at 2.0 s was refused"):
        offline.process(magenta(), 2.0)
    assert twin_engine.processors.refusals()["frame"] == refused_before + 2
    live.close()
    offline.close()


class _RefusingSwapper:
    """Stands in for a FrameSwapper whose content gate refused the stream."""

    closed = False

    def begin(self, frame, timestamp, overlap: bool = False):
        # the real FrameSwapper checks the content gate first thing in begin()
        raise ContentRefused("the stream was refused by the content gate (open_nsfw.onnx score 0.97 > threshold 0.80)", 0.97)

    def overlaps(self) -> bool:
        return False

    def process(self, frame, timestamp) -> StageTimes:
        return self.begin(frame, timestamp)

    def close(self) -> None:
        self.closed = True


def test_an_rtmp_stream_the_gate_refuses_ends_with_the_reason(grace_image) -> None:
    from streamer.live.h264 import H264Encoder
    from streamer.samples import moving_face_frames

    encoder = H264Encoder(320, 240, bitrate_kbps=800, fps_hint=30)
    packets = [p for i, f in enumerate(moving_face_frames(grace_image, 3, (320, 240))) for p in encoder.encode(f, i * 33)]
    failures: list[str] = []
    swapper = _RefusingSwapper()
    worker = LiveSwapWorker(swapper, EncoderSettings(), lambda packet, header: None, name="gated",
                            on_failure=failures.append)
    worker.push(SequenceHeader(encoder.sequence_header))
    for packet in packets:
        worker.push(VideoSample(packet.data, packet.dts))
    deadline = time.monotonic() + 20
    while not failures and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    assert failures and "refused by the content gate" in failures[0]  # what the publisher's onStatus says
    assert swapper.closed


def test_a_source_upload_the_gate_refuses_is_a_422_and_counted(twin_engine: FaceEngine, grace_image, tmp_path) -> None:
    async def scenario():
        async with node(twin_engine, tmp_path) as client:
            refused = await client.post("/api/v1/faces", data=jpeg(magenta()),
                                        headers={"Content-Type": "image/jpeg"})
            accepted = await client.post("/api/v1/faces", data=jpeg(grace_image),
                                         headers={"Content-Type": "image/jpeg"})
            listed = await client.get("/api/v1/processors")
            metrics = await client.get("/metrics", headers=bearer("ops", "admin"))
            return (refused.status, await refused.json(), accepted.status, await listed.json(),
                    await metrics.text())

    status, body, accepted, listed, metrics = run(scenario())
    assert status == 422 and "refused by the content gate" in body["error"]
    assert accepted == 201
    assert [entry["kind"] for entry in listed] == ["occluder", "enhancer", "content_gate"]
    assert 'swapcast_content_refusals_total{where="source"} 1.0' in metrics


def test_bench_engine_processors_section(twin_engine: FaceEngine) -> None:
    from swapcast.benchmarks.processors import processors_lines, run_processors_benchmark

    report = run_processors_benchmark(twin_engine, frames=8)
    assert set(report["processors"]) == {"occluder", "enhancer", "content_gate"}
    gate = report["processors"]["content_gate"]
    assert 0 < gate["ms_per_frame_at_30fps"] < gate["median_ms"]  # sampled every 0.5 s: spread over 15 frames
    assert all(entry["median_ms"] > 0 for entry in report["processors"].values())
    assert "occluder       xseg_2" in "\n".join(processors_lines(report))


def test_a_job_chunk_the_gate_refuses_fails_for_good(twin_engine: FaceEngine, grace_image, tmp_path) -> None:
    """A job's chunk with refused frames raises ContentRefused, a SwapcastError: the job worker
    fails the job with its message instead of retrying it."""
    from gpu.errors import SwapcastError
    from gpu.options import SwapOptions
    from media_fixtures import write_test_video
    from streamer.jobs.render import Encoding, render_chunk

    chunk = tmp_path / "chunk.mp4"
    write_test_video(chunk, [magenta(240, 320)] * 6, audio=False)
    source = twin_engine.register_source(grace_image)
    with pytest.raises(ContentRefused, match="the video at 0.0 s was refused by the content gate") as caught:
        render_chunk(twin_engine, source, SwapOptions(), chunk, tmp_path / "out.mp4",
                     expected_frames=6, encoding=Encoding(), stopped=lambda: False, label="the whole video",
                     session_id="job-1")
    assert isinstance(caught.value, SwapcastError)


def test_processors_run_the_same_on_the_torch_runner(tmp_path, astronaut_image) -> None:
    """The runner a CUDA node picks (PyTorch, here on the CPU) takes the processors' graphs,
    batch made dynamic and CodeFormer's weight baked in, and answers as ONNX Runtime does."""
    from gpu.models.user_models import UserModels
    from gpu.processors import Processors
    from gpu.runners.select import make_runner
    from model_twins import make_bisenet
    from test_processors import ASTRONAUT

    make_xseg(tmp_path / "xseg_1.onnx")
    make_bisenet(tmp_path / "bisenet_resnet_18.onnx")
    make_enhancer(tmp_path / "codeformer.onnx", 512, weight_input=True)
    make_open_nsfw(tmp_path / "open_nsfw.onnx")
    found = UserModels.discover(tmp_path)
    torch = Processors.load(found, ProcessorSettings(),
                            lambda model, name: make_runner(model, device="cpu", runner="torch", name=name))
    ort = Processors.load(found, ProcessorSettings())
    for mine, reference in zip(torch.loaded, ort.loaded, strict=True):
        assert type(mine.model.runner).__name__ == "TorchRunner"
        frames = [astronaut_image, np.ascontiguousarray(astronaut_image[:, ::-1])]
        rows = [mine.feed(frame) if mine is torch.gate else mine.feed(frame, ASTRONAUT)[0] for frame in frames]
        stacked = {name: np.stack([row[name] for row in rows]) for name in rows[0]}
        np.testing.assert_allclose(np.asarray(mine.model.runner.run(stacked)[0]),
                                   reference.model.runner.run(stacked)[0], atol=1e-4)
    torch.close()
    ort.close()


def test_an_rtmp_publisher_the_gate_refuses_gets_the_reason_in_on_status(twin_engine: FaceEngine, grace_image,
                                                                        tmp_path) -> None:
    import asyncio
    import subprocess

    from streamer.media.images import write_image
    from test_rtmp_ingest import Node

    face_file = tmp_path / "grace.png"
    write_image(face_file, grace_image)

    async def scenario():
        async with Node(twin_engine, tmp_path / "data") as node:
            key, _ = node.keys.add("cam", face_file)
            command = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi",
                       "-i", "color=c=magenta:size=320x240:rate=25", "-t", "6", "-c:v", "libx264",
                       "-pix_fmt", "yuv420p", "-f", "flv", node.url(key)]
            process = await asyncio.create_subprocess_exec(*command, stdin=subprocess.DEVNULL,
                                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, stderr = await asyncio.wait_for(process.communicate(), 40)
            return process.returncode, stderr.decode(errors="replace")

    code, stderr = asyncio.run(scenario())
    assert code != 0 and "refused by the content gate" in stderr  # ffmpeg prints our error onStatus


def test_a_live_stream_drops_the_enhancer_it_cannot_afford(twin_engine: FaceEngine, astronaut_image,
                                                           grace_image) -> None:
    from dataclasses import replace

    from gpu.processors.budget import WINDOW

    processors = twin_engine.processors
    default = processors.settings
    processors.settings = replace(default, enhancer="live", enhancer_live_budget_ms=1e-3)  # nothing fits
    try:
        live = FrameSwapper(twin_engine, twin_engine.register_source(grace_image))
        enhanced = [live.process(astronaut_image.copy(), index / 30).enhance > 0 for index in range(WINDOW + 2)]
        live.close()
    finally:
        processors.settings = default
    assert enhanced == [True] * WINDOW + [False] * 2  # measured on its first frames, then dropped


def test_a_live_stream_drops_the_mask_models_it_cannot_afford(twin_engine: FaceEngine, astronaut_image,
                                                              grace_image) -> None:
    from dataclasses import replace

    from gpu.processors.budget import WINDOW

    processors = twin_engine.processors
    occluder = processors.occluder
    calls: list[str] = []
    original = type(occluder).__call__

    def counted(self, crop, face, matrix):
        calls.append("occluder")
        return original(self, crop, face, matrix)

    default = processors.settings
    processors.settings = replace(default, enhancer="off", mask_live_budget_ms=1e-3)  # nothing fits
    type(occluder).__call__ = counted
    try:
        source = twin_engine.register_source(grace_image)
        live = FrameSwapper(twin_engine, source)
        ran = []
        for index in range(WINDOW + 2):
            before = len(calls)
            live.process(astronaut_image.copy(), index / 30)
            ran.append(len(calls) > before)
        live.close()
        offline = FrameSwapper(twin_engine, source, offline=True)
        before = len(calls)
        for index in range(WINDOW + 2):
            offline.process(astronaut_image.copy(), index / 30)
        offline_calls = len(calls) - before
        offline.close()
    finally:
        type(occluder).__call__ = original
        processors.settings = default
    assert ran == [True] * WINDOW + [False] * 2  # measured on its first frames, then the stream goes on without it
    assert offline_calls >= WINDOW + 2  # offline work has no budget
