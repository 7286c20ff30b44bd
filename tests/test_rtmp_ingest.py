"""RTMP ingest end to end with real clients on 127.0.0.1: the ffmpeg CLI publishes like OBS,
an ffmpeg listener is the push destination, ffmpeg plays the stream back from swapcast."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
from media_fixtures import camera_messages, publish, write_test_video

from gpu.analysis.identity import identity_distance
from signaling.stream_keys import StreamKeyStore, play_handle, rtmp_session_id
from streamer.faces import FaceLibrary
from streamer.live.rtmp_ingest import IngestSettings, RtmpIngest
from streamer.live.swap_worker import EncoderSettings
from streamer.media.images import write_image
from streamer.rtmp.client import RtmpPublishClient
from streamer.rtmp.flv import is_sequence_header
from streamer.rtmp.handler import MediaMessage, PublishRejected
from streamer.rtmp.server import RtmpServer
from streamer.samples import moving_face_frames
from swapcast.config import SwapConfig
from swapcast.local_cluster import free_port

FPS = 25
FLASH_FRAMES = {20, 45, 70}  # white frames, each with a beep under it


@pytest.fixture(scope="module")
def camera_clip(tmp_path_factory, grace_image) -> Path:
    """4 s of a moving real face at 640x480 with AAC audio; three white flashes with beeps."""
    frames = moving_face_frames(grace_image, 100, (640, 480))
    for index in FLASH_FRAMES:
        frames[index] = np.full_like(frames[index], 255)
    path = tmp_path_factory.mktemp("clips") / "camera.mp4"
    write_test_video(path, frames, fps=FPS, beep_on_frames=FLASH_FRAMES)
    return path


def publish_command(clip: Path, url: str, realtime: bool = True) -> list[str]:
    """ffmpeg publishing like OBS: H.264 + AAC, 2 s keyframe interval, CBR."""
    return [
        "ffmpeg", "-hide_banner", "-loglevel", "error", *(["-re"] if realtime else []), "-i", str(clip),
        "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", str(2 * FPS),
        "-b:v", "1500k", "-minrate", "1500k", "-maxrate", "1500k", "-bufsize", "1500k",
        "-c:a", "aac", "-b:a", "128k", "-f", "flv", url,
    ]  # fmt: skip


def listen_command(port: int, output: Path, seconds: float) -> list[str]:
    return ["ffmpeg", "-hide_banner", "-loglevel", "error", "-listen", "1", "-timeout", "20",
            "-i", f"rtmp://127.0.0.1:{port}/live/out", "-t", str(seconds), "-c", "copy", "-y", str(output)]  # fmt: skip


def probe(path: Path) -> dict:
    result = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-of", "json", str(path)],
                            capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    return {s["codec_type"]: s for s in json.loads(result.stdout)["streams"]}


async def run_process(command: list[str], timeout: float) -> int:
    process = await asyncio.create_subprocess_exec(
        *command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise
    if process.returncode:
        print(stderr.decode(errors="replace"), file=sys.stderr)
    return process.returncode


class Node:
    """The RTMP half of a swapcast node, as `swapcast serve` wires it."""

    def __init__(self, engine, data_dir: Path, stall_timeout: float = 5.0, resume_window_s: float = 30.0,
                 catch_up_s: float = 0.5):
        self.keys = StreamKeyStore(data_dir)
        settings = IngestSettings(EncoderSettings(bitrate_kbps=2000, keyframe_interval_s=1.0),
                                  push_retry_initial_s=0.2, push_retry_max_s=1.0, resume_window_s=resume_window_s,
                                  catch_up_s=catch_up_s)
        self.faces = FaceLibrary(engine)
        self.ingest = RtmpIngest(self.keys, engine, lambda swap: SwapConfig(**swap).options(), settings, RtmpPublishClient,
                                 self.faces)
        self.server = RtmpServer(self.ingest, port=0, stall_timeout=stall_timeout)

    async def __aenter__(self):
        await self.server.start()
        return self

    async def __aexit__(self, *exc):
        await self.ingest.close()
        await self.server.close()
        self.faces.close()

    def url(self, name: str) -> str:
        return f"rtmp://127.0.0.1:{self.server.port}/live/{name}"


@pytest.fixture
def face_file(tmp_path, astronaut_image) -> Path:
    path = tmp_path / "astronaut.png"
    write_image(path, astronaut_image)
    return path


def read_video(path: Path) -> tuple[list[tuple[float, np.ndarray]], np.ndarray | None, int]:
    """(time, RGB) per video frame, mono audio samples and the audio rate."""
    frames, audio, rate = [], [], 0
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            frames.append((float(frame.time), frame.to_ndarray(format="rgb24")))
    with av.open(str(path)) as container:
        if container.streams.audio:
            rate = container.streams.audio[0].rate
            for frame in container.decode(audio=0):
                audio.append((float(frame.time), frame.to_ndarray().mean(axis=0)))
    samples = None
    if audio:
        start = audio[0][0]
        samples = (start, np.concatenate([a for _, a in audio]))
    return frames, samples, rate


def flash_and_beep_times(path: Path) -> tuple[list[float], list[float]]:
    frames, (audio_start, samples), rate = read_video(path)
    flashes = [t for t, rgb in frames if rgb.mean() > 230]
    # beeps: 2 kHz bursts far louder than the 440 Hz bed; 5 ms energy windows
    window = rate // 200
    energy = np.abs(samples[: len(samples) // window * window]).reshape(-1, window).max(axis=1)
    loud = energy > 0.5 * energy.max()
    starts = [audio_start + i * window / rate for i in np.nonzero(loud & ~np.r_[False, loud[:-1]])[0]]
    return [t for i, t in enumerate(flashes) if i == 0 or t - flashes[i - 1] > 0.2], starts


def test_ffmpeg_publish_is_swapped_pushed_with_audio_in_sync_and_playable(engine, camera_clip, face_file, tmp_path, identity_of, astronaut_image, grace_image):
    pushed = tmp_path / "pushed.flv"
    played = tmp_path / "played.flv"
    destination = free_port()

    async def scenario():
        # a short resume window: the viewer and the destination see the end soon after the publisher leaves
        async with Node(engine, tmp_path / "data", resume_window_s=1.0) as node:
            key, record = node.keys.add("cam", face_file, push=(f"rtmp://127.0.0.1:{destination}/live/out",))
            listener = asyncio.create_task(run_process(listen_command(destination, pushed, 3.5), 60))
            await asyncio.sleep(0.5)
            publisher = asyncio.create_task(run_process(publish_command(camera_clip, node.url(key)), 60))
            for _ in range(100):
                await asyncio.sleep(0.1)
                if record.key_id in node.ingest.streams:
                    break
            stream = node.ingest.streams[record.key_id]
            await asyncio.sleep(1.0)
            viewer = await run_process(["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", node.url(record.play_token),
                                        "-t", "1.5", "-c", "copy", "-y", str(played)], 30)  # fmt: skip
            assert await publisher == 0
            assert await listener == 0
            assert viewer == 0
            info = stream.info()  # the stream itself ends a second after its publisher
            # a quarter of the 100 frames at least: swapping all along, not stalled (a loaded
            # machine drops frames by the newest-frame policy, which is right)
            assert info["stats"]["frames_out"] > 25
            return info

    info = asyncio.run(scenario())
    streams = probe(pushed)
    assert set(streams) == {"video", "audio"} and streams["video"]["codec_name"] == "h264"
    assert (int(streams["video"]["width"]), int(streams["video"]["height"])) == (640, 480)
    assert set(probe(played)) >= {"video"}
    frames, _, _ = read_video(pushed)
    faces = [rgb for _, rgb in frames if rgb.mean() < 200][:: max(1, len(frames) // 6)][:5]
    source, camera = identity_of(astronaut_image), identity_of(grace_image)
    closer = [identity_distance(identity_of(f), source) < identity_distance(identity_of(f), camera) for f in faces]
    assert sum(closer) >= len(closer) - 1, closer
    flashes, beeps = flash_and_beep_times(pushed)
    assert flashes and beeps
    offsets = [min(abs(b - f) for b in beeps) for f in flashes]
    assert max(offsets) <= 0.1, f"A/V offsets {offsets}"
    assert info["push"][0]["url"].endswith("/live/out") and info["push"][0]["attempts"] >= 1


def test_unknown_key_is_refused_and_nothing_is_created(engine, camera_clip, tmp_path):
    async def scenario():
        async with Node(engine, tmp_path / "data") as node:
            code = await run_process(publish_command(camera_clip, node.url("sk_not-a-key"), realtime=False), 30)
            return code, node.ingest.sessions()

    code, sessions = asyncio.run(scenario())
    assert code != 0 and sessions == []


# -- robustness, with swapcast's own RTMP client as a precisely controlled publisher -------------


async def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def test_two_publishers_at_once(engine, grace_image, face_file, tmp_path):
    async def scenario():
        async with Node(engine, tmp_path / "data") as node:
            first, record_a = node.keys.add("a", face_file)
            second, record_b = node.keys.add("b", face_file)
            messages = camera_messages(grace_image, 40)
            await asyncio.gather(publish(node.url(first), messages), publish(node.url(second), messages))
            streams = node.ingest.streams
            await wait_until(lambda: all(streams[r.key_id].worker.stats.frames_out + streams[r.key_id].worker.stats.frames_dropped >= 40
                                         for r in (record_a, record_b)))
            return [streams[r.key_id].worker.stats.snapshot() for r in (record_a, record_b)]

    for stats in asyncio.run(scenario()):
        assert stats["frames_in"] == 40 and stats["frames_out"] >= 10


def test_reconnect_resumes_the_same_stream_for_its_viewers(engine, grace_image, face_file, tmp_path):
    from streamer.rtmp.client import RtmpPlayClient

    async def scenario():
        async with Node(engine, tmp_path / "data") as node:
            key, record = node.keys.add("cam", face_file)
            await publish(node.url(key), camera_messages(grace_image, 15), close=False)
            stream = node.ingest.streams[record.key_id]
            viewer = RtmpPlayClient(node.url(record.play_token))
            await viewer.connect()
            received = []

            async def watch():
                async for message in viewer.media():
                    if message.kind == "video":
                        received.append(message.timestamp)

            watching = asyncio.create_task(watch())
            await asyncio.sleep(0.3)
            # the publisher drops (as OBS on a network blip) and comes back with timestamps from 0
            await publish(node.url(key), camera_messages(grace_image, 25))
            await wait_until(lambda: stream.worker.stats.frames_out + stream.worker.stats.frames_dropped >= 40)
            await asyncio.sleep(0.3)
            same = node.ingest.streams.get(record.key_id) is stream
            preview = node.ingest.preview_jpeg(rtmp_session_id(key))  # what the dashboard shows of it
            await viewer.close()
            watching.cancel()
            return same, stream.publishes, received, preview

    same, publishes, timestamps, preview = asyncio.run(scenario())
    assert same and publishes == 2
    assert preview.startswith(b"\xff\xd8") and len(preview) > 1000
    assert len(timestamps) > 10
    assert timestamps == sorted(timestamps)  # continuous for the viewer across the reconnect


def test_stalled_publisher_is_cut(engine, grace_image, face_file, tmp_path):
    async def scenario():
        async with Node(engine, tmp_path / "data", stall_timeout=1.0) as node:
            key, record = node.keys.add("cam", face_file)
            client = await publish(node.url(key), camera_messages(grace_image, 5), close=False)
            stream = node.ingest.streams[record.key_id]
            publisher = stream.publisher
            started = asyncio.get_running_loop().time()
            await wait_until(lambda: stream.publisher is None, timeout=10)  # then silence
            elapsed = asyncio.get_running_loop().time() - started
            await client.close()
            return elapsed, publisher.ended_reason

    elapsed, reason = asyncio.run(scenario())
    assert 0.5 < elapsed < 4.0
    assert reason.startswith("stalled")


def test_destination_down_then_up_is_retried_without_disturbing_ingest(engine, grace_image, face_file, tmp_path):
    destination = free_port()
    received = tmp_path / "late.flv"

    async def scenario():
        async with Node(engine, tmp_path / "data", resume_window_s=1.0) as node:
            key, record = node.keys.add("cam", face_file, push=(f"rtmp://127.0.0.1:{destination}/live/out",))
            client = RtmpPublishClient(node.url(key))
            await client.connect()
            messages = camera_messages(grace_image, 150)
            for message in messages[:30]:  # the destination is down meanwhile
                await client.send(message)
                await asyncio.sleep(0.04)
            stream = node.ingest.streams[record.key_id]
            push = stream.outputs[0]
            assert not push.connected and push.attempts >= 2 and push.last_error
            listener = asyncio.create_task(run_process(listen_command(destination, received, 1.5), 40))
            for message in messages[30:]:
                await client.send(message)
                await asyncio.sleep(0.04)
            await client.close()
            code = await listener
            return code, push.attempts, stream.worker.stats.snapshot()

    code, attempts, stats = asyncio.run(scenario())
    assert code == 0 and attempts >= 3
    assert stats["frames_in"] == 150 and stats["frames_out"] >= 50
    assert "video" in probe(received)


def tiny_publish_command(url: str) -> list[str]:
    """A crafted publish: H.264 one pixel wide (yuv444p lets x264 make it), which the
    stream's re-encoder cannot take (x264 rounds its width down to 0)."""
    return ["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=1x64:rate=25",
            "-t", "4", "-c:v", "libx264", "-pix_fmt", "yuv444p", "-f", "flv", url]  # fmt: skip


def test_a_picture_size_the_encoder_cannot_take_ends_the_stream_with_a_reason_and_a_reconnect_starts_fresh(
        engine, grace_image, face_file, tmp_path):
    async def scenario():
        async with Node(engine, tmp_path / "data") as node:
            key, record = node.keys.add("cam", face_file)
            process = await asyncio.create_subprocess_exec(*tiny_publish_command(node.url(key)), stdin=subprocess.DEVNULL,
                                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, stderr = await asyncio.wait_for(process.communicate(), 30)
            tiny = node.ingest.streams.get(record.key_id)  # ended at once, not kept for a reconnect
            await publish(node.url(key), camera_messages(grace_image, 30), close=False)
            fresh = node.ingest.streams[record.key_id]
            await wait_until(lambda: fresh.worker.stats.frames_out >= 5)
            return process.returncode, stderr.decode(errors="replace"), tiny, fresh.worker.alive, fresh.failed

    code, stderr, tiny, alive, failed = asyncio.run(scenario())
    assert code != 0 and "1x64" in stderr and "cannot be re-encoded" in stderr  # ffmpeg shows our onStatus
    assert tiny is None
    assert alive and failed is None


def test_ffmpeg_pushing_a_file_without_re_is_told_to_publish_in_real_time(engine, face_file, tmp_path):
    """The common mistake (and the cheap flood): ffmpeg sends as fast as it encodes; the
    stream ends within seconds, ffmpeg prints why, and the node keeps serving. The file is
    an hour long: the node's answer comes once its swap thread has worked through what it
    already holds, and a loaded machine took longer than ffmpeg needed to send two minutes
    of video (it finished with status 0, the node's refusal logged after it had gone)."""
    async def scenario():
        async with Node(engine, tmp_path / "data") as node:
            key, record = node.keys.add("cam", face_file)
            command = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=10",
                       "-t", "3600", "-c:v", "libx264", "-preset", "ultrafast", "-g", "10", "-f", "flv", node.url(key)]
            started = asyncio.get_running_loop().time()
            process = await asyncio.create_subprocess_exec(*command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                           stderr=subprocess.PIPE)
            _, stderr = await asyncio.wait_for(process.communicate(), 60)
            took = asyncio.get_running_loop().time() - started
            return process.returncode, stderr.decode(errors="replace"), took, node.ingest.streams.get(record.key_id)

    code, stderr, took, stream = asyncio.run(scenario())
    assert code != 0 and "faster than real time" in stderr and "-re" in stderr  # ffmpeg shows our onStatus
    assert took < 30  # an hour of video, cut long before its end
    assert stream is None


def test_playing_needs_the_keys_play_token_not_its_id(engine, grace_image, face_file, tmp_path):
    from streamer.rtmp.client import RtmpClientError, RtmpPlayClient

    async def scenario():
        async with Node(engine, tmp_path / "data") as node:
            key, record = node.keys.add("cam", face_file)
            client = await publish(node.url(key), camera_messages(grace_image, 10), close=False)
            session = await node.ingest.registry.get_session(rtmp_session_id(key))
            assert session.play_handle == play_handle(record.play_token)  # how a gateway finds this node
            refused = []
            for name in (record.key_id, rtmp_session_id(key), record.play_token[:-1], "pt_"):
                with pytest.raises(RtmpClientError, match="NetStream.Play.StreamNotFound") as caught:
                    await RtmpPlayClient(node.url(name), timeout=5).connect()
                refused.append(str(caught.value))
            async with RtmpPlayClient(node.url(record.play_token), timeout=5) as viewer:
                await publish_more(client, camera_messages(grace_image, 25, start_ms=400)[1:])
                first = await asyncio.wait_for(anext(aiter(viewer.media())), 10)
            await client.close()
            return refused, first

    refused, first = asyncio.run(scenario())
    assert len(refused) == 4 and all("play token" in reason for reason in refused)
    assert first.kind in ("video", "data", "audio")


async def publish_more(client, messages: list) -> None:
    for message in messages:
        await client.send(message)
        await asyncio.sleep(0.02)


def swap_threads(name: str) -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == f"swap-{name}" and t.is_alive()]


def test_rapid_replace_and_unpublish_leaves_no_swap_thread_after_the_resume_window(engine, grace_image, face_file, tmp_path):
    """A publisher replaced while the first publish of its key was still starting (its face
    being fetched, as when the library re-reads an evicted upload) must not leave a stream,
    and its swap thread, that nothing lists or ends."""
    from streamer.rtmp.client import RtmpClientError

    async def scenario():
        async with Node(engine, tmp_path / "data", resume_window_s=0.3) as node:
            key, record = node.keys.add("churn", face_file)
            for_stream = node.faces.for_stream

            async def slow_for_stream(stream):
                await asyncio.sleep(0.3)  # a face read from the store: the event loop runs meanwhile
                return await for_stream(stream)

            node.faces.for_stream = slow_for_stream
            messages = camera_messages(grace_image, 3)
            for _ in range(4):
                # the second publish of the key replaces the first while that one is starting
                clients = await asyncio.gather(publish(node.url(key), messages, pace_s=0.0, close=False),
                                               publish(node.url(key), messages, pace_s=0.0, close=False),
                                               return_exceptions=True)
                replaced = [c for c in clients if isinstance(c, RtmpClientError)]
                assert all("replaced by a new connection" in str(c) for c in replaced)
                for client in clients:
                    if not isinstance(client, RtmpClientError):
                        await client.close()  # an unpublish
                # every publish handled, then the resume window over: the next round starts afresh
                await wait_until(lambda: node.server.connection_count == 0 and not node.ingest.streams)
            sessions = node.ingest.sessions()
            await wait_until(lambda: not swap_threads("churn"))  # an ended stream's thread is joined
            return sessions

    assert asyncio.run(scenario()) == []


# -- on air: what a push destination and a player get from the first frame on --------------------


class Recorder:
    """A push destination in this process: takes one publish (after ``accept_delay_s``, as a
    platform's slower handshake) and keeps its video timestamps, audio timestamps and metadata."""

    def __init__(self, accept_delay_s: float = 0.0) -> None:
        self.accept_delay_s = accept_delay_s
        self.video: list[int] = []
        self.audio: list[int] = []
        self.metadata: dict | None = None
        self.server = RtmpServer(self, port=0)

    async def authorize_publish(self, app: str, name: str) -> None:
        await asyncio.sleep(self.accept_delay_s)

    async def on_publish(self, publisher) -> None:
        async for message in publisher.media():
            if message.kind == "data":
                self.metadata = onmetadata(message.payload)
            elif not is_sequence_header(message.kind, message.payload):
                (self.video if message.kind == "video" else self.audio).append(message.timestamp)

    async def authorize_play(self, app: str, name: str) -> None:
        raise PublishRejected("NetStream.Play.StreamNotFound", "a destination only")

    async def on_play(self, player) -> None:
        return None

    @property
    def url(self) -> str:
        return f"rtmp://127.0.0.1:{self.server.port}/live/out"


def onmetadata(payload: bytes) -> dict | None:
    from streamer.rtmp import amf0

    values = amf0.decode_all(payload)
    values = values[1:] if values[:1] == ["@setDataFrame"] else values
    return dict(values[1]) if len(values) == 2 and values[0] == "onMetaData" else None


def obs_metadata() -> MediaMessage:
    """What OBS says about its own encode (which the node replaces with its own)."""
    from streamer.rtmp import amf0

    return MediaMessage("data", 0, amf0.encode("onMetaData", amf0.EcmaArray({
        "encoder": "obs-output module (libobs version 30.0.2)", "width": 1920.0, "height": 1080.0, "framerate": 25.0,
        "videocodecid": 7.0, "videodatarate": 6000.0, "audiocodecid": 10.0, "audiosamplerate": 48000.0,
        "audiosamplesize": 16.0, "stereo": True, "audiodatarate": 160.0})))


def test_a_slow_destination_gets_the_stream_from_its_first_frame(engine, grace_image, face_file, tmp_path):
    """A destination whose handshake takes longer than the first frame's swap (a platform far
    away) still gets the stream from its first keyframe: the start waits for the connection
    instead of going out before it, which cost a whole GOP (the node's keyframe interval here
    is 1 s; 2 s by default)."""

    async def scenario():
        destination = Recorder(accept_delay_s=0.7)
        await destination.server.start()
        try:
            async with Node(engine, tmp_path / "data", resume_window_s=0.5) as node:
                key, record = node.keys.add("cam", face_file, push=(destination.url,))
                await publish(node.url(key), camera_messages(grace_image, 50))  # 2 s at 25 fps
                await wait_until(lambda: destination.video and destination.video[-1] >= 1900)
                stream = node.ingest.streams[record.key_id]
                return destination.video, stream.worker.stats.snapshot()
        finally:
            await destination.server.close()

    video, stats = asyncio.run(scenario())
    assert video[0] < 200, video[:5]  # the first swapped frames, not the second GOP's (>= 1000 ms)
    assert len(video) == stats["frames_out"]  # everything the node sent went there


def test_destinations_and_players_get_the_nodes_own_metadata(engine, grace_image, face_file, tmp_path):
    """The video is the node's encode: its size, codec and bitrate, encoder swapcast; the
    audio passes through, so its fields stay the publisher's."""
    from streamer.rtmp.client import RtmpPlayClient

    async def scenario():
        destination = Recorder()
        await destination.server.start()
        try:
            async with Node(engine, tmp_path / "data", resume_window_s=0.5) as node:
                key, record = node.keys.add("cam", face_file, push=(destination.url,))
                client = await publish(node.url(key), [obs_metadata(), *camera_messages(grace_image, 15)], close=False)
                stream = node.ingest.streams[record.key_id]
                await wait_until(lambda: stream.worker.stats.frames_out >= 3 and destination.metadata is not None)
                viewer = RtmpPlayClient(node.url(record.play_token))
                await viewer.connect()
                seen = None
                async for message in viewer.media():
                    if message.kind == "data":
                        seen = onmetadata(message.payload)
                        break
                await viewer.close()
                await client.close()
                return destination.metadata, seen
        finally:
            await destination.server.close()

    pushed, played = asyncio.run(scenario())
    for metadata in (pushed, played):
        assert metadata["encoder"] == "swapcast"
        assert (metadata["width"], metadata["height"]) == (320.0, 240.0)  # what camera_messages sends, not OBS's claim
        assert metadata["videocodecid"] == 7.0 and metadata["videodatarate"] == 2000.0  # the node's encoder
        assert metadata["framerate"] == 25.0
        assert {k: metadata[k] for k in ("audiocodecid", "audiosamplerate", "audiosamplesize", "stereo", "audiodatarate")} == {
            "audiocodecid": 10.0, "audiosamplerate": 48000.0, "audiosamplesize": 16.0, "stereo": True, "audiodatarate": 160.0}
        assert "obs" not in str(metadata).lower()


def test_a_publishers_start_up_burst_is_swapped_and_sent_on(engine, grace_image, face_file, tmp_path):
    """OBS sends what it encoded while it connected all at once: those frames wait for the
    swap (RTMP's catch-up) rather than being dropped to the newest, and reach the destination."""

    async def scenario():
        destination = Recorder()
        await destination.server.start()
        try:
            # frames may wait as long as they need here: the policy, not this machine's speed, is tested
            async with Node(engine, tmp_path / "data", catch_up_s=60.0) as node:
                key, record = node.keys.add("cam", face_file, push=(destination.url,))
                messages = camera_messages(grace_image, 45)
                client = RtmpPublishClient(node.url(key))
                await client.connect()
                for message in messages[:21]:  # the header and 20 frames at once
                    await client.send(message)
                for message in messages[21:]:
                    await asyncio.sleep(0.04)
                    await client.send(message)
                await client.close()
                stream = node.ingest.streams[record.key_id]
                await wait_until(lambda: stream.worker.stats.frames_out == 45 and len(destination.video) == 45)
                return destination.video, stream.worker.stats.snapshot()
        finally:
            await destination.server.close()

    video, stats = asyncio.run(scenario())
    assert stats["frames_dropped"] == 0 and stats["frames_in"] == 45
    assert video == [40 * i for i in range(45)]
