"""How fast an RTMP stream goes on air, and how much of it gets there: ``swapcast bench rtmp``'s
"on air" run.

A stream key with a push destination; the destination is an RTMP server in this process
that keeps what it receives and when. A publisher sends a clip from its first frame, paced
at its own timestamps, and leaves at the end; the node swaps it and re-publishes it to the
destination. Reported:

* first-frame delay: publish start (the publisher got ``NetStream.Publish.Start``, or for an
  outside program: it was started) → the first swapped video frame at the destination;
* frames delivered: video frames at the destination (by timestamp) / frames published, and
  the same for audio;
* what the destination's ``onMetaData`` says (encoder, size, rate) against what it got.

Publishers: ``swapcast`` (this process, the in-project client, sending an OBS-like FLV that
PyAV's x264 writes with B-frames, a 2 s GOP and AAC: the exact send times are known),
``ffmpeg`` (the CLI, ``-re``) and ``gstreamer`` (``rtmp2sink``, as the issue's report).
"""

from __future__ import annotations

import asyncio
import math
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from streamer.rtmp import amf0
from streamer.rtmp.client import RtmpPublishClient
from streamer.rtmp.flv import is_sequence_header, parse_video_tag
from streamer.rtmp.handler import MediaMessage, Player, Publisher
from streamer.rtmp.server import RtmpServer
from streamer.samples import grace_hopper, moving_face_frames

PUBLISHERS = ("swapcast", "ffmpeg", "gstreamer")
FPS = 30
TARGET_FIRST_FRAME_S = 1.0
TARGET_DELIVERED = 0.95
QUIET_S = 3.0  # the destination has had nothing new for this long after the publisher left: done


@dataclass
class Received:
    """What the destination got: (kind, timestamp, arrival) per media message, the metadata."""

    messages: list[tuple[str, int, float]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    last_arrival: float = 0.0

    def frames(self, kind: str) -> list[tuple[int, float]]:
        return [(t, at) for k, t, at in self.messages if k == kind]


class Destination:
    """An RTMP server that takes any one publish and keeps what it sends (no playing);
    ``accept_delay_s`` holds the publish's acceptance back, as a platform's round trips do."""

    def __init__(self, accept_delay_s: float = 0.0) -> None:
        self.received = Received()
        self.accept_delay_s = accept_delay_s
        self.server = RtmpServer(self, port=0)

    async def authorize_publish(self, app: str, name: str) -> None:
        await asyncio.sleep(self.accept_delay_s)

    async def on_publish(self, publisher: Publisher) -> None:
        async for message in publisher.media():
            now = time.monotonic()
            self.received.last_arrival = now
            if message.kind == "data":
                values = amf0.decode_all(message.payload)
                values = values[1:] if values[:1] == ["@setDataFrame"] else values
                if len(values) == 2 and values[0] == "onMetaData" and isinstance(values[1], dict):
                    self.received.metadata = values[1]
            elif not is_sequence_header(message.kind, message.payload):
                self.received.messages.append((message.kind, message.timestamp, now))

    async def authorize_play(self, app: str, name: str) -> None:
        from streamer.rtmp.handler import PublishRejected

        raise PublishRejected("NetStream.Play.StreamNotFound", "a destination only takes a publish")

    async def on_play(self, player: Player) -> None:
        return None

    @property
    def url(self) -> str:
        return f"rtmp://127.0.0.1:{self.server.port}/live/out"


# -- the clip -------------------------------------------------------------------------------


def write_obs_like_flv(path: Path, seconds: float) -> None:
    """A moving face at 640x480@30 as OBS sends it: x264 with B-frames (2) and a 2 s GOP at
    2500 kbps, AAC stereo 48 kHz, in FLV (AVCC, with the muxer's onMetaData)."""
    frames = moving_face_frames(grace_hopper(), 2 * FPS, (640, 480))
    count = round(seconds * FPS)
    with av.open(str(path), "w", format="flv") as container:
        video = container.add_stream("libx264", rate=FPS, options={
            "preset": "veryfast", "bf": "2", "g": str(2 * FPS), "keyint_min": str(2 * FPS), "sc_threshold": "0",
            "b": "2500k", "maxrate": "2500k", "bufsize": "5000k"})
        video.width, video.height, video.pix_fmt = 640, 480, "yuv420p"
        video.codec_context.time_base = Fraction(1, FPS)
        sound = container.add_stream("aac", rate=48_000, layout="stereo")
        for number in range(count):
            frame = av.VideoFrame.from_ndarray(frames[number % len(frames)], format="rgb24")
            frame.pts, frame.time_base = number, Fraction(1, FPS)
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        samples = round(seconds * 48_000)
        for offset in range(0, samples, 1024):
            n = min(1024, samples - offset)
            tone = (0.1 * np.sin(2 * math.pi * 440.0 * (offset + np.arange(n)) / 48_000)).astype(np.float32)
            block = av.AudioFrame.from_ndarray(np.stack([tone, tone]), format="fltp", layout="stereo")
            block.sample_rate, block.pts, block.time_base = 48_000, offset, Fraction(1, 48_000)
            container.mux(sound.encode(block))
        container.mux(sound.encode(None))


def read_flv_tags(path: Path) -> list[MediaMessage]:
    """An FLV file's tags as RTMP messages, in file order (their bodies are the payloads)."""
    data = path.read_bytes()
    offset = 9 + 4  # header, first PreviousTagSize
    kinds = {8: "audio", 9: "video", 18: "data"}
    messages = []
    while offset + 11 <= len(data):
        kind, size = data[offset], int.from_bytes(data[offset + 1:offset + 4], "big")
        timestamp = int.from_bytes(data[offset + 4:offset + 7], "big") | (data[offset + 7] << 24)
        body = data[offset + 11:offset + 11 + size]
        if kind in kinds:
            messages.append(MediaMessage(kinds[kind], timestamp, bytes(body)))
        offset += 11 + size + 4
    return messages


def published_frames(messages: list[MediaMessage]) -> dict[str, set[int]]:
    """Presentation times (ms) of the clip's video frames and audio frames."""
    times: dict[str, set[int]] = {"video": set(), "audio": set()}
    for message in messages:
        if message.kind == "video" and not is_sequence_header("video", message.payload):
            times["video"].add(message.timestamp + parse_video_tag(message.payload).composition_time)
        elif message.kind == "audio" and not is_sequence_header("audio", message.payload):
            times["audio"].add(message.timestamp)
    return times


# -- publishers -------------------------------------------------------------------------------


async def publish_in_process(url: str, messages: list[MediaMessage]) -> float:
    """Publish the tags at their own pace; returns when publishing started (monotonic)."""
    async with RtmpPublishClient(url) as client:
        started = time.monotonic()
        for message in messages:
            wait = started + message.timestamp / 1000 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            payload = message.payload
            if message.kind == "data":  # the client adds @setDataFrame itself
                payload = amf0.encode(*amf0.decode_all(payload))
            await client.send(MediaMessage(message.kind, message.timestamp, payload))
    return started


def outside_command(publisher: str, clip: Path, url: str) -> list[str]:
    if publisher == "ffmpeg":
        return ["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-i", str(clip), "-c", "copy", "-f", "flv", url]
    return ["gst-launch-1.0", "-q", "filesrc", f"location={clip}", "!", "flvdemux", "name=d",
            "d.video", "!", "queue", "!", "h264parse", "!", "flvmux", "name=m", "streamable=true", "!",
            "rtmp2sink", f"location={url}", "sync=true",
            "d.audio", "!", "queue", "!", "aacparse", "!", "m."]


def publisher_available(publisher: str) -> bool:
    return publisher == "swapcast" or shutil.which({"ffmpeg": "ffmpeg", "gstreamer": "gst-launch-1.0"}[publisher]) is not None


# -- the run -----------------------------------------------------------------------------------


async def measure_on_air(node_rtmp_port: int, add_key, publisher: str, seconds: float, workdir: Path,
                         destination_delay_s: float = 0.0) -> dict[str, Any]:
    """``add_key(push_url) -> stream key`` makes the key on the node; the destination (its
    handshake taking ``destination_delay_s`` more, as a platform far away) and the publisher
    run here."""
    clip = workdir / "obs-like.flv"
    if not clip.exists():
        await asyncio.to_thread(write_obs_like_flv, clip, seconds)
    messages = read_flv_tags(clip)
    sent = published_frames(messages)
    destination = Destination(destination_delay_s)
    await destination.server.start()
    try:
        key = add_key(destination.url)
        url = f"rtmp://127.0.0.1:{node_rtmp_port}/live/{key}"
        if publisher == "swapcast":
            started = await publish_in_process(url, messages)
        else:
            started = time.monotonic()
            process = await asyncio.create_subprocess_exec(*outside_command(publisher, clip, url),
                                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                           stderr=subprocess.PIPE)
            _, error = await asyncio.wait_for(process.communicate(), seconds + 60)
            if process.returncode:
                raise RuntimeError(f"{publisher} failed ({process.returncode}): {error.decode(errors='replace')[-500:]}")
        left = time.monotonic()
        while time.monotonic() - max(destination.received.last_arrival, left) < QUIET_S:
            await asyncio.sleep(0.2)
    finally:
        await destination.server.close()
    received = destination.received
    report: dict[str, Any] = {"publisher": publisher, "seconds": seconds, "destination_delay_s": destination_delay_s}
    video = received.frames("video")
    report["first_frame_s"] = (min(at for _, at in video) - started) if video else None
    # counted, not matched by timestamp: an outside publisher re-times the clip (GStreamer by
    # its running time), and the node never makes a frame up, it only drops
    for kind in ("video", "audio"):
        got = sorted({t for t, _ in received.frames(kind)})
        report[f"{kind}_published"] = len(sent[kind])
        report[f"{kind}_delivered"] = min(len(got), len(sent[kind]))
        report[f"{kind}_delivered_share"] = min(len(got), len(sent[kind])) / max(1, len(sent[kind]))
        report[f"{kind}_first_ms"] = got[0] if got else None
        report[f"{kind}_last_ms"] = got[-1] if got else None
    report["published_video_span_ms"] = [min(sent["video"]), max(sent["video"])] if sent["video"] else None
    metadata = received.metadata or {}
    report["metadata"] = {k: metadata.get(k) for k in ("encoder", "width", "height", "framerate", "videocodecid",
                                                        "videodatarate", "audiocodecid")}
    return report


def describe(report: dict[str, Any]) -> list[str]:
    first = report["first_frame_s"]
    share = report["video_delivered_share"]
    meta = report["metadata"]
    return [
        f"on air ({report['publisher']} publisher, {report['seconds']:.0f} s clip, B-frames, AAC; a push destination "
        f"accepting {1000 * report['destination_delay_s']:.0f} ms late): "
        f"first swapped frame at the destination {'never' if first is None else f'{first:.2f} s'} after the publish "
        f"started; video {report['video_delivered']}/{report['video_published']} frames delivered ({100 * share:.1f}%, "
        f"first {report['video_first_ms']} ms, last {report['video_last_ms']} ms; published "
        f"{report['published_video_span_ms']} ms), "
        f"audio {report['audio_delivered']}/{report['audio_published']} ({100 * report['audio_delivered_share']:.1f}%)",
        f"  the destination's onMetaData: encoder {meta['encoder']!r}, {meta['width']}x{meta['height']}, "
        f"{meta['framerate']} fps, video {meta['videodatarate']} kbps",
        f"target: first swapped frame at the destination <= {TARGET_FIRST_FRAME_S:.0f} s after the publish starts: "
        f"{'n/a' if first is None else f'{first:.2f} s'} -> {'PASS' if first is not None and first <= TARGET_FIRST_FRAME_S else 'FAIL'}",
        f"target: >= {100 * TARGET_DELIVERED:.0f}% of the published frames at the destination: {100 * share:.1f}% -> "
        f"{'PASS' if share >= TARGET_DELIVERED else 'FAIL'}",
    ]
